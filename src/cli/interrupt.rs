//! Ctrl-C while a statement runs: its cancel flag is set from a thread of its own.
//!
//! The CLI's `tokio::signal::ctrl_c()` future is polled by the thread that drives the statement,
//! and woken by the runtime's signal driver, which runs only when a worker is between two polls;
//! while a long operator occupies those threads, the Ctrl-C would wait for it. A thread with a
//! runtime of its own waits for Ctrl-C instead and sets the running statement's flag
//! ([`calibsql::cancel`]), or remembers the Ctrl-C for the statement about to start: the
//! statement's operators then stop at once, the threads come free, and the CLI's own handling
//! (drop the statement, say "cancelled", or exit 130) goes on as before.

use std::sync::{Mutex, OnceLock};

use calibsql::cancel::Cancel;

/// What a Ctrl-C reaches.
#[derive(Default)]
struct State {
    /// The flag of the statement running now, if any.
    running: Option<Cancel>,
    /// A Ctrl-C came since the last prompt (or since the start, in a batch run): a statement
    /// that starts now starts cancelled. This closes the gap between a Ctrl-C and the
    /// statement about to run on the thread that would otherwise notice it.
    interrupted: bool,
    /// The REPL is at its prompt, where Ctrl-C edits the line: this thread's Ctrl-C is not
    /// remembered. (It can get a Ctrl-C after the REPL's own handler did and the prompt came
    /// back: remembered, it cancelled the next statement at its start.)
    at_prompt: bool,
}

fn state() -> std::sync::MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Starts the thread that waits for Ctrl-C (once per process) and returns once it listens.
///
/// Waiting matters: a Ctrl-C that arrives before this thread listens reaches only the CLI's
/// own `ctrl_c()` future, and while the statement's operators occupy the thread that polls
/// that future, nothing would set the statement's flag and the Ctrl-C would be lost.
pub fn watch() {
    static WATCHING: OnceLock<()> = OnceLock::new();
    WATCHING.get_or_init(|| {
        let (listening, listens) = std::sync::mpsc::channel::<()>();
        let started = std::thread::Builder::new()
            .name("calibsql-ctrl-c".to_string())
            .spawn(move || {
                let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                runtime.block_on(async move {
                    let Ok(mut interrupts) = Interrupts::listen() else {
                        return;
                    };
                    let _ = listening.send(());
                    while interrupts.next().await {
                        let mut state = state();
                        state.interrupted = !state.at_prompt;
                        if let Some(cancel) = state.running.as_ref() {
                            cancel.cancel();
                            INTERRUPTED.notify_waiters();
                        }
                    }
                });
            });
        // Without the thread, Ctrl-C still works, only later: nothing to report. The thread
        // either listens or ends (dropping the sender), so this wait is short.
        if started.is_ok() {
            let _ = listens.recv();
        }
    });
}

/// Ctrl-C as a stream whose listener is registered when it is made, so no Ctrl-C after
/// [`Interrupts::listen`] returns is missed (`tokio::signal::ctrl_c()` registers on its first
/// poll instead).
#[cfg(unix)]
struct Interrupts(tokio::signal::unix::Signal);

#[cfg(unix)]
impl Interrupts {
    fn listen() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self(signal(SignalKind::interrupt())?))
    }

    async fn next(&mut self) -> bool {
        self.0.recv().await.is_some()
    }
}

#[cfg(not(unix))]
struct Interrupts(tokio::signal::windows::CtrlC);

#[cfg(not(unix))]
impl Interrupts {
    fn listen() -> std::io::Result<Self> {
        Ok(Self(tokio::signal::windows::ctrl_c()?))
    }

    async fn next(&mut self) -> bool {
        self.0.recv().await.is_some()
    }
}

/// Woken when a Ctrl-C has cancelled the running statement ([`interrupted`]).
static INTERRUPTED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Resolves when a Ctrl-C cancels the statement running then: the REPL waits for this
/// beside the statement, so that one Ctrl-C is seen once, by this module's thread (a second
/// listener of its own could see the same Ctrl-C after the prompt was back and cancel the
/// next statement).
pub async fn interrupted() {
    INTERRUPTED.notified().await;
}

/// A new statement's flag, the one Ctrl-C sets until the returned guard is dropped.
pub fn statement() -> (Cancel, Running) {
    watch();
    let cancel = Cancel::new();
    let mut state = state();
    if state.interrupted {
        cancel.cancel();
    }
    state.at_prompt = false;
    state.running = Some(cancel.clone());
    (cancel, Running(()))
}

/// Whether a Ctrl-C came since the start (or since the last prompt) outside the prompt.
pub fn seen() -> bool {
    state().interrupted
}

/// Forgets the Ctrl-Cs so far, and ignores those until the next [`statement`]: the REPL calls
/// this before each prompt, where a Ctrl-C edits the line instead of cancelling a statement.
pub fn forget() {
    let mut state = state();
    state.interrupted = false;
    state.at_prompt = true;
}

/// While it lives, Ctrl-C cancels the statement [`statement`] made.
pub struct Running(());

impl Drop for Running {
    fn drop(&mut self) {
        state().running = None;
    }
}
