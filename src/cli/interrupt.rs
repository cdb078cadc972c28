//! Ctrl-C while a statement runs: its cancel flag is set from a thread of its own.
//!
//! The CLI's `tokio::signal::ctrl_c()` is delivered by the runtime's signal driver, which only
//! runs when a worker thread is between two polls; while a long operator occupies both, the
//! signal would wait for it. A thread with a runtime of its own waits for Ctrl-C instead and
//! sets the running statement's flag ([`calibsql::cancel`]): the statement's operators then
//! stop at once, the workers come free, and the CLI's own handling (drop the statement, say
//! "cancelled", or exit 130) goes on as before.

use std::sync::{Mutex, OnceLock};

use calibsql::cancel::Cancel;

/// The flag of the statement running now, if any.
fn running() -> &'static Mutex<Option<Cancel>> {
    static RUNNING: OnceLock<Mutex<Option<Cancel>>> = OnceLock::new();
    RUNNING.get_or_init(|| Mutex::new(None))
}

/// Starts the thread that waits for Ctrl-C (once per process).
fn watch() {
    static WATCHING: OnceLock<()> = OnceLock::new();
    WATCHING.get_or_init(|| {
        let started = std::thread::Builder::new()
            .name("calibsql-interrupt".to_string())
            .spawn(|| {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async {
                    while tokio::signal::ctrl_c().await.is_ok() {
                        let running = running().lock().unwrap_or_else(|e| e.into_inner());
                        if let Some(cancel) = running.as_ref() {
                            cancel.cancel();
                        }
                    }
                });
            });
        // Without the thread, Ctrl-C still works, only later: nothing to report.
        drop(started);
    });
}

/// A new statement's flag, the one Ctrl-C sets until the returned guard is dropped.
pub fn statement() -> (Cancel, Running) {
    watch();
    let cancel = Cancel::new();
    *running().lock().unwrap_or_else(|e| e.into_inner()) = Some(cancel.clone());
    (cancel, Running(()))
}

/// While it lives, Ctrl-C cancels the statement [`statement`] made.
pub struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        *running().lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}
