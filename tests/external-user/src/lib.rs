//! This crate's own retry client: a hand-written loop, as a team writes one
//! before it knows retrysim. It is written against retrysim's `Transport`,
//! `Clock` and `Rng` traits, so production hands it the real network, clock
//! and entropy (`HyperTransport`, `TokioClock::real()`, `os_rng()`) and a
//! test hands it the simulated ones (tests/client.rs).
//!
//! ```no_run
//! # async fn production() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use retrysim::env::{HyperTransport, TokioClock, os_rng};
//! use retrysim::{bytes::Bytes, http::Request};
//!
//! let client = external_user::Retrying { max_attempts: 5, deadline: Duration::from_secs(30) };
//! let req = Request::post("http://localhost:8080/v1/jobs").body(Bytes::from("{}"))?;
//! let done = client.call(&HyperTransport::new(), &TokioClock::real(), &mut os_rng()?, req, true).await;
//! println!("{} attempt(s): {:?}", done.attempts, done.answer.map(|res| res.status()));
//! # Ok(()) }
//! ```

// README:external-client begin
use std::time::Duration;

use retrysim::bytes::Bytes;
use retrysim::env::{Clock, Rng, Transport};
use retrysim::http::{Request, Response};

/// Up to `max_attempts` tries under one `Idempotency-Key`, waiting what
/// `Retry-After` says plus up to 250 ms of jitter; it gives up rather than
/// sleep past `deadline`.
pub struct Retrying {
    pub max_attempts: u32,
    pub deadline: Duration,
}

/// How a call ended, and after how many attempts.
pub struct Done {
    pub answer: Result<Response<Bytes>, String>,
    pub attempts: u32,
}

impl Retrying {
    /// Sends `req` until a 2xx. `keyed`: it carries an `Idempotency-Key`,
    /// so it may be resent after a network error (the server runs it once).
    pub async fn call(
        &self,
        net: &impl Transport,
        clock: &impl Clock,
        rng: &mut dyn Rng,
        req: Request<Bytes>,
        keyed: bool,
    ) -> Done {
        let start = clock.now();
        let key = format!("{:016x}", rng.draw());
        for attempt in 1..=self.max_attempts {
            let mut req = req.clone();
            if keyed {
                req.headers_mut().insert("idempotency-key", key.parse().expect("hex is a valid header"));
            }
            let wait = match net.send(req).await {
                Ok(res) if res.status().is_success() => return Done { answer: Ok(res), attempts: attempt },
                Ok(res) if res.status() == 429 || res.status() == 503 => retry_after(&res),
                Ok(res) => return Done { answer: Err(format!("status {}", res.status().as_u16())), attempts: attempt },
                // No answer: the server may have run it. Only a keyed request is safe to resend.
                Err(_) if keyed => Duration::from_millis(500),
                Err(_) => return Done { answer: Err("network error".into()), attempts: attempt },
            };
            let wait = wait + Duration::from_millis(rng.draw() % 250);
            if attempt == self.max_attempts {
                return Done { answer: Err("out of attempts".into()), attempts: attempt };
            }
            if clock.now() - start + wait > self.deadline {
                return Done { answer: Err("out of time".into()), attempts: attempt };
            }
            clock.sleep(wait).await;
        }
        Done { answer: Err("no attempt".into()), attempts: 0 }
    }
}

/// `Retry-After` in seconds; 1 s when it is missing or not a number.
fn retry_after(res: &Response<Bytes>) -> Duration {
    let secs = res.headers().get("retry-after").and_then(|v| v.to_str().ok()?.trim().parse().ok());
    Duration::from_secs(secs.unwrap_or(1))
}
// README:external-client end
