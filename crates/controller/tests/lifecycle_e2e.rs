//! The controller is PID 1 of its container, where SIGTERM has no default action: it handles
//! SIGTERM itself. Two real replicas against a private control plane: the passive one (waiting
//! for the Lease) exits promptly and leaves the Lease alone; the leader exits promptly and
//! releases the Lease, so a new replica takes over without waiting for it to expire.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kopiur_testenv::TestEnv;
use kopiur_testenv::operator::Operator;
use kube::Api;

const LEASE: &str = "kopiur-leader";

async fn wait_until<F, Fut>(what: &str, within: Duration, mut f: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        ensure!(start.elapsed() < within, "timed out after {within:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// SIGTERM to the replica, then its exit status and how long it took.
async fn terminate(op: &mut Operator) -> Result<(std::process::ExitStatus, Duration)> {
    let sent = Instant::now();
    op.proc_.signal(libc::SIGTERM);
    loop {
        if let Some(st) = op.proc_.try_wait() {
            return Ok((st, sent.elapsed()));
        }
        ensure!(
            sent.elapsed() < Duration::from_secs(15),
            "replica {:?} still running 15 s after SIGTERM; log:\n{}",
            op.identity,
            op.proc_.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn holder(leases: &Api<Lease>) -> Result<Option<String>> {
    Ok(leases.get(LEASE).await?.spec.context("Lease has a spec")?.holder_identity)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_passive_and_leader_replicas() -> Result<()> {
    let env = &TestEnv::start(kopiur_testenv::Options { node_agent: false, ..Default::default() }).await?;
    let _guard = env.log_guard();
    let client = env.client().await?;
    let op_ns = env.namespace("kopiur-system").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &op_ns);

    let mut a = Operator::start_replica(env, &op_ns, "a", &[]).await?;
    wait_until("replica a leads", Duration::from_secs(60), || a.is_leader()).await?;
    let mut b = Operator::start_replica(env, &op_ns, "b", &[]).await?;
    // b is up (serving metrics) and passive.
    wait_until("replica b serves metrics", Duration::from_secs(30), || async {
        b.metric("kopiur_leader").await == Some(0.0)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(holder(&leases).await? == a.identity, "a holds the Lease");

    // The passive replica: prompt exit 0, the Lease untouched.
    let (st, took) = terminate(&mut b).await?;
    let b_log = std::fs::read_to_string(b.log_path())?;
    ensure!(st.code() == Some(0), "passive replica exit {st:?}; log:\n{b_log}");
    ensure!(took < Duration::from_secs(5), "passive replica took {took:?} to exit");
    ensure!(b_log.contains("received SIGTERM"), "b logs the signal:\n{b_log}");
    ensure!(b_log.contains("not the Lease holder"), "b releases nothing:\n{b_log}");
    ensure!(holder(&leases).await? == a.identity, "a still holds the Lease after b left");
    ensure!(a.is_leader().await, "a still leads");

    // The leader: prompt exit 0, the Lease released (no holder).
    let (st, took) = terminate(&mut a).await?;
    let a_log = std::fs::read_to_string(a.log_path())?;
    ensure!(st.code() == Some(0), "leader exit {st:?}; log:\n{a_log}");
    ensure!(took < Duration::from_secs(5), "leader took {took:?} to exit");
    ensure!(a_log.contains("released the leader Lease"), "a logs the release:\n{a_log}");
    let spec = leases.get(LEASE).await?.spec.context("Lease spec")?;
    ensure!(spec.holder_identity.is_none(), "the Lease is released: {spec:?}");
    ensure!(spec.lease_duration_seconds == Some(1), "released with a 1 s duration: {spec:?}");

    // A new replica takes the released Lease at once (an unreleased one would block it for
    // the 15 s lease duration after a's last renewal).
    let started = Instant::now();
    let mut c = Operator::start_replica(env, &op_ns, "c", &[]).await?;
    wait_until("replica c leads", Duration::from_secs(30), || c.is_leader()).await?;
    let took = started.elapsed();
    ensure!(took < Duration::from_secs(12), "c took {took:?} to lead after the release");
    ensure!(holder(&leases).await? == c.identity, "c holds the Lease");
    c.stop();
    Ok(())
}
