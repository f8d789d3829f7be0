//! The strict-retry holdoff, the suspect probe cadence and the bootstrap Job deadline.
use super::types::{Health, ProbeSettings, Tuning};

/// `holdoff(n) = min(base × 2^(n−1), cap)` seconds for retry n ≥ 1 (120, 240, 480, 600, …).
pub fn strict_retry_holdoff(tuning: &Tuning, attempt: u32) -> i64 {
    let n = attempt.max(1);
    // Doubling past 2^20 is far beyond any cap; saturate instead of overflowing.
    let factor = 1i64.checked_shl(n.saturating_sub(1).min(20)).unwrap_or(i64::MAX);
    tuning.strict_retry_base_seconds.saturating_mul(factor).min(tuning.strict_retry_cap_seconds)
}

/// How long after the last probe the next one is due. A Ready repository under Degrade that
/// already failed a probe re-probes on the holdoff cadence, so the breaker opens within minutes
/// whatever the interval (one doomed consumer Job per outage, not one per tick).
pub fn probe_spacing_seconds(probe: &ProbeSettings, tuning: &Tuning, streak: u32) -> i64 {
    match probe.on_failure {
        super::types::OnFailure::Degrade if streak >= 1 => {
            probe.interval_seconds.min(strict_retry_holdoff(tuning, streak))
        }
        super::types::OnFailure::Degrade | super::types::OnFailure::Alert => probe.interval_seconds,
    }
}

/// The deadline's bounds: `initial` is the configured deadline
/// (`spec.bootstrap.failurePolicy.activeDeadlineSeconds`) or `tuning.bootstrap_deadline_seconds`;
/// `cap` is `max(tuning.bootstrap_deadline_cap_seconds, configured)`, never below `initial`.
pub fn deadline_bounds(tuning: &Tuning, configured: Option<i64>) -> (i64, i64) {
    let initial = configured.unwrap_or(tuning.bootstrap_deadline_seconds).max(1);
    let cap = tuning.bootstrap_deadline_cap_seconds.max(configured.unwrap_or(0)).max(initial);
    (initial, cap)
}

/// Slack of the adaptive deadline over three measured connects: pod start, image pull and
/// scheduling, which do not grow with the repository.
pub const ADAPTIVE_SLACK_SECONDS: i64 = 30;

/// The deadline a measured connect earns: `clamp(3 × lastConnectSeconds + 30 s, initial, cap)`.
/// Three times the last measurement leaves room for the index to keep growing until the next
/// measurement; the floor keeps a fast repository on today's deadline and the cap bounds how
/// long a connect Job against a dead backend can live. Unmeasured: `initial`.
pub fn adaptive_deadline(last_connect_seconds: Option<i64>, tuning: &Tuning, configured: Option<i64>) -> i64 {
    let (initial, cap) = deadline_bounds(tuning, configured);
    match last_connect_seconds {
        None => initial,
        Some(l) => l.max(0).saturating_mul(3).saturating_add(ADAPTIVE_SLACK_SECONDS).clamp(initial, cap),
    }
}

/// The bootstrap Job deadline to use now: the stored deadline (the adaptive one after a
/// success, the doubled one after a deadline kill), never below what the last measured
/// connect earns, within the bounds.
pub fn bootstrap_deadline(health: &Health, tuning: &Tuning, configured: Option<i64>) -> i64 {
    let (initial, cap) = deadline_bounds(tuning, configured);
    let adaptive = adaptive_deadline(health.last_connect_seconds, tuning, configured);
    health.bootstrap_deadline_seconds.unwrap_or(adaptive).max(adaptive).clamp(initial, cap)
}

/// The deadline after a Job was killed by its deadline: doubled, capped at max(cap, configured).
pub fn escalated_deadline(current: i64, tuning: &Tuning, configured: Option<i64>) -> i64 {
    let cap = tuning.bootstrap_deadline_cap_seconds.max(configured.unwrap_or(0));
    current.saturating_mul(2).min(cap).max(current.min(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Tuning {
        Tuning::default() // initial 120 s, cap 1800 s
    }

    #[test]
    fn the_adaptive_deadline_is_three_connects_plus_slack_within_the_bounds() {
        // Unmeasured and fast connects keep the initial deadline.
        assert_eq!(adaptive_deadline(None, &t(), None), 120);
        assert_eq!(adaptive_deadline(Some(0), &t(), None), 120);
        assert_eq!(adaptive_deadline(Some(30), &t(), None), 120, "3 × 30 + 30 = 120: the floor exactly");
        assert_eq!(adaptive_deadline(Some(31), &t(), None), 123, "just above the floor");
        // The figures: ~90 s at 2,000 index blobs, 253 s at ~5,000.
        assert_eq!(adaptive_deadline(Some(90), &t(), None), 300);
        assert_eq!(adaptive_deadline(Some(253), &t(), None), 789);
        assert_eq!(adaptive_deadline(Some(590), &t(), None), 1800, "3 × 590 + 30 = 1800: the cap exactly");
        assert_eq!(adaptive_deadline(Some(591), &t(), None), 1800, "capped");
        assert_eq!(adaptive_deadline(Some(i64::MAX), &t(), None), 1800, "no overflow");
        assert_eq!(adaptive_deadline(Some(-5), &t(), None), 120, "a negative measurement reads as 0");
        // A configured deadline is the floor (the initial deadline), and raises the cap when
        // above it.
        assert_eq!(adaptive_deadline(Some(90), &t(), Some(600)), 600);
        assert_eq!(adaptive_deadline(Some(1000), &t(), Some(600)), 1800, "the operator cap above it");
        assert_eq!(adaptive_deadline(Some(1000), &t(), Some(1000)), 1800, "between the floor and the cap");
        assert_eq!(
            adaptive_deadline(Some(1000), &t(), Some(3000)),
            3000,
            "a configured deadline above the cap is both"
        );
        assert_eq!(adaptive_deadline(Some(5000), &t(), Some(3600)), 3600);
    }

    #[test]
    fn the_deadline_in_use_never_drops_below_what_the_last_connect_earned() {
        let h = |stored: Option<i64>, last: Option<i64>| Health {
            bootstrap_deadline_seconds: stored,
            last_connect_seconds: last,
            ..Health::default()
        };
        assert_eq!(bootstrap_deadline(&h(None, None), &t(), None), 120);
        assert_eq!(bootstrap_deadline(&h(None, Some(90)), &t(), None), 300);
        // A doubled deadline after a kill stays in force above the adaptive one.
        assert_eq!(bootstrap_deadline(&h(Some(600), Some(90)), &t(), None), 600);
        assert_eq!(bootstrap_deadline(&h(Some(200), Some(90)), &t(), None), 300);
        // A stored value from a larger configured deadline is clamped to today's cap.
        assert_eq!(bootstrap_deadline(&h(Some(7200), None), &t(), None), 1800);
        // The doubling keeps working on top of the adaptive deadline, up to the cap.
        let d = bootstrap_deadline(&h(None, Some(90)), &t(), None);
        assert_eq!(escalated_deadline(d, &t(), None), 600);
        assert_eq!(escalated_deadline(1200, &t(), None), 1800);
        assert_eq!(escalated_deadline(1800, &t(), None), 1800);
    }
}
