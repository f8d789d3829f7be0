//! The per-repository mass-deletion breaker. It counts pending external destructive deletions
//! as inclusively as it can (over-counting only trips earlier, the safe direction) and, at or
//! above the threshold, holds every one of them until a human acknowledges the wave. There is
//! no timer: the breaker is a gate, not a delay.
use std::collections::BTreeSet;

use kopiur_api::names::{condition, event, reason};
use kopiur_api::repository::DeletionProtectionStatus;
use kopiur_api::repository::MassDeletionAck;

use super::ack::{self, AckOutcome};
use super::messages;
use super::pruned_by::PrunedBy;
use super::types::{Binding, EventType, PlannedCondition, PlannedEvent, RepoRef, Time};
use kopiur_api::snapshot_policy::DeletionPolicy;

/// The schema default of `spec.deletionProtection.threshold`.
pub const DEFAULT_THRESHOLD: u32 = 10;

/// One Snapshot with a `deletionTimestamp`, from the Snapshot store (every namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDeletion {
    pub uid: String,
    pub deletion_timestamp: Time,
    /// The `snapshot-cleanup` finalizer is still on the object.
    pub finalizer_present: bool,
    /// The effective policy (discovered rows: Retain).
    pub policy: DeletionPolicy,
    pub skip: bool,
    pub pruned_by: PrunedBy,
    pub binding: Binding,
    /// `status.deletion.decision` is Held: the member's own plan holds it.
    pub held: bool,
}

/// Everything the breaker needs about one repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepoDeletionFacts {
    pub repo: RepoRef,
    /// `spec.deletionProtection.threshold` as stored. The schema forbids negatives; one that
    /// slips through reads as the default, keeping protection on.
    pub threshold: i32,
    /// The raw `allow-mass-deletion` annotation.
    pub ack_annotation: Option<String>,
    /// `status.deletionProtection.ack` as last written.
    pub ack_recorded: Option<MassDeletionAck>,
    /// Whether `MassDeletionHeld` is currently True in status (for the transition Event).
    pub held_condition_was_true: bool,
    /// Every deleting Snapshot in the store; the breaker picks the ones that count against
    /// this repository.
    pub deletions: Vec<PendingDeletion>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BreakerMode {
    /// Threshold 0.
    Disabled,
    BelowThreshold,
    /// At or above the threshold: every counted deletion is held.
    Tripped,
}

/// What the breaker says about one member: the `tripped` and `acked` facts of the plan, plus
/// what the plan needs to write the member's `DeletionHeld` condition.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemberBreaker {
    pub tripped: bool,
    pub acked: bool,
    pub threshold: u32,
    pub pending_external: u32,
    pub ack_effective: Option<Time>,
    /// The `DeletionHeld=True` message (with the release command) while the breaker holds.
    pub held_message: Option<String>,
}

impl MemberBreaker {
    /// A repository below its threshold with no ack: the common case.
    pub fn quiet() -> MemberBreaker {
        MemberBreaker { threshold: DEFAULT_THRESHOLD, ..MemberBreaker::default() }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerState {
    pub repo: RepoRef,
    pub threshold: u32,
    pub mode: BreakerMode,
    /// N: the inclusive pending external count.
    pub pending_external: u32,
    /// The uids the breaker holds: counted while tripped. Each reaches D10 on its own
    /// reconcile unless an earlier row (skip, namespace axis, cascade guard) resolves it.
    pub holding: BTreeSet<String>,
    /// H: members of `holding` whose own plan has persisted Held. Only these make the
    /// repository show `MassDeletionHeld=True`, so a cascade that the guard fully retains
    /// (counted, hence tripping, but never held) raises no alarm.
    pub held: BTreeSet<String>,
    /// V: the newest `deletionTimestamp` among `holding`, the value the ack command carries.
    /// Taken over `holding` rather than `held` so one ack covers members not yet planned.
    pub wave_latest: Option<Time>,
    pub ack: AckOutcome,
    /// Repository Events: `MassDeletionHeld` on False→True, `InvalidMassDeletionAck` once per
    /// distinct bad value.
    pub events: Vec<PlannedEvent>,
}

/// Resolve the threshold: 0 disables, negatives read as the default.
pub fn effective_threshold(raw: i32) -> u32 {
    u32::try_from(raw).unwrap_or(DEFAULT_THRESHOLD)
}

/// Does this deletion count against `repo_uid`, given the ack in effect? Inclusive on purpose:
/// members that may yet be cascade-retained, namespace-orphaned or manifest-less count too.
pub fn counts(d: &PendingDeletion, repo_uid: &str, ack_effective: Option<Time>) -> bool {
    let destructive = match d.policy {
        DeletionPolicy::Delete => true,
        DeletionPolicy::Retain | DeletionPolicy::Orphan => false,
    };
    d.finalizer_present
        && destructive
        && !d.skip
        && d.pruned_by.is_external()
        && !ack::approves(ack_effective, d.deletion_timestamp)
        && d.binding.counts_against(repo_uid)
}

pub fn evaluate(facts: &RepoDeletionFacts, now: Time) -> BreakerState {
    let threshold = effective_threshold(facts.threshold);
    let ack = ack::resolve(facts.ack_annotation.as_deref(), facts.ack_recorded.as_ref(), now);
    let counted: Vec<&PendingDeletion> =
        facts.deletions.iter().filter(|d| counts(d, &facts.repo.uid, ack.effective)).collect();
    let pending_external = u32::try_from(counted.len()).unwrap_or(u32::MAX);
    let mode = if threshold == 0 {
        BreakerMode::Disabled
    } else if pending_external >= threshold {
        BreakerMode::Tripped
    } else {
        BreakerMode::BelowThreshold
    };
    let (holding, held, wave_latest) = match mode {
        BreakerMode::Tripped => (
            counted.iter().map(|d| d.uid.clone()).collect(),
            counted.iter().filter(|d| d.held).map(|d| d.uid.clone()).collect(),
            counted.iter().map(|d| d.deletion_timestamp).max(),
        ),
        BreakerMode::Disabled | BreakerMode::BelowThreshold => (BTreeSet::new(), BTreeSet::new(), None),
    };
    let mut state = BreakerState {
        repo: facts.repo.clone(),
        threshold,
        mode,
        pending_external,
        holding,
        held,
        wave_latest,
        ack,
        events: vec![],
    };
    if state.ack.newly_invalid
        && let Some(raw) = facts.ack_annotation.as_deref()
    {
        state.events.push(PlannedEvent {
            kind: EventType::Warning,
            reason: event::INVALID_MASS_DELETION_ACK,
            message: messages::invalid_ack(raw),
        });
    }
    if let (true, false, Some(v)) = (state.held_count() > 0, facts.held_condition_was_true, state.wave_latest) {
        state.events.push(PlannedEvent {
            kind: EventType::Warning,
            reason: event::MASS_DELETION_HELD,
            message: messages::mass_deletion_held_event(
                &state.repo,
                state.held_count(),
                pending_external,
                threshold,
                v,
            ),
        });
    }
    state
}

impl BreakerState {
    pub fn tripped(&self) -> bool {
        match self.mode {
            BreakerMode::Tripped => true,
            BreakerMode::Disabled | BreakerMode::BelowThreshold => false,
        }
    }

    pub fn held_count(&self) -> u32 {
        u32::try_from(self.held.len()).unwrap_or(u32::MAX)
    }

    pub fn is_acked(&self, deletion_timestamp: Time) -> bool {
        ack::approves(self.ack.effective, deletion_timestamp)
    }

    /// The `tripped` / `acked` facts for one member of this repository.
    pub fn member(&self, deletion_timestamp: Time) -> MemberBreaker {
        MemberBreaker {
            tripped: self.tripped(),
            acked: self.is_acked(deletion_timestamp),
            threshold: self.threshold,
            pending_external: self.pending_external,
            ack_effective: self.ack.effective,
            held_message: self.snapshot_held_message(),
        }
    }

    /// The release command for the current wave, while anything is held.
    pub fn ack_command(&self) -> Option<String> {
        self.wave_latest.map(|v| messages::ack_command(&self.repo, v))
    }

    /// The `DeletionHeld=True` message for a held member of this repository.
    pub fn snapshot_held_message(&self) -> Option<String> {
        self.wave_latest.map(|v| messages::snapshot_held(&self.repo, self.threshold, v))
    }

    /// `status.deletionProtection`.
    pub fn status(&self) -> DeletionProtectionStatus {
        DeletionProtectionStatus {
            pending_external: i32::try_from(self.pending_external).unwrap_or(i32::MAX),
            held: i32::try_from(self.held_count()).unwrap_or(i32::MAX),
            ack: self.ack.status.clone(),
        }
    }

    /// The repository's `MassDeletionHeld` condition: True while H ≥ 1.
    pub fn condition(&self) -> PlannedCondition {
        let (status, reason, message) = match (self.mode, self.wave_latest, self.held_count()) {
            (BreakerMode::Tripped, Some(v), 1..) => (
                true,
                reason::THRESHOLD_EXCEEDED,
                messages::repository_held(&self.repo, self.held_count(), self.pending_external, self.threshold, v),
            ),
            (BreakerMode::Tripped, _, 0) => (
                false,
                reason::BELOW_THRESHOLD,
                messages::repository_pending_none_held(self.pending_external, self.threshold),
            ),
            // Tripped always has a newest member; this arm exists only to stay exhaustive.
            (BreakerMode::Tripped, None, 1..) | (BreakerMode::BelowThreshold, _, _) => (
                false,
                reason::BELOW_THRESHOLD,
                messages::repository_below_threshold(self.pending_external, self.threshold),
            ),
            (BreakerMode::Disabled, _, _) => (false, reason::DISABLED, messages::repository_disabled()),
        };
        PlannedCondition { type_: condition::MASS_DELETION_HELD, status, reason, message }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::super::pruned_by::PruneKind;
    use super::*;

    fn t(secs: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap() + Duration::seconds(secs)
    }

    fn ext(uid: &str, ts: i64) -> PendingDeletion {
        PendingDeletion {
            uid: uid.into(),
            deletion_timestamp: t(ts),
            finalizer_present: true,
            policy: DeletionPolicy::Delete,
            skip: false,
            pruned_by: PrunedBy::External,
            binding: Binding::Pinned { repo_uid: "r1".into() },
            held: true,
        }
    }

    fn facts(deletions: Vec<PendingDeletion>) -> RepoDeletionFacts {
        RepoDeletionFacts {
            repo: RepoRef::repository("t", "r", "r1"),
            threshold: 10,
            ack_annotation: None,
            ack_recorded: None,
            held_condition_was_true: false,
            deletions,
        }
    }

    fn wave(n: usize) -> Vec<PendingDeletion> {
        (0..n).map(|i| ext(&format!("s{i:03}"), i as i64)).collect()
    }

    #[test]
    fn nine_pending_stay_below_ten_trip_and_hold_all() {
        let s = evaluate(&facts(wave(9)), t(100));
        assert_eq!((s.mode, s.pending_external, s.held_count()), (BreakerMode::BelowThreshold, 9, 0));
        assert!(!s.condition().status);
        assert!(s.events.is_empty());

        let s = evaluate(&facts(wave(10)), t(100));
        assert_eq!((s.mode, s.pending_external, s.held_count()), (BreakerMode::Tripped, 10, 10));
        assert_eq!(s.wave_latest, Some(t(9)));
        let c = s.condition();
        assert!(c.status);
        assert_eq!(c.reason, "ThresholdExceeded");
        assert!(c.message.contains("allow-mass-deletion=\"2026-07-17T10:00:09Z\""), "{}", c.message);
        assert_eq!(s.events.len(), 1);
        assert_eq!(s.events[0].reason, "MassDeletionHeld");
    }

    #[test]
    fn a_trip_nothing_is_held_for_raises_no_alarm() {
        // A schedule cascade the guard retains: counted (inclusive), so the breaker trips, but
        // no member's plan holds it.
        let deletions = wave(50).into_iter().map(|d| PendingDeletion { held: false, ..d }).collect();
        let s = evaluate(&facts(deletions), t(100));
        assert_eq!((s.mode, s.pending_external, s.holding.len(), s.held_count()), (BreakerMode::Tripped, 50, 50, 0));
        assert!(s.member(t(0)).tripped);
        assert!(s.events.is_empty());
        let c = s.condition();
        assert_eq!((c.status, c.reason), (false, "BelowThreshold"));
        assert!(c.message.contains("none is held"), "{}", c.message);
    }

    #[test]
    fn held_event_only_on_the_transition() {
        let mut f = facts(wave(12));
        f.held_condition_was_true = true;
        assert!(evaluate(&f, t(100)).events.is_empty());
    }

    #[test]
    fn threshold_zero_disables_and_negative_reads_as_default() {
        let mut f = facts(wave(600));
        f.threshold = 0;
        let s = evaluate(&f, t(1000));
        assert_eq!((s.mode, s.pending_external, s.held_count()), (BreakerMode::Disabled, 600, 0));
        assert_eq!(s.condition().reason, "Disabled");
        f.threshold = -3;
        assert_eq!(evaluate(&f, t(1000)).threshold, DEFAULT_THRESHOLD);
    }

    #[test]
    fn what_counts() {
        let mut not_counted = vec![];
        let mut d = ext("a", 0);
        d.finalizer_present = false;
        not_counted.push(d);
        let mut d = ext("b", 0);
        d.policy = DeletionPolicy::Retain;
        not_counted.push(d);
        let mut d = ext("c", 0);
        d.policy = DeletionPolicy::Orphan;
        not_counted.push(d);
        let mut d = ext("d", 0);
        d.skip = true;
        not_counted.push(d);
        let mut d = ext("e", 0);
        d.pruned_by = PrunedBy::Operator(PruneKind::Retention);
        not_counted.push(d);
        let mut d = ext("f", 0);
        d.binding = Binding::Pinned { repo_uid: "other".into() };
        not_counted.push(d);
        let mut d = ext("g", 0);
        d.binding = Binding::Unpinned { resolves: vec!["other".into()] };
        not_counted.push(d);
        for d in &not_counted {
            assert!(!counts(d, "r1", None), "{}", d.uid);
        }
        // An unpinned member that could resolve here is counted (inclusive).
        let mut d = ext("h", 0);
        d.binding = Binding::Unpinned { resolves: vec!["other".into(), "r1".into()] };
        assert!(counts(&d, "r1", None));
    }

    #[test]
    fn ack_releases_its_wave_and_only_its_wave() {
        let mut f = facts(wave(20));
        f.ack_annotation = Some("2026-07-17T10:00:19Z".into());
        let s = evaluate(&f, t(100));
        assert_eq!((s.mode, s.pending_external), (BreakerMode::BelowThreshold, 0));
        assert!(s.member(t(19)).acked);
        // A later wave after the ack counts again.
        f.ack_recorded = s.ack.status.clone();
        f.deletions.extend((0..15).map(|i| ext(&format!("n{i}"), 200 + i)));
        let s = evaluate(&f, t(300));
        assert_eq!((s.mode, s.pending_external, s.held_count()), (BreakerMode::Tripped, 15, 15));
        assert_eq!(s.wave_latest, Some(t(214)));
        assert!(!s.member(t(200)).acked);
        assert!(s.member(t(5)).acked);
    }

    #[test]
    fn future_ack_is_clamped_to_first_sight() {
        let mut f = facts(vec![]);
        f.ack_annotation = Some("2027-07-17T10:00:00Z".into());
        let s0 = evaluate(&f, t(0));
        f.ack_recorded = s0.ack.status.clone();
        f.deletions = (0..12).map(|i| ext(&format!("s{i}"), 60 + i)).collect();
        let s = evaluate(&f, t(120));
        assert_eq!(s.ack.effective, Some(t(0)));
        assert_eq!((s.mode, s.held_count()), (BreakerMode::Tripped, 12));
    }

    #[test]
    fn invalid_ack_warns_once_and_holds() {
        let mut f = facts(wave(12));
        f.ack_annotation = Some("tomorrow".into());
        let s = evaluate(&f, t(100));
        assert_eq!(s.events.iter().filter(|e| e.reason == "InvalidMassDeletionAck").count(), 1);
        assert!(s.tripped());
        f.ack_recorded = s.ack.status.clone();
        f.held_condition_was_true = true;
        for i in 0..10 {
            let s = evaluate(&f, t(101 + i));
            assert!(s.events.is_empty());
            assert_eq!(s.held_count(), 12);
        }
    }

    #[test]
    fn status_reports_counts_and_ack() {
        let mut f = facts(wave(25));
        f.ack_annotation = Some("2026-07-17T09:00:00Z".into());
        let s = evaluate(&f, t(100));
        let st = s.status();
        assert_eq!((st.pending_external, st.held), (25, 25));
        assert_eq!(st.ack.unwrap().effective, Some(t(-3600)));
    }
}
