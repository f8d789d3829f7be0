//! Apply a decision: one status write (first, so stamps are durable before any Job exists),
//! Events, counters, then the Job or its cleanup.
use crate::error::ApiStep;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kopiur_api::names::{annotation, constants};
use kopiur_kopia::cmd::{CacheSizes, CreateOptions, Identity};
use kopiur_mover::job::{ConnectKind as MoverConnectKind, JobInput, build_job};
use kopiur_mover::workspec::{
    BootstrapRepositoryOp, CreateGate as MoverGate, Operation, RepositoryInfo, SCHEMA_VERSION, WorkSpec,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KEvent, EventType as KEventType};
use kube::{Api, ResourceExt};

use super::observe::{
    ANN_CATALOG_SCAN, ANN_CREATE_GATE, ANN_CREDENTIAL_VERSION, ANN_EARLY_STRICT, ANN_PROBE_KIND, GATE_VIA_ACK,
    job_name, result_configmap_name,
};
use crate::context::Context;
use crate::error::Error;
use crate::health::{ConnectKind, CreateGate, Decision, Effect, EventType, Launch, Plan, RepoFacts};
use crate::metrics::labels::{RepoOutcomeLabels, TripLabels};
use crate::repo_view::{RepoObject, lease_host, secret_names};

pub async fn apply<K: RepoObject>(
    obj: &K,
    ctx: &Context,
    facts: &RepoFacts,
    d: Decision,
    cat: super::catalog::CatalogStep,
    now: DateTime<Utc>,
) -> Result<Action, Error> {
    // 1. The one status write, skipped when nothing changed.
    write_status(obj, ctx, &d, cat.status, cat.snapshot_count, now).await?;

    // 2. Process memory for once-per-value warnings.
    if let (Some(uid), Some(v)) = (obj.meta().uid.clone(), d.warned_ack.clone())
        && let Ok(mut m) = ctx.warned_acks.lock()
    {
        m.insert(uid, v);
    }

    // 3. Events and counters: the decision only contains transitions.
    announce(obj, ctx, &d).await;

    // 4. The one next step.
    match &d.plan {
        Plan::Idle | Plan::AwaitJob => {}
        Plan::DeleteJob { uid } => delete_job(obj, ctx, uid).await?,
        Plan::Launch(l) => launch(obj, ctx, facts, l, cat.list.as_deref(), &cat.verify).await?,
    }
    Ok(match d.requeue_after {
        Some(after) => Action::requeue(after.to_std().unwrap_or_default().max(std::time::Duration::from_secs(1))),
        // Safety net for a missed watch event.
        None => Action::requeue(std::time::Duration::from_secs(300)),
    })
}

/// The one status write (the pinned-id ledger first), skipped when nothing changed.
async fn write_status<K: RepoObject>(
    obj: &K,
    ctx: &Context,
    d: &Decision,
    catalog: Option<kopiur_api::repository::CatalogStatus>,
    snapshot_count: Option<i64>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    let name = obj.name_any();
    let current = obj.status_common();
    let mut desired = super::convert::from_pure(current, &d.status, &d.conditions, obj.common().backend.key(), now);
    if let Some(c) = catalog {
        desired.catalog = Some(c);
    }
    if let Some(n) = snapshot_count {
        let prev = desired.storage_stats.clone().unwrap_or_default();
        if prev.snapshot_count != Some(n) {
            desired.storage_stats = Some(kopiur_api::repository::StorageStats {
                snapshot_count: Some(n),
                last_observed_at: Some(now),
                ..prev
            });
        }
    }
    crate::features::drop_stale_features_ignored(&mut desired.conditions, &d.conditions);
    crate::health::kstatus::drop_stale_repository_writable(&mut desired.conditions, &d.conditions);
    if current != Some(&desired) {
        // The ledger first: it is never older than a status.
        super::pins::record(obj, ctx, desired.unique_id.as_deref()).await?;
        // Unguarded: only the controller writes a repository's status.
        let old = current.cloned().map(|c| obj.status_value(c)).unwrap_or(serde_json::Value::Null);
        let new = obj.status_value(desired);
        crate::status::write_status_value(&K::api(ctx.client.clone(), obj), &name, None, &old, &new)
            .await
            .step("patch repository status")?;
    }
    Ok(())
}

/// The decision's Events and counters (it carries transitions only).
async fn announce<K: RepoObject>(obj: &K, ctx: &Context, d: &Decision) {
    let kind = K::KIND.as_str();
    let ns_label = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let reference = obj.object_ref(&());
    for e in &d.events {
        let ev = KEvent {
            type_: match e.type_ {
                EventType::Normal => KEventType::Normal,
                EventType::Warning => KEventType::Warning,
            },
            reason: e.reason.to_string(),
            note: Some(crate::text::truncate(&e.note, 1024)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&ev, &reference).await {
            tracing::warn!(%err, reason = e.reason, "publishing an Event failed");
        }
    }
    for e in &d.effects {
        match e {
            Effect::Trip { probe_kind } => ctx.metrics.breaker_trips.inc(TripLabels {
                kind: kind.into(),
                namespace: ns_label.clone(),
                name: name.clone(),
                probe_kind: probe_kind.to_string(),
            }),
            Effect::ProbeFailure { outcome } => ctx.metrics.probe_failures.inc(RepoOutcomeLabels {
                kind: kind.into(),
                namespace: ns_label.clone(),
                name: name.clone(),
                outcome: outcome.to_string(),
            }),
        }
    }
}

fn owner<K: RepoObject>(obj: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: obj.name_any(),
        uid: obj.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    }
}

fn managed_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(kopiur_mover::job::LABEL_MANAGED_BY.to_string(), "kopiur".to_string())])
}

async fn delete_job<K: RepoObject>(obj: &K, ctx: &Context, uid: &str) -> Result<(), Error> {
    let ns = obj.home_namespace(&ctx.config.namespace);
    let name = job_name(obj);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(kube::api::Preconditions { uid: Some(uid.to_string()), resource_version: None }),
        ..DeleteParams::default()
    };
    match jobs.delete(&name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => return Err(Error::api("delete connect Job", e)),
    }
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    match cms.delete(&result_configmap_name(&name), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(Error::api("delete connect result ConfigMap", e)),
    }
}

fn mover_gate(g: CreateGate) -> MoverGate {
    match g {
        CreateGate::Allowed { via_reinit_ack } => MoverGate::Allowed { via_reinit_ack },
        CreateGate::DisabledBySpec { also_pinned } => MoverGate::DisabledBySpec { also_pinned },
        CreateGate::PinnedOnceReady => MoverGate::PinnedOnceReady,
    }
}

/// `list`: the Job also lists snapshots for the catalog, honoring this request token (may be
/// empty).
async fn launch<K: RepoObject>(
    obj: &K,
    ctx: &Context,
    facts: &RepoFacts,
    l: &Launch,
    list: Option<&str>,
    verify: &[String],
) -> Result<(), Error> {
    let ns = obj.home_namespace(&ctx.config.namespace);
    let name = job_name(obj);
    let common = obj.common();
    ctx.ensure_mover_rbac(&ns).await?;

    let host = lease_host(obj);
    // The repository's own Jobs run in its home namespace, where its PVC and CA live.
    let mounts = crate::mounts::for_job(&common.backend, &ns, &ns)?;
    let probe = match l.kind {
        ConnectKind::Strict => false,
        ConnectKind::Probe(_) => true,
    };
    let spec = work_spec(obj, facts, l, list, verify, mounts.backend.clone(), &host);
    let (pw_secret, auth_secret) = secret_names(obj);
    let pw_key =
        common.encryption.password_secret_ref.key.clone().unwrap_or_else(|| constants::DEFAULT_PASSWORD_KEY.into());
    let mut env_from = vec![pw_secret.clone()];
    env_from.extend(auth_secret);
    let input = JobInput {
        result_configmap: Some(result_configmap_name(&name)),
        connect_kind: Some(if probe { MoverConnectKind::Probe } else { MoverConnectKind::Strict }),
        annotations: job_annotations(l, list),
        // The mover's UID/GID and the repository's moverDefaults come from `mover_settings`.
        pod_security_context: None,
        // One attempt: the breaker counts failures, a retry would hide them.
        backoff_limit: 0,
        active_deadline_seconds: l.deadline_seconds,
        ..crate::mover_job::input(
            &ctx.config,
            crate::mover_job::Identity {
                name: name.clone(),
                namespace: ns.clone(),
                owner: owner(obj),
                work_spec: spec,
                password: (pw_secret, pw_key),
                env_from_secrets: env_from,
            },
            &mounts,
            None,
        )
    };
    let mut input = input;
    crate::mover_settings::resolve(common.mover_defaults.as_ref(), None, crate::mover_settings::MoverOp::Other, false)
        .map_err(Error::MoverRefused)?
        .apply(&mut input, true);
    let job = build_job(&input).map_err(Error::from)?;

    result_configmap(obj, ctx, &ns, &name).await?;
    // The deterministic name protects against a double launch from a stale store.
    if ctx.create_mover_job(&ns, &job, "bootstrap").await? {
        tracing::info!(job = %name, namespace = %ns, kind = l.kind.probe_kind(), "launched connect Job");
    }
    Ok(())
}

/// The connect's work spec: bootstrap (or probe) the repository, listing and verifying
/// snapshots for the catalog when `list` asks.
fn work_spec<K: RepoObject>(
    obj: &K,
    facts: &RepoFacts,
    l: &Launch,
    list: Option<&str>,
    verify: &[String],
    backend: kopiur_kopia::Backend,
    host: &str,
) -> WorkSpec {
    let common = obj.common();
    let probe = match l.kind {
        ConnectKind::Strict => false,
        ConnectKind::Probe(_) => true,
    };
    WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: crate::mover_job::target_of(obj),
        repository: RepositoryInfo {
            kind: K::kind(&()).to_string(),
            namespace: obj.namespace(),
            name: obj.name_any(),
            uid: obj.meta().uid.clone().unwrap_or_default(),
            backend,
            client_identity: Identity::new("kopiur-ops", host.to_string()),
            read_only: facts.spec.read_only,
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: kopiur_mover::workspec::DEFAULT_COMMAND_TIMEOUT_SECONDS,
        heartbeat_seconds: kopiur_mover::workspec::DEFAULT_HEARTBEAT_SECONDS,
        // The connect may take as long as the Job may run (for bootstrap, the adaptive
        // deadline; maintenance is what compacts a slow repository's index); the mover's own
        // bound comes after the Job deadline, whose verdict tells slow from down.
        connect_timeout_seconds: kopiur_mover::workspec::connect_backstop(l.deadline_seconds),
        operation: Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: mover_gate(l.gate),
            pinned_unique_id: facts.status.unique_id.clone(),
            probe,
            list_snapshots: list.is_some(),
            catalog_limit: crate::catalog::catalog_limit(),
            verify_snapshot_ids: if list.is_some() { verify.to_vec() } else { Vec::new() },
            maintenance_owner: format!("kopiur@{host}"),
            create: create_options(&common.create),
        }),
    }
}

/// The connect Job's annotations: what it was launched for, read back when it finishes.
fn job_annotations(l: &Launch, list: Option<&str>) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([
        (annotation::BOOTSTRAP_GENERATION.to_string(), l.generation.to_string()),
        (ANN_CREDENTIAL_VERSION.to_string(), l.credential_version.clone()),
        (ANN_PROBE_KIND.to_string(), l.kind.probe_kind().to_string()),
        (
            ANN_CREATE_GATE.to_string(),
            match l.gate {
                CreateGate::Allowed { via_reinit_ack: true } => GATE_VIA_ACK.to_string(),
                CreateGate::Allowed { via_reinit_ack: false } => "Allowed".to_string(),
                CreateGate::DisabledBySpec { .. } => "DisabledBySpec".to_string(),
                CreateGate::PinnedOnceReady => "PinnedOnceReady".to_string(),
            },
        ),
    ]);
    if let Some(token) = list {
        annotations.insert(ANN_CATALOG_SCAN.to_string(), token.to_string());
    }
    if l.early {
        annotations.insert(ANN_EARLY_STRICT.to_string(), "true".to_string());
    }
    annotations
}

/// The result ConfigMap exists, empty, before the Job does.
async fn result_configmap<K: RepoObject>(obj: &K, ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let cm_name = result_configmap_name(name);
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            namespace: Some(ns.to_string()),
            labels: Some(managed_labels()),
            owner_references: Some(vec![owner(obj)]),
            ..Default::default()
        },
        ..Default::default()
    };
    match cms.create(&PostParams::default(), &cm).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {
            cms.patch(&cm_name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({"data": null})))
                .await
                .step("reset connect result ConfigMap")?;
        }
        Err(e) => return Err(Error::api("create connect result ConfigMap", e)),
    }
    Ok(())
}

/// `spec.create` as `kopia repository create` options (docs/design/api-contract.md §4.1): the algorithm names
/// verbatim (checked against kopia's by `validate` before any Job), `ecc` as `--ecc` and
/// `--ecc-overhead-percent`.
pub fn create_options(c: &kopiur_api::repository::CreateSpec) -> CreateOptions {
    CreateOptions {
        encryption: c.encryption.clone(),
        block_hash: c.hash.clone(),
        object_splitter: c.splitter.clone(),
        ecc: c.ecc.as_ref().map(|e| e.algorithm.clone()),
        ecc_overhead_percent: c.ecc.as_ref().and_then(|e| e.overhead_percent).map(|p| p.clamp(1, 100) as u32),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn spec_create_reaches_the_create_options_ecc_included() {
        use super::{CreateOptions, create_options};
        let c: kopiur_api::repository::CreateSpec = serde_json::from_value(serde_json::json!({
            "encryption": "CHACHA20-POLY1305-HMAC-SHA256", "hash": "BLAKE3-256", "splitter": "FIXED-4M",
            "ecc": {"algorithm": "REED-SOLOMON-CRC32", "overheadPercent": 2}
        }))
        .unwrap();
        assert_eq!(
            create_options(&c),
            CreateOptions {
                encryption: Some("CHACHA20-POLY1305-HMAC-SHA256".into()),
                block_hash: Some("BLAKE3-256".into()),
                object_splitter: Some("FIXED-4M".into()),
                ecc: Some("REED-SOLOMON-CRC32".into()),
                ecc_overhead_percent: Some(2),
            }
        );
        assert_eq!(create_options(&Default::default()), CreateOptions::default(), "kopia's defaults");
    }
}
