//! The mover-settings table every Job kind is checked against: backup, maintenance and
//! replication (docs/design/api-contract.md §2.6, §10 and §11). The repository's `moverDefaults`
//! and the kind's own `mover` block go in; the Job's pod spec must show the documented effect in
//! merge order (hardened base < moverDefaults < the kind's `mover`). A kind's own table adds only
//! what is its own (the backup's inherited identity, colocation, cache PVC, privileged mode).
use k8s_openapi::api::batch::v1::JobSpec;
use k8s_openapi::api::core::v1::PodSpec;
use serde_json::{Value, json};

pub type Check = fn(&PodSpec, &JobSpec);

/// The required node-selector terms of the pod's node affinity.
pub fn required_terms(p: &PodSpec) -> Vec<k8s_openapi::api::core::v1::NodeSelectorTerm> {
    let affinity = p.affinity.clone().expect("an affinity");
    let required = affinity.node_affinity.and_then(|n| n.required_during_scheduling_ignored_during_execution);
    required.expect("required node-affinity terms").node_selector_terms
}

/// The work spec the Job's container carries.
pub fn work_spec(p: &PodSpec) -> Value {
    let raw = p.containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "KOPIUR_WORK_SPEC")
        .and_then(|e| e.value.clone())
        .expect("the work spec env");
    serde_json::from_str(&raw).unwrap()
}

/// `(name, moverDefaults, the kind's mover, check)`.
pub fn rows() -> Vec<(&'static str, Value, Value, Check)> {
    vec![
        ("hardened base", json!(null), json!(null), |p, j| {
            let sc = p.containers[0].security_context.clone().unwrap();
            assert_eq!(sc.run_as_non_root, Some(true));
            assert_eq!(sc.allow_privilege_escalation, Some(false));
            assert_eq!(sc.read_only_root_filesystem, Some(true));
            assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
            assert_eq!(sc.seccomp_profile.unwrap().type_, "RuntimeDefault");
            let ps = p.security_context.clone().unwrap();
            assert_eq!((ps.run_as_user, ps.fs_group), (Some(65532), Some(65532)));
            assert_eq!(j.ttl_seconds_after_finished, Some(3600), "the resolved TTL");
            assert!(p.node_selector.is_none() && p.tolerations.is_none() && p.affinity.is_none());
        }),
        (
            "resources from the defaults alone",
            json!({"resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "1Gi"}}}),
            json!(null),
            |p, _| {
                let r = p.containers[0].resources.clone().unwrap();
                assert_eq!(r.requests.unwrap()["memory"].0, "256Mi");
                assert_eq!(r.limits.unwrap()["memory"].0, "1Gi");
            },
        ),
        (
            "resources: the kind's mover replaces the defaults",
            json!({"resources": {"limits": {"memory": "1Gi"}}}),
            json!({"resources": {"limits": {"memory": "512Mi", "cpu": "500m"}}}),
            |p, _| {
                let l = p.containers[0].resources.clone().unwrap().limits.unwrap();
                assert_eq!(l["memory"].0, "512Mi");
                assert_eq!(l["cpu"].0, "500m");
            },
        ),
        (
            "securityContext field by field",
            json!({"securityContext": {"runAsUser": 1234, "runAsGroup": 1234}}),
            json!({"securityContext": {"runAsUser": 999}}),
            |p, _| {
                let sc = p.containers[0].security_context.clone().unwrap();
                assert_eq!((sc.run_as_user, sc.run_as_group), (Some(999), Some(1234)));
                assert_eq!(sc.read_only_root_filesystem, Some(true), "the base stays under the overlay");
            },
        ),
        (
            "podSecurityContext field by field",
            json!({"podSecurityContext": {"fsGroup": 2000, "supplementalGroups": [7]}}),
            json!({"podSecurityContext": {"fsGroup": 3000}}),
            |p, _| {
                let ps = p.security_context.clone().unwrap();
                assert_eq!((ps.fs_group, ps.supplemental_groups.clone()), (Some(3000), Some(vec![7])));
            },
        ),
        (
            "cache: capacity gives an ephemeral volume; the sizes reach kopia, field by field",
            json!({"cache": {"capacity": "2Gi", "storageClassName": "fast", "contentCacheSizeMb": 100}}),
            json!({"cache": {"metadataCacheSizeMb": 50}}),
            |p, _| {
                let v = p.volumes.iter().flatten().find(|v| v.ephemeral.is_some()).expect("an ephemeral cache volume");
                let t = v.ephemeral.clone().unwrap().volume_claim_template.unwrap().spec;
                assert_eq!(t.storage_class_name.as_deref(), Some("fast"));
                assert_eq!(t.resources.unwrap().requests.unwrap()["storage"].0, "2Gi");
                let ws = work_spec(p);
                assert_eq!(ws["repository"]["cache"]["contentMb"], 100);
                assert_eq!(ws["repository"]["cache"]["metadataMb"], 50);
            },
        ),
        (
            "nodeSelector, tolerations, affinity from the defaults",
            json!({"nodeSelector": {"disk": "ssd"},
                   "tolerations": [{"key": "backup", "operator": "Exists", "effect": "NoSchedule"}],
                   "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                       {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}),
            json!(null),
            |p, _| {
                assert_eq!(p.node_selector.clone().unwrap()["disk"], "ssd");
                assert_eq!(p.tolerations.clone().unwrap()[0].key.as_deref(), Some("backup"));
                let t = required_terms(p);
                assert_eq!(t[0].match_expressions.clone().unwrap()[0].key, "zone");
            },
        ),
        (
            "ttlSecondsAfterFinished: the kind's mover over the defaults",
            json!({"ttlSecondsAfterFinished": 60}),
            json!({"ttlSecondsAfterFinished": 30}),
            |_, j| assert_eq!(j.ttl_seconds_after_finished, Some(30)),
        ),
        ("ttlSecondsAfterFinished from the defaults", json!({"ttlSecondsAfterFinished": 60}), json!(null), |_, j| {
            assert_eq!(j.ttl_seconds_after_finished, Some(60))
        }),
    ]
}

/// Settings that make this Job kind's mover privileged: refused (never privileged).
pub fn privileged() -> Vec<(&'static str, Value, Value)> {
    vec![
        ("privilegedMode in the kind's mover", json!(null), json!({"privilegedMode": true})),
        ("runAsUser 0 in the defaults", json!({"securityContext": {"runAsUser": 0}}), json!(null)),
    ]
}
