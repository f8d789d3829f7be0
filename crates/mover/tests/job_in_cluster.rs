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
        operation: Operation::BootstrapRepository(BootstrapRepositoryOp {
            create_gate: CreateGate::Allowed { via_reinit_ack: false },
            pinned_unique_id: None,
            probe: false,
            list_snapshots: true,
            catalog_limit: 1000,
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
