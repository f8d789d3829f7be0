//! The pipeline's watch mappers: which objects a watch event on another kind re-enqueues.
//! Pure functions over the event's object and a store's state (the feeds update each store
//! before the mapper runs, so the re-reconcile sees the new state); `pipeline.rs` wires them.
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kopiur_api::restore::RestorePhase;
use kopiur_api::shared::RepositoryKind;
use kopiur_api::snapshot::SnapshotPhase;
use kopiur_api::{Maintenance, Restore, Snapshot, SnapshotPolicy};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

/// The kopiur kinds that own mover Jobs (an owner reference of another API group is not ours).
/// Each kind's controller maps its own Jobs from the one Job watch: Snapshot and Restore in the
/// pipeline, the repositories in `controllers.rs`, Maintenance and RepositoryReplication in
/// their modules, all through [`owned_by`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOwner {
    Snapshot,
    Restore,
    Repository,
    ClusterRepository,
    Maintenance,
    RepositoryReplication,
}

impl JobOwner {
    pub const ALL: [JobOwner; 6] = [
        Self::Snapshot,
        Self::Restore,
        Self::Repository,
        Self::ClusterRepository,
        Self::Maintenance,
        Self::RepositoryReplication,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Self::Snapshot => "Snapshot",
            Self::Restore => "Restore",
            Self::Repository => "Repository",
            Self::ClusterRepository => "ClusterRepository",
            Self::Maintenance => "Maintenance",
            Self::RepositoryReplication => "RepositoryReplication",
        }
    }

    /// The owner reference's kind, when its API group is kopiur's (a `Snapshot` of another
    /// group, such as a VolumeSnapshot's, is not ours).
    pub fn of(api_version: &str, kind: &str) -> Option<JobOwner> {
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        if group != kopiur_api::names::GROUP {
            return None;
        }
        Self::ALL.into_iter().find(|o| o.kind() == kind)
    }
}

/// Job → its owners of kind `owner` (a kopiur kind of kopiur's API group), in the Job's
/// namespace (a ClusterRepository owner has none).
pub fn owned_by<K: Resource<DynamicType = ()>>(job: &Job, owner: JobOwner) -> Vec<ObjectRef<K>> {
    let ns = job.namespace().unwrap_or_default();
    job.owner_references()
        .iter()
        .filter(|o| JobOwner::of(&o.api_version, &o.kind) == Some(owner))
        .map(|o| match owner {
            JobOwner::ClusterRepository => ObjectRef::new(&o.name),
            JobOwner::Snapshot
            | JobOwner::Restore
            | JobOwner::Repository
            | JobOwner::Maintenance
            | JobOwner::RepositoryReplication => ObjectRef::new(&o.name).within(&ns),
        })
        .collect()
}

/// Secret → the repositories that reference it (password or auth Secret, by name, in the
/// repository's home namespace: its own, or the operator's for a ClusterRepository).
pub fn secret_referrers<K: crate::repo_view::RepoObject>(
    repos: &[Arc<K>],
    secret_ns: &str,
    secret: &str,
    operator_ns: &str,
) -> Vec<ObjectRef<K>> {
    repos
        .iter()
        .filter(|r| r.home_namespace(operator_ns) == secret_ns)
        .filter(|r| {
            let (pw, auth) = crate::repo_view::secret_names(r.as_ref());
            pw == secret || auth.as_deref() == Some(secret)
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

fn waiting_phase(phase: Option<&SnapshotPhase>) -> bool {
    matches!(phase, None | Some(SnapshotPhase::Pending))
}

/// Repository → the Snapshots waiting on it: not yet terminal, deleting, or with a pin
/// outstanding, and pinned to it (or not pinned yet, in its namespace).
pub fn parked_on(snaps: &[Arc<Snapshot>], kind: &str, ns: Option<&str>, name: &str) -> Vec<ObjectRef<Snapshot>> {
    snaps
        .iter()
        .filter(|s| {
            let st = s.status.as_ref();
            let waiting = s.meta().deletion_timestamp.is_some()
                || waiting_phase(st.and_then(|x| x.phase.as_ref()))
                || pin_outstanding(s);
            if !waiting {
                return false;
            }
            match st.and_then(|x| x.resolved.as_ref()).and_then(|r| r.repository.as_ref()) {
                Some(r) => format!("{:?}", r.kind) == kind && r.name == name && r.namespace.as_deref() == ns,
                None => ns.is_none() || s.namespace().as_deref() == ns,
            }
        })
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

/// Maintenance → the Snapshots parked on its repository (the `maintenance.*` preflight
/// variables).
pub fn parked_on_maintained(snaps: &[Arc<Snapshot>], m: &Maintenance) -> Vec<ObjectRef<Snapshot>> {
    let r = &m.spec.repository;
    let ns = match r.kind {
        RepositoryKind::Repository => r.namespace.clone().or_else(|| m.namespace()),
        RepositoryKind::ClusterRepository => None,
    };
    parked_on(snaps, &format!("{:?}", r.kind), ns.as_deref(), &r.name)
}

/// Secret or PVC in `ns` → the Snapshots not yet launched (or with no phase yet) there.
pub fn unlaunched(snaps: &[Arc<Snapshot>], ns: Option<&str>) -> Vec<ObjectRef<Snapshot>> {
    snaps
        .iter()
        .filter(|x| x.namespace().as_deref() == ns)
        .filter(|x| waiting_phase(x.status.as_ref().and_then(|st| st.phase.as_ref())))
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}

/// Namespace → its Snapshots: while it is being deleted, the ones being deleted (the
/// onNamespaceDelete axis); when its labels changed (`relabelled`) while some
/// ClusterRepository admits namespaces by selector (`label_dependent`), the ones whose
/// tenancy verdict may flip (not yet launched, or being deleted).
pub fn namespace_snapshots(
    snaps: &[Arc<Snapshot>],
    n: &ObjectMeta,
    relabelled: bool,
    label_dependent: bool,
) -> Vec<ObjectRef<Snapshot>> {
    let ns = n.name.clone().unwrap_or_default();
    let in_ns = snaps.iter().filter(|x| x.namespace().as_deref() == Some(ns.as_str()));
    if n.deletion_timestamp.is_some() {
        return in_ns
            .filter(|x| x.meta().deletion_timestamp.is_some())
            .map(|x| ObjectRef::from_obj(x.as_ref()))
            .collect();
    }
    if !relabelled || !label_dependent {
        return Vec::new();
    }
    in_ns
        .filter(|x| {
            x.meta().deletion_timestamp.is_some() || waiting_phase(x.status.as_ref().and_then(|st| st.phase.as_ref()))
        })
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}

/// Restores not yet past the gate, in a namespace (or everywhere: a Restore may reference a
/// Repository in another namespace, docs/design/api-contract.md §1.8).
pub fn parked_restores(restores: &[Arc<Restore>], ns: Option<&str>) -> Vec<ObjectRef<Restore>> {
    restores
        .iter()
        .filter(|r| ns.is_none() || r.namespace().as_deref() == ns)
        .filter(|r| {
            matches!(
                r.status.as_ref().and_then(|s| s.phase.as_ref()),
                None | Some(RestorePhase::Pending | RestorePhase::Resolving)
            )
        })
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Populator Restores running in a namespace (their prime or claim binding moves them on).
pub fn populating_restores(restores: &[Arc<Restore>], ns: Option<&str>) -> Vec<ObjectRef<Restore>> {
    restores
        .iter()
        .filter(|r| r.namespace().as_deref() == ns)
        .filter(|r| matches!(r.spec.target, kopiur_api::restore::RestoreTarget::Populator(_)))
        .filter(|r| matches!(r.status.as_ref().and_then(|s| s.phase.as_ref()), Some(RestorePhase::Restoring)))
        .map(|r| ObjectRef::from_obj(r.as_ref()))
        .collect()
}

/// Namespace → its parked Restores, when its labels changed while some ClusterRepository
/// admits namespaces by selector (and it is not being deleted).
pub fn namespace_restores(
    restores: &[Arc<Restore>],
    n: &ObjectMeta,
    relabelled: bool,
    label_dependent: bool,
) -> Vec<ObjectRef<Restore>> {
    if n.deletion_timestamp.is_some() || !relabelled || !label_dependent {
        return Vec::new();
    }
    parked_restores(restores, n.name.as_deref())
}

/// Snapshot → the SnapshotSchedule that controls it.
pub fn schedule_of(s: &Snapshot) -> Vec<ObjectRef<kopiur_api::SnapshotSchedule>> {
    let ns = s.namespace().unwrap_or_default();
    s.owner_references()
        .iter()
        .filter(|o| o.controller == Some(true) && o.kind == "SnapshotSchedule")
        .map(|o| ObjectRef::new(&o.name).within(&ns))
        .collect()
}

/// Snapshot → the SnapshotPolicy it references.
pub fn policy_of(s: &Snapshot) -> Option<ObjectRef<SnapshotPolicy>> {
    let ns = s.namespace().unwrap_or_default();
    s.spec.policy_ref.as_ref().map(|p| ObjectRef::new(&p.name).within(p.namespace.as_deref().unwrap_or(&ns)))
}

/// PVC in `ns` → the policies of that namespace that select sources by label (their expansion).
pub fn selecting_policies(policies: &[Arc<SnapshotPolicy>], ns: Option<&str>) -> Vec<ObjectRef<SnapshotPolicy>> {
    policies
        .iter()
        .filter(|x| x.namespace().as_deref() == ns)
        .filter(|x| crate::policy_rules::sources::uses_selector(&x.spec.sources))
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}

/// Namespace → its policies, when its labels changed while some ClusterRepository admits
/// namespaces by selector (and it is not being deleted).
pub fn namespace_policies(
    policies: &[Arc<SnapshotPolicy>],
    n: &ObjectMeta,
    relabelled: bool,
    label_dependent: bool,
) -> Vec<ObjectRef<SnapshotPolicy>> {
    if n.deletion_timestamp.is_some() || !relabelled || !label_dependent {
        return Vec::new();
    }
    let ns = n.name.clone().unwrap_or_default();
    policies
        .iter()
        .filter(|x| x.namespace().as_deref() == Some(ns.as_str()))
        .map(|x| ObjectRef::from_obj(x.as_ref()))
        .collect()
}

/// Whether the Snapshot's pin is not in its desired state yet (the repository watch re-enqueues
/// such Snapshots, like the ones parked before their backup).
pub fn pin_outstanding(snap: &Snapshot) -> bool {
    let applied = snap.status.as_ref().and_then(|s| s.pinned).unwrap_or(false);
    kube::Resource::meta(snap).deletion_timestamp.is_none() && snap.spec.pin != applied
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(ns: &str, name: &str, status: serde_json::Value, deleting: bool) -> Arc<Snapshot> {
        let mut v = serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"policyRef": {"name": "p"}},
            "status": status,
        });
        if deleting {
            v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-12-03T00:00:00Z");
            v["metadata"]["finalizers"] = serde_json::json!(["x"]);
        }
        Arc::new(serde_json::from_value(v).expect("a Snapshot"))
    }

    fn names<K>(refs: &[ObjectRef<K>]) -> Vec<String>
    where
        K: Resource<DynamicType = ()>,
    {
        let mut v: Vec<String> = refs.iter().map(|r| r.name.clone()).collect();
        v.sort();
        v
    }

    fn job_owned(ns: &str, owners: &[(&str, &str, &str)]) -> Job {
        let refs: Vec<serde_json::Value> = owners
            .iter()
            .map(|(api, kind, name)| {
                serde_json::json!({"apiVersion": api, "kind": kind, "name": name, "uid": format!("u-{name}")})
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "namespace": ns, "ownerReferences": refs}
        }))
        .expect("a Job")
    }

    #[test]
    fn a_job_maps_to_its_kopiur_owner_of_the_kind_asked_and_nothing_of_another_group() {
        const OURS: &str = "kopiur.home-operations.com/v1alpha1";
        let job = job_owned(
            "team-a",
            &[
                (OURS, "Repository", "r1"),
                ("other.example.com/v1", "Repository", "foreign"),
                (OURS, "ClusterRepository", "c1"),
                ("snapshot.storage.k8s.io/v1", "Maintenance", "not-ours"),
                (OURS, "Maintenance", "m1"),
                (OURS, "RepositoryReplication", "rr1"),
            ],
        );
        let repos: Vec<ObjectRef<kopiur_api::Repository>> = owned_by(&job, JobOwner::Repository);
        assert_eq!(repos, vec![ObjectRef::new("r1").within("team-a")]);
        // A ClusterRepository is cluster-scoped: its reference has no namespace, or it would
        // never match the store's key.
        let crepos: Vec<ObjectRef<kopiur_api::ClusterRepository>> = owned_by(&job, JobOwner::ClusterRepository);
        assert_eq!(crepos, vec![ObjectRef::new("c1")]);
        assert!(crepos[0].namespace.is_none());
        let m: Vec<ObjectRef<Maintenance>> = owned_by(&job, JobOwner::Maintenance);
        assert_eq!(m, vec![ObjectRef::new("m1").within("team-a")]);
        let rr: Vec<ObjectRef<kopiur_api::RepositoryReplication>> = owned_by(&job, JobOwner::RepositoryReplication);
        assert_eq!(rr, vec![ObjectRef::new("rr1").within("team-a")]);
        let none: Vec<ObjectRef<Snapshot>> = owned_by(&job, JobOwner::Snapshot);
        assert!(none.is_empty());
    }

    #[test]
    fn a_secret_maps_to_the_repositories_that_reference_it_in_their_home_namespace() {
        let spec = |pw: &str, auth: &str| {
            serde_json::json!({
                "backend": {"s3": {"bucket": "b", "auth": {"secretRef": {"name": auth}}}},
                "encryption": {"passwordSecretRef": {"name": pw}},
            })
        };
        let repo = |ns: &str, name: &str, pw: &str, auth: &str| -> Arc<kopiur_api::Repository> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
                    "metadata": {"name": name, "namespace": ns}, "spec": spec(pw, auth)
                }))
                .expect("a Repository"),
            )
        };
        let repos = vec![
            repo("team-a", "by-password", "pw", "keys"),
            repo("team-a", "by-auth", "other-pw", "pw"),
            repo("team-a", "neither", "x", "y"),
            repo("team-b", "elsewhere", "pw", "keys"),
        ];
        assert_eq!(names(&secret_referrers(&repos, "team-a", "pw", "kopiur-system")), ["by-auth", "by-password"]);
        assert_eq!(names(&secret_referrers(&repos, "team-b", "keys", "kopiur-system")), ["elsewhere"]);
        assert!(secret_referrers(&repos, "kopiur-system", "pw", "kopiur-system").is_empty());
        // A ClusterRepository's Secrets live in the operator's namespace.
        let mut c = serde_json::json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "ClusterRepository",
            "metadata": {"name": "shared"}, "spec": spec("pw", "keys")
        });
        c["spec"]["allowedNamespaces"] = serde_json::json!({"all": true});
        let crepo: Arc<kopiur_api::ClusterRepository> =
            Arc::new(serde_json::from_value(c).expect("a ClusterRepository"));
        let crepos = vec![crepo];
        assert_eq!(names(&secret_referrers(&crepos, "kopiur-system", "keys", "kopiur-system")), ["shared"]);
        assert!(secret_referrers(&crepos, "team-a", "keys", "kopiur-system").is_empty());
    }

    fn namespace(name: &str, deleting: bool) -> ObjectMeta {
        let mut v = serde_json::json!({"name": name});
        if deleting {
            v["deletionTimestamp"] = serde_json::json!("2026-12-03T00:00:00Z");
        }
        serde_json::from_value(v).expect("a Namespace's metadata")
    }

    #[test]
    fn job_owners_are_kopiur_kinds_only() {
        for o in JobOwner::ALL {
            assert_eq!(JobOwner::of("kopiur.home-operations.com/v1alpha1", o.kind()), Some(o));
        }
        assert_eq!(JobOwner::of("snapshot.storage.k8s.io/v1", "Snapshot"), None, "another group's Snapshot");
        assert_eq!(JobOwner::of("batch/v1", "CronJob"), None);
        assert_eq!(JobOwner::of("v1", "Restore"), None);
        assert_eq!(JobOwner::of("kopiur.home-operations.com/v1alpha1", "Unknown"), None);
    }

    #[test]
    fn a_repository_event_wakes_the_snapshots_parked_on_it_and_no_others() {
        let pinned = |repo: &str| serde_json::json!({"phase": "Pending", "resolved": {"repository": {"kind": "Repository", "namespace": "a", "name": repo}}});
        let snaps = vec![
            snap("a", "pending-on-r", pinned("r"), false),
            snap("a", "pending-on-other", pinned("other"), false),
            snap("a", "unpinned", serde_json::json!({}), false),
            snap("b", "unpinned-elsewhere", serde_json::json!({}), false),
            snap(
                "a",
                "done",
                serde_json::json!({"phase": "Succeeded", "resolved": {"repository": {"kind": "Repository", "namespace": "a", "name": "r"}}}),
                false,
            ),
            snap(
                "a",
                "deleting-on-r",
                serde_json::json!({"phase": "Succeeded", "resolved": {"repository": {"kind": "Repository", "namespace": "a", "name": "r"}}}),
                true,
            ),
        ];
        assert_eq!(
            names(&parked_on(&snaps, "Repository", Some("a"), "r")),
            ["deleting-on-r", "pending-on-r", "unpinned"]
        );
        // A ClusterRepository event: unpinned ones anywhere, pinned ones only when pinned to it.
        assert_eq!(names(&parked_on(&snaps, "ClusterRepository", None, "r")), ["unpinned", "unpinned-elsewhere"]);
    }

    #[test]
    fn a_secret_or_pvc_wakes_only_the_unlaunched_snapshots_of_its_namespace() {
        let snaps = vec![
            snap("a", "new", serde_json::json!({}), false),
            snap("a", "pending", serde_json::json!({"phase": "Pending"}), false),
            snap("a", "running", serde_json::json!({"phase": "Running"}), false),
            snap("b", "other-ns", serde_json::json!({}), false),
        ];
        assert_eq!(names(&unlaunched(&snaps, Some("a"))), ["new", "pending"]);
    }

    #[test]
    fn a_namespace_event_wakes_deleting_snapshots_or_on_a_relabel_those_whose_tenancy_may_flip() {
        let snaps = vec![
            snap("a", "deleting", serde_json::json!({"phase": "Succeeded"}), true),
            snap("a", "pending", serde_json::json!({"phase": "Pending"}), false),
            snap("a", "done", serde_json::json!({"phase": "Succeeded"}), false),
        ];
        assert_eq!(names(&namespace_snapshots(&snaps, &namespace("a", true), false, false)), ["deleting"]);
        assert!(namespace_snapshots(&snaps, &namespace("a", false), false, true).is_empty(), "not relabelled");
        assert!(namespace_snapshots(&snaps, &namespace("a", false), true, false).is_empty(), "no selector tenancy");
        assert_eq!(names(&namespace_snapshots(&snaps, &namespace("a", false), true, true)), ["deleting", "pending"]);
    }

    #[test]
    fn a_snapshot_maps_to_its_controlling_schedule_and_its_policy() {
        let s: Snapshot = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "a", "ownerReferences": [
                {"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule", "name": "nightly", "uid": "u1", "controller": true},
                {"apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotSchedule", "name": "not-controller", "uid": "u2"}
            ]},
            "spec": {"policyRef": {"name": "p", "namespace": "team"}}
        }))
        .unwrap();
        assert_eq!(names(&schedule_of(&s)), ["nightly"]);
        let p = policy_of(&s).expect("a policy");
        assert_eq!((p.name.as_str(), p.namespace.as_deref()), ("p", Some("team")));
    }
}
