//! The kstatus trio of a SnapshotPolicy (docs/design/api-contract.md §1.6, §6.4): the reconciler decides Ready and,
//! for a structural problem, Stalled; this completes the trio so exactly one of Ready,
//! Reconciling and Stalled is True. Stalled wins (a human or a spec change is needed); else
//! Ready True is the steady state; else the policy waits on something that heals by itself
//! (its repositories becoming Ready), so Reconciling carries Ready's reason.
use kopiur_api::names::{condition, reason};

use crate::conditions::{Cond, CondStatus};
use crate::gating::{Gate, Readiness};

/// `RepositoriesReady` and `Ready` (plus `Stalled` when a human is needed) from the gate of
/// each repository the policy targets (docs/design/api-contract.md §6.4, §5 tenancy; the readiness gate of docs/design/repository-breaker.md §4).
/// `RepositoriesReady` is the warning-level summary (`RepositoryReady` / `RepositoryNotReady`).
/// Ready names the most severe gate: a namespace refused by a ClusterRepository's tenancy
/// (`NamespaceNotAllowed`), then a repository that does not exist (`RepositoryNotFound`), then
/// one that is not Ready (`RepositoryNotReady`). A refused namespace, an absent repository and a
/// Failed one are Blocked: Stalled with Ready's reason. A repository on its way to Ready is a
/// wait (Reconciling, completed by [`complete_trio`]).
pub fn repository_conditions(gates: &[Gate]) -> Vec<Cond> {
    let blocked: Vec<&Gate> = gates.iter().filter(|g| **g != Gate::Open).collect();
    if blocked.is_empty() {
        return vec![
            Cond {
                type_: condition::REPOSITORIES_READY,
                status: CondStatus::True,
                reason: reason::REPOSITORY_READY.into(),
                message: String::new(),
            },
            Cond { type_: "Ready", status: CondStatus::True, reason: reason::READY.into(), message: String::new() },
        ];
    }
    let message = blocked.iter().map(|g| g.message()).collect::<Vec<_>>().join("; ");
    let severity = |g: &Gate| match g {
        Gate::NamespaceNotAllowed { .. } => 3,
        Gate::NotReady { phase, .. } if phase == crate::gating::ABSENT => 2,
        Gate::NotReady { .. } => 1,
        Gate::Open => 0,
    };
    let worst = blocked.iter().copied().max_by_key(|g| severity(g)).cloned().unwrap_or(Gate::Open);
    let (ready_reason, stalled) = match worst.readiness() {
        Readiness::Blocked { reason } => (reason, true),
        Readiness::Wait | Readiness::Go => (reason::REPOSITORY_NOT_READY, false),
    };
    let mut out = vec![
        Cond {
            type_: condition::REPOSITORIES_READY,
            status: CondStatus::False,
            reason: reason::REPOSITORY_NOT_READY.into(),
            message: message.clone(),
        },
        Cond { type_: "Ready", status: CondStatus::False, reason: ready_reason.into(), message: message.clone() },
    ];
    if stalled {
        out.push(Cond { type_: condition::STALLED, status: CondStatus::True, reason: ready_reason.into(), message });
    }
    out
}

pub fn complete_trio(conds: &mut Vec<Cond>) {
    let find = |conds: &[Cond], t: &str| conds.iter().find(|c| c.type_ == t).cloned();
    let stalled = find(conds, condition::STALLED).filter(|c| c.status == CondStatus::True);
    let ready = find(conds, "Ready");
    conds.retain(|c| c.type_ != condition::RECONCILING);
    let set = |conds: &mut Vec<Cond>, c: Cond| {
        conds.retain(|x| x.type_ != c.type_);
        conds.push(c);
    };
    match (stalled, ready) {
        (Some(s), _) => {
            set(
                conds,
                Cond {
                    type_: "Ready",
                    status: CondStatus::False,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                },
            );
            set(
                conds,
                Cond {
                    type_: condition::RECONCILING,
                    status: CondStatus::False,
                    reason: s.reason,
                    message: String::new(),
                },
            );
        }
        (None, Some(r)) if r.status == CondStatus::True => {
            set(
                conds,
                Cond {
                    type_: condition::RECONCILING,
                    status: CondStatus::False,
                    reason: r.reason.clone(),
                    message: String::new(),
                },
            );
            set(
                conds,
                Cond { type_: condition::STALLED, status: CondStatus::False, reason: r.reason, message: String::new() },
            );
        }
        (None, Some(r)) => {
            set(
                conds,
                Cond {
                    type_: condition::RECONCILING,
                    status: CondStatus::True,
                    reason: r.reason.clone(),
                    message: r.message,
                },
            );
            set(
                conds,
                Cond { type_: condition::STALLED, status: CondStatus::False, reason: r.reason, message: String::new() },
            );
        }
        // No verdict at all (never the case after a reconcile): nothing to complete.
        (None, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(type_: &'static str, status: CondStatus, reason: &str) -> Cond {
        Cond { type_, status, reason: reason.into(), message: format!("{reason} message") }
    }

    fn trio(conds: &[Cond]) -> Vec<(&'static str, CondStatus, String)> {
        let mut v: Vec<_> = conds
            .iter()
            .filter(|x| ["Ready", "Reconciling", "Stalled"].contains(&x.type_))
            .map(|x| (x.type_, x.status, x.reason.clone()))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    fn gate_not_ready(phase: &str) -> Gate {
        Gate::NotReady { repository: "ns/r".into(), phase: phase.into() }
    }

    type Trio = Vec<(&'static str, CondStatus, String)>;

    /// The trio, RepositoriesReady and Ready's message after [`repository_conditions`] and
    /// [`complete_trio`].
    fn verdict(gates: &[Gate]) -> (Trio, (CondStatus, String), String) {
        let mut conds = repository_conditions(gates);
        complete_trio(&mut conds);
        let rr = conds.iter().find(|c| c.type_ == "RepositoriesReady").unwrap();
        let msg = conds.iter().find(|c| c.type_ == "Ready").unwrap().message.clone();
        (trio(&conds), (rr.status, rr.reason.clone()), msg)
    }

    #[test]
    fn repository_gates_give_the_spec_reasons_and_trio() {
        use CondStatus::{False, True};
        let t = |r: &str, rec: CondStatus, st: CondStatus| {
            vec![("Ready", False, r.to_string()), ("Reconciling", rec, r.to_string()), ("Stalled", st, r.to_string())]
        };
        // All Ready.
        let (tr, rr, _) = verdict(&[Gate::Open]);
        assert_eq!(tr[0], ("Ready", True, "Ready".into()));
        assert_eq!(rr, (True, "RepositoryReady".into()));
        // On its way to Ready: a wait.
        let (tr, rr, m) = verdict(&[gate_not_ready("Initializing")]);
        assert_eq!(tr, t("RepositoryNotReady", True, False));
        assert_eq!(rr, (False, "RepositoryNotReady".into()));
        assert!(m.contains("ns/r is Initializing"), "{m}");
        // Failed: Blocked, a human is needed.
        let (tr, _, _) = verdict(&[gate_not_ready("Failed")]);
        assert_eq!(tr, t("RepositoryNotReady", False, True));
        // A reference naming nothing.
        let (tr, rr, m) = verdict(&[gate_not_ready(crate::gating::ABSENT)]);
        assert_eq!(tr, t("RepositoryNotFound", False, True));
        assert_eq!(rr, (False, "RepositoryNotReady".into()), "RepositoriesReady keeps its two reasons");
        assert!(m.contains("does not exist"), "{m}");
        // Tenancy refused: NamespaceNotAllowed, never RepositoryNotReady.
        let nna = Gate::NamespaceNotAllowed { repository: "shared".into() };
        let (tr, _, m) = verdict(std::slice::from_ref(&nna));
        assert_eq!(tr, t("NamespaceNotAllowed", False, True));
        assert!(m.contains("not in allowedNamespaces of ClusterRepository shared"), "{m}");
        // The most severe gate names Ready; every message is kept.
        let (tr, _, m) = verdict(&[gate_not_ready("Initializing"), nna, gate_not_ready(crate::gating::ABSENT)]);
        assert_eq!(tr, t("NamespaceNotAllowed", False, True));
        assert!(
            m.contains("is Initializing") && m.contains("allowedNamespaces") && m.contains("does not exist"),
            "{m}"
        );
        let (tr, _, _) = verdict(&[Gate::Open, gate_not_ready("Pending"), gate_not_ready(crate::gating::ABSENT)]);
        assert_eq!(tr, t("RepositoryNotFound", False, True));
    }

    #[test]
    fn exactly_one_of_the_trio_is_true() {
        use CondStatus::{False, True};
        let mut ready = vec![c("RepositoriesReady", True, "RepositoryReady"), c("Ready", True, "Ready")];
        complete_trio(&mut ready);
        assert_eq!(
            trio(&ready),
            vec![
                ("Ready", True, "Ready".into()),
                ("Reconciling", False, "Ready".into()),
                ("Stalled", False, "Ready".into())
            ]
        );
        assert!(ready.iter().any(|x| x.type_ == "RepositoriesReady"), "other conditions stay");
        let mut waiting = vec![c("Ready", False, "RepositoryNotReady")];
        complete_trio(&mut waiting);
        assert_eq!(
            trio(&waiting),
            vec![
                ("Ready", False, "RepositoryNotReady".into()),
                ("Reconciling", True, "RepositoryNotReady".into()),
                ("Stalled", False, "RepositoryNotReady".into())
            ]
        );
        assert_eq!(waiting.iter().find(|x| x.type_ == "Reconciling").unwrap().message, "RepositoryNotReady message");
        // A stall written next to a Ready=True (preflight appends one) wins.
        let mut stalled = vec![c("Ready", True, "Ready"), c("Stalled", True, "InvalidPreflight")];
        complete_trio(&mut stalled);
        assert_eq!(
            trio(&stalled),
            vec![
                ("Ready", False, "InvalidPreflight".into()),
                ("Reconciling", False, "InvalidPreflight".into()),
                ("Stalled", True, "InvalidPreflight".into())
            ]
        );
        // A Stalled=False left by a lifted stall is kept as written when Ready.
        let mut lifted = vec![c("Ready", True, "Ready"), c("Stalled", False, "Ready")];
        complete_trio(&mut lifted);
        assert_eq!(lifted.iter().filter(|x| x.status == True && x.type_ != "RepositoriesReady").count(), 1);
    }
}
