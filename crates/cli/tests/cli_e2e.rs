//! `kubectl-kopiur` against a real API server (the local control plane with the shipped CRDs,
//! no operator): each command is run as the user runs it, with KUBECONFIG, and what it wrote
//! is read back. The repository's status is written directly, standing in for the operator.
use std::process::Output;

use anyhow::{Context, Result, ensure};
use chrono::Utc;
use k8s_openapi::api::coordination::v1::Lease;
use kopiur_api::names::annotation;
use kopiur_api::{Repository, Restore, Snapshot};
use kopiur_testenv::TestEnv;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

struct Cli {
    kubeconfig: std::path::PathBuf,
}

impl Cli {
    async fn run(&self, args: &[&str]) -> Result<(i32, String, String)> {
        let out: Output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-kopiur"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .await
            .context("running kubectl-kopiur")?;
        let (so, se) =
            (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
        println!("$ kubectl kopiur {}\n{so}{se}(exit {:?})", args.join(" "), out.status.code());
        Ok((out.status.code().unwrap_or(-1), so, se))
    }
}

async fn set_status(client: &Client, ns: &str, name: &str, status: serde_json::Value) -> Result<()> {
    Api::<Repository>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status })))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_against_a_real_api_server() -> Result<()> {
    let env = TestEnv::start(kopiur_testenv::Options { node_agent: false, ..Default::default() }).await?;
    let client = env.client().await?;
    let cli = Cli { kubeconfig: env.kubeconfig().to_path_buf() };
    let ns = env.namespace("cli").await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "r", "namespace": ns},
        "spec": {"backend": {"s3": {"bucket": "bkt", "endpoint": "http://127.0.0.1:9", "region": "garage"}},
                 "encryption": {"passwordSecretRef": {"name": "kopia"}}}
    }))?;
    repos.create(&PostParams::default(), &repo).await?;
    let opened = Utc::now() - chrono::Duration::minutes(12);
    let retry = Utc::now() + chrono::Duration::minutes(3);
    set_status(
        &client,
        &ns,
        "r",
        json!({
            "phase": "Degraded",
            "conditions": [{"type": "BackendReachable", "status": "False", "reason": "RepositoryUnavailable",
                            "message": "dial tcp: connection refused", "lastTransitionTime": opened.to_rfc3339()}],
            "health": {"consecutiveProbeFailures": 3, "breakerOpenedAt": opened.to_rfc3339(),
                       "strictRetry": {"attempt": 2, "holdoffSeconds": 240, "nextAttemptAt": retry.to_rfc3339()}},
            "deletionProtection": {"pendingExternal": 12, "held": 12}
        }),
    )
    .await?;

    // status: the row, the breaker from the stamped holdoff, and the next steps.
    let (code, out, _) = cli.run(&["status", "-n", &ns]).await?;
    ensure!(code == 0, "status exits 0");
    let row = out.lines().find(|l| l.starts_with(&ns)).context("a row for r")?;
    ensure!(row.contains("Degraded") && row.contains("False") && row.contains("open 12m, retry in"), "row: {row}");
    ensure!(row.split_whitespace().any(|c| c == "12"), "12 held deletions in the row: {row}");
    ensure!(out.contains(&format!("kubectl kopiur ack r -n {ns}")), "the ack advice");
    ensure!(out.contains(&format!("kubectl kopiur reverify r -n {ns}")), "the reverify advice");

    // ack without --yes shows the plan and writes nothing.
    let (code, out, _) = cli.run(&["ack", "r", "-n", &ns]).await?;
    ensure!(code == 2 && out.contains("12 external deletion(s) pending, 12 held") && out.contains("--yes"), "dry run");
    let ann = |r: &Repository, k: &str| r.metadata.annotations.as_ref().and_then(|a| a.get(k).cloned());
    ensure!(ann(&repos.get("r").await?, annotation::ALLOW_MASS_DELETION).is_none(), "a dry run writes no ack");
    // A malformed or future --at is refused with the reason; nothing is written.
    let (code, _, err) = cli.run(&["ack", "r", "-n", &ns, "--at", "yesterday", "--yes"]).await?;
    ensure!(code == 1 && err.contains("not an RFC 3339 time"), "bad --at: {err}");
    let (code, _, err) = cli.run(&["ack", "r", "-n", &ns, "--at", "2999-01-01T00:00:00Z", "--yes"]).await?;
    ensure!(code == 1 && err.contains("in the future"), "future --at: {err}");
    ensure!(ann(&repos.get("r").await?, annotation::ALLOW_MASS_DELETION).is_none(), "refused acks write nothing");
    let before = Utc::now().timestamp();
    let (code, _, _) = cli.run(&["ack", "r", "-n", &ns, "--yes"]).await?;
    ensure!(code == 0, "ack --yes exits 0");
    let value = ann(&repos.get("r").await?, annotation::ALLOW_MASS_DELETION).context("the ack annotation")?;
    let at = chrono::DateTime::parse_from_rfc3339(&value).context("an RFC 3339 ack")?.timestamp();
    ensure!(at >= before - 1 && at <= Utc::now().timestamp(), "the ack is now: {value}");
    // An ack for a repository that does not exist says so.
    let (code, _, err) = cli.run(&["ack", "nope", "-n", &ns, "--yes"]).await?;
    ensure!(code == 1 && err.contains("reading Repository") && err.contains("--cluster"), "missing repo: {err}");

    // reverify stamps the nudge.
    let (code, _, _) = cli.run(&["reverify", "r", "-n", &ns]).await?;
    ensure!(code == 0 && ann(&repos.get("r").await?, annotation::REVERIFY_REQUESTED_AT).is_some(), "reverify nudge");

    // snapshot: a Snapshot of the policy, named as asked.
    let (code, _, _) = cli.run(&["snapshot", "p", "-n", &ns, "--name", "s1", "--pin"]).await?;
    ensure!(code == 0, "snapshot exits 0");
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
    let s1 = snaps.get("s1").await?;
    ensure!(s1.spec.policy_ref.as_ref().map(|p| p.name.as_str()) == Some("p") && s1.spec.pin, "s1 spec");

    // restore: refused, with the reason, while the Snapshot has no kopia snapshot.
    let restores: Api<Restore> = Api::namespaced(client.clone(), &ns);
    let (code, _, err) = cli.run(&["restore", "s1", "--to-pvc", "data", "-n", &ns]).await?;
    ensure!(code == 1 && err.contains("has no kopia snapshot to restore"), "restore of a run without data: {err}");
    ensure!(restores.list(&Default::default()).await?.items.is_empty(), "nothing created");
    snaps
        .patch_status(
            "s1",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"phase": "Succeeded", "snapshot": {"kopiaSnapshotID": "k1"}}})),
        )
        .await?;
    let (code, _, _) = cli.run(&["restore", "s1", "--to-pvc", "data", "-n", &ns, "--name", "rs"]).await?;
    ensure!(code == 0, "restore exits 0");
    let rs = serde_json::to_value(restores.get("rs").await?.spec)?;
    ensure!(
        rs["source"] == json!({"snapshotRef": {"name": "s1"}}) && rs["target"] == json!({"pvcRef": {"name": "data"}}),
        "restore spec: {rs}"
    );
    let (code, _, err) = cli.run(&["restore", "s1", "--new-pvc", "copy", "-n", &ns]).await?;
    ensure!(code != 0 && err.contains("--capacity"), "--new-pvc needs --capacity: {err}");

    // doctor: CRDs fine, no operator lease, a Degraded repository -> exit 1 and each said.
    let (code, out, _) = cli.run(&["doctor", "-n", &ns]).await?;
    ensure!(code == 1, "doctor fails without an operator");
    ensure!(out.contains("kopiur CRDs installed"), "CRDs checked");
    ensure!(out.contains("[FAIL] no operator holds the kopiur-leader lease"), "lease checked");
    ensure!(out.contains("[warn]") && out.contains("Degraded"), "the repository is reported");
    // A fresh leader lease and a Ready repository: doctor passes.
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "kopiur-leader", "namespace": ns},
        "spec": {"holderIdentity": "kopiur-0", "leaseDurationSeconds": 15,
                 "renewTime": Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}
    }))?;
    Api::<Lease>::namespaced(client.clone(), &ns).create(&PostParams::default(), &lease).await?;
    set_status(
        &client,
        &ns,
        "r",
        json!({"phase": "Ready", "health": null, "deletionProtection": null, "conditions": []}),
    )
    .await?;
    let (code, out, _) = cli.run(&["doctor", "-n", &ns]).await?;
    ensure!(code == 0 && out.contains("leader kopiur-0") && out.contains("0 failed"), "doctor passes: {out}");
    Ok(())
}
