//! Slot disposition as a pure function. The next slot is pinned in status, so a restart or a
//! failover changes no timing; exactly one disposition applies once the pinned fire time has
//! passed, and every disposition re-pins forward, so a past slot never turns into a tight
//! requeue loop.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::Duration as ApiDuration;
use kopiur_api::domain::cron::{Cron, next_slot, parse_timezone};
use kopiur_api::snapshot::SnapshotSource;
use kopiur_api::snapshot_schedule::ConcurrencyPolicy;

use crate::policy_rules::sources::key_hash6;

/// One expanded source of the policy: a child backs it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSource {
    /// `ns/name` of the PVC (the child-name hash input).
    pub key: String,
    pub source: SnapshotSource,
}

/// What a fired slot creates children for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildSources {
    /// The policy is not known yet: one child without `spec.source`, which parks until it exists.
    PolicyUnknown,
    /// The policy's current expansion: one child per source, all from the same slot.
    Expanded(Vec<ChildSource>),
    /// `policySelector`: each matched policy's expansion, by policy name. Children carry the
    /// policy in their name (`-<6 hex of the policy name hash>`) and in `spec.policyRef`.
    Selected(Vec<PolicyChildren>),
    /// Nothing to back up (a `pvcSelector` matched no PVC, or a source is refused): the slot
    /// is consumed without a child.
    None { message: String },
}

/// One policy matched by a `policySelector`, with its expanded sources (at least one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyChildren {
    pub policy: String,
    pub sources: Vec<ChildSource>,
}

/// The pinned next slot (`status.nextSchedule`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pin {
    pub slot: DateTime<Utc>,
    pub at: DateTime<Utc>,
    pub timezone: String,
}

#[derive(Clone, Debug)]
pub struct ScheduleFacts {
    pub name: String,
    pub uid: String,
    pub created: DateTime<Utc>,
    /// The parsed cron, or why it does not parse.
    pub cron: Result<Cron, String>,
    /// The effective IANA zone (own, else the repository default, else UTC).
    pub timezone_name: String,
    pub jitter: Option<ApiDuration>,
    pub suspend: bool,
    pub concurrency: ConcurrencyPolicy,
    pub starting_deadline_seconds: Option<i64>,
    pub run_on_create: bool,
    pub pinned: Option<Pin>,
    /// `status.lastSchedule` is set (runOnCreate fires only before the first fire).
    pub has_last_schedule: bool,
    /// The spec changed since the pin was computed (a cron or jitter edit re-pins).
    pub spec_changed: bool,
    /// Children of this schedule in Pending or Running and not being deleted. A child parked
    /// on RepositoryNotReady is active.
    pub active_children: Vec<String>,
    /// What a fired slot backs up.
    pub sources: ChildSources,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// The pinned fire time is in the future.
    Wait,
    SkipSuspended,
    SkipExpired,
    SkipActive,
    /// Stamp `pruned-by: replaced-run` on each victim and delete it, then create the child.
    ReplaceActive {
        victims: Vec<String>,
    },
    Fire,
    /// The policy expands to no source: no child, re-pin after now. `run_on_create_slot` is
    /// the creation slot when this was the runOnCreate fire (recorded so it never fires late).
    SkipNoSource {
        message: String,
        run_on_create_slot: Option<DateTime<Utc>>,
    },
    /// The cron cannot be evaluated; nothing fires until the spec is fixed.
    Invalid {
        message: String,
    },
}

impl Disposition {
    /// `slots_skipped_total{reason}` label, for the skip dispositions.
    pub fn skip_reason(&self) -> Option<&'static str> {
        match self {
            Disposition::SkipSuspended => Some("suspended"),
            Disposition::SkipExpired => Some("expired"),
            Disposition::SkipActive => Some("active_run"),
            // Not a spec'd `slots_skipped_total` reason; the status condition carries it.
            Disposition::Wait
            | Disposition::ReplaceActive { .. }
            | Disposition::Fire
            | Disposition::SkipNoSource { .. }
            | Disposition::Invalid { .. } => None,
        }
    }
}

/// One child of a fired slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Child {
    pub name: String,
    /// `spec.source`; absent only while the policy is unknown.
    pub source: Option<SnapshotSource>,
    /// The child's policy under a `policySelector`; None means the schedule's `policyRef`.
    pub policy: Option<String>,
}

/// The children to create for a fired slot (at least one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fire {
    pub children: Vec<Child>,
    pub slot: DateTime<Utc>,
    pub at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleDecision {
    pub disposition: Disposition,
    /// The pin to write (unchanged when waiting).
    pub next: Option<Pin>,
    pub fire: Option<Fire>,
    pub requeue_after: Duration,
}

/// Children are named per slot, so a repeated CREATE of the same slot is idempotent.
pub fn child_name(schedule: &str, slot: DateTime<Utc>) -> String {
    let name = format!("{schedule}-{}", slot.timestamp());
    kopiur_mover::job::job_name(&name)
}

/// A child of a policy that expands to several sources: `<schedule>-<slot>-<6 hex of the
/// source key hash>` (docs/design/api-contract.md §8), truncated and hashed to fit like every child name.
pub fn source_child_name(schedule: &str, slot: DateTime<Utc>, key: &str) -> String {
    let name = format!("{schedule}-{}-{}", slot.timestamp(), key_hash6(key));
    kopiur_mover::job::job_name(&name)
}

/// A child under a `policySelector`: `<schedule>-<slot>-<6 hex of the policy name hash>`, plus
/// `-<6 hex of the source key hash>` when that policy expands to several sources.
pub fn policy_child_name(schedule: &str, slot: DateTime<Utc>, policy: &str, key: Option<&str>) -> String {
    let mut name = format!("{schedule}-{}-{}", slot.timestamp(), key_hash6(policy));
    if let Some(k) = key {
        name.push('-');
        name.push_str(&key_hash6(k));
    }
    kopiur_mover::job::job_name(&name)
}

/// The children of one slot, or why there are none. One source keeps the plain per-slot name.
pub fn children_for(schedule: &str, slot: DateTime<Utc>, sources: &ChildSources) -> Result<Vec<Child>, String> {
    match sources {
        ChildSources::PolicyUnknown => Ok(vec![Child { name: child_name(schedule, slot), source: None, policy: None }]),
        ChildSources::Expanded(list) => match list.as_slice() {
            [] => Err("the policy expands to no source".to_string()),
            [one] => {
                Ok(vec![Child { name: child_name(schedule, slot), source: Some(one.source.clone()), policy: None }])
            }
            many => Ok(many
                .iter()
                .map(|c| Child {
                    name: source_child_name(schedule, slot, &c.key),
                    source: Some(c.source.clone()),
                    policy: None,
                })
                .collect()),
        },
        ChildSources::Selected(policies) => {
            let mut out = Vec::new();
            for p in policies {
                let several = p.sources.len() > 1;
                for c in &p.sources {
                    out.push(Child {
                        name: policy_child_name(schedule, slot, &p.policy, several.then_some(c.key.as_str())),
                        source: Some(c.source.clone()),
                        policy: Some(p.policy.clone()),
                    });
                }
            }
            if out.is_empty() { Err("the policySelector matched no policy with a source".to_string()) } else { Ok(out) }
        }
        ChildSources::None { message } => Err(message.clone()),
    }
}

fn pin_after(f: &ScheduleFacts, cron: &Cron, after: DateTime<Utc>) -> Result<Pin, String> {
    let tz = parse_timezone(&f.timezone_name).map_err(|e| e.to_string())?;
    next_slot(cron, &f.uid, after, tz, f.jitter.as_ref())
        .map(|n| Pin { slot: n.slot, at: n.at, timezone: f.timezone_name.clone() })
        .map_err(|e| e.to_string())
}

fn requeue_until(at: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (at - now).max(Duration::seconds(1))
}

fn invalid(message: String) -> ScheduleDecision {
    ScheduleDecision {
        disposition: Disposition::Invalid { message },
        next: None,
        fire: None,
        requeue_after: Duration::seconds(300),
    }
}

pub fn plan(f: &ScheduleFacts, now: DateTime<Utc>) -> ScheduleDecision {
    let cron = match &f.cron {
        Ok(c) => c,
        Err(e) => return invalid(e.clone()),
    };
    // The current pin, or a fresh one: the first slot strictly after now.
    let pin = match &f.pinned {
        Some(p) if !f.spec_changed && p.timezone == f.timezone_name => p.clone(),
        Some(_) | None => match pin_after(f, cron, now) {
            Ok(p) => p,
            Err(e) => return invalid(e),
        },
    };
    let repin = |after: DateTime<Utc>| pin_after(f, cron, after);

    if f.run_on_create && !f.has_last_schedule && !f.suspend {
        let (disposition, fire) = match children_for(&f.name, f.created, &f.sources) {
            Ok(children) => (Disposition::Fire, Some(Fire { children, slot: f.created, at: f.created })),
            Err(message) => (Disposition::SkipNoSource { message, run_on_create_slot: Some(f.created) }, None),
        };
        return ScheduleDecision { disposition, requeue_after: requeue_until(pin.at, now), next: Some(pin), fire };
    }

    if now < pin.at {
        return ScheduleDecision {
            disposition: Disposition::Wait,
            requeue_after: requeue_until(pin.at, now),
            next: Some(pin),
            fire: None,
        };
    }

    // Concurrency is per slot (docs/design/pipeline.md §7.2): one disposition covers every child of
    // the slot, and an active child of any source counts. Without a source nothing is
    // replaced: running work is never deleted for a slot that creates nothing.
    let children = children_for(&f.name, pin.slot, &f.sources);
    // The slot's own children (a retry after a partial fan-out) neither block nor get replaced:
    // the retry completes the set, and CREATE of the existing ones is idempotent.
    let own: Vec<&str> = children.iter().flatten().map(|c| c.name.as_str()).collect();
    let others: Vec<String> = f.active_children.iter().filter(|n| !own.contains(&n.as_str())).cloned().collect();
    let disposition = if f.suspend {
        Disposition::SkipSuspended
    } else if f.starting_deadline_seconds.is_some_and(|d| now > pin.at + Duration::seconds(d)) {
        Disposition::SkipExpired
    } else {
        match (f.concurrency, others.is_empty(), &children) {
            (ConcurrencyPolicy::Forbid, false, _) => Disposition::SkipActive,
            (ConcurrencyPolicy::Forbid | ConcurrencyPolicy::Replace | ConcurrencyPolicy::Allow, _, Err(message)) => {
                Disposition::SkipNoSource { message: message.clone(), run_on_create_slot: None }
            }
            (ConcurrencyPolicy::Replace, false, Ok(_)) => Disposition::ReplaceActive { victims: others.clone() },
            (ConcurrencyPolicy::Forbid | ConcurrencyPolicy::Replace, true, Ok(_))
            | (ConcurrencyPolicy::Allow, _, Ok(_)) => Disposition::Fire,
        }
    };
    let (after, fire) = match (&disposition, children) {
        (Disposition::Fire | Disposition::ReplaceActive { .. }, Ok(children)) => {
            (now.max(pin.slot), Some(Fire { children, slot: pin.slot, at: pin.at }))
        }
        (Disposition::Fire | Disposition::ReplaceActive { .. }, Err(_)) => (now, None),
        (
            Disposition::SkipSuspended
            | Disposition::SkipExpired
            | Disposition::SkipActive
            | Disposition::SkipNoSource { .. },
            _,
        ) => (now, None),
        (Disposition::Wait | Disposition::Invalid { .. }, _) => (now, None),
    };
    let next = match repin(after) {
        Ok(p) => p,
        Err(e) => return invalid(e),
    };
    ScheduleDecision { disposition, requeue_after: requeue_until(next.at, now), next: Some(next), fire }
}

/// The labels of a scheduled child (docs/design/api-contract.md §1.7, §13): its origin, schedule and policy, and
/// `app.kubernetes.io/managed-by: kopiur` like everything else kopiur creates.
pub fn child_labels(schedule: &str, policy: &str) -> std::collections::BTreeMap<String, String> {
    use kopiur_api::names::{label, origin};
    std::collections::BTreeMap::from([
        (label::ORIGIN.to_string(), origin::SCHEDULED.to_string()),
        (label::SCHEDULE.to_string(), schedule.to_string()),
        (label::CONFIG.to_string(), policy.to_string()),
        (label::MANAGED_BY.to_string(), label::MANAGED_BY_VALUE.to_string()),
    ])
}

/// How a scheduled child ended, for [`consecutive_failures`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// Succeeded or Unchanged.
    Success,
    Failed,
}

/// `status.consecutiveFailures` (docs/design/api-contract.md §8): the trailing Failed runs among the terminal
/// children, newest first by end time, up to the newest Succeeded or Unchanged one (which
/// resets it to 0). `failedJobsHistoryLimit` prunes the oldest Failed runs, so while the
/// newest run is still Failed the count never goes below the stored `prev`; with no terminal
/// child (all pruned or not yet ended) `prev` stays.
pub fn consecutive_failures(prev: i32, ended: &[(DateTime<Utc>, RunEnd)]) -> i32 {
    let mut v: Vec<&(DateTime<Utc>, RunEnd)> = ended.iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.0));
    match v.first() {
        None => prev,
        Some((_, RunEnd::Success)) => 0,
        Some((_, RunEnd::Failed)) => {
            let trailing = v.iter().take_while(|(_, e)| *e == RunEnd::Failed).count() as i32;
            // A success behind the streak is still kept: the streak is exact.
            if v.iter().any(|(_, e)| *e == RunEnd::Success) { trailing } else { trailing.max(prev) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn scheduled_children_carry_managed_by() {
        let l = child_labels("nightly", "db");
        assert_eq!(l.get("app.kubernetes.io/managed-by").map(String::as_str), Some("kopiur"));
        assert_eq!(l.get(kopiur_api::names::label::ORIGIN).map(String::as_str), Some("scheduled"));
        assert_eq!(l.get(kopiur_api::names::label::SCHEDULE).map(String::as_str), Some("nightly"));
        assert_eq!(l.get(kopiur_api::names::label::CONFIG).map(String::as_str), Some("db"));
        assert_eq!(l.len(), 4);
    }

    #[test]
    fn consecutive_failures_count_the_trailing_failed_runs() {
        use RunEnd::{Failed, Success};
        assert_eq!(consecutive_failures(0, &[]), 0);
        assert_eq!(consecutive_failures(4, &[]), 4, "nothing ended: kept");
        // Order given is irrelevant: newest first by end time.
        let runs = [(t(3, 0, 0), Failed), (t(1, 0, 0), Success), (t(2, 0, 0), Failed), (t(0, 30, 0), Failed)];
        assert_eq!(consecutive_failures(0, &runs), 2, "the two after the success");
        assert_eq!(consecutive_failures(9, &runs), 2, "a kept success makes the streak exact");
        assert_eq!(consecutive_failures(5, &[(t(1, 0, 0), Failed), (t(2, 0, 0), Success)]), 0, "a success resets");
        assert_eq!(
            consecutive_failures(3, &[(t(2, 0, 0), Success), (t(3, 0, 0), Failed)]),
            1,
            "a failure after a success: 1"
        );
        // Every kept child Failed: older ones may have been pruned, so never below prev...
        assert_eq!(consecutive_failures(12, &[(t(1, 0, 0), Failed), (t(2, 0, 0), Failed)]), 12);
        // ...and it grows past prev when more are kept.
        assert_eq!(consecutive_failures(1, &[(t(1, 0, 0), Failed), (t(2, 0, 0), Failed)]), 2);
    }

    fn t(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, h, m, s).unwrap()
    }

    fn facts(expr: &str) -> ScheduleFacts {
        ScheduleFacts {
            name: "nightly".into(),
            uid: "8b0f6a4e-0000-4000-8000-000000000001".into(),
            created: t(10, 0, 30),
            cron: Cron::parse(expr, "8b0f6a4e-0000-4000-8000-000000000001").map_err(|e| e.to_string()),
            timezone_name: "UTC".into(),
            jitter: None,
            suspend: false,
            concurrency: ConcurrencyPolicy::Forbid,
            starting_deadline_seconds: None,
            run_on_create: false,
            pinned: None,
            has_last_schedule: false,
            spec_changed: false,
            active_children: vec![],
            sources: ChildSources::Expanded(vec![src("data")]),
        }
    }

    fn src(pvc: &str) -> ChildSource {
        let source = crate::policy_rules::sources::Expanded {
            source_index: 0,
            namespace: "apps".into(),
            pvc: pvc.into(),
            source_path: format!("/pvc/{pvc}"),
        };
        ChildSource { key: source.key(), source: source.snapshot_source() }
    }

    fn names(d: &ScheduleDecision) -> Vec<String> {
        d.fire.as_ref().map(|f| f.children.iter().map(|c| c.name.clone()).collect()).unwrap_or_default()
    }

    fn pin(slot: DateTime<Utc>) -> Option<Pin> {
        Some(Pin { slot, at: slot, timezone: "UTC".into() })
    }

    #[test]
    fn first_reconcile_pins_the_next_slot_and_waits() {
        let f = facts("*/2 * * * *");
        let d = plan(&f, t(10, 0, 30));
        assert_eq!(d.disposition, Disposition::Wait);
        assert_eq!(d.next.as_ref().unwrap().slot, t(10, 2, 0));
        assert_eq!(d.requeue_after, Duration::seconds(90));
    }

    #[test]
    fn due_slot_fires_a_deterministic_child_and_repins() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::Fire);
        let fire = d.fire.unwrap();
        assert_eq!(fire.children.len(), 1);
        assert_eq!(fire.children[0].name, format!("nightly-{}", t(10, 2, 0).timestamp()));
        assert_eq!(fire.children[0].source.as_ref().unwrap().target.pvc.name, "data", "spec.source is written");
        assert_eq!(d.next.unwrap().slot, t(10, 4, 0));
    }

    #[test]
    fn forbid_with_an_active_child_skips() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.active_children = vec!["nightly-1".into()];
        let d = plan(&f, t(10, 2, 1));
        assert_eq!(d.disposition, Disposition::SkipActive);
        assert_eq!(d.disposition.skip_reason(), Some("active_run"));
        assert!(d.fire.is_none());
        assert_eq!(d.next.unwrap().slot, t(10, 4, 0));
    }

    #[test]
    fn allow_fires_regardless_and_replace_names_victims() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.active_children = vec!["a".into()];
        f.concurrency = ConcurrencyPolicy::Allow;
        assert_eq!(plan(&f, t(10, 2, 0)).disposition, Disposition::Fire);
        f.concurrency = ConcurrencyPolicy::Replace;
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::ReplaceActive { victims: vec!["a".into()] });
        assert!(d.fire.is_some());
    }

    #[test]
    fn expired_slot_repins_forward_without_a_tight_loop() {
        let mut f = facts("* * * * *");
        f.starting_deadline_seconds = Some(30);
        f.pinned = pin(t(10, 1, 0));
        let now = t(10, 6, 10);
        let d = plan(&f, now);
        assert_eq!(d.disposition, Disposition::SkipExpired);
        assert!(d.fire.is_none());
        let next = d.next.clone().unwrap();
        assert!(next.at > now, "re-pinned into the future");
        assert_eq!(d.requeue_after, Duration::seconds(50));
        // The next reconcile right after waits; it does not skip again.
        f.pinned = d.next;
        assert_eq!(plan(&f, now + Duration::seconds(1)).disposition, Disposition::Wait);
    }

    #[test]
    fn without_a_deadline_a_far_past_slot_fires_once() {
        let mut f = facts("* * * * *");
        f.pinned = pin(t(5, 0, 0));
        let now = t(10, 0, 30);
        let d = plan(&f, now);
        assert_eq!(d.disposition, Disposition::Fire);
        assert_eq!(d.fire.unwrap().slot, t(5, 0, 0));
        assert_eq!(d.next.unwrap().slot, t(10, 1, 0), "one catch-up, then the next nominal slot");
    }

    #[test]
    fn suspend_skips_and_repins() {
        let mut f = facts("*/2 * * * *");
        f.suspend = true;
        f.pinned = pin(t(10, 2, 0));
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::SkipSuspended);
        assert_eq!(d.next.unwrap().slot, t(10, 4, 0));
    }

    #[test]
    fn run_on_create_fires_once_at_creation() {
        let mut f = facts("0 3 * * *");
        f.run_on_create = true;
        let d = plan(&f, t(10, 0, 31));
        assert_eq!(d.disposition, Disposition::Fire);
        assert_eq!(d.fire.as_ref().unwrap().slot, f.created);
        f.has_last_schedule = true;
        f.pinned = d.next;
        assert_eq!(plan(&f, t(10, 0, 32)).disposition, Disposition::Wait, "never again");
    }

    #[test]
    fn cron_edit_repins() {
        let mut f = facts("0 3 * * *");
        f.pinned = pin(Utc.with_ymd_and_hms(2026, 3, 2, 3, 0, 0).unwrap());
        f.spec_changed = true;
        let d = plan(&f, t(10, 0, 0));
        assert_eq!(d.disposition, Disposition::Wait);
        assert_eq!(d.next.unwrap().slot, Utc.with_ymd_and_hms(2026, 3, 2, 3, 0, 0).unwrap());
        f.cron = Cron::parse("30 * * * *", &f.uid).map_err(|e| e.to_string());
        let d = plan(&f, t(10, 0, 0));
        assert_eq!(d.next.unwrap().slot, t(10, 30, 0));
    }

    #[test]
    fn invalid_cron_never_fires() {
        let f = facts("61 * * * *");
        assert!(matches!(plan(&f, t(10, 0, 0)).disposition, Disposition::Invalid { .. }));
    }

    #[test]
    fn a_policy_selector_names_each_child_after_its_policy() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::Selected(vec![
            PolicyChildren { policy: "app".into(), sources: vec![src("db")] },
            PolicyChildren { policy: "media".into(), sources: vec![src("media"), src("photos")] },
        ]);
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::Fire);
        let slot = t(10, 2, 0).timestamp();
        let h = crate::policy_rules::sources::key_hash6;
        let got: Vec<(String, Option<String>)> =
            d.fire.unwrap().children.into_iter().map(|c| (c.name, c.policy)).collect();
        assert_eq!(
            got,
            vec![
                (format!("nightly-{slot}-{}", h("app")), Some("app".into())),
                (format!("nightly-{slot}-{}-{}", h("media"), h("apps/media")), Some("media".into())),
                (format!("nightly-{slot}-{}-{}", h("media"), h("apps/photos")), Some("media".into())),
            ]
        );
        // Matched policies without a source consume the slot.
        f.sources = ChildSources::Selected(vec![]);
        assert!(matches!(plan(&f, t(10, 2, 0)).disposition, Disposition::SkipNoSource { .. }));
    }

    #[test]
    fn a_selector_fans_out_one_child_per_matched_pvc_from_the_same_slot() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::Expanded(vec![src("db"), src("media"), src("photos")]);
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::Fire);
        let fire = d.fire.as_ref().unwrap();
        assert_eq!(fire.slot, t(10, 2, 0));
        let slot = t(10, 2, 0).timestamp();
        let expected: Vec<String> = ["apps/db", "apps/media", "apps/photos"]
            .iter()
            .map(|k| format!("nightly-{slot}-{}", crate::policy_rules::sources::key_hash6(k)))
            .collect();
        assert_eq!(names(&d), expected);
        let targets: Vec<&str> =
            fire.children.iter().map(|c| c.source.as_ref().unwrap().target.pvc.name.as_str()).collect();
        assert_eq!(targets, vec!["db", "media", "photos"]);
        // Deterministic: the same slot and expansion give the same names (idempotent CREATE).
        assert_eq!(names(&plan(&f, t(10, 2, 30))), expected);
        assert_eq!(d.next.unwrap().slot, t(10, 4, 0));
    }

    #[test]
    fn a_selector_matching_nothing_creates_no_child_and_repins() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::None { message: "pvcSelector matched no PVC in namespace apps".into() };
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(
            d.disposition,
            Disposition::SkipNoSource {
                message: "pvcSelector matched no PVC in namespace apps".into(),
                run_on_create_slot: None
            }
        );
        assert!(d.fire.is_none());
        assert_eq!(d.disposition.skip_reason(), None, "not a spec'd slots_skipped_total reason");
        assert_eq!(d.next.unwrap().slot, t(10, 4, 0), "the slot is consumed, never a tight loop");
        // An empty expansion list is refused the same way.
        f.sources = ChildSources::Expanded(vec![]);
        assert!(matches!(plan(&f, t(10, 2, 0)).disposition, Disposition::SkipNoSource { .. }));
    }

    #[test]
    fn concurrency_is_per_slot_across_all_sources() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::Expanded(vec![src("db"), src("media")]);
        f.active_children = vec!["nightly-1-aaaaaa".into()];
        // Forbid: one active child of any PVC skips the whole slot.
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::SkipActive);
        assert!(d.fire.is_none());
        // Replace: every active child is a victim and the whole fan-out is created.
        f.concurrency = ConcurrencyPolicy::Replace;
        let d = plan(&f, t(10, 2, 0));
        assert_eq!(d.disposition, Disposition::ReplaceActive { victims: vec!["nightly-1-aaaaaa".into()] });
        assert_eq!(names(&d).len(), 2);
        // Allow: the fan-out fires regardless.
        f.concurrency = ConcurrencyPolicy::Allow;
        assert_eq!(names(&plan(&f, t(10, 2, 0))).len(), 2);
        // Replace with nothing to create deletes nothing.
        f.concurrency = ConcurrencyPolicy::Replace;
        f.sources = ChildSources::None { message: "none".into() };
        assert!(matches!(plan(&f, t(10, 2, 0)).disposition, Disposition::SkipNoSource { .. }));
    }

    #[test]
    fn run_on_create_fans_out_and_an_empty_expansion_consumes_it() {
        let mut f = facts("0 3 * * *");
        f.run_on_create = true;
        f.sources = ChildSources::Expanded(vec![src("db"), src("media")]);
        let d = plan(&f, t(10, 0, 31));
        assert_eq!(d.disposition, Disposition::Fire);
        assert_eq!(names(&d).len(), 2);
        assert!(names(&d).iter().all(|n| n.starts_with(&format!("nightly-{}-", f.created.timestamp()))));
        f.sources = ChildSources::None { message: "pvcSelector matched no PVC".into() };
        let d = plan(&f, t(10, 0, 31));
        assert_eq!(
            d.disposition,
            Disposition::SkipNoSource {
                message: "pvcSelector matched no PVC".into(),
                run_on_create_slot: Some(f.created)
            }
        );
        assert!(d.fire.is_none());
    }

    #[test]
    fn an_unknown_policy_fires_one_child_without_a_source() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::PolicyUnknown;
        let d = plan(&f, t(10, 2, 0));
        let fire = d.fire.unwrap();
        assert_eq!(
            fire.children,
            vec![Child { name: format!("nightly-{}", t(10, 2, 0).timestamp()), source: None, policy: None }]
        );
    }

    #[test]
    fn a_retry_after_a_partial_fan_out_completes_the_slot() {
        let mut f = facts("*/2 * * * *");
        f.pinned = pin(t(10, 2, 0));
        f.sources = ChildSources::Expanded(vec![src("db"), src("media")]);
        let first = names(&plan(&f, t(10, 2, 0)));
        // The first child was created, then the reconcile failed before status was written.
        f.active_children = vec![first[0].clone()];
        for policy in [ConcurrencyPolicy::Forbid, ConcurrencyPolicy::Replace] {
            f.concurrency = policy;
            let d = plan(&f, t(10, 2, 5));
            assert_eq!(d.disposition, Disposition::Fire, "{policy:?}: the slot's own child is not a blocker");
            assert_eq!(names(&d), first);
        }
        // An older slot's child still blocks under Forbid.
        f.concurrency = ConcurrencyPolicy::Forbid;
        f.active_children.push("nightly-1".into());
        assert_eq!(plan(&f, t(10, 2, 5)).disposition, Disposition::SkipActive);
        f.concurrency = ConcurrencyPolicy::Replace;
        assert_eq!(plan(&f, t(10, 2, 5)).disposition, Disposition::ReplaceActive { victims: vec!["nightly-1".into()] });
    }

    #[test]
    fn long_fan_out_names_fit_and_stay_distinct() {
        let long = "s".repeat(60);
        let a = source_child_name(&long, t(10, 2, 0), "apps/db");
        let b = source_child_name(&long, t(10, 2, 0), "apps/media");
        assert!(a.len() <= 63 && b.len() <= 63);
        assert_ne!(a, b);
    }
}
