//! A running statement's cancel flag, as the functions see it.
//!
//! An engine that cancels a statement sets its [`Cancel`] flag, and polls each operator of the
//! statement inside [`Cancel::while_polling`], which makes the flag the current thread's while
//! the poll runs. A function whose own work is long (a fit's optimisation over millions of
//! points) calls [`check`] now and then, and stops with an error when the statement has been
//! cancelled, or stops iterating when [`requested`] (the fits' solvers in `optim`);
//! elsewhere (no engine flag) neither ever stops anything.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use datafusion_common::{DataFusionError, Result};

/// The cancel flag of one statement; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

thread_local! {
    /// The flag of the statement whose operator this thread is polling.
    static CURRENT: RefCell<Option<Cancel>> = const { RefCell::new(None) };
}

impl Cancel {
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the statement cancelled: every later [`check`] under it fails.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Runs `poll` with this flag as the current thread's, then restores the previous one
    /// (polls nest: an operator polls its inputs).
    pub fn while_polling<T>(&self, poll: impl FnOnce() -> T) -> T {
        let previous = CURRENT.with(|c| c.replace(Some(self.clone())));
        struct Restore(Option<Cancel>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let _restore = Restore(previous);
        poll()
    }
}

/// The error a cancelled statement's operators stop with. The engine that cancelled the
/// statement reports its own words (a cancel request, Ctrl-C, a timeout); this is what is
/// seen if it does not.
pub fn cancelled() -> DataFusionError {
    DataFusionError::Execution("the statement was cancelled".to_string())
}

/// Whether the statement being polled on this thread has been cancelled: an iterative
/// solver stops iterating (its unfinished answer is never seen, the statement fails).
pub fn requested() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(Cancel::is_cancelled))
}

/// Fails when the statement being polled on this thread has been cancelled.
pub fn check() -> Result<()> {
    if requested() {
        Err(cancelled())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_fails_only_inside_a_cancelled_statements_poll() {
        assert!(check().is_ok());
        let cancel = Cancel::new();
        cancel.while_polling(|| assert!(check().is_ok()));
        cancel.cancel();
        cancel.while_polling(|| {
            assert!(check().is_err());
            // A nested poll of another statement sees that one's flag, then this one's again.
            Cancel::new().while_polling(|| assert!(check().is_ok()));
            assert!(check().is_err());
        });
        assert!(check().is_ok());
    }
}
