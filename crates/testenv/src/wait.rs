//! Polling waits for end-to-end tests: the condition is re-checked every 500 ms and a timeout
//! fails with the operator log's tail, so a red test says what the controller was doing.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Polls `f` until it yields `Some`, failing after `timeout` with the last 60 lines of `log`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, log: &Path, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    wait_explained(what, timeout, || format!("operator log tail:\n{}", crate::process::log_tail(log, 60)), f).await
}

/// Polls `f` every 500 ms until it yields `Some`; after `timeout` fails with what `why` says the
/// system was doing (a log tail, the controller pods' logs).
pub async fn wait_explained<T, F, Fut>(what: &str, timeout: Duration, why: impl Fn() -> String, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}\n{}", why());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
