//! Panics during a run: a run in which anything panicked is not a result.
//!
//! A panic inside a simulated host's task is caught by tokio and may leave
//! the run going on without it (a gate, a connection, a job), so the report
//! could look like a pass. While a run is watched, a process-wide panic hook
//! (installed once, passing every other panic on to the hook it replaced)
//! records the panics of the simulating thread instead of printing them; the
//! runner then fails the run with the first one and how many there were,
//! shown once with the replay line. The one panic a run may go on through is
//! a user's own client's in a job ([`Subject`](super::subject::Subject)),
//! which the checks report as a violation of that client.

use std::cell::RefCell;
use std::panic::PanicHookInfo;
use std::sync::Once;

thread_local! {
    /// The panics of this thread's watched run, when one is watched.
    static RECORDED: RefCell<Option<Recorded>> = const { RefCell::new(None) };
}

static HOOK: Once = Once::new();

/// The most panic messages a run keeps (one that panics in a loop goes on
/// counting).
const KEPT: usize = 16;

/// What a watched run's panics came to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorded {
    /// The first [`KEPT`] messages, each with where it panicked.
    pub(crate) first: Vec<String>,
    /// Every panic.
    pub(crate) count: usize,
}

/// Watches the panics of the calling thread until it is dropped.
pub(crate) struct Watch {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Watch {
    /// Starts recording this thread's panics (and installs the hook once).
    pub(crate) fn start() -> Watch {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                if !record(info) {
                    previous(info);
                }
            }));
        });
        RECORDED.with(|r| *r.borrow_mut() = Some(Recorded::default()));
        Watch { _not_send: std::marker::PhantomData }
    }

    /// The panics recorded so far.
    pub(crate) fn panics(&self) -> Recorded {
        RECORDED.with(|r| r.borrow().clone().unwrap_or_default())
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        RECORDED.with(|r| *r.borrow_mut() = None);
    }
}

/// Records `info` if this thread is watched; whether it did.
fn record(info: &PanicHookInfo<'_>) -> bool {
    RECORDED
        .try_with(|r| {
            let Ok(mut r) = r.try_borrow_mut() else { return false };
            let Some(recorded) = r.as_mut() else { return false };
            let message = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("a panic without a message");
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            recorded.count += 1;
            if recorded.first.len() < KEPT {
                recorded.first.push(format!("{message}{at}"));
            }
            true
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_thread_records_its_panics_and_an_unwatched_one_does_not() {
        let watch = Watch::start();
        let caught = std::panic::catch_unwind(|| panic!("boom {}", 1));
        assert!(caught.is_err());
        let panics = watch.panics();
        assert_eq!(panics.count, 1);
        assert!(panics.first[0].starts_with("boom 1 at src/sim/run/panics.rs:"), "{panics:?}");
        drop(watch);
        // Another thread is not watched by this one's watch.
        let watch = Watch::start();
        let other = std::thread::spawn(|| std::panic::catch_unwind(|| panic!("elsewhere")).is_err()).join();
        assert_eq!(other.ok(), Some(true));
        assert_eq!(watch.panics().count, 0);
    }
}
