//! The command line as clap sees it, and the parsers of single flag values.
//!
//! Everything here is syntax: each value is checked on its own and a bad one is a clap usage
//! error naming the flag (exit code 2). Cross-checks between flags live in `options.rs`.

use std::path::PathBuf;

use calibsql::tables::TableFormat;
use clap::{Parser, ValueEnum};

const AFTER_HELP: &str = "\
Statements:
  -c and -f run in the order given; each may hold several statements separated by ';'.
  Without -c or -f, calibsql starts an interactive shell (history in ~/.calibsql_history;
  end a statement with ';', quit with \\q, quit or Ctrl-D), or runs the SQL read from
  standard input when it is not a terminal.

Tables:
  --table clicks=logs/2026-*/part-*.parquet registers a file, a directory or a glob. The
  format comes from the file extension (.parquet/.parq, .csv, .json/.ndjson/.jsonl; CSV and
  JSON may end in .gz, .bz2, .xz or .zst) unless --table-format is given. SQL works too:
  CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 'dir/';

S3:
  s3://bucket/key, s3://bucket/prefix/ and globs work wherever a path does (--table, LOCATION,
  COPY … TO). Credentials and region come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_SESSION_TOKEN, AWS_REGION and AWS_ENDPOINT_URL; --s3-* flags override them, and
  CREATE EXTERNAL TABLE … OPTIONS ('aws.endpoint' '…', 'aws.allow_http' 'true') overrides
  both for that table's bucket.

Output:
  Query results go to standard output (or -o FILE), nothing else does: with csv, json and
  ndjson, DDL prints nothing and there are no timing lines. Table format prints a row count
  and time on standard error. A progress line shows on standard error for queries running
  over a second, only when standard error is a terminal.

Exit status:
  0  success (also when standard output is closed early, e.g. by `| head`)
  1  a statement failed (SQL, planning or execution error, out of memory), a --table could
     not be registered (missing or unreadable file), or a -f/-o file could not be opened;
     -c and -f stop at the first failing statement
  2  usage error: unknown flag or a bad flag value
  130  interrupted with Ctrl-C";

/// SQL for calibrating and evaluating model probabilities, on Apache DataFusion.
#[derive(Debug, Parser)]
#[command(name = "calibsql", version, about, after_help = AFTER_HELP)]
pub struct Args {
    /// Run SQL statements (several separated by ';'); repeatable
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub commands: Vec<String>,

    /// Run the SQL statements in a file ('-' reads standard input); repeatable
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub files: Vec<PathBuf>,

    /// Register a file, directory or glob as a table; repeatable
    #[arg(short = 't', long = "table", value_name = "NAME=PATH", value_parser = parse_table_arg)]
    pub tables: Vec<TableArg>,

    /// Format of the --table files, instead of guessing from their extensions
    #[arg(long, value_name = "FORMAT", value_parser = parse_table_format)]
    pub table_format: Option<TableFormat>,

    /// Output format [default: from the -o extension (.csv, .json, .ndjson, .txt = table),
    /// else table when standard output is a terminal, else csv]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,

    /// Write query results to FILE instead of standard output
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Memory for query execution, e.g. 512M or 2G (K, M, G, T: powers of 1024); queries
    /// that need more spill to disk or fail
    #[arg(long, value_name = "SIZE", value_parser = parse_byte_size)]
    pub memory_limit: Option<usize>,

    /// Rows per batch during execution [default: 8192]
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub batch_size: Option<usize>,

    /// Partitions (parallel streams) per query [default: number of CPU cores]
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub target_partitions: Option<usize>,

    /// With --format table, show at most N rows per query [default: 40 in the interactive
    /// shell, all otherwise]
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub max_rows: Option<usize>,

    /// Print no row counts, timings or progress on standard error
    #[arg(short = 'q', long)]
    pub quiet: bool,

    /// Endpoint of an S3-compatible store (MinIO, Ceph, R2, …), e.g. http://127.0.0.1:9000
    /// [default: AWS_ENDPOINT_URL, else Amazon S3]
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,

    /// Allow a plain-HTTP (not HTTPS) S3 endpoint [default: AWS_ALLOW_HTTP, else no]
    #[arg(long)]
    pub s3_allow_http: bool,

    /// Timeout of one S3 request, in seconds [default: 30]
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub s3_timeout: Option<std::time::Duration>,

    /// Retries of a failed S3 request (connection errors, timeouts, 5xx) [default: 3]
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub s3_retries: Option<usize>,
}

/// How query results are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// An aligned text table
    Table,
    /// CSV with a header line, per query
    Csv,
    /// One JSON array of objects per query
    Json,
    /// One JSON object per row and line
    Ndjson,
}

impl OutputFormat {
    /// The format a file name implies: `.csv`, `.json`, `.ndjson`/`.jsonl`, `.txt` (table).
    pub fn from_file_name(path: &std::path::Path) -> Option<OutputFormat> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        match extension.as_str() {
            "csv" => Some(OutputFormat::Csv),
            "json" => Some(OutputFormat::Json),
            "ndjson" | "jsonl" => Some(OutputFormat::Ndjson),
            "txt" => Some(OutputFormat::Table),
            _ => None,
        }
    }
}

/// One `--table NAME=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableArg {
    pub name: String,
    pub location: String,
}

fn parse_table_arg(value: &str) -> Result<TableArg, String> {
    let (name, location) = value
        .split_once('=')
        .ok_or_else(|| "expected NAME=PATH, e.g. clicks=data/clicks.parquet".to_string())?;
    let name = name.trim();
    if name.is_empty() {
        return Err("the table NAME before '=' is empty".to_string());
    }
    let plain = name.chars().all(|c| c.is_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !plain {
        return Err(format!(
            "the table NAME '{name}' must be letters, digits and '_', not starting with a digit"
        ));
    }
    if location.is_empty() {
        return Err("the PATH after '=' is empty".to_string());
    }
    Ok(TableArg {
        name: name.to_string(),
        location: location.to_string(),
    })
}

fn parse_table_format(value: &str) -> Result<TableFormat, String> {
    value
        .parse()
        .map_err(|e: calibsql::tables::UnknownTableFormat| e.to_string())
}

fn parse_seconds(value: &str) -> Result<std::time::Duration, String> {
    calibsql::s3::parse_seconds(value)
}

/// A whole number ≥ 0.
fn parse_count(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| "expected a whole number of at least 0".to_string())
}

/// A whole number ≥ 1.
fn parse_positive(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err("expected a whole number of at least 1".to_string()),
    }
}

/// A size in bytes: a number with an optional K, M, G or T suffix (powers of 1024; `KB`,
/// `KiB` and lower case accepted), e.g. `2G`, `1.5G`, `512MiB`, `1048576`.
pub fn parse_byte_size(value: &str) -> Result<usize, String> {
    const HINT: &str = "expected a size such as 512M, 2G or 1048576";
    let text = value.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| HINT.to_string())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(HINT.to_string()),
    };
    let bytes = number * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= usize::MAX as f64 {
        return Err("too large".to_string());
    }
    let bytes = bytes as usize;
    if bytes == 0 {
        return Err("must be more than 0 bytes".to_string());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert_eq!(parse_byte_size("2G"), Ok(2 << 30));
        assert_eq!(parse_byte_size("512m"), Ok(512 << 20));
        assert_eq!(parse_byte_size("1.5K"), Ok(1536));
        assert_eq!(parse_byte_size("10MiB"), Ok(10 << 20));
        assert_eq!(parse_byte_size("4096"), Ok(4096));
        assert!(parse_byte_size("abc").is_err());
        assert!(parse_byte_size("0").is_err());
        assert!(parse_byte_size("2X").is_err());
        assert!(parse_byte_size("").is_err());
        assert!(parse_byte_size("1.2.3G").is_err());
    }

    #[test]
    fn table_args() {
        let arg = parse_table_arg("t=data/x=1/a.parquet").unwrap();
        assert_eq!(arg.name, "t");
        assert_eq!(arg.location, "data/x=1/a.parquet");
        assert!(parse_table_arg("noequals").is_err());
        assert!(parse_table_arg("=x.parquet").is_err());
        assert!(parse_table_arg("t=").is_err());
        assert!(parse_table_arg("my.t=x.csv").is_err());
        assert!(parse_table_arg("1t=x.csv").is_err());
        assert_eq!(parse_table_arg("Clicks_2=x.csv").unwrap().name, "Clicks_2");
    }

    #[test]
    fn counts() {
        assert_eq!(parse_positive("8"), Ok(8));
        assert!(parse_positive("0").is_err());
        assert!(parse_positive("-1").is_err());
        assert!(parse_positive("x").is_err());
    }
}
