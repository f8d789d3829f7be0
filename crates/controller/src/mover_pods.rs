//! What a mover learns from the application's pods before its Job is built:
//! `mover.inheritSecurityContextFrom` (docs/design/api-contract.md §2.6: run as the workload's uid, gid and
//! fsGroup) and `moverDefaults.sourceColocation` (run on the node where a ReadWriteOnce source
//! or target volume is attached, so the mover does not wait on a Multi-Attach error).
//!
//! The decisions are pure functions over pod lists; [`io`] lists the pods of one namespace
//! (one LIST, only when a recipe asks for inheritance or a volume is ReadWriteOnce).
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PreferredSchedulingTerm,
};
use kopiur_api::shared::mover::{InheritSecurityContextFrom, SourceColocationMode};
use kube::ResourceExt;

/// The identity a mover inherits, and from where (for the `SecurityContextInherited` message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inherited {
    /// `pod <name>, container <name>`.
    pub from: String,
    pub run_as_user: i64,
    pub run_as_group: Option<i64>,
    pub fs_group: Option<i64>,
    pub supplemental_groups: Option<Vec<i64>>,
}

impl Inherited {
    pub fn describe(&self) -> String {
        let mut s = format!("uid {}", self.run_as_user);
        if let Some(g) = self.run_as_group {
            s.push_str(&format!(", gid {g}"));
        }
        if let Some(f) = self.fs_group {
            s.push_str(&format!(", fsGroup {f}"));
        }
        if let Some(g) = self.supplemental_groups.as_ref().filter(|g| !g.is_empty()) {
            let g: Vec<String> = g.iter().map(i64::to_string).collect();
            s.push_str(&format!(", supplementalGroups {}", g.join(",")));
        }
        format!("{s} from {}", self.from)
    }
}

/// A pod that is live: not terminal and not being deleted.
fn live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn running(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

/// Whether the pod mounts `claim` (directly; generic ephemeral volumes are its own claims).
pub fn mounts_claim(p: &Pod, claim: &str) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim)))
}

/// The pod to inherit from: running before pending, then the oldest, then by name (stable).
fn pick<'a>(pods: impl Iterator<Item = &'a Pod>) -> Option<&'a Pod> {
    let mut c: Vec<&Pod> = pods.filter(|p| live(p)).collect();
    c.sort_by(|a, b| {
        running(b)
            .cmp(&running(a))
            .then_with(|| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp))
            .then_with(|| a.name_any().cmp(&b.name_any()))
    });
    c.first().copied()
}

/// The identity of one pod's container: the container's own `runAsUser`/`runAsGroup` win over
/// the pod's; `fsGroup` and `supplementalGroups` are pod-level.
pub fn identity_of(pod: &Pod, container: Option<&str>) -> Result<Inherited, String> {
    let name = pod.name_any();
    let spec = pod.spec.as_ref().ok_or_else(|| format!("pod {name} has no spec"))?;
    let c = match container {
        Some(want) => spec.containers.iter().find(|c| c.name == want).ok_or_else(|| {
            let have: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
            format!("pod {name} has no container {want:?} (it has {})", have.join(", "))
        })?,
        None => spec.containers.first().ok_or_else(|| format!("pod {name} has no containers"))?,
    };
    let psc = spec.security_context.clone().unwrap_or_default();
    let csc = c.security_context.clone().unwrap_or_default();
    let uid = csc.run_as_user.or(psc.run_as_user).ok_or_else(|| {
        format!(
            "pod {name} container {} sets no runAsUser (it runs as its image's user, which the operator cannot \
             read), so there is no uid to inherit: set runAsUser on the workload, or set mover.securityContext \
             {{runAsUser, runAsGroup}} instead of inheriting",
            c.name
        )
    })?;
    Ok(Inherited {
        from: format!("pod {name}, container {}", c.name),
        run_as_user: uid,
        run_as_group: csc.run_as_group.or(psc.run_as_group),
        fs_group: psc.fs_group,
        supplemental_groups: psc.supplemental_groups,
    })
}

/// Resolves `inheritSecurityContextFrom` over the pods of the Job's namespace. `claim` is the
/// backup's source PVC (what `pvcConsumer` looks for). `Err` says why nothing was inherited.
pub fn inherit(spec: &InheritSecurityContextFrom, pods: &[Pod], claim: Option<&str>) -> Result<Inherited, String> {
    match spec {
        InheritSecurityContextFrom::WorkloadSelector(w) => {
            let pod = pick(pods.iter().filter(|p| crate::gating::selector_matches(&w.pod_selector, p.labels())))
                .ok_or_else(|| {
                    format!(
                        "no live pod in this namespace matches inheritSecurityContextFrom.workloadSelector.podSelector \
                     {} (is the workload scaled to zero?); the run waits and retries every minute",
                        selector_text(&w.pod_selector)
                    )
                })?;
            identity_of(pod, w.container.as_deref())
        }
        InheritSecurityContextFrom::PvcConsumer(c) => {
            let Some(claim) = claim else {
                return Err("inheritSecurityContextFrom.pvcConsumer needs a source PVC, and this run has none".into());
            };
            let pod = pick(pods.iter().filter(|p| mounts_claim(p, claim))).ok_or_else(|| {
                format!(
                    "no live pod in this namespace mounts PVC {claim} (is its workload scaled to zero?), so there \
                     is no consumer to inherit from; the run waits and retries every minute"
                )
            })?;
            identity_of(pod, c.container.as_deref())
        }
        InheritSecurityContextFrom::Snapshot(_) => {
            Err("inheritSecurityContextFrom.snapshot is not implemented in this version: use workloadSelector, or set \
             mover.securityContext {runAsUser, runAsGroup}"
                .into())
        }
    }
}

fn selector_text(s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector) -> String {
    let mut parts: Vec<String> = s.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in s.match_expressions.iter().flatten() {
        parts.push(format!("{} {} ({})", e.key, e.operator, e.values.clone().unwrap_or_default().join(",")));
    }
    if parts.is_empty() { "{}".into() } else { parts.join(",") }
}

/// The nodes where live pods mounting `claim` run (the volume's attachment, for a RWO claim).
pub fn nodes_using(pods: &[Pod], claim: &str) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| live(p) && mounts_claim(p, claim))
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect()
}

/// Whether a claim's access modes pin it to one node at a time.
pub fn single_node(access_modes: &[String]) -> bool {
    !access_modes.is_empty() && access_modes.iter().all(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod")
}

/// Adds co-location with `node` to `affinity` (docs/design/api-contract.md §2.6 `sourceColocation`): `Auto`
/// prefers the node (weight 100), `Required` requires it, `Disabled` leaves the affinity alone.
/// A required term is ANDed into every existing required term, so a user's node affinity still
/// holds.
pub fn colocate(affinity: Option<Affinity>, node: &str, mode: SourceColocationMode) -> Option<Affinity> {
    let req = || NodeSelectorRequirement {
        key: "metadata.name".into(),
        operator: "In".into(),
        values: Some(vec![node.to_string()]),
    };
    match mode {
        SourceColocationMode::Disabled => affinity,
        SourceColocationMode::Auto => {
            let mut a = affinity.unwrap_or_default();
            let na = a.node_affinity.get_or_insert_with(NodeAffinity::default);
            na.preferred_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(
                PreferredSchedulingTerm {
                    weight: 100,
                    preference: NodeSelectorTerm { match_fields: Some(vec![req()]), match_expressions: None },
                },
            );
            Some(a)
        }
        SourceColocationMode::Required => {
            let mut a = affinity.unwrap_or_default();
            let na = a.node_affinity.get_or_insert_with(NodeAffinity::default);
            let ns = na
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(|| NodeSelector { node_selector_terms: vec![] });
            if ns.node_selector_terms.is_empty() {
                ns.node_selector_terms.push(NodeSelectorTerm::default());
            }
            for t in &mut ns.node_selector_terms {
                t.match_fields.get_or_insert_with(Vec::new).push(req());
            }
            Some(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodStatus, SecurityContext, Volume,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kopiur_api::shared::mover::{PvcConsumer, WorkloadSelector};

    fn pod(name: &str, app: &str, phase: &str, uid: Option<i64>, claim: Option<&str>, node: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        p.spec = Some(PodSpec {
            containers: vec![
                Container {
                    name: "app".into(),
                    security_context: Some(SecurityContext { run_as_group: Some(998), ..Default::default() }),
                    ..Default::default()
                },
                Container {
                    name: "sidecar".into(),
                    security_context: Some(SecurityContext { run_as_user: Some(1234), ..Default::default() }),
                    ..Default::default()
                },
            ],
            security_context: Some(PodSecurityContext {
                run_as_user: uid,
                run_as_group: Some(999),
                fs_group: Some(999),
                supplemental_groups: Some(vec![5]),
                ..Default::default()
            }),
            volumes: claim.map(|c| {
                vec![Volume {
                    name: "data".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: c.into(),
                        read_only: None,
                    }),
                    ..Default::default()
                }]
            }),
            node_name: Some(node.into()),
            ..Default::default()
        });
        p.status = Some(PodStatus { phase: Some(phase.into()), ..Default::default() });
        p
    }

    fn by_app(app: &str, container: Option<&str>) -> InheritSecurityContextFrom {
        InheritSecurityContextFrom::WorkloadSelector(WorkloadSelector {
            pod_selector: LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            container: container.map(str::to_string),
        })
    }

    #[test]
    fn a_workload_gives_its_uid_gid_and_groups_container_first() {
        let pods = vec![
            pod("db-old-failed", "db", "Failed", Some(1), Some("data"), "n1"),
            pod("db-0", "db", "Running", Some(999), Some("data"), "n1"),
            pod("web", "web", "Running", Some(33), None, "n2"),
        ];
        let i = inherit(&by_app("db", None), &pods, None).unwrap();
        assert_eq!(i.run_as_user, 999);
        assert_eq!(i.run_as_group, Some(998), "the container's runAsGroup wins over the pod's");
        assert_eq!((i.fs_group, i.supplemental_groups.clone()), (Some(999), Some(vec![5])));
        assert_eq!(i.from, "pod db-0, container app");
        assert!(i.describe().starts_with("uid 999, gid 998, fsGroup 999, supplementalGroups 5 from pod db-0"));
        let s = inherit(&by_app("db", Some("sidecar")), &pods, None).unwrap();
        assert_eq!(s.run_as_user, 1234);
        let e = inherit(&by_app("db", Some("nope")), &pods, None).unwrap_err();
        assert!(e.contains("no container \"nope\"") && e.contains("app, sidecar"), "{e}");
    }

    #[test]
    fn scaled_to_zero_and_image_users_say_why_nothing_was_inherited() {
        let pods = vec![pod("db-gone", "db", "Succeeded", Some(999), None, "n1")];
        let e = inherit(&by_app("db", None), &pods, None).unwrap_err();
        assert!(e.contains("app=db") && e.contains("scaled to zero"), "{e}");
        let pods = vec![pod("db-0", "db", "Running", None, None, "n1")];
        let e = inherit(&by_app("db", None), &pods, None).unwrap_err();
        assert!(e.contains("sets no runAsUser") && e.contains("mover.securityContext"), "{e}");
        let e = inherit(&InheritSecurityContextFrom::Snapshot(Default::default()), &pods, None).unwrap_err();
        assert!(e.contains("not implemented"), "{e}");
    }

    #[test]
    fn a_pvc_consumer_is_the_pod_that_mounts_the_source() {
        let pods = vec![
            pod("other", "x", "Running", Some(5), Some("other"), "n1"),
            pod("db-0", "db", "Running", Some(999), Some("data"), "n2"),
        ];
        let spec = InheritSecurityContextFrom::PvcConsumer(PvcConsumer::default());
        assert_eq!(inherit(&spec, &pods, Some("data")).unwrap().run_as_user, 999);
        let e = inherit(&spec, &pods, Some("missing")).unwrap_err();
        assert!(e.contains("mounts PVC missing"), "{e}");
        assert!(inherit(&spec, &pods, None).is_err());
    }

    #[test]
    fn colocation_prefers_or_requires_the_node_and_keeps_user_terms() {
        let pods = vec![
            pod("db-0", "db", "Running", Some(999), Some("data"), "node-a"),
            pod("db-gone", "db", "Failed", Some(999), Some("data"), "node-b"),
        ];
        assert_eq!(nodes_using(&pods, "data").into_iter().collect::<Vec<_>>(), vec!["node-a".to_string()]);
        assert!(single_node(&["ReadWriteOnce".into()]));
        assert!(!single_node(&["ReadWriteMany".into()]));
        assert!(!single_node(&[]));
        assert_eq!(colocate(None, "node-a", SourceColocationMode::Disabled), None);
        let auto = colocate(None, "node-a", SourceColocationMode::Auto).unwrap();
        let pref = auto.node_affinity.unwrap().preferred_during_scheduling_ignored_during_execution.unwrap();
        assert_eq!(pref[0].weight, 100);
        assert_eq!(pref[0].preference.match_fields.as_ref().unwrap()[0].values, Some(vec!["node-a".to_string()]));
        // A user's required term keeps its expression and gains the node.
        let user = Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "disk".into(),
                            operator: "In".into(),
                            values: Some(vec!["ssd".into()]),
                        }]),
                        match_fields: None,
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = colocate(Some(user), "node-a", SourceColocationMode::Required).unwrap();
        let t = &req
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms[0];
        assert_eq!(t.match_expressions.as_ref().unwrap()[0].key, "disk");
        assert_eq!(t.match_fields.as_ref().unwrap()[0].key, "metadata.name");
    }
}
