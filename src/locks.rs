//! The crate's one lock helper: production (`core`'s shared budget, `gate`)
//! and the harness (`sim`, `testing`) lock their mutexes through it, so a
//! poisoned lock is treated the same way everywhere.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, going on past a poisoned lock: a panic while it was held is
/// reported where it happened, and what every holder leaves between its
/// statements is still consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
