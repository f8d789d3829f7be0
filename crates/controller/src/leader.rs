//! Leader election on a `coordination.k8s.io/v1` Lease: lease 15 s, renew deadline 10 s,
//! retry 2 s. Only the holder runs controllers; a replica that loses the Lease exits non-zero
//! and restarts clean (every durable clock lives in status).
//!
//! Every Lease request is bounded by the renew deadline. The kube client has no read timeout,
//! so without the bound a renewal sent to a stalled kube-apiserver (stopped, not down: the
//! kernel still accepts the connection) would hang for as long as the stall lasts, and a
//! leader cut off from an apiserver its standby still reaches would keep acting long after
//! the standby took the Lease over. With it, a leader that cannot renew within 10 s stops
//! (exits) before its Lease can expire at 15 s, so two replicas never act at once; after a
//! stall the standby takes over at the first attempt that finds the Lease expired: one
//! transition per stall longer than the renew deadline, never a flap. A standby's attempts
//! are bounded the same way, so it takes over promptly when the apiserver answers again. On SIGTERM or SIGINT the process
//! releases the Lease if it holds it and exits ([`exit_on_signal`]): as PID 1 of its container
//! it gets no default signal action, and a released Lease lets a standby take over at once
//! instead of after the lease duration.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::metrics::Metrics;
use crate::metrics::labels::NoLabels;

pub const LEASE_SECONDS: i32 = 15;
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY: Duration = Duration::from_secs(2);

/// Set once a shutdown began: renewals stop, so a released Lease is not taken back.
static STOPPING: AtomicBool = AtomicBool::new(false);

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Try once to take or keep the Lease. Ok(true) when we hold it afterwards.
pub async fn try_acquire(api: &Api<Lease>, name: &str, identity: &str) -> Result<bool, kube::Error> {
    let now = now_micro();
    match api.get_opt(name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(identity.into()),
                    lease_duration_seconds: Some(LEASE_SECONDS),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(LEASE_SECONDS));
            let expired = spec
                .renew_time
                .as_ref()
                .map(|t| t.0.as_second() + duration < k8s_openapi::jiff::Timestamp::now().as_second())
                .unwrap_or(true);
            let ours = holder == identity;
            if !ours && !holder.is_empty() && !expired {
                return Ok(false);
            }
            let mut new = spec.clone();
            new.holder_identity = Some(identity.into());
            new.lease_duration_seconds = Some(LEASE_SECONDS);
            new.renew_time = Some(now.clone());
            if !ours {
                new.acquire_time = Some(now);
                new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            lease.spec = Some(new);
            // replace carries the resourceVersion: a concurrent writer makes this a 409.
            match api.replace(name, &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

/// One bounded attempt: `Err` with what happened when it failed or did not answer in `within`.
async fn attempt(api: &Api<Lease>, name: &str, identity: &str, within: Duration) -> Result<bool, String> {
    match tokio::time::timeout(within, try_acquire(api, name, identity)).await {
        Ok(Ok(held)) => Ok(held),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer from the apiserver within {within:?}")),
    }
}

/// Blocks until this replica leads, then keeps renewing in the background; exits the process
/// when the Lease cannot be renewed within the deadline or another holder took it.
pub async fn lead(client: Client, namespace: &str, name: &str, identity: &str, metrics: Arc<Metrics>) {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    loop {
        match attempt(&api, name, identity, RENEW_DEADLINE).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
        }
        tokio::time::sleep(RETRY).await;
    }
    tracing::info!(%identity, lease = %name, "became leader");
    metrics.leader_transitions.inc(NoLabels);
    metrics.leader.set(1);
    let name = name.to_string();
    let identity = identity.to_string();
    tokio::spawn(async move {
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(RETRY).await;
            if STOPPING.load(Ordering::SeqCst) {
                return;
            }
            // Never wait past the deadline: a renewal still in flight then cannot be trusted.
            let left = RENEW_DEADLINE.saturating_sub(last_ok.elapsed()).max(Duration::from_millis(100));
            match attempt(&api, &name, &identity, left).await {
                Ok(true) => last_ok = Instant::now(),
                Ok(false) => {
                    tracing::error!("lost the leader Lease to another replica; exiting");
                    std::process::exit(1);
                }
                Err(e) => {
                    metrics.leader_renew_failures.inc(NoLabels);
                    tracing::warn!(error = %e, "Lease renewal failed");
                }
            }
            if last_ok.elapsed() > RENEW_DEADLINE {
                tracing::error!("could not renew the leader Lease within the deadline; exiting");
                std::process::exit(1);
            }
        }
    });
}

/// Gives the Lease up if `identity` holds it: holder cleared, duration 1 s (what client-go does
/// on release). Ok(true) when it was ours and is released now.
pub async fn release(api: &Api<Lease>, name: &str, identity: &str) -> Result<bool, kube::Error> {
    let Some(mut lease) = api.get_opt(name).await? else { return Ok(false) };
    let mut spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now_micro());
    lease.spec = Some(spec);
    match api.replace(name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        // Someone else wrote it in between: it is not ours to release any more.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Waits for SIGTERM or SIGINT, then stops renewing, releases the Lease if this replica holds
/// it (bounded to 5 s) and exits 0. Spawn it before anything else: a passive replica waiting
/// for the Lease must stop promptly too.
pub async fn exit_on_signal(client: Client, namespace: String, name: String, identity: String) {
    use tokio::signal::unix::{SignalKind, signal};
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot install the SIGTERM/SIGINT handlers");
            std::process::exit(1);
        }
    };
    let sig = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    STOPPING.store(true, Ordering::SeqCst);
    tracing::info!(signal = sig, "received {sig}; releasing the leader Lease if held and exiting");
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    match tokio::time::timeout(Duration::from_secs(5), release(&api, &name, &identity)).await {
        Ok(Ok(true)) => tracing::info!(lease = %name, %identity, "released the leader Lease"),
        Ok(Ok(false)) => tracing::info!(lease = %name, %identity, "not the Lease holder; nothing to release"),
        Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader Lease failed; it expires on its own"),
        Err(_) => tracing::warn!("releasing the leader Lease timed out; it expires on its own"),
    }
    tracing::info!(signal = sig, "exiting on {sig}");
    std::process::exit(0);
}
