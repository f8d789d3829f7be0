//! Issue 19 "Slow is not down", end to end: the death spiral on a real kopia repository.
use std::time::{Duration, Instant};

use anyhow::Result;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::index_growth::{self, Kopia};
use kopiur_testenv::proxy::{FaultProxy, Mode};

const PASSWORD: &str = "death spiral";
const TARGET: usize = 2_000;

/// Calibration (run by hand): grows the repository and times a cold connect through the proxy
/// at several latencies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn calibrate_connect_latency() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let grown =
        index_growth::grow_into_garage(&g, &dir.path().join("kopia"), "spiral/", PASSWORD, "kopiur@calibrate", TARGET)
            .await?;
    println!("grown: {grown:?}");
    let proxy = FaultProxy::start(g.s3_addr()).await?;
    let k = Kopia::new(&g, &dir.path().join("probe"), PASSWORD)?;
    for ms in [0u64, 5, 10, 20, 50] {
        proxy.set(if ms == 0 { Mode::Pass } else { Mode::Latency(Duration::from_millis(ms)) });
        let c = k.fresh(&format!("c{ms}"));
        let t = Instant::now();
        let r = c.connect_s3(&g, &proxy.endpoint(), "spiral/", Duration::from_secs(300)).await;
        println!("latency {ms} ms: cold connect {:?} ({:?})", t.elapsed(), r.map(|_| "ok"));
    }
    Ok(())
}
