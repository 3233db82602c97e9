//! Polls the API server until a condition holds; on timeout the error says
//! what was awaited and what was last observed, so a failure explains itself.

use std::{future::Future, time::Duration};

/// The awaited state never arrived.
#[derive(Debug, thiserror::Error)]
#[error("failed to observe {what} within {seconds} s; last observed: {last}")]
pub struct WaitError {
    pub what: String,
    pub seconds: u64,
    pub last: String,
}

/// Calls `probe` every 250 ms until it returns `Ok(value)`; `Err(text)` is the
/// latest observation, reported if the deadline passes.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T, WaitError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(last) => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(WaitError {
                        what: what.to_owned(),
                        seconds: timeout.as_secs(),
                        last,
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
