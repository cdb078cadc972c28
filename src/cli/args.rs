//! The command line as clap sees it, and the parsers of single flag values.
//!
//! Everything here is syntax: each value is checked on its own and a bad one is a clap usage
//! error naming the flag (exit code 2). Cross-checks between flags live in `options.rs`.

use std::path::PathBuf;

use calibsql::tables::TableFormat;
use clap::{Parser, Subcommand, ValueEnum};

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
#[command(
    name = "calibsql",
    version,
    about,
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// A tool instead of the SQL runner (the flags below apply to the SQL runner only)
    #[command(subcommand)]
    pub command: Option<Command>,

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

    /// Run the statements on an Apache Ballista cluster whose scheduler is at df://HOST:PORT
    /// (needs a calibsql built with --features distributed; docs/distributed.md)
    #[arg(long, value_name = "URL", value_parser = parse_remote)]
    pub remote: Option<String>,

    #[command(flatten)]
    pub s3: S3Args,
}

/// The `--s3-*` flags: S3 settings over the AWS environment.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct S3Args {
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

impl S3Args {
    pub fn options(&self) -> calibsql::S3Options {
        calibsql::S3Options {
            endpoint: self.s3_endpoint.clone(),
            // Only an explicit flag overrides AWS_ALLOW_HTTP.
            allow_http: self.s3_allow_http.then_some(true),
            timeout: self.s3_timeout,
            retries: self.s3_retries,
            ..calibsql::S3Options::default()
        }
    }
}

/// The tools besides the SQL runner.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Write synthetic Parquet logs whose truth is known
    ///
    /// DIR/valid is biased (clicks missing not at random: an item must be shown to be
    /// clicked, and popular items are shown more), DIR/test unbiased (items shown at random).
    /// docs/DATA.md describes how each column is generated.
    Generate(GenerateArgs),
    /// Generate data, run the reports in sql/ on it and draw reliability diagrams
    Demo(DemoArgs),
    /// Draw a chart from a query
    #[command(subcommand)]
    Plot(PlotCommand),
    /// Write the calibration report: one self-contained HTML page (and optionally JSON)
    ///
    /// Header with a status badge per model, headline numbers, reliability diagram with
    /// Wilson bands, per-bin table, values over time with the drift rule, segments per
    /// --field, and an appendix with the SQL and every number as JSON. All numbers come from
    /// calibsql's SQL aggregates, one query per section.
    #[command(after_help = REPORT_AFTER_HELP)]
    Report(Box<ReportArgs>),
    /// Run a scheduler of an Apache Ballista cluster with every calibsql function
    ///
    /// Clients connect with `calibsql --remote df://HOST:PORT`; executors with `calibsql
    /// executor --scheduler HOST:PORT`. Ballista has no authentication: keep the cluster on a
    /// trusted network (docs/distributed.md). Needs --features distributed.
    Scheduler(SchedulerArgs),
    /// Run an executor of an Apache Ballista cluster with every calibsql function
    ///
    /// It asks the scheduler for tasks and serves their results to other executors and to
    /// clients on --bind. Needs --features distributed.
    Executor(ExecutorArgs),
    /// Serve calibsql over the Postgres wire protocol (psql, psycopg, JDBC, BI tools)
    ///
    /// Clients log in with SCRAM-SHA-256 as a user of --users (make its lines with `calibsql
    /// hash-password`) to the database `calibsql`, and run read-only queries over the
    /// --tables unless --allow-writes / --allow-path say otherwise. Each connection has its
    /// own session. Needs --features serve (part of --features distributed).
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve(Box<ServeArgs>),
    /// Read a password on standard input and print its SCRAM-SHA-256 verifier, a line of a
    /// `calibsql serve --users` file once prefixed with `NAME:`
    ///
    /// The verifier is in PostgreSQL's format (what pg_authid.rolpassword holds), so a
    /// verifier made by PostgreSQL works too. The first line of standard input is the
    /// password (its line ending removed).
    HashPassword,
}

const SERVE_AFTER_HELP: &str = "\
Example:
  printf '%s' \"$PASSWORD\" | calibsql hash-password | sed 's/^/analyst:/' > users && chmod 600 users
  calibsql serve --users users --table clicks=logs/ --tls-cert server.crt --tls-key server.key
  psql 'host=127.0.0.1 port=5432 dbname=calibsql user=analyst sslmode=require'

What a client may do (docs/serving.md):
  By default: queries (SELECT, EXPLAIN, SHOW, SET, views of its own session) over the
  --tables. Refused: reading a file by its path (SELECT * FROM 'x.csv'), CREATE EXTERNAL
  TABLE, COPY … TO, INSERT and other DDL. --allow-path PREFIX lets clients read files under
  PREFIX (paths or s3://bucket/prefix/); --allow-writes lets them run DDL, DML and COPY TO,
  whose files must also be under an --allow-path prefix.";

/// `calibsql serve`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (0.0.0.0:PORT accepts other machines; port 0 picks a free port)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:5432")]
    pub bind: std::net::SocketAddr,

    /// Also serve Arrow Flight SQL (ADBC, polars, DBeaver's Flight SQL driver) on this
    /// address, with the same users, TLS, tables, limits and policy (port 0 picks a free port)
    #[arg(long, value_name = "HOST:PORT")]
    pub flight_bind: Option<std::net::SocketAddr>,

    /// Serve Flight SQL only: no Postgres listener (needs --flight-bind)
    #[arg(long, requires = "flight_bind")]
    pub no_postgres: bool,

    /// Seconds a Flight SQL login's bearer token stays valid; a client logs in again after
    #[arg(long, value_name = "SECONDS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
    pub flight_token_lifetime: u64,

    /// The users who may log in: one `NAME:VERIFIER` a line, the verifier from `calibsql
    /// hash-password` or PostgreSQL's pg_authid.rolpassword; the file must not be readable
    /// by group or others
    #[arg(long, value_name = "FILE")]
    pub users: PathBuf,

    /// Register a file, directory or glob as a table clients can query; repeatable
    #[arg(short = 't', long = "table", value_name = "NAME=PATH", value_parser = parse_table_arg)]
    pub tables: Vec<TableArg>,

    /// Format of the --table files, instead of guessing from their extensions
    #[arg(long, value_name = "FORMAT", value_parser = parse_table_format)]
    pub table_format: Option<TableFormat>,

    /// TLS certificate chain (PEM); with --tls-key, clients may connect with TLS
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// TLS private key (PEM, PKCS#8, PKCS#1 or SEC1)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Refuse connections without TLS (Postgres and Flight SQL alike)
    #[arg(long, requires = "tls_cert")]
    pub require_tls: bool,

    /// Connections at once; one more is refused with "too many clients"
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = parse_positive)]
    pub max_connections: usize,

    /// Seconds a statement may take, parsing and planning included, before it is cancelled
    /// (0: no limit)
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub query_timeout: u64,

    /// Memory all queries of the server share, e.g. 4G (K, M, G, T: powers of 1024); a query
    /// that needs more than what is left spills to disk or fails
    #[arg(long, value_name = "SIZE", value_parser = parse_byte_size)]
    pub memory_limit: Option<usize>,

    /// Let clients run DDL, DML and COPY … TO (files written must be under --allow-path)
    #[arg(long)]
    pub allow_writes: bool,

    /// Let clients read (and, with --allow-writes, write) files under this path or
    /// s3://bucket/prefix; repeatable
    #[arg(long, value_name = "PREFIX")]
    pub allow_path: Vec<String>,

    /// Run the clients' queries on the Apache Ballista cluster whose scheduler is at
    /// df://HOST:PORT (needs --features distributed)
    #[arg(long, value_name = "URL", value_parser = parse_remote)]
    pub remote: Option<String>,

    #[command(flatten)]
    pub s3: S3Args,
}

/// `calibsql scheduler`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct SchedulerArgs {
    /// Address to listen on (use 0.0.0.0:PORT to accept other machines, on a trusted
    /// network only)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50050")]
    pub bind: std::net::SocketAddr,

    /// Seconds without news after which an executor is dead and its work is run again
    #[arg(long, value_name = "SECONDS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub executor_timeout: u64,

    #[command(flatten)]
    pub s3: S3Args,
}

/// `calibsql executor`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ExecutorArgs {
    /// The scheduler's address
    #[arg(long, value_name = "HOST:PORT")]
    pub scheduler: String,

    /// Address of this executor's data service (other executors and clients fetch results
    /// from it; it is also the address the executor gives the scheduler, except 0.0.0.0, for
    /// which the scheduler takes the address the executor connects from)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:50051")]
    pub bind: std::net::SocketAddr,

    /// Tasks run at once [default: number of CPU cores]
    #[arg(long, value_name = "N", value_parser = parse_positive)]
    pub concurrent_tasks: Option<usize>,

    /// Directory for shuffle files and spills [default: a new temporary directory]
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,

    /// Memory the executor's tasks share, e.g. 4G (K, M, G, T: powers of 1024); tasks that
    /// need more spill to disk or fail
    #[arg(long, value_name = "SIZE", value_parser = parse_byte_size)]
    pub memory_limit: Option<usize>,

    #[command(flatten)]
    pub s3: S3Args,
}

/// `calibsql generate`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct GenerateArgs {
    /// Rows in all, e.g. 1000000 or 1M (K, M, G: powers of 1000); half valid, half test
    #[arg(long, value_name = "N", value_parser = parse_row_count)]
    pub rows: u64,

    /// Directory to write DIR/valid/part-*.parquet and DIR/test/part-*.parquet into
    /// (part-*.parquet files already there are replaced)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Random seed: the same seed and row count write the same rows
    #[arg(long, value_name = "S", default_value_t = calibsql::generate::DEFAULT_SEED)]
    pub seed: u64,

    /// Days the log spans (column `day`, rows in time order)
    #[arg(long, value_name = "N", default_value_t = calibsql::generate::DEFAULT_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub days: u32,

    /// Inject calibration drift from this day on: the CTR model's p_model is multiplied by
    /// --drift-factor while the clicks stay as they were
    #[arg(long, value_name = "DAY")]
    pub drift_day: Option<u32>,

    /// The factor of --drift-day (default 1.5: the model over-predicts by half)
    #[arg(long, value_name = "F", value_parser = parse_factor, requires = "drift_day")]
    pub drift_factor: Option<Factor>,

    /// How strongly the valid split's clicks are missing not at random: strong (exposure
    /// 0.1 to 1, about 1.1% clicked) or mild (0.9 to 1, about 9% clicked); docs/DATA.md
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = ExposureArg::Strong)]
    pub exposure: ExposureArg,

    /// No progress bar or summary on standard error
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `--exposure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExposureArg {
    Strong,
    Mild,
}

/// A finite positive number (`--drift-factor`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Factor(pub f64);

impl Eq for Factor {}

fn parse_factor(value: &str) -> Result<Factor, String> {
    match value.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(Factor(x)),
        _ => Err("expected a positive number such as 1.5".to_string()),
    }
}

/// `calibsql demo`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct DemoArgs {
    /// Rows to generate, e.g. 1M (K, M, G: powers of 1000)
    #[arg(long, value_name = "N", value_parser = parse_demo_rows,
          default_value_t = DEFAULT_ROWS)]
    pub rows: u64,

    /// Directory for the data and the diagrams
    #[arg(long, value_name = "DIR", default_value_os_t = default_demo_dir())]
    pub dir: PathBuf,

    /// Random seed of the data
    #[arg(long, value_name = "S", default_value_t = calibsql::generate::DEFAULT_SEED)]
    pub seed: u64,
}

/// `calibsql plot …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum PlotCommand {
    /// Draw a reliability diagram (SVG) from a query returning p, y and optionally series
    ///
    /// Per bin of p: the fraction of positives against the mean prediction, the gap between
    /// them, the diagonal and the rows per bin (log scale); one panel per value of the query's
    /// series column (sorted), the ECE in each panel's title. The bins are those of the
    /// reliability() and ece() SQL functions.
    #[command(after_help = RELIABILITY_AFTER_HELP)]
    Reliability(ReliabilityArgs),
    /// Draw a metric over time (SVG) from a query returning x, value and optionally lower,
    /// upper and series
    ///
    /// One line per series value; a shaded band between lower and upper (an interval, or a
    /// drift rule's reference band); values outside their band marked in red. This is the
    /// drift chart of sql/monitoring.sql.
    #[command(after_help = METRIC_AFTER_HELP)]
    Metric(MetricArgs),
}

const METRIC_AFTER_HELP: &str = "\
-f and -c may be given together: the file's statements run first, then -c's; the last
statement is the chart's query. For example, the drift chart of sql/monitoring.sql:

  calibsql plot metric --table valid=data/valid --table test=data/test -f sql/monitoring.sql \\
    -c \"SELECT day AS x, rce_site AS value, rce_lower AS lower, rce_upper AS upper, model AS series
        FROM monitoring\" -o drift.svg --y-label 'Field-RCE (site)'";

/// `calibsql plot metric`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct MetricArgs {
    #[command(flatten)]
    pub query: QueryArgs,

    /// The SVG file to write
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,

    /// A title above the chart
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// The name of the x axis
    #[arg(long, value_name = "TEXT", default_value = "x")]
    pub x_label: String,

    /// The name of the value axis
    #[arg(long, value_name = "TEXT", default_value = "value")]
    pub y_label: String,
}

/// The query of a command that draws or reports one result (`plot reliability`, `plot
/// metric`): statements from `-f`, then `-c`'s, over the `--table` tables; the last
/// statement's result is what is drawn.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct QueryArgs {
    /// SQL to run after -f's statements; its last statement is the query
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SQL",
        required_unless_present = "file"
    )]
    pub command: Option<String>,

    /// A file of SQL statements, run before -c's ('-' reads standard input)
    #[arg(short = 'f', long = "file", value_name = "PATH")]
    pub file: Option<PathBuf>,

    /// Register a file, directory or glob as a table; repeatable
    #[arg(short = 't', long = "table", value_name = "NAME=PATH", value_parser = parse_table_arg)]
    pub tables: Vec<TableArg>,

    /// Format of the --table files, instead of guessing from their extensions
    #[arg(long, value_name = "FORMAT", value_parser = parse_table_format)]
    pub table_format: Option<TableFormat>,

    /// Print nothing on standard error but errors
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

const RELIABILITY_AFTER_HELP: &str = "\
The query (the last statement of -f then -c; earlier ones, e.g. CREATE VIEW, run first) returns
a column p (probability), a column y (0/1 or Boolean) and optionally series. For example:

  calibsql plot reliability --table test=calibsql-demo/test -o sigmoid.svg \\
    -c \"SELECT sigmoid(score) AS p, click AS y FROM test\"";

/// `calibsql plot reliability`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReliabilityArgs {
    #[command(flatten)]
    pub query: QueryArgs,

    /// The SVG file to write
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: PathBuf,

    /// Number of bins
    #[arg(long, value_name = "N", default_value_t = calibsql::plot::DEFAULT_BINS,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub bins: u32,

    /// Equal-width bins over [0, 1], or equal-mass bins
    #[arg(long, value_enum, value_name = "STRATEGY", default_value_t = PlotStrategy::Uniform)]
    pub strategy: PlotStrategy,

    /// A title above the panels
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// Leave out the error bars (each bin's 95% Wilson interval of the fraction of positives)
    #[arg(long)]
    pub no_intervals: bool,
}

const REPORT_AFTER_HELP: &str = "\
The query returns p (probability) and y (label, 0/1 or Boolean), and optionally model (one
section per value), w (row weight), day (a date, timestamp or integer time bucket) and the
--field columns. The page needs no network: charts are inline SVG, the numbers are also in
the page as JSON (docs/report.md). For example:

  calibsql report --table test=calibsql-demo/test -o report.html --field site_id \\
    -c \"SELECT p_model AS p, click AS y, day, site_id FROM test\"";

/// `calibsql report`.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub query: QueryArgs,

    /// The HTML file to write (replaced only once the page is whole)
    #[arg(short = 'o', long = "output", value_name = "FILE.html")]
    pub output: PathBuf,

    /// A column of the query to break calibration down by (segments, Field-RCE); repeatable
    #[arg(long = "field", value_name = "COL")]
    pub fields: Vec<String>,

    /// Number of bins of the reliability diagram, the ECE and the MCE
    #[arg(long, value_name = "N", default_value_t = calibsql::report::DEFAULT_BINS,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub bins: u32,

    /// Bins of the reliability diagram, the per-bin table and the MCE: equal-width or
    /// equal-mass (the headline shows the ECE of both)
    #[arg(long, value_enum, value_name = "STRATEGY", default_value_t = PlotStrategy::Uniform)]
    pub strategy: PlotStrategy,

    /// Axes of the reliability diagram: log-odds spreads CTR-sized probabilities; auto picks
    /// log-odds when every bin's mean prediction is below 0.2
    #[arg(long, value_enum, value_name = "AXIS", default_value_t = AxisArg::Auto)]
    pub axis: AxisArg,

    /// The page's title [default: Calibration report]
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,

    /// Days (the first ones) whose daily values make the drift rule's reference band
    #[arg(long, value_name = "N", default_value_t = calibsql::report::DEFAULT_REFERENCE_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub reference_days: u32,

    /// Also write the numbers as JSON to this file
    #[arg(long, value_name = "FILE.json")]
    pub json: Option<PathBuf>,

    /// Run the queries on the Apache Ballista cluster whose scheduler is at df://HOST:PORT
    /// (needs --features distributed)
    #[arg(long, value_name = "URL", value_parser = parse_remote)]
    pub remote: Option<String>,
}

/// `report --axis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AxisArg {
    Auto,
    Linear,
    LogOdds,
}

/// The binning of `plot reliability --strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlotStrategy {
    /// Equal-width bins [k/M, (k+1)/M)
    Uniform,
    /// Equal-mass bins (as many rows in each)
    Quantile,
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
    calibsql::stores::parse_seconds(value)
}

/// A whole number ≥ 0.
fn parse_count(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .map_err(|_| "expected a whole number of at least 0".to_string())
}

/// A row count: digits (`_` allowed) with an optional K, M or G suffix (powers of 1000), ≥ 2
/// so that both splits get rows.
fn parse_row_count(value: &str) -> Result<u64, String> {
    const HINT: &str = "expected a row count such as 100000, 100K or 2M";
    let text = value.trim().replace('_', "");
    let (digits, scale) = match text.chars().last().map(|c| c.to_ascii_lowercase()) {
        Some('k') => (&text[..text.len() - 1], 1_000),
        Some('m') => (&text[..text.len() - 1], 1_000_000),
        Some('g') => (&text[..text.len() - 1], 1_000_000_000),
        _ => (&text[..], 1),
    };
    let n: u64 = digits.parse().map_err(|_| HINT.to_string())?;
    let rows = n
        .checked_mul(scale)
        .ok_or_else(|| "too large".to_string())?;
    if rows < 2 {
        return Err("must be at least 2 (one row per split)".to_string());
    }
    Ok(rows)
}

/// Rows of the demo unless `--rows` says otherwise.
pub const DEFAULT_ROWS: u64 = 1_000_000;
/// The smallest `--rows` the reports work with.
pub const MIN_ROWS: u64 = 1_000;

/// The demo directory unless `--dir` says otherwise.
pub fn default_demo_dir() -> PathBuf {
    PathBuf::from("calibsql-demo")
}

/// A row count for the demo: at least [`MIN_ROWS`].
fn parse_demo_rows(value: &str) -> Result<u64, String> {
    let rows = parse_row_count(value)?;
    if rows < MIN_ROWS {
        return Err(format!(
            "must be at least {} for the reports to have data",
            MIN_ROWS
        ));
    }
    Ok(rows)
}

/// A scheduler's address, `df://HOST:PORT`.
fn parse_remote(value: &str) -> Result<String, String> {
    calibsql::address::parse_remote_url(value)
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
    fn row_counts() {
        assert_eq!(parse_row_count("1000000"), Ok(1_000_000));
        assert_eq!(parse_row_count("1_000"), Ok(1_000));
        assert_eq!(parse_row_count("2M"), Ok(2_000_000));
        assert_eq!(parse_row_count("50k"), Ok(50_000));
        assert!(parse_row_count("1").is_err());
        assert!(parse_row_count("1.5M").is_err());
        assert!(parse_row_count("x").is_err());
        assert!(parse_demo_rows("10").is_err());
    }

    #[test]
    fn subcommands_parse() {
        let args =
            Args::try_parse_from(["calibsql", "generate", "--rows", "1K", "--out", "d"]).unwrap();
        let Some(Command::Generate(generate)) = args.command else {
            panic!("{:?}", args.command)
        };
        assert_eq!(
            (generate.rows, generate.seed),
            (1000, calibsql::generate::DEFAULT_SEED)
        );
        let args = Args::try_parse_from(["calibsql", "demo"]).unwrap();
        assert!(matches!(args.command, Some(Command::Demo(_))));
        let args = Args::try_parse_from([
            "calibsql",
            "plot",
            "reliability",
            "-c",
            "SELECT 1",
            "-o",
            "x.svg",
            "--bins",
            "10",
        ])
        .unwrap();
        let Some(Command::Plot(PlotCommand::Reliability(plot))) = args.command else {
            panic!("{:?}", args.command)
        };
        assert_eq!(plot.bins, 10);
        let args = Args::try_parse_from([
            "calibsql", "report", "-c", "SELECT 1", "-o", "r.html", "--field", "a", "--field", "b",
        ])
        .unwrap();
        let Some(Command::Report(report)) = args.command else {
            panic!("{:?}", args.command)
        };
        assert_eq!(report.fields, ["a", "b"]);
        assert!(Args::try_parse_from(["calibsql", "report", "-o", "r.html"]).is_err());
        // The SQL runner's flags do not mix with a tool.
        assert!(Args::try_parse_from(["calibsql", "-c", "SELECT 1", "demo"]).is_err());
        assert!(Args::try_parse_from(["calibsql", "plot", "reliability", "-o", "x.svg"]).is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_positive("8"), Ok(8));
        assert!(parse_positive("0").is_err());
        assert!(parse_positive("-1").is_err());
        assert!(parse_positive("x").is_err());
    }
}
