//! The create gate, the reinitialize ack and the terminal gate.
use super::types::{Phase, RepoFacts, TerminalReason};

/// Whether a strict bootstrap may create a repository when connect finds none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CreateGate {
    Allowed { via_reinit_ack: bool },
    DisabledBySpec { also_pinned: bool },
    PinnedOnceReady,
}

impl CreateGate {
    pub fn allows_create(self) -> bool {
        match self {
            CreateGate::Allowed { .. } => true,
            CreateGate::DisabledBySpec { .. } | CreateGate::PinnedOnceReady => false,
        }
    }
}

/// The create-gate table: pin × create.enabled (ReadOnly counts as disabled) × honored ack.
pub fn create_gate(pinned: bool, create_enabled: bool, ack_honored: bool) -> CreateGate {
    match (pinned, create_enabled, ack_honored) {
        (false, true, _) => CreateGate::Allowed { via_reinit_ack: false },
        (false, false, _) => CreateGate::DisabledBySpec { also_pinned: false },
        (true, false, _) => CreateGate::DisabledBySpec { also_pinned: true },
        (true, true, false) => CreateGate::PinnedOnceReady,
        (true, true, true) => CreateGate::Allowed { via_reinit_ack: true },
    }
}

/// What the `allow-reinitialize` annotation currently means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckState {
    Absent,
    /// Ready repositories do not evaluate the ack at all.
    NotEvaluated,
    Honored,
    /// Present but not equal to the pin (or nothing pinned).
    Invalid {
        value: String,
    },
}

pub fn ack_state(facts: &RepoFacts, phase: Phase) -> AckState {
    let Some(value) = facts.reinit_ack.as_deref().map(str::trim) else {
        return AckState::Absent;
    };
    match phase {
        Phase::Ready => AckState::NotEvaluated,
        Phase::Pending | Phase::Initializing | Phase::Degraded | Phase::Failed => {
            match facts.status.unique_id.as_deref() {
                Some(pin) if !pin.is_empty() && pin.eq_ignore_ascii_case(value) => AckState::Honored,
                Some(_) | None => AckState::Invalid { value: value.to_string() },
            }
        }
    }
}

/// The gate the next strict connect carries.
pub fn gate_for(facts: &RepoFacts, phase: Phase) -> CreateGate {
    let pinned = facts.status.unique_id.as_deref().is_some_and(|u| !u.is_empty());
    let enabled = facts.spec.create_enabled && !facts.spec.read_only;
    let honored = match ack_state(facts, phase) {
        AckState::Honored => true,
        AckState::Absent | AckState::NotEvaluated | AckState::Invalid { .. } => false,
    };
    create_gate(pinned, enabled, honored)
}

/// Why a Failed repository may try again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reopen {
    SpecChanged,
    CredentialsChanged,
    AckHonored,
}

/// The terminal gate: Failed stays sticky while the generation and the credential versions are
/// those of the failed verdict and no ack applies. An ack only re-opens the two states it
/// exists for; a failure of the ack'd attempt itself (e.g. a wrong password) stays sticky.
pub fn terminal_gate(facts: &RepoFacts) -> Option<Reopen> {
    let st = &facts.status;
    if st.observed_generation != Some(facts.spec.generation) {
        return Some(Reopen::SpecChanged);
    }
    if let Some(current) = &facts.credential_version
        && st.resolved_credential_version.as_ref() != Some(current)
    {
        return Some(Reopen::CredentialsChanged);
    }
    let honored = match ack_state(facts, Phase::Failed) {
        AckState::Honored => true,
        AckState::Absent | AckState::NotEvaluated | AckState::Invalid { .. } => false,
    };
    if !honored {
        return None;
    }
    let addressed = match st.terminal.as_ref().map(|t| &t.reason) {
        Some(TerminalReason::RepositoryUniqueIdMismatch { .. }) => true,
        // Re-creating needs create.enabled as well; with it off the ack is not enough.
        Some(TerminalReason::RepositoryReinitializeBlocked) => facts.spec.create_enabled && !facts.spec.read_only,
        Some(TerminalReason::Class(_))
        | Some(TerminalReason::RepositoryNotInitialized)
        | Some(TerminalReason::BootstrapJobFailed)
        | None => false,
    };
    addressed.then_some(Reopen::AckHonored)
}
