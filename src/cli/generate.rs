//! `calibsql generate`: synthetic event logs with known truth (see `calibsql::generate`).

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use calibsql::generate::{self, Config, Drift, Summary};

use super::args::GenerateArgs;
use super::progress::thousands;

/// Writes the data of `args`; the progress bar draws on standard error when `progress`.
pub fn run(args: &GenerateArgs, progress: bool) -> anyhow::Result<()> {
    let mut config = Config::new(args.rows);
    config.seed = args.seed;
    config.days = args.days;
    config.exposure = match args.exposure {
        super::args::ExposureArg::Strong => calibsql::generate::Exposure::Strong,
        super::args::ExposureArg::Mild => calibsql::generate::Exposure::Mild,
    };
    config.drift = args.drift_day.map(|from_day| Drift {
        from_day,
        factor: args.drift_factor.map_or(DEFAULT_DRIFT_FACTOR, |f| f.0),
    });
    let summary = write(&args.out, config, progress && !args.quiet)?;
    if !args.quiet {
        let _ = writeln!(io::stderr(), "{}", describe(&summary));
    }
    Ok(())
}

/// Set on Ctrl-C: a running generation stops after its current batch.
static CANCEL: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Stops a running [`write`] (on Ctrl-C; the runtime waits for the blocking thread).
pub fn cancel() {
    CANCEL.store(true, Ordering::Relaxed);
}

/// The factor `--drift-day` uses without `--drift-factor`.
pub const DEFAULT_DRIFT_FACTOR: f64 = 1.5;

/// Generates the rows of `config` into `out`, drawing a progress bar on standard error if
/// `progress`.
pub fn write(out: &Path, mut config: Config, progress: bool) -> anyhow::Result<Summary> {
    config.cancel = Some(Arc::clone(&CANCEL));
    let mut bar = ProgressBar::new(config.rows, progress);
    let result = generate::generate(out, &config, &mut |done| bar.draw(done));
    bar.clear();
    result
}

/// `Wrote 1,000,000 rows (valid 500,000 in DIR/valid, test 500,000 in DIR/test) in 0.8 s,
/// 1.2M rows/s`.
pub fn describe(summary: &Summary) -> String {
    let rows = summary.valid_rows + summary.test_rows;
    let seconds = summary.elapsed.as_secs_f64();
    format!(
        "Wrote {} rows (valid {} in {}, test {} in {}) in {seconds:.1} s, {} rows/s",
        thousands(rows),
        thousands(summary.valid_rows),
        summary.valid_dir.display(),
        thousands(summary.test_rows),
        summary.test_dir.display(),
        per_second(rows, seconds),
    )
}

/// A one-line bar on standard error, redrawn at most every 100 ms.
struct ProgressBar {
    total: u64,
    enabled: bool,
    started: Instant,
    last: Option<Instant>,
}

impl ProgressBar {
    const WIDTH: usize = 30;

    fn new(total: u64, enabled: bool) -> ProgressBar {
        ProgressBar {
            total,
            enabled,
            started: Instant::now(),
            last: None,
        }
    }

    fn draw(&mut self, done: u64) {
        if !self.enabled {
            return;
        }
        if self
            .last
            .is_some_and(|t| t.elapsed() < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(Instant::now());
        let fraction = if self.total == 0 {
            1.0
        } else {
            done as f64 / self.total as f64
        };
        let full = ((fraction * Self::WIDTH as f64) as usize).min(Self::WIDTH);
        let line = format!(
            "generating [{}{}] {:>3.0}%  {} / {} rows  {} rows/s",
            "█".repeat(full),
            "░".repeat(Self::WIDTH - full),
            fraction * 100.0,
            thousands(done),
            thousands(self.total),
            per_second(done, self.started.elapsed().as_secs_f64()),
        );
        let mut stderr = io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K{line}");
        let _ = stderr.flush();
    }

    fn clear(&mut self) {
        if self.enabled && self.last.is_some() {
            let mut stderr = io::stderr().lock();
            let _ = write!(stderr, "\r\x1b[2K");
            let _ = stderr.flush();
        }
    }
}

/// `1.2M` rows per second.
fn per_second(rows: u64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return "-".to_string();
    }
    let rate = rows as f64 / seconds;
    if rate >= 1e6 {
        format!("{:.1}M", rate / 1e6)
    } else if rate >= 1e3 {
        format!("{:.0}k", rate / 1e3)
    } else {
        format!("{rate:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_well() {
        assert_eq!(per_second(3_000_000, 2.0), "1.5M");
        assert_eq!(per_second(500, 1.0), "500");
    }
}
