//! `plan(facts, now)`: the whole repository decision. Fold a finished Job exactly once, then
//! decide the one next step: launch a strict or probe connect, wait, or idle until a time.
use chrono::{DateTime, Duration, Utc};
use kopiur_api::names::event;

use super::fold::{Effect, Event, EventType, FoldOutcome, fold};
use super::gate::{AckState, CreateGate, Reopen, ack_state, gate_for, terminal_gate};
use super::holdoff::{bootstrap_deadline, probe_spacing_seconds};
use super::kstatus::conditions;
use super::types::{
    ConnectKind, Endpoint, EndpointAnswer, EndpointCheck, JobState, Phase, ProbeTrigger, Reach, RepoFacts, RepoStatus,
    Time,
};
use crate::conditions::Cond;

/// The one next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to launch now; `Decision::requeue_after` says when to look again.
    Idle,
    /// A bootstrap Job is running; its completion re-enqueues us.
    AwaitJob,
    /// The Job was folded (now or earlier); delete it so the name can be reused.
    DeleteJob { uid: String },
    /// Write the status first (stamps), then create the result ConfigMap and the Job.
    Launch(Launch),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub kind: ConnectKind,
    /// Meaningful for strict connects; probes never create.
    pub gate: CreateGate,
    pub deadline_seconds: i64,
    pub generation: i64,
    pub credential_version: String,
    /// A strict connect launched before its stamped time because the endpoint answered again.
    pub early: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub plan: Plan,
    pub status: RepoStatus,
    pub conditions: Vec<Cond>,
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
    pub requeue_after: Option<Duration>,
    /// The ack value an InvalidReinitializeAck was emitted for (the shell remembers it).
    pub warned_ack: Option<String>,
    /// The endpoint's return this decision launched an early strict connect for (the launch
    /// spends it: [`spend_return`]).
    pub early_strict: Option<EndpointCheck>,
}

/// Reason of the Normal Event emitted when an early strict connect is launched.
pub const ENDPOINT_ANSWERING: &str = "RepositoryEndpointAnswering";

/// The cheap endpoint check watches this repository now: the breaker is open for an
/// unreachable backend, the backend has an endpoint, nothing is in flight and a connect could
/// be launched. Pure; the shell performs the check when [`endpoint_check_due`] says so.
pub fn endpoint_watched(facts: &RepoFacts) -> bool {
    let unreachable = matches!(
        facts.status.reach.as_ref().map(|r| r.reach),
        Some(Reach::BackendUnreachable | Reach::ProbeDeadlineExceeded)
    );
    facts.status.phase == Some(Phase::Degraded)
        && unreachable
        && matches!(facts.endpoint, Endpoint::Checkable { .. })
        && facts.job.is_none()
        && !facts.spec.suspended
        && facts.credential_version.is_some()
}

/// Whether the shell should run a cheap check before planning: watched, and the last check is
/// at least `tuning.endpoint_check_seconds` old (the requeue brings the reconcile back then).
pub fn endpoint_check_due(facts: &RepoFacts, now: Time) -> bool {
    endpoint_watched(facts)
        && match &facts.endpoint {
            Endpoint::Checkable { last: Some(l), .. } => now >= next_check_at(l, &facts.tuning),
            Endpoint::Checkable { last: None, .. } => true,
            Endpoint::NotCheckable => false,
        }
}

fn next_check_at(last: &EndpointCheck, tuning: &super::types::Tuning) -> Time {
    last.at + Duration::seconds(tuning.endpoint_check_seconds.max(1))
}

/// Fold one cheap check into the shell's memory: `returned` is set on a `Down` → `Answers`
/// transition, kept while the endpoint keeps answering, and cleared when it goes down again.
/// With no earlier check the open breaker's own verdict (unreachable) is the `Down`.
pub fn record_endpoint_check(endpoint: &Endpoint, check: EndpointCheck) -> Endpoint {
    match endpoint {
        Endpoint::NotCheckable => Endpoint::NotCheckable,
        Endpoint::Checkable { last, returned } => {
            let returned = match (last.map(|l| l.answer), check.answer) {
                (Some(EndpointAnswer::Down) | None, EndpointAnswer::Answers) => Some(check),
                (Some(EndpointAnswer::Answers), EndpointAnswer::Answers) => *returned,
                (_, EndpointAnswer::Down) => None,
            };
            Endpoint::Checkable { last: Some(check), returned }
        }
    }
}

/// The shell's memory after a decision: any strict connect it launches (early, scheduled or
/// for a spec change) spends a pending return, so one `Down` → `Answers` transition is followed
/// by at most one strict connect that it caused, never by a second one after a scheduled
/// connect already ran.
pub fn spend_return(endpoint: &Endpoint, d: &Decision) -> Endpoint {
    match (endpoint, &d.plan) {
        (Endpoint::Checkable { last, returned: Some(_) }, Plan::Launch(l)) if l.kind == ConnectKind::Strict => {
            Endpoint::Checkable { last: *last, returned: None }
        }
        (Endpoint::Checkable { .. } | Endpoint::NotCheckable, _) => endpoint.clone(),
    }
}

/// Whether the shell should ask the endpoint before folding a finished Job: the Job was killed
/// by a deadline (its own, or kopia's), it is not folded yet, the backend has an endpoint, and
/// no check was made since the Job was launched. The answer tells slow (`TimedOut`) from down
/// (`verdict::backend_answered`). Any phase: the first deadline kill of a Ready repository is
/// the one that matters most.
pub fn fold_check_due(facts: &RepoFacts) -> bool {
    let Endpoint::Checkable { last, .. } = &facts.endpoint else { return false };
    let Some(job) = &facts.job else { return false };
    if facts.status.health.last_folded_job_uid.as_deref() == Some(job.uid.as_str()) {
        return false;
    }
    let JobState::Finished { completed_at, result } = &job.state else { return false };
    match super::verdict::Verdict::of(result) {
        super::verdict::Verdict::ProbeDeadlineExceeded { .. } => {}
        super::verdict::Verdict::Reachable { .. }
        | super::verdict::Verdict::TimedOut { .. }
        | super::verdict::Verdict::NotInitialized
        | super::verdict::Verdict::BackendUnreachable { .. }
        | super::verdict::Verdict::BootstrapJobFailed
        | super::verdict::Verdict::ConnectFailed { .. } => return false,
    }
    let deadline = bootstrap_deadline(&facts.status.health, &facts.tuning, facts.spec.configured_deadline_seconds);
    let since = job.launched_at.unwrap_or(*completed_at - Duration::seconds(deadline.max(0)));
    !last.is_some_and(|c| c.at >= since)
}

/// Record a check made for a fold: it is the last check, and never a return (the fold itself
/// decides what the answer means; an early strict connect needs a `Down` → `Answers` seen by
/// the open breaker's own checks).
pub fn record_fold_check(endpoint: &Endpoint, check: EndpointCheck) -> Endpoint {
    match endpoint {
        Endpoint::NotCheckable => Endpoint::NotCheckable,
        Endpoint::Checkable { .. } => Endpoint::Checkable { last: Some(check), returned: None },
    }
}

/// Parse an RFC3339 annotation value (any offset), normalized to UTC.
pub fn parse_time(s: &str) -> Option<Time> {
    DateTime::parse_from_rfc3339(s.trim()).ok().map(|t| t.with_timezone(&Utc))
}

pub fn plan(facts: &RepoFacts, now: Time) -> Decision {
    let mut d = Decision {
        plan: Plan::Idle,
        status: facts.status.clone(),
        conditions: Vec::new(),
        events: Vec::new(),
        effects: Vec::new(),
        requeue_after: None,
        warned_ack: facts.warned_ack.clone(),
        early_strict: None,
    };
    if d.status.phase.is_none() {
        d.status.phase = Some(Phase::Pending); // R1
    }

    match &facts.job {
        Some(job) if facts.status.health.last_folded_job_uid.as_deref() == Some(job.uid.as_str()) => {
            d.plan = Plan::DeleteJob { uid: job.uid.clone() };
        }
        Some(job) => match &job.state {
            JobState::Running => d.plan = Plan::AwaitJob,
            JobState::Finished { completed_at, result } => {
                let FoldOutcome { status, events, effects } = fold(facts, job, *completed_at, result, now);
                d.status = status;
                d.events = events;
                d.effects = effects;
                d.plan = Plan::DeleteJob { uid: job.uid.clone() };
            }
        },
        None => next_step(facts, now, &mut d),
    }

    ack_events(facts, &mut d);
    // Conditions describe the status after this decision, against the facts of this reconcile.
    let view = RepoFacts { status: d.status.clone(), ..facts.clone() };
    d.conditions = conditions(&view, &d.status);
    d
}

/// One InvalidReinitializeAck per distinct unhonored value.
fn ack_events(facts: &RepoFacts, d: &mut Decision) {
    let phase = d.status.phase.unwrap_or(Phase::Pending);
    match ack_state(facts, phase) {
        AckState::Invalid { value } => {
            if d.warned_ack.as_deref() != Some(value.as_str()) {
                let pin = facts.status.unique_id.as_deref().unwrap_or("");
                d.events.push(Event {
                    type_: EventType::Warning,
                    reason: event::INVALID_REINITIALIZE_ACK,
                    note: if pin.is_empty() {
                        format!("allow-reinitialize={value} ignored: no uniqueId is pinned")
                    } else {
                        format!("allow-reinitialize={value} ignored: it must equal status.uniqueId {pin}")
                    },
                });
                d.warned_ack = Some(value);
            }
        }
        AckState::Absent | AckState::NotEvaluated | AckState::Honored => {}
    }
}

fn secs_until(now: Time, at: Time) -> Duration {
    (at - now).max(Duration::seconds(1))
}

fn launch(facts: &RepoFacts, d: &mut Decision, kind: ConnectKind, phase_for_gate: Phase, now: Time) {
    let Some(cv) = facts.credential_version.clone() else {
        // No Job without credentials; the Secret watch re-enqueues us.
        d.plan = Plan::Idle;
        d.requeue_after = Some(Duration::seconds(300));
        return;
    };
    let gate = match kind {
        ConnectKind::Strict => gate_for(facts, phase_for_gate),
        ConnectKind::Probe(_) => {
            // A probe stamps its attempt before the Job exists, so a restart cannot double it.
            d.status.health.probe_attempt_at = Some(now);
            CreateGate::DisabledBySpec { also_pinned: true }
        }
    };
    d.plan = Plan::Launch(Launch {
        kind,
        gate,
        deadline_seconds: bootstrap_deadline(&d.status.health, &facts.tuning, facts.spec.configured_deadline_seconds),
        generation: facts.spec.generation,
        credential_version: cv,
        early: false,
    });
}

fn next_step(facts: &RepoFacts, now: Time, d: &mut Decision) {
    let phase = d.status.phase.unwrap_or(Phase::Pending);
    if facts.spec.suspended {
        // Suspend launches nothing and keeps the phase; un-suspending bumps the generation.
        d.plan = Plan::Idle;
        return;
    }
    if facts.credential_version.is_none() {
        d.plan = Plan::Idle;
        d.requeue_after = Some(Duration::seconds(300));
        return;
    }
    let spec_changed = d.status.observed_generation != Some(facts.spec.generation)
        || d.status.resolved_credential_version.as_ref() != facts.credential_version.as_ref();

    match phase {
        Phase::Failed => match terminal_gate(facts) {
            Some(Reopen::SpecChanged | Reopen::CredentialsChanged | Reopen::AckHonored) => {
                // R16: re-attempt; Initializing until the verdict is folded. The gate is
                // evaluated as of the Failed phase, where an ack counts.
                d.status.phase = Some(Phase::Initializing);
                d.status.terminal = None;
                launch(facts, d, ConnectKind::Strict, Phase::Failed, now);
            }
            None => {
                d.plan = Plan::Idle;
                d.requeue_after = Some(Duration::seconds(facts.tuning.terminal_heartbeat_seconds));
            }
        },
        Phase::Pending => {
            d.status.phase = Some(Phase::Initializing); // R2
            launch(facts, d, ConnectKind::Strict, Phase::Pending, now);
        }
        Phase::Initializing => {
            let due = spec_changed
                || match &d.status.health.strict_retry {
                    None => true,
                    Some(r) => now >= r.next_attempt_at,
                };
            if due {
                launch(facts, d, ConnectKind::Strict, Phase::Initializing, now);
            } else if let Some(r) = &d.status.health.strict_retry {
                d.requeue_after = Some(secs_until(now, r.next_attempt_at));
            }
        }
        Phase::Degraded => degraded_step(facts, now, spec_changed, d),
        Phase::Ready => {
            if spec_changed {
                launch(facts, d, ConnectKind::Strict, Phase::Ready, now); // S2/S3
                return;
            }
            ready_probe(facts, now, d);
        }
    }
}

/// The breaker is open: the stamped strict retry when due (or at once after a spec or
/// credentials change), earlier when the endpoint answers again, else a wake-up at the stamp
/// or the next endpoint check.
fn degraded_step(facts: &RepoFacts, now: Time, spec_changed: bool, d: &mut Decision) {
    record_reverify_while_open(facts, d);
    // S2/S3 launch at once even while open (a human acted); S4 waits for the stamp.
    let next = d.status.health.strict_retry.as_ref().map(|r| r.next_attempt_at);
    match next {
        Some(at) if !spec_changed && now < at => {
            match endpoint_returned(facts).filter(|_| slot_open(facts, now)) {
                // The endpoint answers again: the strict connect now, in place of the
                // stamped one (it takes that slot; see `fold::slot_end`).
                Some(back) => {
                    d.events.push(Event {
                        type_: EventType::Normal,
                        reason: ENDPOINT_ANSWERING,
                        note: format!(
                            "the endpoint of {} answers again (checked at {}); strict connect launched now \
                         instead of at {}",
                            facts.id.target,
                            back.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                            at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                        ),
                    });
                    d.early_strict = Some(back);
                    launch(facts, d, ConnectKind::Strict, Phase::Degraded, now);
                    if let Plan::Launch(l) = &mut d.plan {
                        l.early = true;
                    }
                }
                None => {
                    let wake = match &facts.endpoint {
                        Endpoint::Checkable { last: Some(l), .. } if endpoint_watched(facts) => {
                            at.min(next_check_at(l, &facts.tuning))
                        }
                        Endpoint::Checkable { .. } | Endpoint::NotCheckable => at,
                    };
                    d.requeue_after = Some(secs_until(now, wake));
                }
            }
        }
        Some(_) | None => launch(facts, d, ConnectKind::Strict, Phase::Degraded, now),
    }
}

/// An unspent `Down` → `Answers` transition of a watched endpoint.
fn endpoint_returned(facts: &RepoFacts) -> Option<EndpointCheck> {
    match &facts.endpoint {
        Endpoint::Checkable { returned: Some(r), last: Some(l) }
            if endpoint_watched(facts) && l.answer == EndpointAnswer::Answers =>
        {
            Some(*r)
        }
        Endpoint::Checkable { .. } | Endpoint::NotCheckable => None,
    }
}

/// An early connect may take the stamped retry's slot: its holdoff is long against the check
/// cadence (more than two check periods; with the default knobs every holdoff, 120 s and up,
/// is), and its window has begun (`nextAttemptAt - holdoffSeconds <= now`). After an early
/// connect fails, the next window opens only once it has paid back its earliness
/// (`fold::slot_end`): windows never overlap, and each holds at most one strict connect.
fn slot_open(facts: &RepoFacts, now: Time) -> bool {
    let long = |h: i64| h > 2 * facts.tuning.endpoint_check_seconds.max(1);
    facts.status.health.strict_retry.as_ref().is_some_and(|r| {
        long(r.holdoff_seconds) && now >= r.next_attempt_at - Duration::seconds(r.holdoff_seconds.max(0))
    })
}

/// While Degraded a newer nudge is recorded without launching: the strict loop is the probe.
fn record_reverify_while_open(facts: &RepoFacts, d: &mut Decision) {
    if let Some(v) = facts.reverify_requested_at.as_deref().and_then(parse_time)
        && d.status.last_reverify_at.is_none_or(|last| v > last)
    {
        d.status.last_reverify_at = Some(v);
    }
}

/// Ready: an honored reverify nudge, else the periodic probe (with the suspect cadence).
fn ready_probe(facts: &RepoFacts, now: Time, d: &mut Decision) {
    let tuning = &facts.tuning;
    let h = &d.status.health;
    let mut wake: Option<Time> = None;

    // A stamped attempt with no Job in sight is assumed in flight for a short grace.
    let attempt_pending = match (h.probe_attempt_at, h.last_probe_at) {
        (Some(a), Some(l)) => a > l,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if attempt_pending && let Some(a) = h.probe_attempt_at {
        let until = a + Duration::seconds(tuning.launch_grace_seconds);
        if now < until {
            d.requeue_after = Some(secs_until(now, until));
            return;
        }
    }

    if let Some(v) = facts.reverify_requested_at.as_deref().and_then(parse_time)
        && d.status.last_reverify_at.is_none_or(|last| v > last)
    {
        let earliest = d.status.last_reverify_at.map(|l| l + Duration::seconds(tuning.reverify_spacing_seconds));
        match earliest {
            Some(e) if now < e => wake = Some(e),
            Some(_) | None => {
                d.status.last_reverify_at = Some(v);
                launch(facts, d, ConnectKind::Probe(ProbeTrigger::Reverify), Phase::Ready, now);
                return;
            }
        }
    }

    let probe = &facts.spec.probe;
    if probe.enabled {
        let spacing = probe_spacing_seconds(probe, tuning, h.consecutive_probe_failures);
        let due_at = h.last_probe_at.map(|l| l + Duration::seconds(spacing));
        match due_at {
            Some(at) if now < at => wake = Some(wake.map_or(at, |w| w.min(at))),
            Some(_) | None => {
                launch(facts, d, ConnectKind::Probe(ProbeTrigger::Periodic), Phase::Ready, now);
                return;
            }
        }
    }
    d.plan = Plan::Idle;
    d.requeue_after = wake.map(|w| secs_until(now, w));
}
