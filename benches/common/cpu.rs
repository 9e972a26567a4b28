//! The process's CPU clock, shared by the benches that report CPU time
//! (`#[path]`-included: a file in a subfolder is no bench target of its own).

use std::time::Duration;

/// CPU time this process has used so far (user + system).
pub fn cpu() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
