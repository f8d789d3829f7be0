//! The kstatus trio of a SnapshotPolicy (api.md §1.6, §6.4): the reconciler decides Ready and,
//! for a structural problem, Stalled; this completes the trio so exactly one of Ready,
//! Reconciling and Stalled is True. Stalled wins (a human or a spec change is needed); else
//! Ready True is the steady state; else the policy waits on something that heals by itself
//! (its repositories becoming Ready), so Reconciling carries Ready's reason.
use crate::health::kstatus::{Cond, CondStatus};

pub fn complete_trio(conds: &mut Vec<Cond>) {
    let find = |conds: &[Cond], t: &str| conds.iter().find(|c| c.type_ == t).cloned();
    let stalled = find(conds, "Stalled").filter(|c| c.status == CondStatus::True);
    let ready = find(conds, "Ready");
    conds.retain(|c| c.type_ != "Reconciling");
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
                Cond { type_: "Reconciling", status: CondStatus::False, reason: s.reason, message: String::new() },
            );
        }
        (None, Some(r)) if r.status == CondStatus::True => {
            set(
                conds,
                Cond {
                    type_: "Reconciling",
                    status: CondStatus::False,
                    reason: r.reason.clone(),
                    message: String::new(),
                },
            );
            set(conds, Cond { type_: "Stalled", status: CondStatus::False, reason: r.reason, message: String::new() });
        }
        (None, Some(r)) => {
            set(
                conds,
                Cond { type_: "Reconciling", status: CondStatus::True, reason: r.reason.clone(), message: r.message },
            );
            set(conds, Cond { type_: "Stalled", status: CondStatus::False, reason: r.reason, message: String::new() });
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
