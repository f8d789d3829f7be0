//! Pure contract tests: the work spec (size cap, versioning, no secrets) and the Job builder.
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{CacheSizes, Identity};
use kopiur_mover::job::{self, CacheVolume, ConnectKind, JobInput, PvcMount};
use kopiur_mover::workspec::*;

/// Secret values that live only in the Secrets this fixture's Jobs reference (`referenced`).
const SECRETS: &[&str] = &[
    "s3cr3t-AKIA-ACCESS-KEY-0001",
    "s3cr3t-SECRET-ACCESS-KEY-0002",
    "s3cr3t-kopia-password-0003",
    "s3cr3t-DEST-ACCESS-KEY-0004",
    "s3cr3t-DEST-SECRET-KEY-0005",
];

fn spec(op: Operation) -> WorkSpec {
    WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Snapshot".into(),
            namespace: Some("t".into()),
            name: "s1".into(),
            uid: "uid-s1".into(),
        },
        repository: RepositoryInfo {
            kind: "Repository".into(),
            namespace: Some("t".into()),
            name: "r".into(),
            uid: "uid-r".into(),
            backend: Backend::S3(S3Backend {
                bucket: "b".into(),
                endpoint: Some("127.0.0.1:3900".into()),
                region: Some("garage".into()),
                disable_tls: true,
                ..Default::default()
            }),
            client_identity: Identity::new("p", "t"),
            read_only: false,
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: 60,
        heartbeat_seconds: 30,
        connect_timeout_seconds: None,
        operation: op,
    }
}

fn snapshot_op() -> Operation {
    Operation::Snapshot(SnapshotOp {
        mount_path: "/source".into(),
        source_path: "/pvc/data".into(),
        snapshot: "t/s1".into(),
        snapshot_uid: "uid-s1".into(),
        tags: BTreeMap::new(),
        description: None,
        policy: Default::default(),
        fail_fast: false,
        upload_limit_mb: None,
        parallel: None,
    })
}

fn input(ws: WorkSpec) -> JobInput {
    JobInput {
        name: "s1".into(),
        namespace: "t".into(),
        image: "kopiur-mover:dev".into(),
        image_pull_policy: None,
        service_account_name: Some("kopiur-mover".into()),
        work_spec: ws,
        password: ("repo-pw".into(), "KOPIA_PASSWORD".into()),
        env_from_secrets: vec!["s3-creds".into(), "s3-creds".into(), "repo-pw".into()],
        destination_secret: None,
        result_configmap: None,
        connect_kind: None,
        delete_repo_uid: None,
        annotations: BTreeMap::new(),
        owner: OwnerReference {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Snapshot".into(),
            name: "s1".into(),
            uid: "uid-s1".into(),
            ..Default::default()
        },
        cache: CacheVolume::EmptyDir,
        source: Some(PvcMount { claim_name: "data".into(), mount_path: "/source".into(), read_only: true }),
        restore: None,
        repository_volume: None,
        ca_bundle: None,
        resources: None,
        security_context: None,
        pod_security_context: None,
        node_selector: None,
        tolerations: None,
        affinity: None,
        backoff_limit: job::DEFAULT_BACKOFF_LIMIT,
        active_deadline_seconds: job::DEFAULT_ACTIVE_DEADLINE_SECONDS,
        ttl_seconds_after_finished: Some(job::DEFAULT_TTL_SECONDS),
        rust_log: None,
        log_format: None,
        extra_env: vec![],
    }
}

#[test]
fn work_spec_round_trips_and_ignores_unknown_fields() {
    let ws = spec(snapshot_op());
    let json = ws.to_json().unwrap();
    assert!(json.contains(r#""operation":{"Snapshot":"#), "{json}");
    let mut v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["someFutureField"] = serde_json::json!(1);
    v["repository"]["futureToo"] = serde_json::json!("x");
    let back = WorkSpec::from_json(&v.to_string()).unwrap();
    assert_eq!(back, ws);
}

#[test]
fn unknown_variant_and_version_are_refused() {
    let mut v: serde_json::Value = serde_json::from_str(&spec(snapshot_op()).to_json().unwrap()).unwrap();
    v["operation"] = serde_json::json!({"Teleport": {}});
    assert!(matches!(WorkSpec::from_json(&v.to_string()), Err(WorkSpecError::Unreadable(_))));
    let mut v: serde_json::Value = serde_json::from_str(&spec(snapshot_op()).to_json().unwrap()).unwrap();
    v["schemaVersion"] = serde_json::json!(2);
    assert!(matches!(WorkSpec::from_json(&v.to_string()), Err(WorkSpecError::Version(2))));
}

#[test]
fn oversized_work_spec_is_refused_with_a_clear_error() {
    let members = (0..3000)
        .map(|i| DeleteMember {
            uid: format!("00000000-0000-0000-0000-{i:012}"),
            snapshot_id: format!("{i:032x}"),
            source: format!("app@t:/pvc/s{i}"),
        })
        .collect();
    let ws = spec(Operation::SnapshotDeleteBatch(SnapshotDeleteBatchOp {
        members,
        chunk_size: 50,
        chunk_timeout_seconds: 300,
    }));
    let err = ws.to_json().unwrap_err();
    assert!(matches!(err, WorkSpecError::TooLarge { size } if size > MAX_WORK_SPEC_BYTES));
    assert!(err.to_string().contains("102400"), "{err}");
    let err = job::build_job(&input(ws)).unwrap_err();
    assert!(err.to_string().contains("above the 102400-byte limit"), "{err}");
}

#[test]
fn job_shape() {
    let j = job::build_job(&input(spec(snapshot_op()))).unwrap();
    let meta = &j.metadata;
    assert_eq!(meta.name.as_deref(), Some("s1"));
    let labels = meta.labels.as_ref().unwrap();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "kopiur");
    assert_eq!(labels["kopiur.home-operations.com/op"], "backup");
    assert_eq!(labels["app.kubernetes.io/component"], "backup");
    let owners = meta.owner_references.as_ref().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].controller, Some(true));
    assert_eq!(owners[0].block_owner_deletion, Some(false));

    let spec = j.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(2));
    assert_eq!(spec.active_deadline_seconds, Some(172_800));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    let pfp = spec.pod_failure_policy.as_ref().unwrap();
    assert_eq!(pfp.rules[0].action, "FailJob");
    assert_eq!(pfp.rules[0].on_exit_codes.as_ref().unwrap().values, vec![2, 3]);
    assert_eq!(pfp.rules[1].action, "Ignore");

    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.containers.len(), 1);
    let c = &pod.containers[0];
    assert_eq!(c.name, "mover");
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.as_ref().unwrap().drop.as_ref().unwrap(), &vec!["ALL".to_string()]);
    assert_eq!(sc.seccomp_profile.as_ref().unwrap().type_, "RuntimeDefault");
    assert_eq!(sc.read_only_root_filesystem, Some(true), "the root filesystem is read-only");
    assert_eq!(pod.security_context.as_ref().unwrap().fs_group, Some(65532));

    // No envFrom (issue 31): each S3 key by its own optional secretKeyRef from each distinct
    // Secret in order, the password through its secretKeyRef.
    assert!(c.env_from.is_none(), "no Secret reaches the mover whole: {:?}", c.env_from);
    let env = c.env.as_ref().unwrap();
    let refs: Vec<(String, String, String, Option<bool>)> = env
        .iter()
        .filter_map(|e| {
            let k = e.value_from.as_ref()?.secret_key_ref.as_ref()?;
            Some((e.name.clone(), k.name.clone(), k.key.clone(), k.optional))
        })
        .filter(|(n, ..)| n != "KOPIA_PASSWORD")
        .collect();
    let want: Vec<(String, String, String, Option<bool>)> = ["s3-creds", "repo-pw"]
        .iter()
        .flat_map(|s| {
            ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]
                .map(|k| (k.to_string(), s.to_string(), k.to_string(), Some(true)))
        })
        .collect();
    assert_eq!(refs, want);
    let pw = env.iter().find(|e| e.name == "KOPIA_PASSWORD").unwrap();
    assert!(pw.value.is_none());
    assert_eq!(pw.value_from.as_ref().unwrap().secret_key_ref.as_ref().unwrap().name, "repo-pw");
    assert!(env.iter().any(|e| e.name == "KOPIUR_WORK_SPEC"));
    assert!(
        env.iter()
            .any(|e| e.name == "KOPIA_CONFIG_PATH" && e.value.as_deref() == Some("/var/run/kopiur/repository.config"))
    );
    // kopia's config (it holds the backend keys) on a memory-backed volume, not the cache.
    let config = pod.volumes.iter().flatten().find(|v| v.name == "kopia-config").expect("a config volume");
    assert_eq!(config.empty_dir.as_ref().and_then(|e| e.medium.as_deref()), Some("Memory"));
    assert!(c.volume_mounts.iter().flatten().any(|m| m.name == "kopia-config" && m.mount_path == "/var/run/kopiur"));

    // Cache at /var/cache/kopia; source read-only.
    let mounts = c.volume_mounts.as_ref().unwrap();
    assert!(mounts.iter().any(|m| m.name == "kopia-cache" && m.mount_path == "/var/cache/kopia"));
    assert!(mounts.iter().any(|m| m.name == "source" && m.mount_path == "/source" && m.read_only == Some(true)));
    let vols = pod.volumes.as_ref().unwrap();
    assert!(vols.iter().any(|v| v.name == "kopia-cache" && v.empty_dir.is_some()));
    // A writable /tmp under the read-only root.
    assert!(mounts.iter().any(|m| m.name == "tmp" && m.mount_path == "/tmp" && m.read_only != Some(true)));
    assert!(vols.iter().any(|v| v.name == "tmp" && v.empty_dir.is_some()));
}

#[test]
fn overlays_merge_field_by_field_from_lowest_to_highest() {
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};
    use kopiur_mover::job::{
        container_security_context, merge_container_overlays, merge_pod_overlays, pod_security_context,
    };
    let defaults = SecurityContext { run_as_user: Some(999), run_as_group: Some(999), ..Default::default() };
    let recipe =
        SecurityContext { run_as_user: Some(1000), read_only_root_filesystem: Some(false), ..Default::default() };
    let merged = merge_container_overlays([Some(&defaults), None, Some(&recipe)]).unwrap();
    assert_eq!((merged.run_as_user, merged.run_as_group), (Some(1000), Some(999)));
    let sc = container_security_context(Some(&merged));
    assert_eq!(sc.read_only_root_filesystem, Some(false), "the recipe may relax the read-only root");
    assert_eq!(sc.capabilities.unwrap().drop.unwrap(), vec!["ALL".to_string()], "unset fields keep the base");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert!(merge_container_overlays([None, None]).is_none());

    let pd = PodSecurityContext { fs_group: Some(999), ..Default::default() };
    let pr = PodSecurityContext { supplemental_groups: Some(vec![5]), ..Default::default() };
    let pod = pod_security_context(merge_pod_overlays([Some(&pd), Some(&pr)]).as_ref());
    assert_eq!(pod.fs_group, Some(999));
    assert_eq!(pod.supplemental_groups, Some(vec![5]));
    assert_eq!(pod.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
}

#[test]
fn bootstrap_and_batch_variants() {
    let mut i = input(spec(Operation::BootstrapRepository(BootstrapRepositoryOp {
        create_gate: CreateGate::PinnedOnceReady,
        pinned_unique_id: Some("ab".into()),
        probe: true,
        list_snapshots: false,
        catalog_limit: 1000,
        verify_snapshot_ids: Vec::new(),
        maintenance_owner: "kopiur@kopiur.t.r".into(),
        create: Default::default(),
    })));
    i.connect_kind = Some(ConnectKind::Probe);
    i.result_configmap = Some("r-discovery-result".into());
    i.backoff_limit = 0;
    let j = job::build_job(&i).unwrap();
    let labels = j.metadata.labels.unwrap();
    assert_eq!(labels["kopiur.home-operations.com/op"], "bootstrap");
    assert_eq!(labels["kopiur.home-operations.com/connect-kind"], "probe");
    assert_eq!(labels["app.kubernetes.io/component"], "bootstrap");
    let env = j.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    assert!(env.iter().any(|e| e.name == "KOPIUR_RESULT_CONFIGMAP"));

    let mut i = input(spec(Operation::SnapshotDeleteBatch(SnapshotDeleteBatchOp {
        members: vec![DeleteMember { uid: "u".into(), snapshot_id: "i".into(), source: "app@t:/pvc/s".into() }],
        chunk_size: 50,
        chunk_timeout_seconds: 300,
    })));
    i.ttl_seconds_after_finished = None;
    i.delete_repo_uid = Some("uid-r".into());
    let j = job::build_job(&i).unwrap();
    assert_eq!(j.spec.as_ref().unwrap().ttl_seconds_after_finished, None);
    let labels = j.metadata.labels.unwrap();
    assert_eq!(labels["kopiur.home-operations.com/delete-repo"], "uid-r");
    assert_eq!(labels["app.kubernetes.io/component"], "snapshot-delete");
}

#[test]
fn long_names_are_hashed() {
    let long = "a".repeat(70);
    let n = job::job_name(&long);
    assert_eq!(n.len(), 63);
    assert!(n.starts_with(&"a".repeat(52)));
    assert_eq!(job::job_name("short"), "short");
}

/// The Secrets (and the CA bundle ConfigMap) a Job of this fixture references, with real
/// values: what the kubelet would hand the mover.
struct Referenced {
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBs3cr3tCAbundleZm9yIGtvcGl1cg0004\n-----END CERTIFICATE-----\n";

fn referenced() -> Referenced {
    let m = |kv: &[(&str, &str)]| kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Referenced {
        secrets: BTreeMap::from([
            ("repo-pw".to_string(), m(&[("KOPIA_PASSWORD", SECRETS[2])])),
            (
                "s3-creds".to_string(),
                // An unrelated key beside the backend's: it must not reach the mover.
                m(&[
                    ("AWS_ACCESS_KEY_ID", SECRETS[0]),
                    ("AWS_SECRET_ACCESS_KEY", SECRETS[1]),
                    ("GITHUB_TOKEN", "ghp-x"),
                ]),
            ),
            ("dest-creds".to_string(), m(&[("AWS_ACCESS_KEY_ID", SECRETS[3]), ("AWS_SECRET_ACCESS_KEY", SECRETS[4])])),
        ]),
        config_maps: BTreeMap::from([("s3-ca".to_string(), m(&[("ca.crt", CA_PEM)]))]),
    }
}

/// What the kubelet resolves for the mover container: its environment (`value`,
/// `secretKeyRef`, `envFrom` with prefix) and its files from ConfigMap volumes.
fn kubelet_view(
    j: &k8s_openapi::api::batch::v1::Job,
    r: &Referenced,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let pod = j.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let c = &pod.containers[0];
    let mut env = BTreeMap::new();
    assert!(c.env_from.is_none(), "no envFrom");
    for e in c.env.iter().flatten() {
        let v = match (&e.value, e.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref())) {
            (Some(v), _) => v.clone(),
            (None, Some(k)) => {
                let data = r.secrets.get(&k.name).unwrap_or_else(|| panic!("Secret {} is not a fixture", k.name));
                match data.get(&k.key) {
                    Some(v) => v.clone(),
                    // The kubelet leaves an optional key that is not there unset.
                    None if k.optional == Some(true) => continue,
                    None => panic!("Secret {} has no key {}", k.name, k.key),
                }
            }
            (None, None) => continue,
        };
        env.insert(e.name.clone(), v);
    }
    let mut files = BTreeMap::new();
    for vm in c.volume_mounts.iter().flatten() {
        let Some(cm) = pod.volumes.iter().flatten().find(|v| v.name == vm.name).and_then(|v| v.config_map.as_ref())
        else {
            continue;
        };
        let data = &r.config_maps[&cm.name];
        for item in cm.items.iter().flatten() {
            files.insert(format!("{}/{}", vm.mount_path.trim_end_matches('/'), item.path), data[&item.key].clone());
        }
    }
    (env, files)
}

/// docs/design/mover.md §1.2: the Job and its work spec hold no Secret value. The inputs reference real
/// Secrets (repository password, S3 keys, a replication destination's keys) and a CA bundle;
/// the kubelet's view proves the values do reach the mover, by reference only, and the whole
/// Job and work spec text (and the base64 a Secret's `data` would carry) holds none of them.
#[test]
fn no_secret_in_work_spec_or_job() {
    let refs = referenced();
    let ca = job::ConfigMapFileMount {
        config_map_name: "s3-ca".into(),
        key: "ca.crt".into(),
        dir: "/etc/kopiur/ca".into(),
        file: "ca.pem".into(),
    };
    let b64 = |v: &str| {
        let s = serde_json::to_string(&k8s_openapi::ByteString(v.as_bytes().to_vec())).unwrap();
        s.trim_matches('"').to_string()
    };
    let values: Vec<String> = SECRETS.iter().map(|s| s.to_string()).chain([CA_PEM.to_string()]).collect();
    for op in [
        snapshot_op(),
        Operation::Replicate(ReplicateOp {
            destination: Backend::S3(S3Backend { bucket: "dest".into(), ..Default::default() }),
            sync: Default::default(),
        }),
    ] {
        let replicate = matches!(op, Operation::Replicate(_));
        let mut ws = spec(op);
        if let Backend::S3(b) = &mut ws.repository.backend {
            b.root_ca_pem_path = Some(ca.path());
        }
        let ws_text = ws.to_json().unwrap();
        let mut i = input(ws);
        i.env_from_secrets = vec!["s3-creds".into()];
        i.ca_bundle = Some(ca.clone());
        if replicate {
            i.destination_secret = Some("dest-creds".into());
        }
        let j = job::build_job(&i).unwrap();

        // The values reach the mover, through references only.
        let (env, files) = kubelet_view(&j, &refs);
        assert_eq!(env.get("KOPIA_PASSWORD").map(String::as_str), Some(SECRETS[2]));
        assert_eq!(env.get("AWS_ACCESS_KEY_ID").map(String::as_str), Some(SECRETS[0]));
        assert_eq!(env.get("AWS_SECRET_ACCESS_KEY").map(String::as_str), Some(SECRETS[1]));
        assert!(!env.contains_key("GITHUB_TOKEN"), "a key the backend does not read reached the mover");
        assert!(!env.contains_key("AWS_SESSION_TOKEN"), "an optional key the Secret lacks stays unset");
        assert_eq!(files.get(&ca.path()).map(String::as_str), Some(CA_PEM), "the CA bundle is a mounted file");
        if replicate {
            assert_eq!(env.get("KOPIUR_DEST_AWS_SECRET_ACCESS_KEY").map(String::as_str), Some(SECRETS[4]));
            let env = j.spec.as_ref().unwrap().template.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
            assert!(env.iter().any(|e| e.name == "KOPIUR_DEST_AWS_ACCESS_KEY_ID"
                && e.value_from.as_ref().and_then(|f| f.secret_key_ref.as_ref()).is_some()));
        }
        // ...and appear nowhere in what the Job and the work spec say.
        let job_text = serde_json::to_string(&j).unwrap();
        assert!(job_text.contains("KOPIUR_WORK_SPEC"), "the work spec rides in the Job");
        for v in &values {
            for (what, text) in [("Job", &job_text), ("work spec", &ws_text)] {
                assert!(!text.contains(v.as_str()), "a referenced value leaked into the {what}: {v:?}");
                assert!(!text.contains(&b64(v)), "a referenced value leaked base64-encoded into the {what}: {v:?}");
                let escaped = serde_json::to_string(v).unwrap();
                assert!(!text.contains(escaped.trim_matches('"')), "a referenced value leaked into the {what}: {v:?}");
            }
        }
    }
}

#[test]
fn dest_env_strips_the_prefix() {
    let v = kopiur_mover::ops::dest_env(
        vec![
            ("KOPIUR_DEST_AWS_ACCESS_KEY_ID".to_string(), "k".to_string()),
            ("AWS_ACCESS_KEY_ID".to_string(), "src".to_string()),
            ("KOPIUR_DEST_".to_string(), "x".to_string()),
        ]
        .into_iter(),
    );
    assert_eq!(v, vec![("AWS_ACCESS_KEY_ID".to_string(), "k".to_string())]);
}

fn manifest(id: &str, user: &str, path: &str, end: &str) -> kopiur_kopia::model::SnapshotManifest {
    serde_json::from_value(serde_json::json!({
        "id": id, "source": {"host": "t", "userName": user, "path": path}, "endTime": end,
        "rootEntry": {"summ": {"size": 10, "files": 2}}, "tags": {"tag:k": "v"}
    }))
    .unwrap()
}

#[test]
fn catalog_is_newest_first_and_capped() {
    let list: Vec<_> = (0..30)
        .map(|i| manifest(&format!("{i:032x}"), "a", "/p", &format!("2026-01-{:02}T00:00:00Z", i + 1)))
        .collect();
    let (entries, truncated) = kopiur_mover::ops::catalog(list.clone(), 10, 1 << 20);
    assert_eq!(entries.len(), 10);
    assert!(truncated);
    assert_eq!(entries[0].id, format!("{:032x}", 29));
    assert_eq!(entries[0].tags["k"], "v");
    let (entries, truncated) = kopiur_mover::ops::catalog(list.clone(), 1000, 1000);
    assert!(truncated && entries.len() < 30 && !entries.is_empty());
    let (entries, truncated) = kopiur_mover::ops::catalog(list, 1000, 1 << 20);
    assert_eq!((entries.len(), truncated), (30, false));
}

#[test]
fn verify_absent_answers_from_the_full_listing_and_never_from_an_empty_one() {
    use kopiur_mover::ops::verify_absent;
    // 30 snapshots: the catalog reports only the newest 10, the check sees all 30.
    let list: Vec<_> = (0..30)
        .map(|i| manifest(&format!("{i:032x}"), "a", "/p", &format!("2026-01-{:02}T00:00:00Z", i + 1)))
        .collect();
    let (entries, truncated) = kopiur_mover::ops::catalog(list.clone(), 10, 1 << 20);
    assert!(truncated && !entries.iter().any(|e| e.id == format!("{:032x}", 0)));
    let gone = "f".repeat(32);
    let ask = vec![format!("{:032x}", 0), gone.clone(), format!("{:032x}", 29), gone.clone()];
    let a = verify_absent(&list, &ask).expect("a successful listing answers");
    // The oldest snapshot, cut from the reported catalog, is present: only the unknown id is absent.
    assert_eq!(a.absent, vec![gone.clone()]);
    assert_eq!(a.checked, 3, "duplicates are checked once");
    assert_eq!(a.through.as_deref(), Some(gone.as_str()), "the cursor is the last id asked");
    // An empty listing (a wrong prefix, a glitch) proves no absence; nothing asked, nothing answered.
    assert_eq!(verify_absent(&[], &ask), None);
    assert_eq!(verify_absent(&list, &[]), None);
    // At most MAX_VERIFY_SNAPSHOT_IDS are checked, whatever the request holds.
    let many: Vec<String> = (0..kopiur_mover::workspec::MAX_VERIFY_SNAPSHOT_IDS + 5).map(|i| format!("x{i}")).collect();
    let a = verify_absent(&list, &many).unwrap();
    assert_eq!(a.checked as usize, kopiur_mover::workspec::MAX_VERIFY_SNAPSHOT_IDS);
    assert_eq!(a.absent.len(), kopiur_mover::workspec::MAX_VERIFY_SNAPSHOT_IDS);
}

#[test]
fn restore_resolution_as_of_and_offset() {
    let list = vec![
        manifest("a", "app", "/pvc/data", "2026-01-01T00:00:00Z"),
        manifest("b", "app", "/pvc/data", "2026-01-02T00:00:00Z"),
        manifest("c", "app", "/pvc/data", "2026-01-03T00:00:00Z"),
        manifest("x", "other", "/pvc/data", "2026-01-04T00:00:00Z"),
    ];
    let r = |as_of: Option<&str>, offset| ResolveIdentity {
        identity: Identity::new("app", "t"),
        source_path: "/pvc/data".into(),
        as_of: as_of.map(|s| s.parse().unwrap()),
        offset,
    };
    let id = |r: &ResolveIdentity| kopiur_mover::ops::resolve(list.clone(), r).map(|m| m.id);
    assert_eq!(id(&r(None, 0)).as_deref(), Some("c"));
    assert_eq!(id(&r(None, 1)).as_deref(), Some("b"));
    assert_eq!(id(&r(Some("2026-01-02T12:00:00Z"), 0)).as_deref(), Some("b"));
    assert_eq!(id(&r(Some("2025-12-31T00:00:00Z"), 0)), None);
    assert_eq!(id(&r(None, 5)), None);
}

#[test]
fn restore_target_sits_in_a_writable_parent() {
    use kopiur_mover::job::{RESTORE_MOUNT, RESTORE_PARENT};
    let mut i = input(spec(snapshot_op()));
    i.source = None;
    i.restore = Some(PvcMount { claim_name: "target".into(), mount_path: RESTORE_MOUNT.into(), read_only: false });
    let job = job::build_job(&i).unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    let mounts = pod.containers[0].volume_mounts.clone().unwrap();
    let at = |path: &str| mounts.iter().find(|m| m.mount_path == path).map(|m| m.name.clone());
    // kopia removes `<target>.kopia-entry` beside the target: that must not be the read-only root.
    assert_eq!(at(RESTORE_PARENT).as_deref(), Some("restore-parent"));
    assert_eq!(at(RESTORE_MOUNT).as_deref(), Some("restore"));
    assert_eq!(std::path::Path::new(RESTORE_MOUNT).parent(), Some(std::path::Path::new(RESTORE_PARENT)));
    let vols = pod.volumes.unwrap();
    assert!(vols.iter().any(|v| v.name == "restore-parent" && v.empty_dir.is_some()));
    // A backup Job has no such volume.
    let backup = job::build_job(&input(spec(snapshot_op()))).unwrap();
    let bvols = backup.spec.unwrap().template.spec.unwrap().volumes.unwrap();
    assert!(!bvols.iter().any(|v| v.name == "restore-parent"));
}

/// docs/design/mover.md §2.3 "Partial", the SourceError form: kopia exits 1 with a manifest on stdout
/// and a fatal file error that is not a permission error. The attempt is `SourceError`
/// (retryable: the mover exits 1) and the saved manifest's id is recorded. kopia here is a
/// script replaying real kopia 0.23 output for `snapshot create` (the manifest and stderr
/// lines, with an I/O error instead of the permission error a real run produced); every
/// other command succeeds silently. The component test
/// `a_partial_snapshot_records_the_saved_manifest_id` shows real kopia behaving so.
#[test]
fn a_partial_manifest_is_recorded_as_a_source_error() {
    use std::os::unix::fs::PermissionsExt;
    const ID: &str = "d4879fc02645ba5ea64d952087d0c6eb";
    let tmp = tempfile::tempdir().unwrap();
    let manifest = serde_json::json!({
        "id": ID,
        "source": {"host": "t", "userName": "p", "path": "/pvc/data"},
        "description": "", "startTime": "2026-12-02T16:06:04.18461861Z", "endTime": "2026-12-02T16:06:04.187479547Z",
        "rootEntry": {"name": "source", "type": "d", "mode": "0755", "mtime": "2026-12-02T16:06:03.910791017Z",
            "obj": "k885ef79aba7f952c02ffd8da1c09aa2e",
            "summ": {"size": 3, "files": 1, "symlinks": 0, "dirs": 1, "maxTime": "2026-12-02T16:06:00.434791127Z",
                "numFailed": 1, "errors": [{"path": "b", "error": "unable to open file: read /source/b: input/output error"}]}}
    });
    let kopia = tmp.path().join("kopia");
    std::fs::write(
        &kopia,
        format!(
            "#!/bin/sh\ncase \"$1 $2\" in\n\"snapshot create\")\n  printf '%s\\n' '{manifest}'\n  \
             echo 'Snapshotting p@t:/pvc/data ...' >&2\n  \
             echo 'Error when processing \"b\": unable to open file: read /source/b: input/output error' >&2\n  \
             echo 'Found 1 fatal error(s) while snapshotting p@t:/pvc/data.' >&2\n  exit 1;;\nesac\nexit 0\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&kopia, std::fs::Permissions::from_mode(0o755)).unwrap();
    let result = tmp.path().join("result.jsonl");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kopiur-mover"))
        .env("KOPIUR_WORK_SPEC", spec(snapshot_op()).to_json().unwrap())
        .env("KOPIUR_WORKDIR", tmp.path().join("work"))
        .env("KOPIUR_KOPIA_BINARY", &kopia)
        .env("KOPIUR_RESULT_FILE", &result)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "a SourceError is retryable: {log}");
    let reports: Vec<serde_json::Value> =
        std::fs::read_to_string(&result).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let last = reports.last().unwrap_or_else(|| panic!("no report: {log}"));
    let st = &last["body"]["status"];
    assert_eq!(st["failure"]["kopiaErrorClass"], "SourceError", "{st}");
    assert_eq!(st["failure"]["retryRecommended"], true, "{st}");
    assert_eq!(st["snapshot"]["kopiaSnapshotID"], ID, "the partial manifest is recorded: {st}");
    assert!(st.get("phase").is_none(), "a failed attempt writes no phase: {st}");
}

/// docs/design/mover.md §1.2 / docs/design/architecture.md §12: the heartbeat interval defaults to 30 s, in the work spec the
/// controller builds and in a work spec that omits it.
#[test]
fn the_heartbeat_defaults_to_thirty_seconds() {
    assert_eq!(DEFAULT_HEARTBEAT_SECONDS, 30);
    let mut v: serde_json::Value = serde_json::from_str(&spec(snapshot_op()).to_json().unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("heartbeatSeconds");
    assert_eq!(WorkSpec::from_json(&v.to_string()).unwrap().heartbeat_seconds, 30);
}
