//! The repository backend's extra mounts end to end on the local control plane, the process
//! node, Garage and the real mover:
//!
//! - S3 over TLS: Garage behind a TLS front whose CA the test made. With `tls.caBundleRef` the
//!   repository is Ready and a backup succeeds; a missing CA ConfigMap is Stalled
//!   `MissingCaBundle` with no Job, and heals once the ConfigMap exists; a wrong CA, and no
//!   CA at all, are terminal `CertificateError` (Stalled, a message naming caBundleRef) that
//!   never open the circuit breaker.
//! - Filesystem on a PVC: the shipped `deploy/examples/repository-filesystem-pvc.yaml`
//!   bootstraps onto the PVC (the kopia repository appears in the PV's directory), and a
//!   backup and a restore through it succeed byte for byte.
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::{Repository, Restore, Snapshot};
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::tls::{TestCa, TlsFront};
use kopiur_testenv::wait::wait_for;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use support::status::{StatusExt, condition_parts as cond};
mod support;
use serde_json::{Value, json};
use support::env::{Stack, start_operator};
use support::repos::{apply, claim, create_secret, policy, repository, s3_backend_at};
use support::wait::{pv_dir, pvc_bound};

const PASSWORD: &str = "backend-mounts-e2e correct horse";

fn s3_repo(ns: &str, name: &str, g: &Garage, endpoint: &str, tls: Option<Value>) -> Value {
    let mut backend = s3_backend_at(g, endpoint, &format!("{name}/"));
    if let Some(t) = tls {
        backend["s3"]["tls"] = t;
    }
    repository(ns, name, backend, json!({"health": {"probe": {"interval": "30s", "failureThreshold": 1}}}))
}

fn ca_map(ns: &str, name: &str, pem: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"ca.crt": pem}})
}

/// Jobs in `ns` owned by the object with this uid.
async fn owned_jobs(client: &Client, ns: &str, uid: &str) -> Result<usize> {
    let jobs = Api::<Job>::namespaced(client.clone(), ns).list(&ListParams::default()).await?;
    Ok(jobs.items.iter().filter(|j| j.owner_references().iter().any(|o| o.uid == uid)).count())
}

async fn pvc_dir(
    env: &TestEnv,
    client: &Client,
    ns: &str,
    name: &str,
    log: &std::path::Path,
) -> Result<std::path::PathBuf> {
    let pvc = pvc_bound(client, ns, name, &format!("PVC {name} Bound"), Duration::from_secs(60), log).await?;
    pv_dir(env, &pvc)
}

async fn snapshot_succeeds(
    client: &Client,
    ns: &str,
    name: &str,
    policy: &str,
    log: &std::path::Path,
) -> Result<String> {
    apply(
        client,
        ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns}, "spec": {"policyRef": {"name": policy}}
        }),
    )
    .await?;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    let done = wait_for(&format!("{name} Succeeded"), Duration::from_secs(300), log, || async {
        let s = snaps.get(name).await?;
        let p = s.status.as_ref().and_then(|st| st.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        assert_ne!(p, "Failed", "{name} failed: {:?}", s.status.as_ref().and_then(|x| x.failure.clone()));
        Ok((p == "Succeeded").then_some(s))
    })
    .await?;
    done.status
        .and_then(|s| s.snapshot)
        .and_then(|s| s.kopia_snapshot_id)
        .context("the Succeeded Snapshot has a kopia snapshot id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_tls_ca_bundle_and_filesystem_pvc_repositories_end_to_end() -> Result<()> {
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    let front = TlsFront::start(g.s3_addr()).await?;
    let https = format!("https://{}", front.endpoint());

    let (_op, log) = start_operator(env, &op_ns, &[]).await?;

    let ns = env.namespace("t").await?;
    create_secret(&client, &ns, &g, PASSWORD).await?;
    apply(&client, &ns, ca_map(&ns, "s3-ca", front.ca_pem())).await?;
    let stranger = TestCa::generate("some-other-ca")?;
    apply(&client, &ns, ca_map(&ns, "wrong-ca", &stranger.pem)).await?;

    let ca_ref = |name: &str| Some(json!({"caBundleRef": {"configMapName": name}}));
    apply(&client, &ns, s3_repo(&ns, "tls-ok", &g, &https, ca_ref("s3-ca"))).await?;
    apply(&client, &ns, s3_repo(&ns, "tls-missing", &g, &https, ca_ref("late-ca"))).await?;
    apply(&client, &ns, s3_repo(&ns, "tls-wrong", &g, &https, ca_ref("wrong-ca"))).await?;
    apply(&client, &ns, s3_repo(&ns, "tls-none", &g, &https, None)).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);

    // The right CA: Ready, through the TLS front (not Garage's plain port).
    wait_for("tls-ok Ready", Duration::from_secs(300), &log, || async {
        let r = repos.get("tls-ok").await?;
        assert_ne!(r.phase(), "Failed", "tls-ok failed: {:?}", cond(&r, "Ready"));
        Ok((r.phase() == "Ready").then_some(()))
    })
    .await?;
    let ok = repos.get("tls-ok").await?;
    assert!(ok.status.as_ref().and_then(|s| s.unique_id.clone()).is_some_and(|u| !u.is_empty()), "uniqueId pinned");

    // A missing ConfigMap: Stalled MissingCaBundle, and no Job at all.
    let missing = wait_for("tls-missing MissingCaBundle", Duration::from_secs(120), &log, || async {
        let r = repos.get("tls-missing").await?;
        Ok((cond(&r, "Stalled").map(|c| (c.0, c.1)) == Some(("True".into(), "MissingCaBundle".into()))).then_some(r))
    })
    .await?;
    let (_, reason, message) = cond(&missing, "Ready").context("Ready")?;
    assert_eq!(reason, "MissingCaBundle");
    assert!(message.contains("late-ca"), "the message names the ConfigMap: {message}");
    assert_eq!(cond(&missing, "CredentialsAvailable").map(|c| c.1).as_deref(), Some("MissingCaBundle"));
    assert_eq!(owned_jobs(&client, &ns, &missing.uid().unwrap_or_default()).await?, 0, "no Job without the CA");

    // A wrong CA, and none at all: terminal CertificateError with the caBundleRef fix, never
    // Degraded (the breaker stays closed).
    for name in ["tls-wrong", "tls-none"] {
        let r = wait_for(&format!("{name} Failed"), Duration::from_secs(300), &log, || async {
            let r = repos.get(name).await?;
            assert_ne!(r.phase(), "Degraded", "{name}: a certificate error opened the breaker");
            assert_ne!(r.phase(), "Ready", "{name} connected without trusting the CA");
            Ok((r.phase() == "Failed").then_some(r))
        })
        .await?;
        let (_, reason, message) = cond(&r, "Ready").context("Ready")?;
        assert_eq!(reason, "CertificateError", "{name}: {message}");
        assert!(message.contains("caBundleRef"), "{name}: the message names the fix: {message}");
        assert_eq!(cond(&r, "Stalled").map(|c| c.0).as_deref(), Some("True"), "{name} is Stalled");
        assert!(r.status.as_ref().and_then(|s| s.health.as_ref()).and_then(|h| h.breaker_opened_at).is_none());
    }

    // The ConfigMap appears: tls-missing heals to Ready by itself.
    apply(&client, &ns, ca_map(&ns, "late-ca", front.ca_pem())).await?;
    wait_for("tls-missing Ready once its CA exists", Duration::from_secs(300), &log, || async {
        let r = repos.get("tls-missing").await?;
        Ok((r.phase() == "Ready").then_some(()))
    })
    .await?;

    // No half-open loop: a while later the certificate failures are still Failed, not
    // Degraded, and each has no running Job.
    tokio::time::sleep(Duration::from_secs(45)).await;
    for name in ["tls-wrong", "tls-none"] {
        let r = repos.get(name).await?;
        assert_eq!(r.phase(), "Failed", "{name} stays terminal");
        let h = r.status.as_ref().and_then(|s| s.health.clone()).unwrap_or_default();
        assert!(h.breaker_opened_at.is_none() && h.strict_retry.is_none(), "{name}: {h:?}");
    }

    // A backup over TLS.
    apply(&client, &ns, claim(&ns, "data")).await?;
    let data = pvc_dir(env, &client, &ns, "data", &log).await?;
    std::fs::write(data.join("hello.txt"), b"hello over TLS\n")?;
    let blob: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    std::fs::write(data.join("blob.bin"), &blob)?;
    apply(&client, &ns, policy(&ns, "over-tls", json!({"name": "tls-ok"}), "data", json!({}))).await?;
    let id = snapshot_succeeds(&client, &ns, "tls-1", "over-tls", &log).await?;
    println!("backup over TLS: kopia snapshot {id}");
    let job = Api::<Job>::namespaced(client.clone(), &ns).get("tls-1").await?;
    let pod = job.spec.and_then(|s| s.template.spec).context("pod spec")?;
    let ca_vol = pod.volumes.unwrap_or_default().into_iter().find(|v| v.name == "ca-bundle").context("ca volume")?;
    assert_eq!(ca_vol.config_map.map(|c| c.name), Some("s3-ca".to_string()), "the backup Job mounts the CA");
    let mounts = pod.containers[0].volume_mounts.clone().unwrap_or_default();
    assert!(mounts.iter().any(|m| m.name == "ca-bundle" && m.read_only == Some(true)), "read-only: {mounts:?}");

    // Filesystem on a PVC: the shipped example, in this namespace, with its Secret.
    apply(&client, &ns, claim(&ns, "backup-volume")).await?;
    let pw: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia-password", "namespace": ns}, "stringData": {"password": PASSWORD}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &pw).await?;
    let example = std::fs::read_to_string(
        kopiur_testenv::controlplane::repo_root().join("deploy/examples/repository-filesystem-pvc.yaml"),
    )?;
    let mut nas: Value = serde_norway::from_str(&example)?;
    nas["metadata"]["namespace"] = json!(ns);
    apply(&client, &ns, nas).await?;
    let volume_dir = pvc_dir(env, &client, &ns, "backup-volume", &log).await?;
    wait_for("nas Ready", Duration::from_secs(300), &log, || async {
        let r = repos.get("nas").await?;
        assert_ne!(r.phase(), "Failed", "nas failed: {:?}", cond(&r, "Ready"));
        Ok((r.phase() == "Ready").then_some(()))
    })
    .await?;
    let names: Vec<String> =
        std::fs::read_dir(&volume_dir)?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.starts_with("kopia.repository")), "the repository lives on the PVC: {names:?}");
    apply(&client, &ns, policy(&ns, "to-nas", json!({"name": "nas"}), "data", json!({}))).await?;
    let nas_id = snapshot_succeeds(&client, &ns, "nas-1", "to-nas", &log).await?;
    println!("backup onto the PVC repository: kopia snapshot {nas_id}");
    let job = Api::<Job>::namespaced(client.clone(), &ns).get("nas-1").await?;
    let pod = job.spec.and_then(|s| s.template.spec).context("pod spec")?;
    let repo_vol = pod.volumes.unwrap_or_default().into_iter().find(|v| v.name == "repository").context("volume")?;
    assert_eq!(repo_vol.persistent_volume_claim.map(|p| p.claim_name), Some("backup-volume".to_string()));

    apply(
        &client,
        &ns,
        json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": "from-nas", "namespace": ns},
            "spec": {"source": {"snapshotRef": {"name": "nas-1"}},
                     "target": {"pvc": {"name": "restored", "capacity": "1Gi"}}}
        }),
    )
    .await?;
    let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
    wait_for("Restore from-nas Completed", Duration::from_secs(300), &log, || async {
        let r = restores.get("from-nas").await?;
        let p = r.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        assert_ne!(p, "Failed", "restore failed: {:?}", r.status.as_ref().and_then(|s| s.failure.clone()));
        Ok((p == "Completed").then_some(()))
    })
    .await?;
    let out = pvc_dir(env, &client, &ns, "restored", &log).await?;
    assert_eq!(std::fs::read(out.join("hello.txt"))?, b"hello over TLS\n");
    assert_eq!(std::fs::read(out.join("blob.bin"))?, blob, "restored bytes match");
    drop(front);
    Ok(())
}
