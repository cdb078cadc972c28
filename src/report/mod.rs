//! The calibration report: one self-contained HTML page (and its numbers as JSON) from a
//! query returning `p`, `y` and optionally `model`, `w`, `day` and segment fields.
//!
//! `calibsql report`, `calibsql demo` and the Python package's `con.report()` share this
//! module. [`compute`] runs one query per section (`queries.rs`) and reads the results into
//! [`ReportData`] (`data.rs`, the documented JSON schema); [`Report::html`] draws the charts as
//! inline SVG (`charts.rs`) and fills the page template (`page.rs`); [`write_atomically`] puts
//! a file in place only once it is whole.
//!
//! The page is written with maud: its templates are Rust code checked at compile time (a
//! typo is a build error, not a blank section at run time), it escapes every interpolated
//! value unless told otherwise (`PreEscaped` is used only for the SVG plotters draws and the
//! JSON, escaped for a script element), and it needs no template files at run time, so the
//! Python extension carries the same page. askama would also check at compile time but keeps
//! templates in separate files with their own syntax; minijinja checks at run time.

pub mod charts;
pub mod data;
mod page;
mod queries;
pub mod status;

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use datafusion::prelude::SessionContext;

pub use data::ReportData;
pub use queries::{LEVEL, TOP_SEGMENTS};

use crate::plot::Strategy;

/// Bins of the reliability diagram and the ECE unless told otherwise (`ece`'s default).
pub const DEFAULT_BINS: u32 = 15;
/// Days whose values make the drift rule's reference band unless told otherwise.
pub const DEFAULT_REFERENCE_DAYS: u32 = 7;

/// The x and y axes of the reliability diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Axis {
    /// Log-odds when every bin's mean prediction is below [`charts::LOG_ODDS_BELOW`]
    /// (CTR-sized probabilities), else linear.
    #[default]
    Auto,
    Linear,
    /// Log-odds (logit) axes labelled with probabilities.
    LogOdds,
}

impl Axis {
    /// The names [`Axis::from_name`] accepts.
    pub const NAMES: [&'static str; 3] = ["auto", "linear", "log-odds"];

    pub fn from_name(name: &str) -> Option<Axis> {
        match name {
            "auto" => Some(Axis::Auto),
            "linear" => Some(Axis::Linear),
            "log-odds" => Some(Axis::LogOdds),
            _ => None,
        }
    }
}

/// What a report is computed with.
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub bins: u32,
    /// Binning of the reliability diagram, the per-bin table and the MCE.
    pub strategy: Strategy,
    /// Segment columns of the query (`--field`).
    pub fields: Vec<String>,
    pub title: Option<String>,
    /// Days of the drift rule's reference period (the first ones).
    pub reference_days: u32,
    /// Where the rows come from, as shown in the header (e.g. `--table` arguments).
    pub source: Vec<String>,
    pub axis: Axis,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            bins: DEFAULT_BINS,
            strategy: Strategy::Uniform,
            fields: vec![],
            title: None,
            reference_days: DEFAULT_REFERENCE_DAYS,
            source: vec![],
            axis: Axis::Auto,
        }
    }
}

/// A computed report.
#[derive(Debug, Clone)]
pub struct Report {
    pub data: ReportData,
    pub axis: Axis,
}

/// Runs the report's queries over the result of `sql` (its last statement; earlier ones run
/// first). Bad input (no `p` or `y`, a `--field` the query does not return, a failing query)
/// is an error; no rows, one class only or NULL/NaN rows give a report that says what could
/// not be computed.
pub async fn compute(
    ctx: &SessionContext,
    sql: &str,
    options: &ReportOptions,
) -> anyhow::Result<Report> {
    if options.bins == 0 || options.bins > 10_000 {
        anyhow::bail!("report: bins must be in [1, 10000], not {}", options.bins);
    }
    if options.reference_days == 0 {
        anyhow::bail!("report: reference_days must be at least 1");
    }
    Ok(Report {
        data: queries::compute(ctx, sql, options).await?,
        axis: options.axis,
    })
}

impl Report {
    /// The page.
    pub fn html(&self) -> anyhow::Result<String> {
        page::render(&self.data, self.axis)
    }

    /// The numbers as pretty-printed JSON (what the page embeds).
    pub fn json(&self) -> anyhow::Result<String> {
        serde_json::to_string_pretty(&self.data).context("report: cannot encode the JSON")
    }

    /// Writes the page to `path`, atomically.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        write_atomically(path, self.html()?.as_bytes())
    }
}

/// Writes `contents` to a temporary file next to `path`, then renames it to `path`: a reader
/// sees the old file or the whole new one, and a failure leaves nothing half-written.
pub fn write_atomically(path: &Path, contents: &[u8]) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::Builder::new()
        .prefix(".calibsql-")
        .suffix(".tmp")
        .tempfile_in(dir)
        .with_context(|| {
            format!(
                "cannot write {}: cannot create a file in {}",
                path.display(),
                dir.display()
            )
        })?;
    // A new file gets the permissions of the one it replaces, or rw-r--r--, not the
    // temporary file's rw-------.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let permissions = std::fs::metadata(path)
            .map(|m| m.permissions())
            .unwrap_or_else(|_| std::fs::Permissions::from_mode(0o644));
        std::fs::set_permissions(file.path(), permissions)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    file.write_all(contents)
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.persist(path)
        .map_err(|e| e.error)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
