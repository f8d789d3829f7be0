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

/// The bootstrap Job deadline to use now.
pub fn bootstrap_deadline(health: &Health, tuning: &Tuning, configured: Option<i64>) -> i64 {
    health.bootstrap_deadline_seconds.unwrap_or_else(|| configured.unwrap_or(tuning.bootstrap_deadline_seconds))
}

/// The deadline after a Job was killed by its deadline: doubled, capped at max(cap, configured).
pub fn escalated_deadline(current: i64, tuning: &Tuning, configured: Option<i64>) -> i64 {
    let cap = tuning.bootstrap_deadline_cap_seconds.max(configured.unwrap_or(0));
    current.saturating_mul(2).min(cap).max(current.min(cap))
}
