// BOOK:reqwest-lib begin
//! The service's HTTP stack: reqwest, then reqwest-retry's exponential
//! backoff. Production and the tests build it with the same function.

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::{Jitter, RetryTransientMiddleware};

/// Retries after the first attempt.
pub const MAX_RETRIES: u32 = 3;

/// The middleware of the stack, in order, added to `builder`. Production
/// passes `Jitter::Full` (reqwest-retry's default).
pub fn with_retries(builder: ClientBuilder, jitter: Jitter) -> ClientBuilder {
    let policy = ExponentialBackoff::builder().jitter(jitter).build_with_max_retries(MAX_RETRIES);
    builder.with(RetryTransientMiddleware::new_with_policy(policy))
}

/// The stack production uses: the middleware, then reqwest.
pub fn client(http: reqwest::Client) -> ClientWithMiddleware {
    with_retries(ClientBuilder::new(http), Jitter::Full).build()
}
// BOOK:reqwest-lib end
