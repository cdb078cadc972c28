//! From clap's [`Args`] to typed, cross-checked [`Options`].

use std::io::IsTerminal;
use std::path::PathBuf;

use calibsql::tables::TableFormat;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use super::args::{Args, Command, OutputFormat, TableArg};

/// Rows a table shows in the interactive shell unless `--max-rows` says otherwise.
const INTERACTIVE_MAX_ROWS: usize = 40;

/// A usage mistake found after parsing (exit code 2). The message names the flag.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Where statements come from, in command-line order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `-c SQL`
    Command(String),
    /// `-f PATH`
    File(PathBuf),
    /// `-f -`, or standard input when it is not a terminal and neither `-c` nor `-f` is given
    Stdin,
}

/// How the program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Run these sources, stop at the first failing statement.
    Batch(Vec<Source>),
    /// The interactive shell.
    Interactive,
    /// A tool (`generate`, `demo`, `plot …`) instead of the SQL runner.
    Tool(Command),
}

/// Which standard streams are terminals (passed in so the defaults can be reasoned about).
#[derive(Debug, Clone, Copy)]
pub struct Terminals {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl Terminals {
    pub fn detect() -> Terminals {
        Terminals {
            stdin: std::io::stdin().is_terminal(),
            stdout: std::io::stdout().is_terminal(),
            stderr: std::io::stderr().is_terminal(),
        }
    }
}

/// Everything the program needs, typed and validated.
#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    pub tables: Vec<TableArg>,
    pub table_format: Option<TableFormat>,
    pub format: OutputFormat,
    pub output: Option<PathBuf>,
    pub memory_limit: Option<usize>,
    pub batch_size: Option<usize>,
    pub target_partitions: Option<usize>,
    /// Row cap for table output (`None`: all rows).
    pub max_rows: Option<usize>,
    /// Row counts and timings on standard error (table format, not `--quiet`).
    pub status: bool,
    /// The progress line (standard error is a terminal, not `--quiet`).
    pub progress: bool,
    /// The scheduler of the cluster to run on (`--remote`), as `host:port`.
    pub remote: Option<String>,
    /// S3 settings from the `--s3-*` flags (over the AWS environment).
    pub s3: calibsql::S3Options,
}

/// Parses `argv`. Clap's own errors (and `--help`/`--version`) come back as `clap::Error`.
pub fn parse<I, T>(argv: I, terminals: Terminals) -> anyhow::Result<Options>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Args::command().try_get_matches_from(argv)?;
    let mut args = Args::from_arg_matches(&matches)?;
    let command = args.command.take();
    let sources = ordered_sources(&args, &matches);
    let mut options = validate(args, sources, terminals)?;
    if let Some(command) = command {
        // The SQL runner's flags cannot be given with a tool (clap checks), so the options
        // are the defaults for this terminal, with the tool as the mode.
        options.mode = Mode::Tool(command);
    }
    Ok(options)
}

/// `-c` and `-f` values in the order they were given.
fn ordered_sources(args: &Args, matches: &ArgMatches) -> Vec<Source> {
    let mut indexed: Vec<(usize, Source)> = Vec::new();
    if let Some(indices) = matches.indices_of("commands") {
        indexed.extend(
            indices
                .zip(&args.commands)
                .map(|(i, sql)| (i, Source::Command(sql.clone()))),
        );
    }
    if let Some(indices) = matches.indices_of("files") {
        indexed.extend(indices.zip(&args.files).map(|(i, path)| {
            let source = if path.as_os_str() == "-" {
                Source::Stdin
            } else {
                Source::File(path.clone())
            };
            (i, source)
        }));
    }
    indexed.sort_by_key(|(i, _)| *i);
    indexed.into_iter().map(|(_, source)| source).collect()
}

fn validate(args: Args, sources: Vec<Source>, terminals: Terminals) -> Result<Options, UsageError> {
    if args.table_format.is_some() && args.tables.is_empty() {
        return Err(UsageError(
            "--table-format applies to --table, but no --table was given".to_string(),
        ));
    }
    for (i, table) in args.tables.iter().enumerate() {
        let lower = table.name.to_lowercase();
        if args.tables[..i]
            .iter()
            .any(|t| t.name.to_lowercase() == lower)
        {
            return Err(UsageError(format!(
                "--table: the name '{}' is given twice",
                table.name
            )));
        }
    }
    if args.remote.is_some() {
        if !cfg!(feature = "distributed") {
            return Err(UsageError(
                "--remote: this calibsql was built without the cluster client; build it with \
                 `cargo install --path . --features distributed` (docs/distributed.md)"
                    .to_string(),
            ));
        }
        if args.memory_limit.is_some() {
            return Err(UsageError(
                "--memory-limit limits a local query; with --remote each executor has its \
                 own (calibsql executor --memory-limit SIZE)"
                    .to_string(),
            ));
        }
    }
    if sources.iter().filter(|s| **s == Source::Stdin).count() > 1 {
        return Err(UsageError(
            "-f -: standard input can be read only once".to_string(),
        ));
    }

    let mode = if !sources.is_empty() {
        Mode::Batch(sources)
    } else if terminals.stdin {
        Mode::Interactive
    } else {
        Mode::Batch(vec![Source::Stdin])
    };

    let format = match (args.format, &args.output) {
        (Some(format), _) => format,
        (None, Some(path)) => OutputFormat::from_file_name(path).unwrap_or(OutputFormat::Csv),
        (None, None) if terminals.stdout => OutputFormat::Table,
        (None, None) => OutputFormat::Csv,
    };
    if args.max_rows.is_some() && format != OutputFormat::Table {
        return Err(UsageError(format!(
            "--max-rows applies to --format table, but the format is {}",
            format_name(format)
        )));
    }
    let max_rows = match (args.max_rows, &mode) {
        (Some(n), _) => Some(n),
        (None, Mode::Interactive) => Some(INTERACTIVE_MAX_ROWS),
        (None, Mode::Batch(_) | Mode::Tool(_)) => None,
    };

    Ok(Options {
        mode,
        tables: args.tables,
        table_format: args.table_format,
        format,
        output: args.output,
        memory_limit: args.memory_limit,
        batch_size: args.batch_size,
        target_partitions: args.target_partitions,
        max_rows,
        status: format == OutputFormat::Table && !args.quiet,
        progress: terminals.stderr && !args.quiet,
        remote: args.remote,
        s3: args.s3.options(),
    })
}

fn format_name(format: OutputFormat) -> &'static str {
    match format {
        OutputFormat::Table => "table",
        OutputFormat::Csv => "csv",
        OutputFormat::Json => "json",
        OutputFormat::Ndjson => "ndjson",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PIPED: Terminals = Terminals {
        stdin: false,
        stdout: false,
        stderr: false,
    };
    const TTY: Terminals = Terminals {
        stdin: true,
        stdout: true,
        stderr: true,
    };

    fn parse_ok(argv: &[&str], terminals: Terminals) -> Options {
        parse(
            std::iter::once("calibsql").chain(argv.iter().copied()),
            terminals,
        )
        .unwrap()
    }

    fn usage_error(argv: &[&str]) -> String {
        let error = parse(
            std::iter::once("calibsql").chain(argv.iter().copied()),
            PIPED,
        )
        .unwrap_err();
        error.downcast::<UsageError>().unwrap().0
    }

    #[test]
    fn sources_keep_command_line_order() {
        let options = parse_ok(&["-f", "a.sql", "-c", "SELECT 1", "-f", "-"], PIPED);
        assert_eq!(
            options.mode,
            Mode::Batch(vec![
                Source::File("a.sql".into()),
                Source::Command("SELECT 1".into()),
                Source::Stdin,
            ])
        );
    }

    #[test]
    fn defaults_follow_the_terminal() {
        let piped = parse_ok(&[], PIPED);
        assert_eq!(piped.mode, Mode::Batch(vec![Source::Stdin]));
        assert_eq!(piped.format, OutputFormat::Csv);
        assert!(!piped.status && !piped.progress);

        let tty = parse_ok(&[], TTY);
        assert_eq!(tty.mode, Mode::Interactive);
        assert_eq!(tty.format, OutputFormat::Table);
        assert_eq!(tty.max_rows, Some(40));
        assert!(tty.status && tty.progress);

        let to_file = parse_ok(&["-c", "SELECT 1", "-o", "out.ndjson"], TTY);
        assert_eq!(to_file.format, OutputFormat::Ndjson);
        assert_eq!(to_file.max_rows, None);
    }

    #[test]
    fn cross_checks_name_the_flag() {
        assert!(
            usage_error(&["--table-format", "csv", "-c", "SELECT 1"]).contains("--table-format")
        );
        assert!(usage_error(&["-t", "a=x.csv", "-t", "A=y.csv"]).contains("--table"));
        assert!(usage_error(&["--format", "csv", "--max-rows", "3"]).contains("--max-rows"));
        assert!(usage_error(&["-f", "-", "-f", "-"]).contains("-f -"));
    }
}
