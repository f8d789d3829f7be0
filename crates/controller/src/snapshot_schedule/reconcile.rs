//! SnapshotSchedule reconciler: children from the Snapshot store, the pin from status,
//! `plan::plan` decides the one disposition; apply creates the child (idempotent by name),
//! replaces or prunes children (stamped before each DELETE), and writes status once.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kopiur_api::domain::cron::{Cron, effective_timezone};
use kopiur_api::names::pruned_by;
use kopiur_api::shared::status::NameRef;
use kopiur_api::snapshot::{SnapshotPhase, SnapshotSpec};
use kopiur_api::snapshot_schedule::{ScheduleRecord, ScheduleTarget};
use kopiur_api::{Snapshot, SnapshotSchedule};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::plan::{ChildSource, ChildSources, Disposition, Pin, ScheduleFacts, plan};
use crate::error::Error;
use crate::health::kstatus::{Cond, CondStatus};
use crate::policy_rules::sources::{expand, pvcs_in, uses_selector};
use crate::prune::stamp_and_delete;
use crate::snapshot::ctx::PipelineCtx;
use crate::snapshot::job::owner_of;

/// The schedule's children: owned by this schedule's uid.
pub fn children(ctx: &PipelineCtx, sched: &SnapshotSchedule) -> Vec<Arc<Snapshot>> {
    let ns = sched.namespace().unwrap_or_default();
    let uid = sched.uid().unwrap_or_default();
    ctx.stores
        .snapshots
        .state()
        .into_iter()
        .filter(|s| s.namespace().as_deref() == Some(ns.as_str()))
        .filter(|s| s.owner_references().iter().any(|o| o.uid == uid))
        .collect()
}

fn is_active(s: &Snapshot) -> bool {
    if s.meta().deletion_timestamp.is_some() {
        return false;
    }
    match s.status.as_ref().and_then(|st| st.phase.as_ref()) {
        // An unknown phase (a newer operator's) may be a run in flight: never fire over it
        // (ScheduleRunnable=False / BlockedOnUnreadableRun, docs/design/api-contract.md §8).
        None | Some(SnapshotPhase::Pending | SnapshotPhase::Running | SnapshotPhase::Unknown(_)) => true,
        Some(
            SnapshotPhase::Succeeded
            | SnapshotPhase::Unchanged
            | SnapshotPhase::Failed
            | SnapshotPhase::Discovered
            | SnapshotPhase::Deleting,
        ) => false,
    }
}

/// The children whose phase this version does not know.
fn unreadable(kids: &[std::sync::Arc<Snapshot>]) -> Vec<String> {
    kids.iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter(|s| matches!(s.status.as_ref().and_then(|st| st.phase.as_ref()), Some(SnapshotPhase::Unknown(_))))
        .map(|s| s.name_any())
        .collect()
}

/// failedJobsHistoryLimit: the newest N Failed and, separately, the newest N Unchanged
/// children stay; the rest are returned for pruning.
/// The terminal children with their end time (creation time when absent), for
/// [`super::plan::consecutive_failures`].
pub fn run_ends(children: &[Arc<Snapshot>]) -> Vec<(DateTime<Utc>, super::plan::RunEnd)> {
    use super::plan::RunEnd;
    children
        .iter()
        .filter_map(|s| {
            let st = s.status.as_ref()?;
            let end = match st.phase.as_ref()? {
                SnapshotPhase::Succeeded | SnapshotPhase::Unchanged => RunEnd::Success,
                SnapshotPhase::Failed => RunEnd::Failed,
                // Not a run's end: still running, a discovered row, being deleted, or a phase
                // this version cannot read (never counted on a guess).
                SnapshotPhase::Pending
                | SnapshotPhase::Running
                | SnapshotPhase::Discovered
                | SnapshotPhase::Deleting
                | SnapshotPhase::Unknown(_) => return None,
            };
            let t = st.timing.as_ref().and_then(|t| t.end_time).or_else(|| {
                s.meta().creation_timestamp.as_ref().and_then(|c| DateTime::<Utc>::from_timestamp(c.0.as_second(), 0))
            })?;
            Some((t, end))
        })
        .collect()
}

pub fn history_prunes(children: &[Arc<Snapshot>], limit: i32) -> Vec<String> {
    let limit = limit.max(0) as usize;
    let mut out = Vec::new();
    for wanted in [SnapshotPhase::Failed, SnapshotPhase::Unchanged] {
        let mut pool: Vec<(DateTime<Utc>, String)> = children
            .iter()
            .filter(|s| s.meta().deletion_timestamp.is_none())
            .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&wanted))
            .map(|s| {
                let st = s.status.as_ref();
                let t = st
                    .and_then(|st| st.timing.as_ref())
                    .and_then(|t| t.end_time)
                    .or_else(|| {
                        s.meta()
                            .creation_timestamp
                            .as_ref()
                            .map(|c| DateTime::<Utc>::from_timestamp(c.0.as_second(), 0).unwrap_or_default())
                    })
                    .unwrap_or_default();
                (t, s.name_any())
            })
            .collect();
        // Newest first; ties by name.
        pool.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        out.extend(pool.into_iter().skip(limit).map(|(_, n)| n));
    }
    out
}

/// The most (policy × repository) pairs one `policySelector` slot fans out to; above it the
/// schedule is `FanoutCapped=True/FanoutTooLarge` and fires nothing (docs/design/api-contract.md §8).
pub const MAX_SCHEDULE_FANOUT: usize = 50;

/// What a `policySelector` resolves to this reconcile.
struct Selection {
    sources: ChildSources,
    /// Matched policies, by name.
    policies: Vec<Arc<kopiur_api::SnapshotPolicy>>,
    /// The Ready reason and message when the selection cannot fire normally.
    problem: Option<(String, String)>,
    /// `FanoutCapped` (True with the message, or False).
    capped: Option<String>,
    /// The repositories' default time zone when they agree; `Err` lists the disagreement.
    repo_tz: Result<Option<String>, String>,
}

/// None while a store it reads has not synced (an unsynced store would match nothing and
/// consume the slot).
fn select_policies(
    ctx: &PipelineCtx,
    ns: &str,
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<Selection> {
    if !ctx.stores.synced.policies.is_synced() {
        return None;
    }
    let mut policies: Vec<Arc<kopiur_api::SnapshotPolicy>> = ctx
        .stores
        .policies
        .state()
        .into_iter()
        .filter(|p| p.namespace().as_deref() == Some(ns))
        .filter(|p| p.meta().deletion_timestamp.is_none())
        .filter(|p| crate::gating::selector_matches(sel, p.labels()))
        .collect();
    policies.sort_by_key(|p| p.name_any());
    if policies.iter().any(|p| uses_selector(&p.spec.sources)) && !ctx.stores.synced.pvcs.is_synced() {
        return None;
    }
    let tzs: std::collections::BTreeSet<Option<String>> = policies
        .iter()
        .map(|p| {
            p.spec
                .target
                .repositories()
                .first()
                .and_then(|r| ctx.repository(ns, r))
                .and_then(|rv| rv.common().schedule_defaults.as_ref().and_then(|d| d.timezone.clone()))
        })
        .collect();
    // No policy or one zone: that zone (or none); several: ambiguous.
    let repo_tz = if tzs.len() <= 1 {
        Ok(tzs.into_iter().next().flatten())
    } else {
        Err(format!(
            "the matched policies' repositories default to different time zones ({}); using UTC, set \
             spec.schedule.timezone",
            tzs.iter().map(|t| t.as_deref().unwrap_or("none")).collect::<Vec<_>>().join(", ")
        ))
    };
    let pairs: usize = policies.iter().map(|p| p.spec.target.repositories().len().max(1)).sum();
    if pairs > MAX_SCHEDULE_FANOUT {
        let message = format!(
            "policySelector matches {} policies with {pairs} (policy x repository) pairs, above the cap of \
             {MAX_SCHEDULE_FANOUT}; nothing fires until the selector is narrowed",
            policies.len()
        );
        return Some(Selection {
            sources: ChildSources::None { message: message.clone() },
            policies,
            problem: Some(("FanoutTooLarge".into(), message.clone())),
            capped: Some(message),
            repo_tz,
        });
    }
    if policies.is_empty() {
        let message = format!("policySelector matches no SnapshotPolicy in namespace {ns}; slots create no child");
        return Some(Selection {
            sources: ChildSources::None { message: message.clone() },
            policies,
            problem: Some(("NoPolicyMatched".into(), message)),
            capped: None,
            repo_tz,
        });
    }
    let pvcs = pvcs_in(&ctx.stores.pvcs, ns);
    let mut selected = Vec::new();
    let mut skipped = Vec::new();
    for p in &policies {
        if p.spec.suspend {
            skipped.push(format!("{}: suspended (spec.suspend)", p.name_any()));
            continue;
        }
        // A policy with a gating [next] field (docs/design/api-contract.md §1.9) gets no child, like a gated source.
        match crate::features::snapshot_policy(&p.spec).refusal().and_then(|()| expand(ns, &p.spec.sources, &pvcs)) {
            Ok(e) if !e.sources.is_empty() => selected.push(super::plan::PolicyChildren {
                policy: p.name_any(),
                sources: e.sources.iter().map(|s| ChildSource { key: s.key(), source: s.snapshot_source() }).collect(),
            }),
            Ok(e) => skipped.push(format!("{}: {}", p.name_any(), e.empty_message(ns).unwrap_or_default())),
            Err(m) => skipped.push(format!("{}: {m}", p.name_any())),
        }
    }
    let problem = (!skipped.is_empty()).then(|| {
        let names: Vec<String> = policies.iter().map(|p| p.name_any()).collect();
        if selected.is_empty() {
            (
                "NoSourceMatched".to_string(),
                format!("no matched policy has a source to back up ({})", skipped.join("; ")),
            )
        } else {
            ("Scheduled".to_string(), format!("policies {}; skipped: {}", names.join(", "), skipped.join("; ")))
        }
    });
    Some(Selection { sources: ChildSources::Selected(selected), policies, problem, capped: None, repo_tz })
}

pub async fn reconcile(sched: Arc<SnapshotSchedule>, ctx: Arc<PipelineCtx>) -> Result<Action, Error> {
    ctx.metrics.reconciliations.inc(&["SnapshotSchedule"]);
    if sched.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = Utc::now();
    let ns = sched.namespace().unwrap_or_default();
    let name = sched.name_any();
    let uid = sched.uid().unwrap_or_default();
    let status = sched.status.clone().unwrap_or_default();
    let kids = children(&ctx, &sched);
    let policy_name = match &sched.spec.target {
        ScheduleTarget::PolicyRef(p) => Some(p.name.clone()),
        ScheduleTarget::PolicySelector(_) => None,
    };
    let policy = policy_name.as_ref().and_then(|p| ctx.stores.policies.get(&ObjectRef::new(p).within(&ns)));
    let selection = match &sched.spec.target {
        ScheduleTarget::PolicySelector(sel) => match select_policies(&ctx, &ns, sel) {
            Some(s) => Some(s),
            None => return Ok(Action::requeue(std::time::Duration::from_secs(2))),
        },
        ScheduleTarget::PolicyRef(_) => None,
    };
    // Timezone: own, else the policy's repository default, else UTC.
    let ref_tz = policy
        .as_ref()
        .and_then(|p| p.spec.target.repositories().first().map(|r| (*r).clone()))
        .and_then(|r| ctx.repository(&ns, &r))
        .and_then(|rv| rv.common().schedule_defaults.as_ref().and_then(|d| d.timezone.clone()));
    // The policy's expansion: one child per source. A selector read from an unsynced PVC
    // store would match nothing and consume the slot, so wait for the store first.
    if policy.as_ref().is_some_and(|p| uses_selector(&p.spec.sources)) && !ctx.stores.synced.pvcs.is_synced() {
        return Ok(Action::requeue(std::time::Duration::from_secs(2)));
    }
    let repo_tz = match &selection {
        Some(sel) => sel.repo_tz.clone().ok().flatten(),
        None => ref_tz,
    };
    // X (docs/design/api-contract.md §1.8): a policyRef into another namespace creates no child.
    let cross_ns = match &sched.spec.target {
        ScheduleTarget::PolicyRef(p) => {
            crate::features::policy_ref_namespace("SnapshotSchedule", &ns, p.namespace.as_deref())
        }
        ScheduleTarget::PolicySelector(_) => None,
    };
    // A suspended policy (docs/design/api-contract.md §6.1): schedules skip it, no child.
    let suspended = policy
        .as_ref()
        .filter(|p| p.spec.suspend)
        .map(|p| format!("SnapshotPolicy {} is suspended (spec.suspend); slots create no child", p.name_any()));
    let expansion = match cross_ns.as_ref().or(suspended.as_ref()) {
        Some(m) => Some(Err(m.clone())),
        None => policy.as_ref().map(|p| {
            crate::features::snapshot_policy(&p.spec)
                .refusal()
                .and_then(|()| expand(&ns, &p.spec.sources, &pvcs_in(&ctx.stores.pvcs, &ns)))
        }),
    };
    let sources = match (&selection, &expansion) {
        (Some(sel), _) => sel.sources.clone(),
        (None, expansion) => match expansion {
            None => ChildSources::PolicyUnknown,
            Some(Err(message)) => ChildSources::None { message: message.clone() },
            Some(Ok(e)) => match e.empty_message(&ns) {
                Some(message) => ChildSources::None { message },
                None => ChildSources::Expanded(
                    e.sources.iter().map(|s| ChildSource { key: s.key(), source: s.snapshot_source() }).collect(),
                ),
            },
        },
    };
    let cron_spec = &sched.spec.schedule.cron;
    let tz = effective_timezone(cron_spec.timezone.as_deref(), repo_tz.as_deref()).to_string();
    let pinned = status.next_schedule.as_ref().and_then(|n| {
        let (slot, at) = n.slot.zip(n.at)?;
        Some(Pin { slot, at, timezone: n.timezone.clone().unwrap_or_else(|| "UTC".into()) })
    });
    let facts = ScheduleFacts {
        name: name.clone(),
        uid: uid.clone(),
        created: sched
            .meta()
            .creation_timestamp
            .as_ref()
            .and_then(|c| DateTime::<Utc>::from_timestamp(c.0.as_second(), 0))
            .unwrap_or(now),
        cron: Cron::parse(&cron_spec.cron, &uid).map_err(|e| e.to_string()),
        timezone_name: tz,
        jitter: cron_spec.jitter.clone(),
        suspend: sched.spec.schedule.suspend,
        concurrency: sched.spec.schedule.concurrency_policy,
        starting_deadline_seconds: sched.spec.schedule.starting_deadline_seconds,
        run_on_create: sched.spec.schedule.run_on_create,
        pinned,
        has_last_schedule: status.last_schedule.is_some(),
        spec_changed: status.observed_generation.is_some() && status.observed_generation != sched.meta().generation,
        active_children: kids.iter().filter(|s| is_active(s)).map(|s| s.name_any()).collect(),
        sources,
    };
    let d = plan(&facts, now);
    let snaps: Api<Snapshot> = Api::namespaced(ctx.client.clone(), &ns);
    let reference = sched.object_ref(&());

    let mut next = status.clone();
    next.observed_generation = sched.meta().generation;
    let mut conds: Vec<Cond> = Vec::new();
    match &d.disposition {
        Disposition::Invalid { message } => {
            conds.extend(super::kstatus::trio(kopiur_api::names::reason::INVALID_SCHEDULE, message));
        }
        Disposition::Wait
        | Disposition::SkipSuspended
        | Disposition::SkipExpired
        | Disposition::SkipActive
        | Disposition::ReplaceActive { .. }
        | Disposition::SkipNoSource { .. }
        | Disposition::Fire => {
            let (reason, msg) = match (&policy_name, &policy, &expansion) {
                _ if cross_ns.is_some() => (
                    kopiur_api::names::reason::CROSS_NAMESPACE_REFERENCE.to_string(),
                    cross_ns.clone().unwrap_or_default(),
                ),
                _ if suspended.is_some() => ("PolicySuspended".to_string(), suspended.clone().unwrap_or_default()),
                (Some(p), Some(_), Some(Err(m))) => {
                    ("FeatureNotImplemented".to_string(), format!("SnapshotPolicy {p}: {m}; slots create no child"))
                }
                (Some(p), Some(_), Some(Ok(e))) if e.sources.is_empty() => (
                    "NoSourceMatched".to_string(),
                    format!(
                        "SnapshotPolicy {p}: {}; slots create no child until one matches",
                        e.empty_message(&ns).unwrap_or_default()
                    ),
                ),
                (Some(_), Some(_), _) => ("Scheduled".to_string(), format!("next slot pinned for {}", cron_spec.cron)),
                (Some(p), None, _) => (
                    "PolicyNotFound".to_string(),
                    format!("SnapshotPolicy {p} does not exist; children park until it does"),
                ),
                (None, _, _) => match selection.as_ref().and_then(|x| x.problem.clone()) {
                    Some(p) => p,
                    None => (
                        "Scheduled".to_string(),
                        format!(
                            "next slot pinned for {}; policies {}",
                            cron_spec.cron,
                            selection
                                .as_ref()
                                .map(|x| x.policies.iter().map(|p| p.name_any()).collect::<Vec<_>>().join(", "))
                                .unwrap_or_default()
                        ),
                    ),
                },
            };
            // The kstatus trio (docs/design/api-contract.md §1.6, §8), Suspended while spec.schedule.suspend.
            let (reason, msg) = super::kstatus::ready_reason(reason, msg, sched.spec.schedule.suspend);
            conds.extend(super::kstatus::trio(&reason, &msg));
        }
    }

    if let Disposition::ReplaceActive { victims } = &d.disposition {
        // A run whose phase this version cannot read is never deleted on a guess.
        let keep = unreadable(&kids);
        for v in victims.iter().filter(|v| !keep.contains(v)) {
            stamp_and_delete(&snaps, v, pruned_by::REPLACED_RUN).await?;
        }
    }
    if let Some(reason) = d.disposition.skip_reason() {
        tracing::info!(schedule = %name, namespace = %ns, reason, "schedule slot skipped");
        ctx.metrics.schedule_slots_skipped.inc(&[&ns, &name, reason]);
        if matches!(d.disposition, Disposition::SkipExpired) {
            ctx.event(
                &reference,
                false,
                "ScheduleSlotSkipped",
                "the slot passed its startingDeadlineSeconds; re-pinned to the next slot".into(),
            )
            .await;
        }
    }
    if let Disposition::SkipNoSource { message, run_on_create_slot } = &d.disposition {
        tracing::info!(schedule = %name, namespace = %ns, %message, "schedule slot created no child");
        ctx.event(&reference, false, "ScheduleSlotSkipped", format!("{message}; no Snapshot created for this slot"))
            .await;
        // The runOnCreate fire happened, with nothing to back up: never fire it late.
        if let Some(slot) = run_on_create_slot {
            next.last_schedule = Some(ScheduleRecord {
                at: Some(*slot),
                slot: Some(*slot),
                snapshot_ref: None,
                timezone: d.next.as_ref().map(|p| p.timezone.clone()),
            });
        }
    }
    if let Some(fire) = &d.fire {
        for c in &fire.children {
            // The child's policy: its own under a policySelector, else the policyRef.
            let Some(pname) = c.policy.as_ref().or(policy_name.as_ref()) else { continue };
            let default_deletion = ctx
                .stores
                .policies
                .get(&ObjectRef::new(pname).within(&ns))
                .map(|p| p.spec.default_deletion_policy)
                .unwrap_or_default();
            let child = Snapshot {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(c.name.clone()),
                    namespace: Some(ns.clone()),
                    labels: Some(super::plan::child_labels(&name, pname)),
                    owner_references: Some(vec![owner_of(sched.as_ref())]),
                    finalizers: Some(vec![kopiur_api::names::finalizer::SNAPSHOT_CLEANUP.to_string()]),
                    ..Default::default()
                },
                spec: SnapshotSpec {
                    policy_ref: Some(kopiur_api::shared::PolicyRef { name: pname.clone(), namespace: None }),
                    source: c.source.clone().map(Box::new),
                    deletion_policy: Some(default_deletion),
                    on_schedule_delete: Some(sched.spec.deletion.on_schedule_delete),
                    ..SnapshotSpec::default()
                },
                status: None,
            };
            match snaps.create(&PostParams::default(), &child).await {
                Ok(_) => {
                    ctx.metrics.schedule_snapshots_created.inc(&[&ns, &name]);
                    tracing::info!(schedule = %name, child = %c.name, "scheduled Snapshot created")
                }
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    // Idempotent for the same child; a different one under this name (two
                    // sources or policies whose 6-hex hashes collide) would go unbacked-up
                    // silently, so say so.
                    let existing = snaps.get_opt(&c.name).await?;
                    let same = existing.as_ref().is_none_or(|x| {
                        x.spec.policy_ref.as_ref().map(|p| p.name.as_str()) == Some(pname.as_str())
                            && x.spec.source.as_deref() == c.source.as_ref()
                    });
                    if !same {
                        let note = format!(
                            "slot child {} already exists for another policy or source; {pname} {:?} was not backed up \
                             for this slot (a child-name hash collision: rename the policy or PVC)",
                            c.name,
                            c.source.as_ref().map(|x| &x.target.pvc.name)
                        );
                        tracing::warn!(schedule = %name, child = %c.name, "{note}");
                        ctx.event(&reference, true, "ScheduleChildNameCollision", note).await;
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        // With a fan-out, `snapshotRef` names the slot's first child (children sort by source).
        next.last_schedule = Some(ScheduleRecord {
            at: Some(fire.at),
            slot: Some(fire.slot),
            snapshot_ref: fire.children.first().map(|c| NameRef { name: c.name.clone() }),
            timezone: d.next.as_ref().map(|p| p.timezone.clone()),
        });
    }
    if let Some(p) = &d.next {
        next.next_schedule = Some(ScheduleRecord {
            at: Some(p.at),
            slot: Some(p.slot),
            snapshot_ref: None,
            timezone: Some(p.timezone.clone()),
        });
    }
    // The newest Succeeded child.
    if let Some(s) = kids
        .iter()
        .filter(|s| s.status.as_ref().and_then(|st| st.phase.as_ref()) == Some(&SnapshotPhase::Succeeded))
        .max_by_key(|s| s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time))
    {
        let end = s.status.as_ref().and_then(|st| st.timing.as_ref()).and_then(|t| t.end_time);
        next.last_successful_schedule = Some(ScheduleRecord {
            at: end,
            slot: None,
            snapshot_ref: Some(NameRef { name: s.name_any() }),
            timezone: None,
        });
    }
    // consecutiveFailures (docs/design/api-contract.md §8), before this pass prunes Failed history.
    next.consecutive_failures = super::plan::consecutive_failures(status.consecutive_failures, &run_ends(&kids));
    // onScheduleDelete propagation (T43): live children whose stamp differs get the
    // schedule's value; a child already being deleted keeps the stamp it was deleted under.
    let desired = sched.spec.deletion.on_schedule_delete;
    let stamps: Vec<crate::deletion::cascade::ChildStamp> = kids
        .iter()
        .map(|k| crate::deletion::cascade::ChildStamp {
            name: k.name_any(),
            being_deleted: k.meta().deletion_timestamp.is_some(),
            stamp: k.spec.on_schedule_delete,
        })
        .collect();
    for child in crate::deletion::cascade::propagation_targets(desired, &stamps) {
        let body = serde_json::json!({"spec": {"onScheduleDelete": desired}});
        match snaps.patch(&child, &PatchParams::default(), &Patch::Merge(&body)).await {
            Ok(_) => {}
            // Gone since the store was read: nothing to stamp.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // failedJobsHistoryLimit.
    for victim in history_prunes(&kids, sched.spec.failed_jobs_history_limit) {
        stamp_and_delete(&snaps, &victim, pruned_by::FAILED_HISTORY).await?;
        tracing::info!(schedule = %name, namespace = %ns, snapshot = %victim, "failed run pruned (failedJobsHistoryLimit)");
    }

    conds.push(super::kstatus::runnable(&unreadable(&kids)));
    // ReplacementHeld (docs/design/api-contract.md §8): the runs of a Replace schedule parked on their repository.
    let parked: Vec<String> = kids
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter(|s| {
            let st = s.status.as_ref();
            matches!(st.and_then(|x| x.phase.as_ref()), Some(SnapshotPhase::Pending))
                && st.is_some_and(|x| {
                    x.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.reason == kopiur_api::names::reason::REPOSITORY_NOT_READY)
                })
        })
        .map(|s| s.name_any())
        .collect();
    conds.extend(super::kstatus::replacement_held(sched.spec.schedule.concurrency_policy, &parked));
    if let Some(sel) = &selection {
        conds.push(match &sel.capped {
            Some(m) => Cond {
                type_: "FanoutCapped",
                status: CondStatus::True,
                reason: "FanoutTooLarge".into(),
                message: m.clone(),
            },
            None => Cond {
                type_: "FanoutCapped",
                status: CondStatus::False,
                reason: "WithinCap".into(),
                message: format!("at most {MAX_SCHEDULE_FANOUT} (policy x repository) pairs"),
            },
        });
        conds.push(match &sel.repo_tz {
            Err(m) => Cond {
                type_: "TimezoneDefaultAmbiguous",
                status: CondStatus::True,
                reason: kopiur_api::names::reason::REPOSITORY_DEFAULTS_DISAGREE.into(),
                message: m.clone(),
            },
            Ok(_) => Cond {
                type_: "TimezoneDefaultAmbiguous",
                status: CondStatus::False,
                reason: "RepositoriesAgree".into(),
                message: String::new(),
            },
        });
    }
    next.conditions =
        crate::conditions::merge_conditions(&status.conditions, &conds, sched.meta().generation.unwrap_or(0), now);
    let api: Api<SnapshotSchedule> = Api::namespaced(ctx.client.clone(), &sched.namespace().unwrap_or_default());
    // A lost conflict is left to the next reconcile, which the newer object's watch event brings.
    crate::status::write_status(&api, sched.as_ref(), &status, &next).await?;
    let mut requeue = d.requeue_after.to_std().unwrap_or_default().max(std::time::Duration::from_secs(1));
    // Policies are not watched here: a selector schedule re-reads them each minute so its
    // conditions follow labels being added or removed (the fire itself reads them at the slot).
    if selection.is_some() {
        requeue = requeue.min(std::time::Duration::from_secs(60));
    }
    Ok(Action::requeue(requeue))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn child(name: &str, phase: &str, end_minute: Option<u32>) -> Arc<Snapshot> {
        let mut status = serde_json::json!({"phase": phase});
        if let Some(m) = end_minute {
            status["timing"] = serde_json::json!({"endTime": format!("2026-03-01T10:{m:02}:00Z")});
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
                "metadata": {"name": name, "namespace": "t", "creationTimestamp": "2026-03-01T09:00:00Z"},
                "spec": {},
                "status": status
            }))
            .unwrap(),
        )
    }

    #[test]
    fn history_keeps_the_newest_failed_and_unchanged_separately() {
        let kids = vec![
            child("f1", "Failed", Some(1)),
            child("f2", "Failed", Some(2)),
            child("f3", "Failed", Some(3)),
            child("f4", "Failed", Some(4)),
            child("f5", "Failed", Some(5)),
            child("u1", "Unchanged", Some(1)),
            child("u2", "Unchanged", Some(2)),
            child("u3", "Unchanged", Some(3)),
            child("ok", "Succeeded", Some(0)),
            child("run", "Running", None),
        ];
        let mut pruned = history_prunes(&kids, 2);
        pruned.sort();
        assert_eq!(pruned, vec!["f1", "f2", "f3", "u1"]);
        assert!(history_prunes(&kids, 10).is_empty());
        let mut all = history_prunes(&kids, 0);
        all.sort();
        assert_eq!(all, vec!["f1", "f2", "f3", "f4", "f5", "u1", "u2", "u3"], "0 keeps none; others untouched");
    }

    #[test]
    fn parked_children_are_active() {
        assert!(is_active(&child("p", "Pending", None)));
        assert!(is_active(&child("r", "Running", None)));
        assert!(!is_active(&child("f", "Failed", Some(1))));
        assert!(!is_active(&child("s", "Succeeded", Some(1))));
    }
}
