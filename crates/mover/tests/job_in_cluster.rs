//! One mover operation as a real Job: the pure Job builder's output is created in the local
//! control plane, the process node agent runs the mover binary as the pod, and the mover
//! writes its bootstrap result into the result ConfigMap through the API with the pod's
//! service account. Backend: a real Garage behind the fault proxy.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, EnvVar, PodSecurityContext, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kopiur_kopia::backend::{Backend, S3Backend};
use kopiur_kopia::cmd::{CacheSizes, Identity};
use kopiur_mover::job::{self, CacheVolume, ConnectKind, JobInput};
use kopiur_mover::result::{BootstrapOutcome, BootstrapResult};
use kopiur_mover::workspec::*;
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::{self, Garage};
use kopiur_testenv::proxy::FaultProxy;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

const PASSWORD: &str = "in-cluster-password-5b1d";

#[tokio::test]
async fn bootstrap_runs_as_a_job() {
    let env = TestEnv::shared();
    let _logs = env.log_guard();
    let client = env.client().await.unwrap();
    let ns = env.namespace("mover-job").await.unwrap();

    // The pod runs as 65532, which cannot traverse the build cache under /root: give it a
    // world-readable copy of kopia.
    let tmp = tempfile::Builder::new().prefix("kopiur-mover-job-").tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let kopia = tmp.path().join("kopia");
    std::fs::copy(kopiur_testenv::tools::kopia().unwrap(), &kopia).unwrap();
    std::fs::set_permissions(&kopia, std::fs::Permissions::from_mode(0o755)).unwrap();

    let g = Garage::start(&tmp.path().join("garage")).await.unwrap();
    let proxy = FaultProxy::start(g.s3_addr()).await.unwrap();

    let pp = PostParams::default();
    let secret = |name: &str, data: BTreeMap<String, String>| -> Secret {
        serde_json::from_value(json!({"metadata": {"name": name}, "stringData": data})).unwrap()
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(&pp, &secret("repo-pw", BTreeMap::from([("KOPIA_PASSWORD".into(), PASSWORD.into())])))
        .await
        .unwrap();
    secrets
        .create(
            &pp,
            &secret(
                "s3-creds",
                BTreeMap::from([
                    ("AWS_ACCESS_KEY_ID".into(), garage::ACCESS_KEY_ID.into()),
                    ("AWS_SECRET_ACCESS_KEY".into(), garage::SECRET_ACCESS_KEY.into()),
                ]),
            ),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(&pp, &serde_json::from_value(json!({"metadata": {"name": "r-discovery-result"}})).unwrap())
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&pp, &serde_json::from_value(json!({"metadata": {"name": "kopiur-mover"}})).unwrap())
        .await
        .unwrap();
    // The mover's RBAC: get/patch ConfigMaps in its namespace (status patches are not
    // needed by bootstrap).
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "kopiur-mover"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "patch"]}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({
                "metadata": {"name": "kopiur-mover"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kopiur-mover"},
                "subjects": [{"kind": "ServiceAccount", "name": "kopiur-mover", "namespace": ns}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    let spec = WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: "Repository".into(),
            namespace: Some(ns.clone()),
            name: "r".into(),
            uid: "uid-r".into(),
        },
        repository: RepositoryInfo {
            kind: "Repository".into(),
            namespace: Some(ns.clone()),
            name: "r".into(),
            uid: "uid-r".into(),
            backend: Backend::S3(S3Backend {
                bucket: garage::BUCKET.into(),
                endpoint: Some(proxy.endpoint()),
                region: Some("garage".into()),
                disable_tls: true,
                ..Default::default()
            }),
            client_identity: Identity::new("kopiur-ops", format!("kopiur.{ns}.r")),
            read_only: false,
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: 60,
        heartbeat_seconds: 30,
        connect_timeout_seconds: None,
        operation: Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: CreateGate::Allowed { via_reinit_ack: false },
            pinned_unique_id: None,
            probe: false,
            list_snapshots: true,
            catalog_limit: 1000,
            verify_snapshot_ids: Vec::new(),
            maintenance_owner: format!("kopiur@kopiur.{ns}.r"),
            create: Default::default(),
        }),
    };
    let input = JobInput {
        name: "r-discovery".into(),
        namespace: ns.clone(),
        image: "kopiur-mover:dev".into(),
        image_pull_policy: None,
        service_account_name: Some("kopiur-mover".into()),
        work_spec: spec,
        password: ("repo-pw".into(), "KOPIA_PASSWORD".into()),
        env_from_secrets: vec!["s3-creds".into()],
        destination_secret: None,
        result_configmap: Some("r-discovery-result".into()),
        connect_kind: Some(ConnectKind::Strict),
        delete_repo_uid: None,
        annotations: BTreeMap::new(),
        // Owned by the ConfigMap only so the Job has a real owner in this test namespace.
        owner: OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "r-discovery-result".into(),
            uid: cms.get("r-discovery-result").await.unwrap().metadata.uid.unwrap(),
            ..Default::default()
        },
        cache: CacheVolume::EmptyDir,
        source: None,
        restore: None,
        repository_volume: None,
        ca_bundle: None,
        resources: None,
        security_context: None,
        // An image would carry `USER 65532`; the process node agent has no image metadata.
        pod_security_context: Some(PodSecurityContext {
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            ..Default::default()
        }),
        node_selector: None,
        tolerations: None,
        affinity: None,
        backoff_limit: 0,
        active_deadline_seconds: 300,
        ttl_seconds_after_finished: Some(job::DEFAULT_TTL_SECONDS),
        rust_log: Some("info,kopia=debug".into()),
        log_format: None,
        extra_env: vec![EnvVar {
            name: "KOPIUR_KOPIA_BINARY".into(),
            value: Some(kopia.display().to_string()),
            value_from: None,
        }],
    };
    let built = job::build_job(&input).unwrap();
    // No secret value in the Job we send.
    let text = serde_json::to_string(&built).unwrap();
    assert!(!text.contains(PASSWORD) && !text.contains(garage::SECRET_ACCESS_KEY));

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    jobs.create(&pp, &built).await.unwrap();
    let start = Instant::now();
    let outcome = loop {
        let j = jobs.get("r-discovery").await.unwrap();
        let conds = j.status.and_then(|s| s.conditions).unwrap_or_default();
        if let Some(c) = conds.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True") {
            break c.type_.clone();
        }
        assert!(start.elapsed() < Duration::from_secs(180), "Job not terminal after 180 s");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!("bootstrap Job {outcome} after {:?}", start.elapsed());
    assert_eq!(outcome, "Complete");
    let cm = cms.get("r-discovery-result").await.unwrap();
    let raw = cm.data.unwrap_or_default().remove("result.json").expect("result.json written by the mover");
    let res: BootstrapResult = serde_json::from_str(&raw).unwrap();
    assert_eq!(res.outcome, BootstrapOutcome::Created, "{raw}");
    assert_eq!(res.unique_id_hex.as_deref().map(str::len), Some(64));
    assert_eq!(res.maintenance_owner, Some(format!("kopiur@kopiur.{ns}.r")));
    assert!(!res.job_uid.is_empty(), "the Job uid reaches the mover");
    assert!(!raw.contains(PASSWORD) && !raw.contains(garage::SECRET_ACCESS_KEY));
    assert!(proxy.stats().bytes_to_upstream > 0);
}

/// The mover binary, run as a process with the test's kubeconfig (so it reports through the
/// API like a pod), against a real Snapshot CR in the local control plane:
/// - docs/design/mover.md §1.2: a work spec whose `targetRef.uid` is not the live Snapshot's (the
///   object was replaced) exits 2 before any kopia command, and writes nothing;
/// - docs/design/mover.md §1.3: with the right uid, the mover merge-PATCHes `status.observedAt` every heartbeat
///   interval while `snapshot create` runs (1 s here instead of 30 s; the wrapper holds the
///   create for 3.5 s), never a phase, then writes the terminal `Succeeded`. Every version of
///   the Snapshot is read from a watch.
#[tokio::test]
async fn the_mover_checks_its_target_uid_and_heartbeats_through_the_api() {
    use futures::StreamExt;
    use kopiur_api::Snapshot;
    use kube::runtime::watcher;

    let env = TestEnv::shared();
    let _logs = env.log_guard();
    let client = env.client().await.unwrap();
    let ns = env.namespace("mover-api").await.unwrap();
    let tmp = tempfile::Builder::new().prefix("kopiur-mover-api-").tempdir().unwrap();
    let g = Garage::start(&tmp.path().join("garage")).await.unwrap();
    let backend = Backend::S3(S3Backend {
        bucket: garage::BUCKET.into(),
        endpoint: Some(g.s3_endpoint()),
        region: Some("garage".into()),
        disable_tls: true,
        ..Default::default()
    });
    // kopia through a wrapper that logs every argv and holds `snapshot create` for 3.5 s.
    let audit = tmp.path().join("argv.log");
    let wrapper = tmp.path().join("kopia-slow-create");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\ncase \"$1 $2\" in \"snapshot create\") sleep 3.5;; esac\nexec '{}' \"$@\"\n",
            audit.display(),
            kopiur_testenv::tools::kopia().unwrap().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..20 {
        std::fs::write(src.join(format!("f{i}")), format!("file {i}")).unwrap();
    }

    let spec = |uid: &str, op: Operation, api: bool| WorkSpec {
        schema_version: SCHEMA_VERSION,
        target_ref: TargetRef {
            api_version: "kopiur.home-operations.com/v1alpha1".into(),
            kind: if api { "Snapshot" } else { "Repository" }.into(),
            namespace: Some(ns.clone()),
            name: "s1".into(),
            uid: uid.into(),
        },
        repository: RepositoryInfo {
            kind: "Repository".into(),
            namespace: Some(ns.clone()),
            name: "r".into(),
            uid: "uid-r".into(),
            backend: backend.clone(),
            client_identity: Identity::new("app", ns.clone()),
            read_only: false,
            cache: CacheSizes::default(),
        },
        command_timeout_seconds: 60,
        heartbeat_seconds: 1,
        connect_timeout_seconds: None,
        operation: op,
    };
    let mover = |ws: WorkSpec, n: u32, result_file: bool| {
        let work = tmp.path().join(format!("work-{n}"));
        std::fs::create_dir_all(&work).unwrap();
        let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_kopiur-mover"));
        c.env("KOPIUR_WORK_SPEC", ws.to_json().unwrap())
            .env("KOPIUR_WORKDIR", &work)
            .env("KOPIUR_KOPIA_BINARY", &wrapper)
            .env("KUBECONFIG", env.kubeconfig())
            .env("POD_NAMESPACE", &ns)
            .env("KOPIA_PASSWORD", PASSWORD)
            .env("AWS_ACCESS_KEY_ID", garage::ACCESS_KEY_ID)
            .env("AWS_SECRET_ACCESS_KEY", garage::SECRET_ACCESS_KEY)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        if result_file {
            c.env("KOPIUR_RESULT_FILE", tmp.path().join(format!("result-{n}.jsonl")));
        }
        async move {
            let out =
                tokio::time::timeout(Duration::from_secs(120), c.output()).await.expect("mover under 120 s").unwrap();
            (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
        }
    };

    // The repository, created by a bootstrap that reports to a file.
    let boot = Operation::BootstrapRepository(BootstrapRepositoryOp {
        create_gate: CreateGate::Allowed { via_reinit_ack: false },
        pinned_unique_id: None,
        probe: false,
        list_snapshots: false,
        catalog_limit: 10,
        verify_snapshot_ids: Vec::new(),
        maintenance_owner: format!("kopiur@kopiur.{ns}.r"),
        create: Default::default(),
    });
    let (code, log) = mover(spec("uid-r", boot, false), 1, true).await;
    assert_eq!(code, 0, "{log}");

    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let created = snaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
                "metadata": {"name": "s1", "namespace": ns}, "spec": {"policyRef": {"name": "p"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    // Every version of s1 from here on.
    let seen: std::sync::Arc<std::sync::Mutex<Vec<(Instant, Snapshot)>>> = Default::default();
    let watch = {
        let seen = seen.clone();
        let stream = watcher(snaps.clone(), watcher::Config::default().fields("metadata.name=s1"));
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = ev {
                    seen.lock().unwrap().push((Instant::now(), s));
                }
            }
        })
    };
    let op = || {
        Operation::Snapshot(SnapshotOp {
            mount_path: src.display().to_string(),
            source_path: "/pvc/data".into(),
            snapshot: format!("{ns}/s1"),
            snapshot_uid: uid.clone(),
            tags: BTreeMap::new(),
            description: None,
            policy: Default::default(),
            fail_fast: false,
            upload_limit_mb: None,
            parallel: None,
        })
    };

    // docs/design/mover.md §1.2: the uid of an earlier s1 (the object was replaced): exit 2, no kopia, no write.
    let kopia_calls = || std::fs::read_to_string(&audit).unwrap_or_default().lines().count();
    let before = kopia_calls();
    let t = Instant::now();
    let (code, log) = mover(spec("uid-of-an-earlier-s1", op(), true), 2, false).await;
    eprintln!("uid mismatch: exit {code} after {:?}", t.elapsed());
    assert_eq!(code, 2, "a uid mismatch on targetRef exits 2: {log}");
    assert!(log.contains("does not match"), "the log says why: {log}");
    assert_eq!(kopia_calls(), before, "no kopia command ran");
    let s = snaps.get("s1").await.unwrap();
    assert!(s.status.is_none(), "nothing was written: {:?}", s.status);

    // docs/design/mover.md §1.3: the heartbeat, then the terminal phase.
    let t = Instant::now();
    let (code, log) = mover(spec(&uid, op(), true), 3, false).await;
    let took = t.elapsed();
    assert_eq!(code, 0, "{log}");
    let terminal = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let done = seen.lock().unwrap().iter().any(|(_, s)| {
                s.status.as_ref().and_then(|st| st.phase.as_ref()).is_some_and(|p| p.as_str() == "Succeeded")
            });
            if done {
                break;
            }
            assert!(Instant::now() < deadline, "the terminal Succeeded never arrived on the watch");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        seen.lock().unwrap().clone()
    };
    watch.abort();
    let mut beats: Vec<chrono::DateTime<chrono::Utc>> = Vec::new();
    for (_, s) in &terminal {
        let Some(st) = &s.status else { continue };
        let phase = st.phase.as_ref().map(|p| p.as_str().to_string());
        let at = st.observed_at;
        if phase.is_none() {
            let at = at.expect("a version without a phase is a heartbeat and carries observedAt");
            assert!(st.snapshot.is_none() && st.failure.is_none(), "a heartbeat writes observedAt only: {st:?}");
            if beats.last() != Some(&at) {
                beats.push(at);
            }
        }
    }
    eprintln!("heartbeats {beats:?} during a {took:?} run");
    assert!(beats.len() >= 2, "at least two heartbeats during a 3.5 s create at 1 s: {beats:?}");
    for w in beats.windows(2) {
        let gap = (w[1] - w[0]).num_seconds();
        assert!((1..=3).contains(&gap), "heartbeats every interval (1 s), not {gap} s apart: {beats:?}");
    }
    let last = terminal.last().map(|(_, s)| s.status.clone().unwrap_or_default()).unwrap_or_default();
    assert_eq!(last.phase.as_ref().map(|p| p.as_str()), Some("Succeeded"));
    assert!(last.snapshot.as_ref().and_then(|s| s.kopia_snapshot_id.clone()).is_some(), "{last:?}");
}
