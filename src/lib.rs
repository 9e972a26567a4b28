//! # retrysim
//!
//! Retries on HTTP 429 that are correct by construction, and a deterministic
//! simulator that proves it.
//!
//! # Where to start
//!
//! **New here?** Read the book in order: `docs/book/SUMMARY.md` in the
//! repository (a first passing test in five minutes, then a
//! reqwest-middleware stack, a typed API client by base URL, the hunt, the
//! command line, the driver in production, and the reference pages: the
//! checks, scenario keys, dialects and fault kinds). Then, by what you have:
//!
//! - **You have a retry client and want to test it** (in your own
//!   `cargo test`, on virtual time, against a simulated rate-limited API):
//!   start at [`testing`](testing/index.html) (feature `sim`, which the
//!   default features `cli` and `proptest` turn on):
//!   [`Harness`](testing/struct.Harness.html), the
//!   [`Subject`](testing/trait.Subject.html) your client implements, the
//!   snapshot text and the hunt over seeds. Put retrysim in
//!   `[dev-dependencies]` for the harness, and with `default-features =
//!   false` in `[dependencies]` when your client is written against its
//!   traits (the README's Cargo.toml has both). A reqwest-middleware stack
//!   is tested with the feature `sim-reqwest` (`testing::ReqwestStack`).
//! - **You want retrysim to do the retrying** in a service: start at
//!   [`client::RetryClient`] with a [`Policy`] preset and an
//!   [`env::Transport`] ([`env::HyperTransport`] for HTTP and HTTPS); the quick
//!   start below. `default-features = false` compiles no harness.
//! - **You want one decision** (your own loop, another runtime): [`core`],
//!   whose [`decide`](core::policy::decide) is pure.
//!
//! Beside the book, the guide (`docs/guide/`, linked from the README) has a
//! page per topic, and `docs/DESIGN.md` says why things are as they are.
//!
//! **Versions.** retrysim 0.1 is not yet published: until 1.0 a release may
//! change the public API, and `CHANGELOG.md` says what changed. The public
//! API is what `tests/public-api.txt` lists; a test keeps that listing equal
//! to the crate. The `rust-version` (1.95) is the toolchain CI builds and
//! tests with; no older one is checked.
//!
//! **The contract.** The decision core ([`core`]) is sans-IO and
//! deterministic: it performs no IO, reads no clock and draws no random
//! number of its own. Every instant and every random draw is an argument, so
//! the same inputs give the same [`Decision`] on every machine. The driver
//! ([`client::RetryClient`]) adds only what needs a runtime: it sends through
//! an injected [`env::Transport`], sleeps on an injected [`env::Clock`], draws
//! from an injected [`env::Rng`]. The simulator (feature `sim`) runs that same
//! driver on turmoil's virtual time against simulated APIs, from one seed.
//!
//! What the core guarantees, whatever the server says:
//! - `Retry-After` is parsed strictly (delta-seconds and the three HTTP-date
//!   forms), a date is measured against the response's own `Date` (so server
//!   clock skew cancels out), and a valid advice is never shortened;
//! - a full rate window (`RATE_LIMITED`) is told from an exhausted quota
//!   (`QUOTA_EXCEEDED`, `INSUFFICIENT_CREDITS`) by the body's error code;
//! - no sleep passes the deadline: an advice too long for what is left gives
//!   up at once, with zero sleep and the original answer;
//! - `N` retries means at most `N + 1` attempts;
//! - a POST carries one `Idempotency-Key` per logical operation, reused on
//!   every attempt; an unkeyed POST is never replayed after an ambiguous
//!   failure;
//! - every give-up names its [`GiveUpReason`].
//!
//! # Quick start: one decision
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use http::{HeaderMap, HeaderValue, StatusCode};
//! use retrysim::core::{body::ErrorEnvelope, classify::*, policy::*, retry_after::read_advice};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("retry-after", HeaderValue::from_static("30"));
//! let body = br#"{"error":{"type":"queue_full","retry_after_seconds":30}}"#;
//! let envelope = ErrorEnvelope::parse(body);
//! let status = StatusCode::TOO_MANY_REQUESTS;
//! // The class and the code it acted on (a terminal one wins where the body
//! // repeats its code member).
//! let table = DefaultTable::default();
//! let (class, code) = classify_answer(&table, status, &headers, envelope.as_ref(), SystemTime::UNIX_EPOCH);
//! let advice = read_advice(&headers, envelope.as_ref(), SystemTime::UNIX_EPOCH);
//! let attempted = Attempted {
//!     operation: Operation::Keyed, class, status: Some(429), code, advice: &advice,
//!     attempts: 1, unclear: 0, throttled: 1, elapsed: Duration::ZERO, previous_wait: None, cancelled: false,
//! };
//! // A person is waiting: 30 s is longer than the interactive budget allows.
//! let d = decide(&Policy::interactive(), &attempted, Draws { backoff: 1, spread: 2 }, None, Duration::ZERO);
//! assert!(matches!(d, Decision::GiveUp { reason: GiveUpReason::AdviceTooLong { .. } }));
//! // A background worker waits 30 s plus a spread of up to 1 s.
//! let d = decide(&Policy::background(), &attempted, Draws { backoff: 1, spread: u64::MAX }, None, Duration::ZERO);
//! assert!(matches!(d, Decision::Retry { wait, .. } if wait == Duration::from_secs(31)));
//! ```
//!
//! # Quick start: the driver
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use retrysim::{bytes::Bytes, client::RetryClient, core::policy::Policy, env::*, http, trace::Trace};
//!
//! // One transport per program: its clones share one keep-alive pool.
//! let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::interactive());
//! // Keys and jitter from OS entropy. Never a fixed seed in production: a
//! // second run would resend the first run's keys and get its answers replayed.
//! let mut rng = os_rng()?;
//! let req = http::Request::post("http://localhost:8080/v1/jobs").body(Bytes::from("{}"))?;
//! let mut trace = Trace::new("job-1");
//! match client.execute_traced(req, &mut rng, &Default::default(), &mut trace).await {
//!     // What it took, without reading the trace.
//!     Ok(done) => println!("{} after {} attempt(s)", done.response.status(), done.attempts),
//!     // Queue the work under the same key and answer 202 (brief 000).
//!     Err(e) => println!("{e}; key {:?}", e.idempotency_key),
//! }
//! print!("{}", trace.render());
//! # Ok(()) }
//! ```
//!
//! # Cargo features
//! - `sim`: the simulation harness (module `testing`: retrysim's turmoil
//!   fork, TOML scenario files, the simulated API's server).
//! - `cli` (default, implies `sim`): the `retrysim` binary (clap, mimalloc).
//! - `proptest` (default, implies `sim`): the scenario and fault strategies
//!   for your own properties (`testing::strategies`).
//! - `https` (default): [`env::HyperTransport`] speaks `https://` over rustls
//!   (module `tls`); `webpki-roots` adds Mozilla's roots, compiled in.
//! - `reqwest`: `impl Transport for reqwest::Client` (module `reqwest`), so a
//!   [`RetryClient`] sends through your own reqwest client;
//!   `reqwest-middleware` adds `RetryMiddleware`, retrysim's retry in a
//!   `reqwest_middleware` chain where `reqwest-retry` sits.
//! - `sim-reqwest` (implies `sim`): `testing::SimReqwest` and
//!   `testing::ReqwestStack`, a `reqwest_middleware` stack (reqwest 0.13,
//!   reqwest-middleware 0.5) as the client under test, its last middleware
//!   the simulated network.
//!
//! With `default-features = false` you get [`core`], [`env`](mod@env),
//! [`client`], [`gate`] and [`trace`], and compile neither turmoil, clap,
//! toml nor proptest.
//!
//! # Layout
//! Each module uses only the ones before it: [`core`] (pure) ←
//! [`env`](mod@env), [`client`], [`gate`], [`trace`] (production) ← the
//! harness's workings (crate-private) ← `testing` (the harness's front door,
//! and all of the harness that is public). `docs/DESIGN.md`, "Layout" and
//! "The public API", says where each part lives and what is public.

#![warn(missing_docs)]
// On docs.rs (which passes `--cfg docsrs`), nightly rustdoc marks each
// feature-gated item with the features it needs (DESIGN.md "docs.rs").
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "cli")]
mod cli;
pub mod client;
pub mod core;
pub mod env;
pub mod gate;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod internals;
mod locks;
#[cfg(feature = "reqwest")]
pub mod reqwest;
#[cfg(feature = "sim")]
pub(crate) mod sim;
#[cfg(feature = "sim")]
pub mod testing;
#[cfg(feature = "https")]
pub mod tls;
pub mod trace;

pub use crate::client::{RetryClient, RetryError, Success};
// The crates and types in the public signatures, so a user needs no
// matching versions of their own.
pub use crate::core::policy::{Decision, GiveUpReason, Policy};
pub use bytes;
pub use http;
/// rustls, for [`env::HyperTransport::with_tls_config`] (feature `https`).
#[cfg(feature = "https")]
pub use rustls;
pub use tokio_util::sync::CancellationToken;
/// The simulator's network and hosts: retrysim's fork of turmoil
/// (`retrysim-turmoil`), re-exported so that a connector or host of your own
/// uses the very types and the thread-local world the harness runs.
#[cfg(feature = "sim")]
pub use turmoil;

/// The `retrysim` command line (feature `cli`): parses the process's
/// arguments, runs the subcommand and prints its output; the exit code says
/// how it went (2 for bad input).
///
/// Hidden, and no part of the API: the binary (`src/main.rs`) is a crate of
/// its own and needs this one door into the crate-private command line,
/// which stays in the library so that it reaches the simulator's workings
/// without making them public.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub fn cli_main() -> std::process::ExitCode {
    cli::main()
}
