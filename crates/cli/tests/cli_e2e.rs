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

/// The demo as a newcomer has it: a Ready Repository `r` and its Snapshots in a namespace that
/// is not the kubeconfig context's (the context names none, so it is `default`). `s1`
/// Succeeded and `s2` is still Running, both pinned to `r` (with its uid) like the operator
/// pins them; `old` is pinned to a deleted namesake of `r` (another uid) and is not `r`'s.
async fn seed_demo(client: &Client, ns: &str) -> Result<()> {
    let repos: Api<Repository> = Api::namespaced(client.clone(), ns);
    let repo: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "r", "namespace": ns},
        "spec": {"backend": {"s3": {"bucket": "bkt", "endpoint": "http://127.0.0.1:9", "region": "garage"}},
                 "encryption": {"passwordSecretRef": {"name": "kopia"}}}
    }))?;
    let uid = repos.create(&PostParams::default(), &repo).await?.metadata.uid.context("the repository's uid")?;
    set_status(
        client,
        ns,
        "r",
        json!({"phase": "Ready",
               "conditions": [{"type": "BackendReachable", "status": "True", "reason": "Reachable", "message": "",
                               "lastTransitionTime": Utc::now().to_rfc3339()}]}),
    )
    .await?;
    let snaps: Api<Snapshot> = Api::namespaced(client.clone(), ns);
    for (name, phase, pin_uid) in
        [("s1", "Succeeded", uid.as_str()), ("s2", "Running", &uid), ("old", "Succeeded", "gone")]
    {
        let s: Snapshot = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"policyRef": {"name": "p"}}
        }))?;
        snaps.create(&PostParams::default(), &s).await?;
        let mut status = json!({"phase": phase,
            "resolved": {"repository": {"kind": "Repository", "namespace": ns, "name": "r", "uid": pin_uid}}});
        if phase == "Succeeded" {
            status["snapshot"] = json!({"kopiaSnapshotID": format!("k-{name}")});
        }
        snaps.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status }))).await?;
    }
    Ok(())
}

/// The row of repository `r` in `status` output, and its last column (SNAPSHOTS).
fn snapshots_cell(out: &str, ns: &str) -> Result<String> {
    let header = out.lines().find(|l| l.starts_with("NAMESPACE")).context("the table header")?;
    let col = header.find("SNAPSHOTS").context("a SNAPSHOTS column")?;
    let row = out.lines().find(|l| l.starts_with(&format!("{ns} "))).context("a row for r")?;
    Ok(row.get(col..).unwrap_or("").trim().to_string())
}

/// Issue 16, second bug: the SNAPSHOTS column showed `-` for a repository with a Succeeded
/// Snapshot. It counts the Snapshot objects pinned to the repository (by kind, namespace,
/// name and uid) and the Succeeded ones among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_the_snapshots_pinned_to_each_repository() -> Result<()> {
    let env = TestEnv::start(kopiur_testenv::Options { node_agent: false, ..Default::default() }).await?;
    let client = env.client().await?;
    let cli = Cli { kubeconfig: env.kubeconfig().to_path_buf() };
    let ns = env.namespace("demo").await?;
    seed_demo(&client, &ns).await?;

    let (code, out, _) = cli.run(&["status", "-n", &ns]).await?;
    ensure!(code == 0, "status exits 0");
    let cell = snapshots_cell(&out, &ns)?;
    ensure!(cell == "2 (1 Succeeded)", "s1 and s2 are r's, `old` is its namesake's: SNAPSHOTS {cell:?}\n{out}");
    ensure!(out.contains(&format!("Snapshots in {ns}: Running 1, Succeeded 2")), "per-namespace phases: {out}");
    // The same from -A.
    let (code, out, _) = cli.run(&["status", "-A"]).await?;
    ensure!(code == 0 && snapshots_cell(&out, &ns)? == "2 (1 Succeeded)", "status -A: {out}");
    // Without -n: the context's namespace, and the output says which.
    let (code, out, _) = cli.run(&["status"]).await?;
    ensure!(code == 0 && out.contains("namespace default") && out.contains("-A"), "status, default scope: {out}");
    Ok(())
}

/// Issue 16, first bug: `doctor` without `-n` looked only in the context's namespace and
/// reported "no repositories" and "0 Snapshot(s)" next to the demo. Without `-n` it looks in
/// all namespaces, says so, and falls back to the context's namespace (saying that too) for a
/// user who may not list across namespaces; `-n X` still scopes to X.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_without_a_namespace_looks_in_all_namespaces() -> Result<()> {
    let env = TestEnv::start(kopiur_testenv::Options { node_agent: false, ..Default::default() }).await?;
    let client = env.client().await?;
    let cli = Cli { kubeconfig: env.kubeconfig().to_path_buf() };
    let ns = env.namespace("demo").await?;
    seed_demo(&client, &ns).await?;

    let (_, out, _) = cli.run(&["doctor"]).await?;
    ensure!(!out.contains("no repositories") && !out.contains("no Repository"), "the demo's repository is seen: {out}");
    ensure!(out.contains(&format!("Repository {ns}/r: Ready")), "r reported: {out}");
    ensure!(out.contains("Repositories in all namespaces: 1"), "the scope said: {out}");
    ensure!(out.contains("Snapshots in all namespaces: 3, none Failed"), "the Snapshots counted: {out}");
    // -A is the same.
    let (_, all, _) = cli.run(&["doctor", "-A"]).await?;
    ensure!(all.contains("Repositories in all namespaces: 1"), "doctor -A: {all}");
    // -n X scopes to X, and says so.
    let (_, out, _) = cli.run(&["doctor", "-n", "default"]).await?;
    ensure!(out.contains("no Repository in namespace default; no ClusterRepository"), "-n default: {out}");
    ensure!(out.contains("Snapshots in namespace default: 0"), "-n default: {out}");
    let (_, out, _) = cli.run(&["doctor", "-n", &ns]).await?;
    ensure!(out.contains(&format!("Repositories in namespace {ns}: 1")), "-n {ns}: {out}");

    // A user who may only read kopiur objects in the demo namespace, with a context naming it.
    let rbac = kube::Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &ns);
    rbac.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "reader", "namespace": ns},
            "rules": [{"apiGroups": ["kopiur.home-operations.com"], "resources": ["repositories", "snapshots"],
                       "verbs": ["get", "list"]}]
        }))?,
    )
    .await?;
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "reader", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tenant"}]
            }))?,
        )
        .await?;
    let admin = std::fs::read_to_string(env.kubeconfig())?;
    ensure!(admin.matches("  user:\n").count() == 1 && admin.contains("    cluster: local\n"), "kubeconfig layout");
    let tenant = admin
        .replace("  user:\n", "  user:\n    as: tenant\n")
        .replace("    cluster: local\n", &format!("    cluster: local\n    namespace: {ns}\n"));
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tenant.kubeconfig");
    std::fs::write(&path, tenant)?;
    let tenant = Cli { kubeconfig: path };
    let (_, out, _) = tenant.run(&["doctor"]).await?;
    ensure!(out.contains(&format!("Repository {ns}/r: Ready")), "the tenant's repository: {out}");
    ensure!(
        out.contains("cannot list Repositories in all namespaces") && out.contains(&format!("namespace {ns}")),
        "the fallback is said: {out}"
    );
    ensure!(out.contains(&format!("Snapshots in namespace {ns}: 3, none Failed")), "tenant's Snapshots: {out}");
    ensure!(out.contains("ClusterRepositories: cannot list them"), "unlisted ClusterRepositories are not 0: {out}");
    let (code, out, _) = tenant.run(&["status"]).await?;
    ensure!(code == 0 && snapshots_cell(&out, &ns)? == "2 (1 Succeeded)", "tenant status: {out}");
    Ok(())
}
