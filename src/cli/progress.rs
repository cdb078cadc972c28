//! A one-line progress indicator on standard error for queries that run over a second.
//!
//! A tokio task polls the running physical plan's metrics every 200 ms: rows produced by the
//! scans (leaf operators) and bytes read (`bytes_scanned`, reported by Parquet). It draws only
//! when enabled (standard error is a terminal and `--quiet` is off) and erases its line when
//! the query ends, before anything else is written.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use datafusion::physical_plan::ExecutionPlan;

const FIRST_DRAW_AFTER: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(200);
const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Debug, Default)]
struct State {
    stopped: bool,
    drawn: bool,
}

/// The indicator for one running query. [`Progress::stop`] it before writing to the terminal;
/// dropping it stops it too.
#[derive(Debug)]
pub struct Progress {
    state: Arc<Mutex<State>>,
}

impl Progress {
    /// Starts polling `plan` if `enabled`; otherwise does nothing.
    pub fn start(plan: Arc<dyn ExecutionPlan>, enabled: bool) -> Progress {
        let state = Arc::new(Mutex::new(State {
            stopped: !enabled,
            drawn: false,
        }));
        if enabled {
            let shared = Arc::clone(&state);
            tokio::spawn(async move {
                let started = Instant::now();
                let mut ticker = tokio::time::interval(TICK);
                let mut frame = 0usize;
                loop {
                    ticker.tick().await;
                    let mut state = match shared.lock() {
                        Ok(state) => state,
                        Err(poisoned) => poisoned.into_inner(),
                    };
                    if state.stopped {
                        break;
                    }
                    if started.elapsed() < FIRST_DRAW_AFTER {
                        continue;
                    }
                    let (rows, bytes) = scan_metrics(plan.as_ref());
                    let line = format!(
                        "{} {} rows scanned{} · {:.1} s",
                        SPINNER[frame % SPINNER.len()],
                        thousands(rows as u64),
                        if bytes > 0 {
                            format!(", {} read", human_bytes(bytes))
                        } else {
                            String::new()
                        },
                        started.elapsed().as_secs_f64()
                    );
                    frame += 1;
                    let mut stderr = io::stderr().lock();
                    let _ = write!(stderr, "\r\x1b[2K{line}");
                    let _ = stderr.flush();
                    state.drawn = true;
                }
            });
        }
        Progress { state }
    }

    /// Stops drawing and erases the line if one was drawn. Idempotent.
    pub fn stop(&self) {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if !state.stopped {
            state.stopped = true;
            if state.drawn {
                let mut stderr = io::stderr().lock();
                let _ = write!(stderr, "\r\x1b[2K");
                let _ = stderr.flush();
                state.drawn = false;
            }
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Rows produced by the plan's leaves and bytes its scans read so far.
fn scan_metrics(plan: &dyn ExecutionPlan) -> (usize, usize) {
    let mut rows = 0;
    let mut bytes = 0;
    if let Some(metrics) = plan.metrics() {
        if plan.children().is_empty() {
            rows += metrics.output_rows().unwrap_or(0);
        }
        bytes += metrics
            .sum_by_name("bytes_scanned")
            .map(|v| v.as_usize())
            .unwrap_or(0);
    }
    for child in plan.children() {
        let (r, b) = scan_metrics(child.as_ref());
        rows += r;
        bytes += b;
    }
    (rows, bytes)
}

/// 1234567 → `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
