//! Signs of life for `compare` and `hunt` on standard error, and what they do
//! on SIGINT or SIGTERM. Standard output never sees any of it: it stays a
//! function of the arguments.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use signal_hook::consts::{SIGINT, SIGTERM};

use super::PROGRESS_EVERY;

/// Progress of a command over a known number of units (seeds, runs): a bar
/// on a terminal, else a plain line every [`PROGRESS_EVERY`] for a log.
pub struct Meter {
    command: &'static str,
    unit: &'static str,
    total: u64,
    bar: Option<ProgressBar>,
    began: Instant,
    /// When the last plain line was written.
    last: Mutex<Instant>,
}

impl Meter {
    /// A meter for `total` units of `unit` (plural, e.g. "seeds").
    pub fn new(command: &'static str, unit: &'static str, total: u64) -> Meter {
        let began = Instant::now();
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{command}: {{bar:30}} {{pos}}/{{len}} {unit}{{msg}}, {{elapsed}} (eta {{eta}})"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar
        });
        Meter { command, unit, total, bar, began, last: Mutex::new(began) }
    }

    /// `done` units finished; `extra` (e.g. ", 2 failing") follows the count.
    pub fn set(&self, done: u64, extra: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(extra.to_owned());
            bar.set_position(done);
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() < PROGRESS_EVERY {
            return;
        }
        *last = Instant::now();
        eprintln!("{}: {done}/{} {}{extra}, {} s", self.command, self.total, self.unit, self.began.elapsed().as_secs());
    }

    /// Takes the bar off the terminal (the summary follows).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The termination signal that arrived (0: none yet).
static SIGNAL: AtomicUsize = AtomicUsize::new(0);
/// Set by the first signal: a second one ends the process at once.
static ARMED: AtomicBool = AtomicBool::new(false);

/// Set once the command has its output and is printing it: the watchdog of
/// [`catch_interrupts`] then lets it finish.
static SETTLED: AtomicBool = AtomicBool::new(false);

/// How long `compare` and `hunt` have after a signal to print what they have
/// (they stop taking new work at once): the watchdog of [`catch_interrupts`]
/// ends the process after it.
pub const GRACE: Duration = Duration::from_secs(1);

/// Catches SIGINT and SIGTERM: the first one is noted for [`interrupted`]
/// (the command then prints what it has and exits); a second one exits at
/// once, for a summary that is itself stuck.
///
/// A watchdog thread makes sure the first one stops the command within
/// `grace` whatever it is doing (a run in the middle of a long step, say):
/// unless the command has [`settle`]d by then, it says on standard error
/// that `command` was interrupted and `unfinished`, and exits with 128 + the
/// signal's number. A command with nothing partial to print (`run`,
/// `trace`) passes [`Duration::ZERO`].
pub fn catch_interrupts(command: &'static str, grace: Duration, unfinished: &'static str) {
    for signal in [SIGINT, SIGTERM] {
        // Registration fails only for forbidden signals, which these are not;
        // without it the command still runs, as before, just uninterruptibly.
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, &ARMED);
        let _ = signal_hook::flag::register_usize(signal, &SIGNAL, signal as usize);
        let _ = signal_hook::flag::register(signal, &ARMED);
    }
    let watch = move || {
        let (name, code) = loop {
            match interrupted() {
                Some(s) => break s,
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        std::thread::sleep(grace);
        if !SETTLED.load(Ordering::SeqCst) {
            eprintln!("{command}: interrupted by {name}; {unfinished}");
            std::process::exit(i32::from(code));
        }
    };
    // Without the watchdog a signal still stops the command between units
    // of work, as before: not worth failing the command for.
    let _ = std::thread::Builder::new().name("signal-watch".into()).spawn(watch);
}

/// The command has its output and prints it now: a signal's watchdog (see
/// [`catch_interrupts`]) no longer cuts it short.
pub fn settle() {
    SETTLED.store(true, Ordering::SeqCst);
}

/// The signal that interrupted the command, if one did: its name and the
/// conventional exit code (128 + its number).
pub fn interrupted() -> Option<(&'static str, u8)> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s if s == SIGINT as usize => Some(("SIGINT", 128 + SIGINT as u8)),
        s => Some(("SIGTERM", 128 + s as u8)),
    }
}
