//! Leader election on a `coordination.k8s.io/v1` Lease: lease 15 s, renew deadline 10 s,
//! retry 2 s. Only the holder runs controllers; a replica that loses the Lease exits non-zero
//! and restarts clean (every durable clock lives in status).
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::PostParams;
use kube::{Api, Client};

use crate::metrics::Metrics;

pub const LEASE_SECONDS: i32 = 15;
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY: Duration = Duration::from_secs(2);

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

/// Blocks until this replica leads, then keeps renewing in the background; exits the process
/// when the Lease cannot be renewed within the deadline or another holder took it.
pub async fn lead(client: Client, namespace: &str, name: &str, identity: &str, metrics: Arc<Metrics>) {
    let api: Api<Lease> = Api::namespaced(client, namespace);
    loop {
        match try_acquire(&api, name, identity).await {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "leader election attempt failed"),
        }
        tokio::time::sleep(RETRY).await;
    }
    tracing::info!(%identity, lease = %name, "became leader");
    metrics.leader_transitions.inc(&[]);
    metrics.leader.store(true, std::sync::atomic::Ordering::Relaxed);
    let name = name.to_string();
    let identity = identity.to_string();
    tokio::spawn(async move {
        let mut last_ok = Instant::now();
        loop {
            tokio::time::sleep(RETRY).await;
            match try_acquire(&api, &name, &identity).await {
                Ok(true) => last_ok = Instant::now(),
                Ok(false) => {
                    tracing::error!("lost the leader Lease to another replica; exiting");
                    std::process::exit(1);
                }
                Err(e) => {
                    metrics.leader_renew_failures.inc(&[]);
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
