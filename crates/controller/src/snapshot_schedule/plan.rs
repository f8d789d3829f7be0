//! Slot disposition as a pure function. The next slot is pinned in status, so a restart or a
//! failover changes no timing; exactly one disposition applies once the pinned fire time has
//! passed, and every disposition re-pins forward, so a past slot never turns into a tight
//! requeue loop.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::Duration as ApiDuration;
use kopiur_api::domain::cron::{Cron, next_slot, parse_timezone};
use kopiur_api::snapshot_schedule::ConcurrencyPolicy;

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
            Disposition::Wait | Disposition::ReplaceActive { .. } | Disposition::Fire | Disposition::Invalid { .. } => {
                None
            }
        }
    }
}

/// A child to create for a fired slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fire {
    pub child: String,
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
        let fire = Fire { child: child_name(&f.name, f.created), slot: f.created, at: f.created };
        return ScheduleDecision {
            disposition: Disposition::Fire,
            requeue_after: requeue_until(pin.at, now),
            next: Some(pin),
            fire: Some(fire),
        };
    }

    if now < pin.at {
        return ScheduleDecision {
            disposition: Disposition::Wait,
            requeue_after: requeue_until(pin.at, now),
            next: Some(pin),
            fire: None,
        };
    }

    let disposition = if f.suspend {
        Disposition::SkipSuspended
    } else if f.starting_deadline_seconds.is_some_and(|d| now > pin.at + Duration::seconds(d)) {
        Disposition::SkipExpired
    } else {
        match (f.concurrency, f.active_children.is_empty()) {
            (ConcurrencyPolicy::Forbid, false) => Disposition::SkipActive,
            (ConcurrencyPolicy::Replace, false) => Disposition::ReplaceActive { victims: f.active_children.clone() },
            (ConcurrencyPolicy::Forbid | ConcurrencyPolicy::Replace, true) | (ConcurrencyPolicy::Allow, _) => {
                Disposition::Fire
            }
        }
    };
    let (after, fire) = match &disposition {
        Disposition::Fire | Disposition::ReplaceActive { .. } => {
            (now.max(pin.slot), Some(Fire { child: child_name(&f.name, pin.slot), slot: pin.slot, at: pin.at }))
        }
        Disposition::SkipSuspended | Disposition::SkipExpired | Disposition::SkipActive => (now, None),
        Disposition::Wait | Disposition::Invalid { .. } => (now, None),
    };
    let next = match repin(after) {
        Ok(p) => p,
        Err(e) => return invalid(e),
    };
    ScheduleDecision { disposition, requeue_after: requeue_until(next.at, now), next: Some(next), fire }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

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
        }
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
        assert_eq!(fire.child, format!("nightly-{}", t(10, 2, 0).timestamp()));
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
}
