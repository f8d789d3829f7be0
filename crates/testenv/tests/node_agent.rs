//! Node agent self-verification (docs/testenv.md; harness checks HV-5..HV-9) against the shared real
//! control plane: Jobs complete and fail as the Job controller expects, env and volumes
//! reach the process, and deletion ends it.
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kopiur_testenv::TestEnv;
use kopiur_testenv::node::{pv_dir, read_pod_log};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn sh(script: &str) -> Value {
    json!(["sh", "-c", script])
}

fn job(name: &str, backoff_limit: i32, extra: Value, pod_spec: Value) -> Job {
    let mut spec = json!({"backoffLimit": backoff_limit, "template": {"spec": pod_spec}});
    if let (Value::Object(s), Value::Object(e)) = (&mut spec, extra) {
        s.extend(e);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn condition(job: &Job, kind: &str) -> Option<(String, Option<String>)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

fn phase(p: &Pod) -> Option<String> {
    p.status.as_ref().and_then(|s| s.phase.clone())
}

fn terminated(p: &Pod, container: &str) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()?
        .terminated
        .clone()
}

fn waiting(p: &Pod, container: &str) -> Option<k8s_openapi::api::core::v1::ContainerStateWaiting> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .state
        .as_ref()?
        .waiting
        .clone()
}

async fn wait_terminal(pods: &Api<Pod>, name: &str, timeout: Duration) -> Pod {
    eventually(&format!("pod {name} terminal"), timeout, || async {
        let p = pods.get_opt(name).await.ok().flatten()?;
        matches!(phase(&p).as_deref(), Some("Succeeded" | "Failed")).then_some(p)
    })
    .await
}

async fn job_pods(client: &Client, ns: &str, job: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.list(&ListParams::default().labels(&format!("job-name={job}"))).await.unwrap().items
}

/// HV-5: a Job whose pod exits 0 completes; the job-tracking finalizer is released.
#[tokio::test]
async fn hv5_job_complete() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv5").await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let spec =
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": sh("exit 0")}]});
    jobs.create(&PostParams::default(), &job("ok", 0, json!({}), spec)).await?;
    let done = eventually("Job Complete=True", Duration::from_secs(60), || async {
        let j = jobs.get("ok").await.ok()?;
        (condition(&j, "Complete").map(|c| c.0).as_deref() == Some("True")).then_some(j)
    })
    .await;
    assert_eq!(done.status.as_ref().and_then(|s| s.succeeded), Some(1));
    let pods = eventually("pod without the job-tracking finalizer", Duration::from_secs(20), || async {
        let pods = job_pods(&client, &ns, "ok").await;
        let released = pods
            .iter()
            .all(|p| !p.metadata.finalizers.iter().flatten().any(|f| f == "batch.kubernetes.io/job-tracking"));
        (!pods.is_empty() && released).then_some(pods)
    })
    .await;
    assert_eq!(pods.len(), 1);
    assert_eq!(phase(&pods[0]).as_deref(), Some("Succeeded"));
    let t = terminated(&pods[0], "c").expect("terminated state");
    assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
    assert!(t.finished_at.is_some() && t.started_at.is_some());
    Ok(())
}

/// HV-6: `exit 3` with backoffLimit 2 gives exactly 3 failed pods, then BackoffLimitExceeded.
#[tokio::test]
async fn hv6_job_backoff_limit_exceeded() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv6").await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let spec =
        json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": sh("exit 3")}]});
    let t0 = Instant::now();
    jobs.create(&PostParams::default(), &job("fail", 2, json!({}), spec)).await?;
    let failed = eventually("Job Failed=True", Duration::from_secs(60), || async {
        let j = jobs.get("fail").await.ok()?;
        condition(&j, "Failed").filter(|c| c.0 == "True")
    })
    .await;
    let elapsed = t0.elapsed();
    assert_eq!(failed.1.as_deref(), Some("BackoffLimitExceeded"));
    assert!(elapsed < Duration::from_secs(20), "Job took {elapsed:?} to fail");
    let pods = job_pods(&client, &ns, "fail").await;
    assert_eq!(
        pods.len(),
        3,
        "exactly backoffLimit+1 pods: {:?}",
        pods.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
    for p in &pods {
        assert_eq!(phase(p).as_deref(), Some("Failed"));
        let t = terminated(p, "c").expect("terminated state");
        assert_eq!((t.exit_code, t.reason.as_deref()), (3, Some("Error")));
    }
    Ok(())
}

/// HV-6: activeDeadlineSeconds on a long sleeper fails the Job with DeadlineExceeded; the
/// agent confirms the Job controller's deletion of the running pod.
#[tokio::test]
async fn hv6_job_active_deadline() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv6d").await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let spec = json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox", "command": sh("sleep 600")}]});
    jobs.create(&PostParams::default(), &job("slow", 6, json!({"activeDeadlineSeconds": 2}), spec)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    eventually("the pod runs", Duration::from_secs(30), || async {
        job_pods(&client, &ns, "slow").await.iter().any(|p| phase(p).as_deref() == Some("Running")).then_some(())
    })
    .await;
    let failed = eventually("Job Failed=True", Duration::from_secs(40), || async {
        let j = jobs.get("slow").await.ok()?;
        condition(&j, "Failed").filter(|c| c.0 == "True")
    })
    .await;
    assert_eq!(failed.1.as_deref(), Some("DeadlineExceeded"));
    eventually("the Job's pods are gone", Duration::from_secs(20), || async {
        pods.list(&ListParams::default().labels("job-name=slow")).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    Ok(())
}

/// HV-7: env sources reach the process; a missing key is a CreateContainerConfigError; an
/// unmapped image is an ErrImagePull naming it.
#[tokio::test]
async fn hv7_env_sources_and_config_errors() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv7").await?;
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "creds"}, "stringData": {"password": "hunter2"}}))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "cfg"}, "data": {"mode": "fast", "extra": "e1"}}))?;
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let spec = json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": "c", "image": "busybox",
            "command": ["sh", "-c"],
            "args": ["printf '%s|%s|%s|%s|%s|%s|%s|%s' \"$PW\" \"$MODE\" \"$CFG_extra\" \"$CFG_mode\" \"$POD\" \"$NS\" \"$GREETING\" '$(POD)' > /dev/termination-log; echo logged-$(POD)"],
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
            "env": [
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "GREETING", "value": "hi-$(POD)-$$(POD)"},
            ],
        }],
    });
    pods.create(&PostParams::default(), &pod("envpod", spec)).await?;
    let p = wait_terminal(&pods, "envpod", Duration::from_secs(60)).await;
    let t = terminated(&p, "c").expect("terminated");
    assert_eq!(phase(&p).as_deref(), Some("Succeeded"), "{t:?}");
    assert_eq!(
        t.message.as_deref(),
        Some(format!("hunter2|fast|e1|fast|envpod|{ns}|hi-envpod-$(POD)|envpod").as_str())
    );
    let uid = p.metadata.uid.clone().unwrap();
    let log = read_pod_log(&env.node_state_dir(), &ns, "envpod", &uid, "c", 0)?;
    assert_eq!(log.trim(), "logged-envpod");

    let spec = json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": "c", "image": "busybox", "command": sh("exit 0"),
            "env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}],
        }],
    });
    pods.create(&PostParams::default(), &pod("missingkey", spec)).await?;
    let w = eventually("CreateContainerConfigError", Duration::from_secs(30), || async {
        let p = pods.get("missingkey").await.ok()?;
        waiting(&p, "c").filter(|w| w.reason.as_deref() == Some("CreateContainerConfigError")).map(|w| (w, p))
    })
    .await;
    assert!(w.0.message.unwrap_or_default().contains("nope"));
    assert_eq!(phase(&w.1).as_deref(), Some("Pending"));

    let spec = json!({"restartPolicy": "Never", "containers": [{"name": "c", "image": "nobody/unmapped:1.0", "command": sh("exit 0")}]});
    pods.create(&PostParams::default(), &pod("unmapped", spec)).await?;
    let w = eventually("ErrImagePull", Duration::from_secs(30), || async {
        let p = pods.get("unmapped").await.ok()?;
        waiting(&p, "c").filter(|w| w.reason.as_deref() == Some("ErrImagePull"))
    })
    .await;
    assert!(w.message.unwrap_or_default().contains("nobody/unmapped:1.0"));
    Ok(())
}

/// HV-8: a class-less PVC binds; pod A writes /data/x, pod B reads it; the file is in the
/// PV's host directory; a readOnly mount refuses writes; the hostname is the pod name.
#[tokio::test]
async fn hv8_pvc_at_mount_path() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv8").await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}},
    }))?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    let bound = eventually("PVC Bound", Duration::from_secs(30), || async {
        let p = pvcs.get("data").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(p)
    })
    .await;
    assert_eq!(bound.spec.as_ref().unwrap().storage_class_name.as_deref(), Some(kopiur_testenv::node::STORAGE_CLASS));
    let uid = bound.metadata.uid.clone().unwrap();
    assert_eq!(bound.spec.as_ref().unwrap().volume_name.as_deref(), Some(format!("pvc-{uid}").as_str()));

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let with_data = |script: &str, read_only: bool| {
        json!({
            "restartPolicy": "Never",
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "c", "image": "busybox", "command": sh(script),
                            "volumeMounts": [{"name": "d", "mountPath": "/data", "readOnly": read_only}]}],
        })
    };
    pods.create(&PostParams::default(), &pod("writer", with_data("echo hello > /data/x", false))).await?;
    let a = wait_terminal(&pods, "writer", Duration::from_secs(60)).await;
    assert_eq!(phase(&a).as_deref(), Some("Succeeded"), "{:?}", terminated(&a, "c"));
    let host_file = pv_dir(&env.node_state_dir(), &uid).join("x");
    assert_eq!(std::fs::read_to_string(&host_file)?, "hello\n");
    assert!(!std::path::Path::new("/data/x").exists(), "the mount stays in the pod's namespace");

    pods.create(&PostParams::default(), &pod("reader", with_data("cat /data/x > /dev/termination-log", false))).await?;
    let b = wait_terminal(&pods, "reader", Duration::from_secs(60)).await;
    assert_eq!(phase(&b).as_deref(), Some("Succeeded"));
    assert_eq!(terminated(&b, "c").unwrap().message.as_deref(), Some("hello\n"));

    let script = "hostname > /dev/termination-log; if echo y > /data/y; then exit 0; else exit 7; fi";
    pods.create(&PostParams::default(), &pod("readonly", with_data(script, true))).await?;
    let c = wait_terminal(&pods, "readonly", Duration::from_secs(60)).await;
    let t = terminated(&c, "c").unwrap();
    assert_eq!(t.exit_code, 7, "the write must be refused");
    assert_eq!(t.message.as_deref(), Some("readonly\n"));
    assert!(!pv_dir(&env.node_state_dir(), &uid).join("y").exists());

    // NA-8: once the claim is gone, the directory and the PV go. Its pods go first: even
    // terminal pods keep a claim in use for the pvc-protection controller.
    for name in ["writer", "reader", "readonly"] {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    pvcs.delete("data", &DeleteParams::default()).await?;
    let pvs: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(client.clone());
    let pv_name = format!("pvc-{uid}");
    eventually("PV deleted", Duration::from_secs(30), || async {
        pvs.get_opt(&pv_name).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(!pv_dir(&env.node_state_dir(), &uid).exists(), "PV directory removed");
    Ok(())
}

/// NA-16: `OnFailure` restarts in place, keeping the emptyDir; the restart is counted and the
/// previous exit lands in lastState.
#[tokio::test]
async fn na16_on_failure_restarts_in_place() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("na16").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let spec = json!({
        "restartPolicy": "OnFailure",
        "volumes": [{"name": "scratch", "emptyDir": {}}],
        "containers": [{"name": "c", "image": "busybox",
            "command": sh("if [ -f /scratch/seen ]; then echo second > /dev/termination-log; exit 0; fi; touch /scratch/seen; echo first > /dev/termination-log; exit 4"),
            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
    });
    pods.create(&PostParams::default(), &pod("retry", spec)).await?;
    let p = wait_terminal(&pods, "retry", Duration::from_secs(60)).await;
    assert_eq!(phase(&p).as_deref(), Some("Succeeded"));
    let cs = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
    assert_eq!(cs.restart_count, 1);
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref()).expect("lastState.terminated");
    assert_eq!((last.exit_code, last.message.as_deref()), (4, Some("first\n")));
    let now = cs.state.as_ref().and_then(|s| s.terminated.as_ref()).unwrap();
    assert_eq!((now.exit_code, now.message.as_deref()), (0, Some("second\n")));
    let uid = p.metadata.uid.clone().unwrap();
    assert!(read_pod_log(&env.node_state_dir(), &ns, "retry", &uid, "c", 1).is_ok(), "one log file per restart");
    Ok(())
}

/// NA-9/NA-11: init containers, emptyDir, secret/configMap/downwardAPI files, the
/// service-account token, and runAsUser + fsGroup.
#[tokio::test]
async fn na9_volumes_init_and_identity() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("na9").await?;
    let secret: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"password": "pw1", "other": "o"}}))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &secret).await?;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"conf": "k=v"}}))?;
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &cm).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let script = r#"set -e
out="uid=$(id -u)"
out="$out init=$(cat /workdir/from-init)"
out="$out pw=$(cat /etc/creds/pw)"
[ ! -e /etc/creds/other ]
out="$out mode=$(stat -c %a /etc/creds/pw)"
out="$out conf=$(cat /etc/conf/conf)"
out="$out name=$(cat /etc/info/name)"
touch /workdir/mine
out="$out gid=$(stat -c %g /workdir/mine)"
out="$out ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
[ -s /var/run/secrets/kubernetes.io/serviceaccount/token ]
printf '%s' "$out" > /dev/termination-log"#;
    let spec = json!({
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "creds", "secret": {"secretName": "s", "items": [{"key": "password", "path": "pw", "mode": 0o440}]}},
            {"name": "conf", "configMap": {"name": "c"}},
            {"name": "info", "downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        ],
        "initContainers": [{"name": "init", "image": "busybox", "command": sh("echo from-init > /workdir/from-init"),
                            "volumeMounts": [{"name": "work", "mountPath": "/workdir"}]}],
        "containers": [{"name": "main", "image": "busybox", "command": sh(script),
            "volumeMounts": [
                {"name": "work", "mountPath": "/workdir"},
                {"name": "creds", "mountPath": "/etc/creds", "readOnly": true},
                {"name": "conf", "mountPath": "/etc/conf"},
                {"name": "info", "mountPath": "/etc/info"},
            ]}],
    });
    pods.create(&PostParams::default(), &pod("vols", spec)).await?;
    let p = wait_terminal(&pods, "vols", Duration::from_secs(60)).await;
    let uid = p.metadata.uid.clone().unwrap();
    let log = read_pod_log(&env.node_state_dir(), &ns, "vols", &uid, "main", 0).unwrap_or_default();
    let t = terminated(&p, "main").expect("terminated");
    assert_eq!(phase(&p).as_deref(), Some("Succeeded"), "{t:?} log: {log}");
    assert_eq!(
        t.message.as_deref(),
        Some(format!("uid=1000 init=from-init pw=pw1 mode=440 conf=k=v name=vols gid=2000 ns={ns}").as_str())
    );
    let init = p.status.as_ref().unwrap().init_container_statuses.as_ref().unwrap();
    assert_eq!(init[0].state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 0);
    Ok(())
}

/// NA-16 (optional part): the pod's own activeDeadlineSeconds kills it: Failed, DeadlineExceeded.
#[tokio::test]
async fn na16_pod_active_deadline() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("na16d").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let spec = json!({"restartPolicy": "Never", "activeDeadlineSeconds": 1,
                      "containers": [{"name": "c", "image": "busybox", "command": sh("sleep 600")}]});
    pods.create(&PostParams::default(), &pod("deadline", spec)).await?;
    let p = wait_terminal(&pods, "deadline", Duration::from_secs(30)).await;
    let st = p.status.as_ref().unwrap();
    assert_eq!(st.phase.as_deref(), Some("Failed"));
    assert_eq!(st.reason.as_deref(), Some("DeadlineExceeded"));
    let t = terminated(&p, "c").expect("terminated");
    assert!(t.exit_code == 137 || t.exit_code == 143, "{t:?}");
    Ok(())
}

/// HV-9: deleting a running pod sends SIGTERM to its process and the object is gone within 10 s.
#[tokio::test]
async fn hv9_delete_running_pod() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("hv9").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox",
                        "command": sh("trap 'echo got-TERM; exit 0' TERM; echo started; sleep 600 & wait")}],
    });
    pods.create(&PostParams::default(), &pod("sleeper", spec)).await?;
    let running = eventually("pod Running", Duration::from_secs(30), || async {
        let p = pods.get("sleeper").await.ok()?;
        (phase(&p).as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let uid = running.metadata.uid.clone().unwrap();
    let cid = running.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].container_id.clone().unwrap();
    let pid: i32 = cid.strip_prefix("proc://").expect("proc:// container id").parse()?;
    assert!(process_alive(pid), "container process {pid} runs");
    // Let the shell install its trap before the signal arrives.
    eventually("the container logged", Duration::from_secs(10), || async {
        read_pod_log(&env.node_state_dir(), &ns, "sleeper", &uid, "c", 0)
            .ok()
            .filter(|l| l.contains("started"))
            .map(|_| ())
    })
    .await;

    let t0 = Instant::now();
    pods.delete("sleeper", &DeleteParams::default()).await?;
    eventually("pod object gone", Duration::from_secs(10), || async {
        pods.get_opt("sleeper").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(!process_alive(pid), "container process {pid} ended");
    let log = read_pod_log(&env.node_state_dir(), &ns, "sleeper", &uid, "c", 0)?;
    assert!(log.contains("got-TERM"), "SIGTERM reached the container: {log:?}");
    Ok(())
}

fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').map(|(_, r)| !r.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

/// (uid, gid, mode) of a path, not following symlinks.
fn owner_mode(p: &std::path::Path) -> (u32, u32, u32) {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(p).unwrap();
    (md.uid(), md.gid(), md.mode() & 0o7777)
}

/// NA-11: the fsGroup never rewrites the user's data. A database-like PVC on a hostPath PV
/// (`drwx------ 999:999` holding `-rw------- 999:999`) and a hostPath volume keep their
/// ownership and modes, whether mounted read-only (as a backup mover does) or read-write;
/// an emptyDir still gets the fsGroup, which is also a supplementary group of the process.
#[tokio::test]
async fn na11_fs_group_leaves_user_data_alone() -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to chown the fixture");
        return Ok(());
    }
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("na11").await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "pgdata"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Mi"}}},
    }))?;
    pvcs.create(&PostParams::default(), &pvc).await?;
    let bound = eventually("PVC Bound", Duration::from_secs(30), || async {
        let p = pvcs.get("pgdata").await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(p)
    })
    .await;
    let pv_name = bound.spec.as_ref().unwrap().volume_name.clone().unwrap();
    let pv = Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(client.clone()).get(&pv_name).await?;
    let pv_path =
        pv.spec.as_ref().unwrap().host_path.as_ref().expect("the provisioner makes hostPath PVs").path.clone();
    let pv_root = std::path::PathBuf::from(pv_path);

    // The fixture: what a database leaves on its volume.
    let fixture = |root: &std::path::Path| -> Result<Vec<std::path::PathBuf>> {
        use std::os::unix::fs::PermissionsExt;
        let dir = root.join("pgdata");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("PG_VERSION"), b"17\n")?;
        std::os::unix::fs::chown(&dir, Some(999), Some(999))?;
        std::os::unix::fs::chown(dir.join("PG_VERSION"), Some(999), Some(999))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        std::fs::set_permissions(dir.join("PG_VERSION"), std::fs::Permissions::from_mode(0o600))?;
        Ok(vec![root.to_path_buf(), dir.clone(), dir.join("PG_VERSION")])
    };
    let host_dir = env.node_state_dir().join(format!("hostpath-{ns}"));
    let mut watched = fixture(&pv_root)?;
    watched.extend(fixture(&host_dir)?);
    let before: Vec<_> = watched.iter().map(|p| owner_mode(p)).collect();
    assert_eq!(before[1], (999, 999, 0o700));
    assert_eq!(before[2], (999, 999, 0o600));

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let script = r#"set -e
cat /data/pgdata/PG_VERSION > /dev/null
cat /host/pgdata/PG_VERSION > /dev/null
printf 'scratch=%s:%s groups=%s' "$(stat -c %g /scratch)" "$(stat -c %a /scratch)" "$(id -G)" > /dev/termination-log"#;
    for (name, read_only) in [("mover", true), ("writer", false)] {
        let spec = json!({
            "restartPolicy": "Never",
            "securityContext": {"fsGroup": 65532},
            "volumes": [
                {"name": "src", "persistentVolumeClaim": {"claimName": "pgdata"}},
                {"name": "host", "hostPath": {"path": host_dir.to_string_lossy(), "type": "Directory"}},
                {"name": "scratch", "emptyDir": {}},
            ],
            "containers": [{"name": "c", "image": "busybox", "command": sh(script),
                "volumeMounts": [
                    {"name": "src", "mountPath": "/data", "readOnly": read_only},
                    {"name": "host", "mountPath": "/host", "readOnly": read_only},
                    {"name": "scratch", "mountPath": "/scratch"},
                ]}],
        });
        pods.create(&PostParams::default(), &pod(name, spec)).await?;
        let p = wait_terminal(&pods, name, Duration::from_secs(60)).await;
        let uid = p.metadata.uid.clone().unwrap();
        let log = read_pod_log(&env.node_state_dir(), &ns, name, &uid, "c", 0).unwrap_or_default();
        let t = terminated(&p, "c").expect("terminated");
        assert_eq!(phase(&p).as_deref(), Some("Succeeded"), "{name}: {t:?} log: {log}");
        let msg = t.message.unwrap_or_default();
        assert!(msg.starts_with("scratch=65532:2777 "), "{name}: the emptyDir gets the fsGroup: {msg}");
        let groups = msg.split("groups=").nth(1).unwrap_or_default();
        assert!(groups.split_whitespace().any(|g| g == "65532"), "{name}: fsGroup is a supplementary group: {msg}");
        let after: Vec<_> = watched.iter().map(|p| owner_mode(p)).collect();
        assert_eq!(after, before, "{name} (read-only={read_only}) changed ownership or modes of {watched:?}");
    }
    for name in ["mover", "writer"] {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    let _ = std::fs::remove_dir_all(&host_dir);
    Ok(())
}

/// NA-18: deleting a pod ends its whole process tree, including a grandchild that moved to
/// a session (and process group) of its own, as kopia under the mover does. Also when PID 1
/// ends on its own.
#[tokio::test]
async fn na18_pod_end_leaves_no_process() -> Result<()> {
    let env = TestEnv::shared();
    let _g = env.log_guard();
    let client = env.client().await?;
    let ns = env.namespace("na18t").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let marker = format!("kopiur-tree-marker-{ns}-{}", std::process::id());
    // The grandchild names the marker in its argv ($0) and creates /scratch/ready once it runs.
    let grandchild = format!("setsid sh -c 'touch /scratch/ready; sleep 1000; :' {marker}-a &");
    let spec = |script: String| {
        json!({
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{"name": "c", "image": "busybox", "command": sh(&script),
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
        })
    };
    let wait_ready = "while [ ! -e /scratch/ready ]; do sleep 0.05; done";

    // 1. Deleted while running.
    pods.create(&PostParams::default(), &pod("deleted", spec(format!("{grandchild} {wait_ready}; echo up; wait"))))
        .await?;
    let running = eventually("pod Running", Duration::from_secs(30), || async {
        let p = pods.get("deleted").await.ok()?;
        (phase(&p).as_deref() == Some("Running")).then_some(p)
    })
    .await;
    let uid = running.metadata.uid.clone().unwrap();
    eventually("the grandchild runs", Duration::from_secs(20), || async {
        read_pod_log(&env.node_state_dir(), &ns, "deleted", &uid, "c", 0).ok().filter(|l| l.contains("up")).map(|_| ())
    })
    .await;
    let cid = running.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].container_id.clone().unwrap();
    let shim: i32 = cid.strip_prefix("proc://").expect("proc:// container id").parse()?;
    let tree = kopiur_testenv::process::processes_with(&format!("{marker}-a"));
    assert!(
        tree.iter().any(|p| kopiur_testenv::process::pgid_of(*p).is_some_and(|g| g != shim)),
        "a process of the pod runs outside the container's process group: {tree:?}"
    );
    pods.delete("deleted", &DeleteParams::default()).await?;
    eventually("pod object gone", Duration::from_secs(30), || async {
        pods.get_opt("deleted").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(
        kopiur_testenv::process::processes_with(&format!("{marker}-a")),
        Vec::<i32>::new(),
        "the pod's processes outlived it"
    );
    assert!(!process_alive(shim));

    // 2. PID 1 exits while the grandchild still runs: the pod succeeds, the grandchild ends.
    let grandchild_b = grandchild.replace(&format!("{marker}-a"), &format!("{marker}-b"));
    pods.create(&PostParams::default(), &pod("exits", spec(format!("{grandchild_b} {wait_ready}; exit 0")))).await?;
    let p = wait_terminal(&pods, "exits", Duration::from_secs(60)).await;
    assert_eq!(phase(&p).as_deref(), Some("Succeeded"), "{:?}", terminated(&p, "c"));
    assert_eq!(terminated(&p, "c").unwrap().exit_code, 0);
    assert_eq!(
        kopiur_testenv::process::processes_with(&format!("{marker}-b")),
        Vec::<i32>::new(),
        "the grandchild outlived PID 1"
    );
    pods.delete("exits", &DeleteParams::default()).await?;
    Ok(())
}
