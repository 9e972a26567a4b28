//! A dependent that uses only the driver: one POST with retries.
//! `cargo run --release -- http://127.0.0.1:PORT/v1/jobs`
use retrysim::{bytes::Bytes, client::RetryClient, core::policy::Policy, env::*, http};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args().nth(1).unwrap_or_else(|| "http://127.0.0.1:8080/v1/jobs".into());
    let client = RetryClient::new(TokioClock::real(), HyperTransport::new(), Policy::interactive());
    let mut rng = os_rng()?;
    let req = http::Request::post(url).body(Bytes::from("{}"))?;
    match client.execute(req, &mut rng, &Default::default()).await {
        Ok(done) => println!("{} after {} attempt(s)", done.response.status(), done.attempts),
        Err(e) => println!("{e}; key {:?}", e.idempotency_key),
    }
    Ok(())
}
