//! Signs of life for `compare` and `hunt` on standard error, and what they do
//! on SIGINT or SIGTERM. Standard output never sees any of it: it stays a
//! function of the arguments.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

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

/// Catches SIGINT and SIGTERM: the first one is noted for [`interrupted`]
/// (the command then prints what it has and exits); a second one exits at
/// once, for a summary that is itself stuck.
pub fn catch_interrupts() {
    for signal in [SIGINT, SIGTERM] {
        // Registration fails only for forbidden signals, which these are not;
        // without it the command still runs, as before, just uninterruptibly.
        let _ = signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, &ARMED);
        let _ = signal_hook::flag::register_usize(signal, &SIGNAL, signal as usize);
        let _ = signal_hook::flag::register(signal, &ARMED);
    }
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
