//! The identity fork guard (docs/design/api-contract.md §2.5 "Fork guard"). A kopia source is
//! `username@hostname:sourcePath`; changing any part of it for a policy that already has
//! backups starts a new, empty history: retention and `fromPolicy` restores stop seeing the
//! old snapshots. So once the policy has a Succeeded Snapshot, a spec change that would alter
//! the pinned identity or an existing source's path is refused (the policy is Stalled with
//! `IdentityWouldFork` and backups continue under the pinned values) until the user annotates
//! the policy with `allow-identity-change`. New PVCs matched by a selector are not forks.
use kopiur_api::names::annotation;
use std::collections::BTreeMap;

use kopiur_api::shared::status::ResolvedSource;
use kopiur_api::snapshot_policy::PinnedIdentity;

/// What the policy pins this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkDecision {
    pub identity: PinnedIdentity,
    pub sources: Vec<ResolvedSource>,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing pinned changes (first pin, or only sources were added or removed).
    Unchanged,
    /// A change of the pinned values is accepted: no Succeeded Snapshot yet, or acknowledged.
    Accepted { changes: Vec<String>, acknowledged: bool },
    /// Refused: the pinned values stay.
    Refused { changes: Vec<String> },
}

/// The inputs, as observed.
pub struct ForkFacts<'a> {
    pub pinned_identity: Option<&'a PinnedIdentity>,
    pub pinned_sources: &'a [ResolvedSource],
    pub desired_identity: &'a PinnedIdentity,
    pub desired_sources: &'a [ResolvedSource],
    /// Succeeded Snapshots of the policy.
    pub succeeded: usize,
    /// `allow-identity-change` is set to a non-empty value.
    pub acknowledged: bool,
}

fn source(id: &PinnedIdentity, path: &str) -> String {
    format!("{}@{}:{path}", id.username, id.hostname)
}

pub fn decide(f: &ForkFacts) -> ForkDecision {
    let Some(pinned) = f.pinned_identity else {
        return ForkDecision {
            identity: f.desired_identity.clone(),
            sources: f.desired_sources.to_vec(),
            verdict: Verdict::Unchanged,
        };
    };
    let mut changes = Vec::new();
    if pinned != f.desired_identity {
        changes.push(format!(
            "identity {}@{} -> {}@{}",
            pinned.username, pinned.hostname, f.desired_identity.username, f.desired_identity.hostname
        ));
    }
    let old: BTreeMap<&str, &str> = f.pinned_sources.iter().map(|s| (s.pvc.as_str(), s.source_path.as_str())).collect();
    for s in f.desired_sources {
        if let Some(prev) = old.get(s.pvc.as_str()).filter(|p| **p != s.source_path) {
            changes.push(format!(
                "PVC {} source {} -> {}",
                s.pvc,
                source(pinned, prev),
                source(f.desired_identity, &s.source_path)
            ));
        }
    }
    if changes.is_empty() {
        return ForkDecision {
            identity: pinned.clone(),
            sources: f.desired_sources.to_vec(),
            verdict: Verdict::Unchanged,
        };
    }
    if f.succeeded == 0 || f.acknowledged {
        return ForkDecision {
            identity: f.desired_identity.clone(),
            sources: f.desired_sources.to_vec(),
            verdict: Verdict::Accepted { changes, acknowledged: f.succeeded > 0 },
        };
    }
    // Refused: the pinned identity and every existing source's pinned path stay; sources the
    // spec added come in with their own path, sources it dropped go.
    let sources = f
        .desired_sources
        .iter()
        .map(|s| match old.get(s.pvc.as_str()) {
            Some(prev) => ResolvedSource { pvc: s.pvc.clone(), source_path: (*prev).to_string() },
            None => s.clone(),
        })
        .collect();
    ForkDecision { identity: pinned.clone(), sources, verdict: Verdict::Refused { changes } }
}

/// The `IdentityWouldFork` message: what would change, what happens meanwhile, and the exact
/// command that accepts it.
pub fn refusal_message(policy: &str, namespace: &str, changes: &[String], succeeded: usize) -> String {
    format!(
        "this spec change would fork the backup history of {succeeded} Succeeded Snapshot(s) into a new kopia source \
         ({}); retention and fromPolicy restores would no longer see the old snapshots. Backups continue under the \
         pinned identity. To accept the fork: kubectl annotate snapshotpolicy {policy} -n {namespace} \
         {}=true; to keep the history, revert the change",
        changes.join("; "),
        annotation::ALLOW_IDENTITY_CHANGE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(u: &str, h: &str) -> PinnedIdentity {
        PinnedIdentity { username: u.into(), hostname: h.into() }
    }

    fn src(pvc: &str, path: &str) -> ResolvedSource {
        ResolvedSource { pvc: pvc.into(), source_path: path.into() }
    }

    fn facts<'a>(
        pinned: Option<&'a PinnedIdentity>,
        pinned_sources: &'a [ResolvedSource],
        desired: &'a PinnedIdentity,
        desired_sources: &'a [ResolvedSource],
        succeeded: usize,
        acknowledged: bool,
    ) -> ForkFacts<'a> {
        ForkFacts {
            pinned_identity: pinned,
            pinned_sources,
            desired_identity: desired,
            desired_sources,
            succeeded,
            acknowledged,
        }
    }

    #[test]
    fn the_first_reconcile_pins_the_desired_values() {
        let (want, s) = (id("p", "ns"), [src("ns/a", "/pvc/a")]);
        let d = decide(&facts(None, &[], &want, &s, 3, false));
        assert_eq!((d.identity, d.sources, d.verdict), (want, s.to_vec(), Verdict::Unchanged));
    }

    #[test]
    fn a_hostname_change_after_a_success_is_refused_and_the_pin_stays() {
        let (old, new) = (id("p", "ns"), id("p", "elsewhere"));
        let s = [src("ns/a", "/pvc/a")];
        let d = decide(&facts(Some(&old), &s, &new, &s, 1, false));
        assert_eq!(d.identity, old);
        assert_eq!(d.sources, s.to_vec());
        assert_eq!(d.verdict, Verdict::Refused { changes: vec!["identity p@ns -> p@elsewhere".into()] });
    }

    #[test]
    fn the_ack_accepts_the_fork_and_pins_the_new_identity() {
        let (old, new) = (id("p", "ns"), id("p", "elsewhere"));
        let s = [src("ns/a", "/pvc/a")];
        let d = decide(&facts(Some(&old), &s, &new, &s, 1, true));
        assert_eq!(d.identity, new);
        assert!(matches!(d.verdict, Verdict::Accepted { acknowledged: true, .. }));
    }

    #[test]
    fn without_a_success_a_change_is_no_fork() {
        let (old, new) = (id("p", "ns"), id("q", "ns"));
        let s = [src("ns/a", "/pvc/a")];
        let d = decide(&facts(Some(&old), &s, &new, &s, 0, false));
        assert_eq!(d.identity, new);
        assert!(matches!(d.verdict, Verdict::Accepted { acknowledged: false, .. }));
    }

    #[test]
    fn a_changed_source_path_is_refused_but_new_and_dropped_sources_are_not_forks() {
        let i = id("p", "ns");
        let pinned = [src("ns/a", "/pvc/a"), src("ns/gone", "/pvc/gone")];
        let desired = [src("ns/a", "/data/a"), src("ns/new", "/pvc/new")];
        let d = decide(&facts(Some(&i), &pinned, &i, &desired, 2, false));
        assert_eq!(d.sources, vec![src("ns/a", "/pvc/a"), src("ns/new", "/pvc/new")], "a keeps its pinned path");
        assert_eq!(d.verdict, Verdict::Refused { changes: vec!["PVC ns/a source p@ns:/pvc/a -> p@ns:/data/a".into()] });
        // Only adding and dropping sources: nothing to refuse, even with successes.
        let grown = [src("ns/a", "/pvc/a"), src("ns/new", "/pvc/new")];
        let d = decide(&facts(Some(&i), &pinned, &i, &grown, 2, false));
        assert_eq!((d.sources, d.verdict), (grown.to_vec(), Verdict::Unchanged));
    }

    #[test]
    fn the_message_names_the_change_and_the_exact_command() {
        let m = refusal_message("p", "apps", &["identity p@apps -> p@x".into()], 4);
        assert!(m.contains("4 Succeeded Snapshot(s)"), "{m}");
        assert!(m.contains("identity p@apps -> p@x"), "{m}");
        assert!(
            m.contains(
                "kubectl annotate snapshotpolicy p -n apps kopiur.home-operations.com/allow-identity-change=true"
            ),
            "{m}"
        );
    }
}
