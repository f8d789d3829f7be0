//! SnapshotSchedule observation: the children from the Snapshot store, the policy or the
//! policies a selector matches, their expansion into sources, and the [`ScheduleFacts`] the
//! plan decides on. Reads stores only: no client, no writes.
use std::sync::Arc;

use chrono::{DateTime, Utc};
use kopiur_api::domain::cron::{Cron, effective_timezone};
use kopiur_api::names::reason;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::snapshot_schedule::ScheduleTarget;
use kopiur_api::{Snapshot, SnapshotPolicy, SnapshotSchedule};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::plan::{ChildSource, ChildSources, Pin, ScheduleFacts};
use crate::context::Context;
use crate::policy_rules::sources::{Expansion, expand, pvcs_in, uses_selector};

/// The schedule's children: owned by this schedule's uid.
pub fn children(ctx: &Context, sched: &SnapshotSchedule) -> Vec<Arc<Snapshot>> {
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

pub(super) fn is_active(s: &Snapshot) -> bool {
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
pub(super) fn unreadable(kids: &[std::sync::Arc<Snapshot>]) -> Vec<String> {
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
pub(super) struct Selection {
    pub sources: ChildSources,
    /// Matched policies, by name.
    pub policies: Vec<Arc<SnapshotPolicy>>,
    /// The Ready reason and message when the selection cannot fire normally.
    pub problem: Option<(String, String)>,
    /// `FanoutCapped` (True with the message, or False).
    pub capped: Option<String>,
    /// The repositories' default time zone when they agree; `Err` lists the disagreement.
    pub repo_tz: Result<Option<String>, String>,
}

/// None while a store it reads has not synced (an unsynced store would match nothing and
/// consume the slot).
fn select_policies(
    ctx: &Context,
    ns: &str,
    sel: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<Selection> {
    if !ctx.stores.synced.policies.is_synced() {
        return None;
    }
    let mut policies: Vec<Arc<SnapshotPolicy>> = ctx
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
    let repo_tz = selection_timezone(ctx, ns, &policies);
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
            problem: Some((reason::FANOUT_TOO_LARGE.into(), message.clone())),
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
    let (selected, skipped) = policy_children(ns, &policies, &pvcs);
    let problem = (!skipped.is_empty()).then(|| {
        let names: Vec<String> = policies.iter().map(|p| p.name_any()).collect();
        if selected.is_empty() {
            (
                "NoSourceMatched".to_string(),
                format!("no matched policy has a source to back up ({})", skipped.join("; ")),
            )
        } else {
            (reason::SCHEDULED.to_string(), format!("policies {}; skipped: {}", names.join(", "), skipped.join("; ")))
        }
    });
    Some(Selection { sources: ChildSources::Selected(selected), policies, problem, capped: None, repo_tz })
}

/// The default time zone of the matched policies' repositories, or why they disagree.
fn selection_timezone(ctx: &Context, ns: &str, policies: &[Arc<SnapshotPolicy>]) -> Result<Option<String>, String> {
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
    if tzs.len() <= 1 {
        Ok(tzs.into_iter().next().flatten())
    } else {
        Err(format!(
            "the matched policies' repositories default to different time zones ({}); using UTC, set \
             spec.schedule.timezone",
            tzs.iter().map(|t| t.as_deref().unwrap_or("none")).collect::<Vec<_>>().join(", ")
        ))
    }
}

/// Each matched policy's children (one per source), and why the others get none (suspended,
/// a gating [next] field, no source).
fn policy_children(
    ns: &str,
    policies: &[Arc<SnapshotPolicy>],
    pvcs: &[crate::policy_rules::sources::PvcInfo],
) -> (Vec<super::plan::PolicyChildren>, Vec<String>) {
    let mut selected = Vec::new();
    let mut skipped = Vec::new();
    for p in policies {
        if p.spec.suspend {
            skipped.push(format!("{}: suspended (spec.suspend)", p.name_any()));
            continue;
        }
        // A policy with a gating [next] field (docs/design/api-contract.md §1.9) gets no child, like a gated source.
        match crate::features::snapshot_policy(&p.spec).refusal().and_then(|()| expand(ns, &p.spec.sources, pvcs)) {
            Ok(e) if !e.sources.is_empty() => selected.push(super::plan::PolicyChildren {
                policy: p.name_any(),
                sources: e.sources.iter().map(|s| ChildSource { key: s.key(), source: s.snapshot_source() }).collect(),
            }),
            Ok(e) => skipped.push(format!("{}: {}", p.name_any(), e.empty_message(ns).unwrap_or_default())),
            Err(m) => skipped.push(format!("{}: {m}", p.name_any())),
        }
    }
    (selected, skipped)
}

/// What one reconcile reads: the children, the policy (or the selector's policies), and the
/// facts the plan decides on.
pub(super) struct Observed {
    pub kids: Vec<Arc<Snapshot>>,
    /// The `policyRef`'s name (none under a `policySelector`).
    pub policy_name: Option<String>,
    /// The referenced policy, when it exists.
    pub policy: Option<Arc<SnapshotPolicy>>,
    /// What a `policySelector` resolved to.
    pub selection: Option<Selection>,
    /// Why a `policyRef` into another namespace creates no child.
    pub cross_ns: Option<String>,
    /// Why a suspended policy creates no child.
    pub suspended: Option<String>,
    /// The referenced policy's expansion into sources (or why it has none).
    pub expansion: Option<Result<Expansion, String>>,
    pub facts: ScheduleFacts,
}

/// Observes `sched`; `None` while a store it needs has not synced (an unsynced store would
/// match nothing and consume the slot: requeue shortly instead).
pub(super) fn observe(ctx: &Context, sched: &SnapshotSchedule, now: DateTime<Utc>) -> Option<Observed> {
    let ns = sched.namespace().unwrap_or_default();
    let uid = sched.uid().unwrap_or_default();
    let status = sched.status.clone().unwrap_or_default();
    let kids = children(ctx, sched);
    let policy_name = match &sched.spec.target {
        ScheduleTarget::PolicyRef(p) => Some(p.name.clone()),
        ScheduleTarget::PolicySelector(_) => None,
    };
    let policy = policy_name.as_ref().and_then(|p| ctx.stores.policies.get(&ObjectRef::new(p).within(&ns)));
    let selection = match &sched.spec.target {
        ScheduleTarget::PolicySelector(sel) => Some(select_policies(ctx, &ns, sel)?),
        ScheduleTarget::PolicyRef(_) => None,
    };
    // The policy's expansion: one child per source. A selector read from an unsynced PVC
    // store would match nothing and consume the slot, so wait for the store first.
    if policy.as_ref().is_some_and(|p| uses_selector(&p.spec.sources)) && !ctx.stores.synced.pvcs.is_synced() {
        return None;
    }
    // Timezone: own, else the policy's repository default, else UTC.
    let repo_tz = repository_timezone(ctx, &ns, selection.as_ref(), policy.as_deref());
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
    let sources = child_sources(&ns, selection.as_ref(), expansion.as_ref());
    let cron_spec = &sched.spec.schedule.cron;
    let pinned = status.next_schedule.as_ref().and_then(|n| {
        let (slot, at) = n.slot.zip(n.at)?;
        Some(Pin { slot, at, timezone: n.timezone.clone().unwrap_or_else(|| "UTC".into()) })
    });
    let facts = ScheduleFacts {
        name: sched.name_any(),
        uid: uid.clone(),
        created: sched
            .meta()
            .creation_timestamp
            .as_ref()
            .and_then(|c| DateTime::<Utc>::from_timestamp(c.0.as_second(), 0))
            .unwrap_or(now),
        cron: Cron::parse(&cron_spec.cron, &uid).map_err(|e| e.to_string()),
        timezone_name: effective_timezone(cron_spec.timezone.as_deref(), repo_tz.as_deref()).to_string(),
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
    Some(Observed { kids, policy_name, policy, selection, cross_ns, suspended, expansion, facts })
}

/// The repository default time zone a schedule falls back to: the selection's (when its
/// repositories agree), or the referenced policy's first repository's.
fn repository_timezone(
    ctx: &Context,
    ns: &str,
    selection: Option<&Selection>,
    policy: Option<&SnapshotPolicy>,
) -> Option<String> {
    match selection {
        Some(sel) => sel.repo_tz.clone().ok().flatten(),
        None => policy
            .and_then(|p| p.spec.target.repositories().first().map(|r| (*r).clone()))
            .and_then(|r| ctx.repository(ns, &r))
            .and_then(|rv| rv.common().schedule_defaults.as_ref().and_then(|d| d.timezone.clone())),
    }
}

/// The sources a slot's children back up: the selection's, or the referenced policy's
/// expansion (none, with why; unknown while the policy is).
fn child_sources(
    ns: &str,
    selection: Option<&Selection>,
    expansion: Option<&Result<Expansion, String>>,
) -> ChildSources {
    match (selection, expansion) {
        (Some(sel), _) => sel.sources.clone(),
        (None, expansion) => match expansion {
            None => ChildSources::PolicyUnknown,
            Some(Err(message)) => ChildSources::None { message: message.clone() },
            Some(Ok(e)) => match e.empty_message(ns) {
                Some(message) => ChildSources::None { message },
                None => ChildSources::Expanded(
                    e.sources.iter().map(|s| ChildSource { key: s.key(), source: s.snapshot_source() }).collect(),
                ),
            },
        },
    }
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
