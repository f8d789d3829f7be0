//! SnapshotReplication gate: the whole kind is [next] (docs/design/api-contract.md §1.1, §12, §15). The CRD is
//! installed so manifests for it apply; this controller answers every object with the kstatus
//! trio `Ready=False`, `Reconciling=False`, `Stalled=True`, reason `FeatureNotImplemented`, the
//! exact message `SnapshotReplication is not implemented in this release`, phase `Pending` and
//! `observedGeneration`, plus one Warning Event `FeatureNotImplemented` per generation. It reads
//! nothing else and launches no Job, whatever the spec says (a spec edit only moves
//! `observedGeneration`).
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kopiur_api::SnapshotReplication;
use kopiur_api::names::condition;
use kopiur_api::snapshot_replication::{NOT_IMPLEMENTED_MESSAGE, SnapshotReplicationPhase, SnapshotReplicationStatus};

use kube::runtime::Controller;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};

use crate::conditions::Cond;
use crate::context::Context;
use crate::error::Error;
use crate::features::{FEATURE_NOT_IMPLEMENTED, Gated, NextFields};
use crate::feeds::Feeds;
use crate::metrics::labels::KindLabels;

/// The gating verdict every SnapshotReplication gets in this release: the whole kind is one
/// gating [next] feature (`features::NextFields` with the kind's exact message).
pub fn verdict() -> NextFields {
    NextFields {
        advisory: Vec::new(),
        gating: vec![Gated { path: "SnapshotReplication".into(), message: NOT_IMPLEMENTED_MESSAGE.into() }],
    }
}

/// The desired status: phase `Pending`, the Stalled trio, `observedGeneration`. Conditions of
/// other types already stored are kept (condition merging keeps unknown types).
pub fn desired_status(
    current: &SnapshotReplicationStatus,
    generation: i64,
    now: DateTime<Utc>,
) -> SnapshotReplicationStatus {
    let conds: Vec<Cond> = verdict().gating_conditions().unwrap_or_default();
    let mut next = current.clone();
    next.phase = Some(SnapshotReplicationPhase::Pending);
    next.observed_generation = Some(generation);
    next.conditions = crate::conditions::merge_conditions(&current.conditions, &conds, generation, now);
    next
}

/// Whether the stored status does not yet report the verdict for `generation`: the Warning
/// Event is emitted once per generation, on the write that reports it.
pub fn needs_event(stored: &[Condition], generation: i64) -> bool {
    !stored.iter().any(|c| {
        c.type_ == condition::STALLED
            && c.status == "True"
            && c.reason == FEATURE_NOT_IMPLEMENTED
            && c.observed_generation == Some(generation)
    })
}

async fn reconcile(obj: Arc<SnapshotReplication>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(KindLabels { kind: "SnapshotReplication".into() });
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let generation = obj.meta().generation.unwrap_or(0);
    let current = obj.status.clone().unwrap_or_default();
    let next = desired_status(&current, generation, Utc::now());
    if next == current {
        return Ok(Action::await_change());
    }
    let event = needs_event(&current.conditions, generation);
    let api: Api<SnapshotReplication> = Api::namespaced(ctx.client.clone(), &ns);
    // A lost conflict: a newer object's watch event brings the reconcile back.
    if !crate::status::write_status(&api, obj.as_ref(), &current, &next).await?.landed() {
        return Ok(Action::await_change());
    }
    if event {
        let ev = Event {
            type_: EventType::Warning,
            reason: FEATURE_NOT_IMPLEMENTED.into(),
            note: Some(NOT_IMPLEMENTED_MESSAGE.into()),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = ctx.recorder.publish(&ev, &obj.object_ref(&())).await {
            tracing::warn!(%err, snapshot_replication = %name, "publishing an Event failed");
        }
    }
    tracing::info!(namespace = %ns, snapshot_replication = %name, "SnapshotReplication is not implemented in this release; Stalled");
    Ok(Action::await_change())
}

/// Wires the SnapshotReplication gate over its shared feed; the returned future runs it until
/// shutdown.
pub fn wire(ctx: &Arc<Context>, feeds: &mut Feeds) -> impl Future<Output = ()> + Send + 'static {
    Controller::for_shared_stream(feeds.snapshot_replications.subscribe(), ctx.stores.snapshot_replications.clone())
        .with_config(ctx.config.controller_config())
        .shutdown_on_signal()
        .run(reconcile, crate::error_events::error_policy, ctx.clone())
        .for_each(crate::error_events::settle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn cond<'a>(s: &'a SnapshotReplicationStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no {t}"))
    }

    #[test]
    fn every_object_is_stalled_feature_not_implemented_with_the_exact_message() {
        let s = desired_status(&SnapshotReplicationStatus::default(), 3, at(0));
        assert_eq!(s.phase, Some(SnapshotReplicationPhase::Pending));
        assert_eq!(s.observed_generation, Some(3));
        for (t, status, message) in [
            ("Ready", "False", NOT_IMPLEMENTED_MESSAGE),
            ("Reconciling", "False", ""),
            ("Stalled", "True", NOT_IMPLEMENTED_MESSAGE),
        ] {
            let c = cond(&s, t);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str(), c.message.as_str(), c.observed_generation),
                (status, "FeatureNotImplemented", message, Some(3)),
                "{t}"
            );
        }
        assert_eq!(NOT_IMPLEMENTED_MESSAGE, "SnapshotReplication is not implemented in this release");
    }

    #[test]
    fn steady_state_writes_nothing_and_a_new_generation_moves_only_observed_generation() {
        let first = desired_status(&SnapshotReplicationStatus::default(), 1, at(0));
        assert_eq!(desired_status(&first, 1, at(60)), first, "a no-op reconcile changes nothing");
        assert!(needs_event(&[], 1));
        assert!(!needs_event(&first.conditions, 1), "one Event per generation");
        let second = desired_status(&first, 2, at(60));
        assert_eq!(second.observed_generation, Some(2));
        assert!(needs_event(&first.conditions, 2));
        // The condition stays True: its transition time is kept.
        assert_eq!(cond(&second, "Stalled").last_transition_time, cond(&first, "Stalled").last_transition_time);
    }
}
