//! The mass-deletion ack: a valued RFC3339 timestamp on the repository, not a presence flag,
//! so approving one wave never disarms the breaker for the next. The effective value is
//! computed once per distinct raw value and persisted, so restarts never move it.
use chrono::DateTime;
use kopiur_api::repository::MassDeletionAck;

use super::types::Time;

/// Parse an annotation value: any RFC3339 offset, normalized to UTC.
pub fn parse(raw: &str) -> Option<Time> {
    DateTime::parse_from_rfc3339(raw.trim()).ok().map(|t| t.to_utc())
}

/// The ack in effect after this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckOutcome {
    /// `E`: deletions with `deletionTimestamp ≤ E` are approved. `None` approves nothing.
    pub effective: Option<Time>,
    /// What `status.deletionProtection.ack` should hold. An unparseable value is recorded with
    /// no `effective`, which is how "warn once per distinct value" survives a restart.
    pub status: Option<MassDeletionAck>,
    /// This raw value is unparseable and was seen for the first time: emit one
    /// `InvalidMassDeletionAck`.
    pub newly_invalid: bool,
}

/// Resolve the ack from the annotation (`raw`) and what status already recorded.
///
/// - absent → no ack, and the record is cleared;
/// - the same raw value as recorded → the recorded effective value, never recomputed;
/// - a new parseable value `A` → `E = min(A, now)`: a future-dated ack approves only what is
///   pending when kopiur first sees it;
/// - a new unparseable value → no ack (fail-safe) and one warning.
pub fn resolve(raw: Option<&str>, recorded: Option<&MassDeletionAck>, now: Time) -> AckOutcome {
    let Some(raw) = raw else {
        return AckOutcome { effective: None, status: None, newly_invalid: false };
    };
    if let Some(rec) = recorded.filter(|r| r.value == raw) {
        // A record we wrote has effective ≤ observedAt; clamp anyway so a hand-edited status
        // can never widen the approval.
        let effective = match (rec.effective, rec.observed_at) {
            (Some(e), Some(o)) => Some(e.min(o)),
            (Some(e), None) => Some(e.min(now)),
            (None, _) => None,
        };
        return AckOutcome { effective, status: Some(rec.clone()), newly_invalid: false };
    }
    match parse(raw) {
        Some(a) => {
            let e = a.min(now);
            AckOutcome {
                effective: Some(e),
                status: Some(MassDeletionAck { value: raw.to_string(), effective: Some(e), observed_at: Some(now) }),
                newly_invalid: false,
            }
        }
        None => AckOutcome {
            effective: None,
            status: Some(MassDeletionAck { value: raw.to_string(), effective: None, observed_at: Some(now) }),
            newly_invalid: true,
        },
    }
}

/// A deletion is approved iff its own `deletionTimestamp` is at or before the effective ack.
pub fn approves(effective: Option<Time>, deletion_timestamp: Time) -> bool {
    match effective {
        Some(e) => deletion_timestamp <= e,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone, Utc};

    use super::*;

    fn t(secs: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 7, 17, 10, 0, 0).unwrap() + Duration::seconds(secs)
    }

    #[test]
    fn absent_is_no_ack() {
        let o = resolve(None, None, t(0));
        assert_eq!(o, AckOutcome { effective: None, status: None, newly_invalid: false });
        assert!(!approves(o.effective, t(-1000)));
    }

    #[test]
    fn past_value_is_taken_as_is_and_any_offset_normalizes() {
        let o = resolve(Some("2026-07-17T12:00:00+02:00"), None, t(60));
        assert_eq!(o.effective, Some(t(0)));
        assert_eq!(o.status.as_ref().unwrap().observed_at, Some(t(60)));
        assert!(approves(o.effective, t(0)));
        assert!(!approves(o.effective, t(1)));
    }

    #[test]
    fn future_value_is_clamped_to_first_observation_and_never_moves() {
        let raw = "2027-07-17T10:00:00Z";
        let first = resolve(Some(raw), None, t(0));
        assert_eq!(first.effective, Some(t(0)));
        // Seen again much later: the recorded effective value stands.
        let again = resolve(Some(raw), first.status.as_ref(), t(3600));
        assert_eq!(again.effective, Some(t(0)));
        assert_eq!(again.status, first.status);
        assert!(!approves(again.effective, t(60)));
    }

    #[test]
    fn unparseable_is_ignored_and_warned_once_per_value() {
        let first = resolve(Some("tomorrow"), None, t(0));
        assert_eq!(first.effective, None);
        assert!(first.newly_invalid);
        let mut rec = first.status.clone();
        for i in 1..10 {
            let o = resolve(Some("tomorrow"), rec.as_ref(), t(i));
            assert!(!o.newly_invalid);
            assert_eq!(o.effective, None);
            rec = o.status;
        }
        // A different bad value warns again.
        assert!(resolve(Some("next week"), rec.as_ref(), t(20)).newly_invalid);
    }

    #[test]
    fn a_new_value_replaces_the_record() {
        let first = resolve(Some("2026-07-17T09:00:00Z"), None, t(0));
        let second = resolve(Some("2026-07-17T10:00:30Z"), first.status.as_ref(), t(100));
        assert_eq!(second.effective, Some(t(30)));
        assert_eq!(second.status.unwrap().observed_at, Some(t(100)));
    }

    #[test]
    fn a_tampered_record_cannot_widen_the_approval() {
        let rec = MassDeletionAck { value: "x".into(), effective: Some(t(500)), observed_at: Some(t(10)) };
        assert_eq!(resolve(Some("x"), Some(&rec), t(1000)).effective, Some(t(10)));
    }
}
