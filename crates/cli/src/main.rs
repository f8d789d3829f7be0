//! `kubectl kopiur`: the operator's companion for the common human actions. It reads and
//! writes the same objects `kubectl` would (it uses the current kubeconfig context), so
//! everything it does is visible and reversible in plain YAML:
//!
//! - `status`: repositories with their breaker and held deletions, Snapshot counts per phase;
//! - `snapshot <policy>`: a manual backup now (`--wait` follows it to the end);
//! - `restore <snapshot> --to-pvc|--new-pvc`: a Restore of one Snapshot;
//! - `ack <repository>`: the mass-deletion acknowledgement, after showing what it releases;
//! - `reverify <repository>`: ask for a connect now instead of waiting for the holdoff;
//! - `doctor`: CRDs, the operator's leader lease, repositories and failures, with next steps;
//!   in all namespaces unless `-n` (it checks the installation, not one namespace).
mod report;

use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::Utc;
use clap::{Parser, Subcommand};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kopiur_api::names::annotation;
use kopiur_api::{ClusterRepository, Repository, Restore, Snapshot};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use report::{Finding, RepoRow, Scope, SnapRow};
use serde_json::json;

#[derive(Parser)]
#[command(name = "kubectl-kopiur", version, about = "Operate kopiur backups: status, manual runs, restores, acks")]
struct Cli {
    /// Namespace (default: the kubeconfig context's; `doctor` looks in all namespaces).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Repositories (phase, breaker, held deletions) and Snapshot counts per phase.
    Status {
        /// Every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
    /// Back up now: a Snapshot of the policy.
    Snapshot {
        policy: String,
        /// The Snapshot's name (default `<policy>-manual-<unix seconds>`).
        #[arg(long)]
        name: Option<String>,
        /// Exempt it from retention.
        #[arg(long)]
        pin: bool,
        /// Wait until it ends; exits 1 if it failed.
        #[arg(long)]
        wait: bool,
        /// How long `--wait` waits, in seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Restore one Snapshot into a PVC.
    Restore {
        snapshot: String,
        /// An existing PVC to restore into.
        #[arg(long, conflicts_with = "new_pvc", required_unless_present = "new_pvc")]
        to_pvc: Option<String>,
        /// A PVC to create and restore into (needs --capacity).
        #[arg(long, requires = "capacity")]
        new_pvc: Option<String>,
        /// The new PVC's size, e.g. 5Gi.
        #[arg(long)]
        capacity: Option<String>,
        /// The new PVC's storage class.
        #[arg(long)]
        storage_class: Option<String>,
        /// The Restore's name (default `<snapshot>-restore-manual-<unix seconds>`).
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Acknowledge held mass deletions on a repository (they are then executed).
    Ack {
        repository: String,
        /// The repository is a ClusterRepository.
        #[arg(long)]
        cluster: bool,
        /// Release deletions requested at or before this RFC 3339 time (default: now).
        #[arg(long)]
        at: Option<String>,
        /// Write the ack; without it the command only shows what it would release.
        #[arg(long)]
        yes: bool,
    },
    /// Ask the operator to connect to a repository now (the `reverify-requested-at` nudge).
    Reverify {
        repository: String,
        #[arg(long)]
        cluster: bool,
    },
    /// Check the installation and report what needs attention (all namespaces unless -n).
    Doctor {
        /// Every namespace (the default without -n).
        #[arg(short = 'A', long)]
        all_namespaces: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {}", explain(&e));
            std::process::exit(1);
        }
    }
}

/// The error chain on one line, with the API server's own message instead of kube's debug
/// rendering of its Status.
fn explain(e: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for c in e.chain() {
        if let Some(kube::Error::Api(s)) = c.downcast_ref::<kube::Error>() {
            // Its sources repeat the same Status.
            parts.push(format!("{} ({})", s.message, s.reason));
            break;
        }
        parts.push(c.to_string());
    }
    parts.join(": ")
}

async fn run(cli: Cli) -> Result<i32> {
    let client = Client::try_default().await.context("connecting with the current kubeconfig context")?;
    let ns = cli.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
    match cli.command {
        Command::Status { all_namespaces } => {
            let scope = if all_namespaces { Scope::All } else { Scope::Namespace(ns.clone()) };
            status(&client, &scope).await
        }
        Command::Snapshot { policy, name, pin, wait, timeout } => {
            let name = name.unwrap_or_else(|| report::manual_name(&policy, Utc::now()));
            let snap: Snapshot = serde_json::from_value(json!({
                "apiVersion": kopiur_api::names::API_VERSION, "kind": "Snapshot",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"policyRef": {"name": policy}, "pin": pin}
            }))?;
            let wait = wait.then_some(Duration::from_secs(timeout));
            create_and_follow(&Api::namespaced(client.clone(), &ns), &snap, wait, |s: &Snapshot| {
                let st = s.status.clone().unwrap_or_default();
                (st.phase.map_or("Pending".into(), |p| p.as_str().to_string()), ready_text(&st.conditions))
            })
            .await
        }
        Command::Restore { snapshot, to_pvc, new_pvc, capacity, storage_class, name, wait, timeout } => {
            let target = match (to_pvc, new_pvc) {
                (Some(p), None) => json!({"pvcRef": {"name": p}}),
                (None, Some(p)) => {
                    let mut pvc = json!({"name": p, "capacity": capacity});
                    if let Some(sc) = storage_class {
                        pvc["storageClassName"] = json!(sc);
                    }
                    json!({ "pvc": pvc })
                }
                (Some(_), Some(_)) | (None, None) => bail!("give exactly one of --to-pvc and --new-pvc"),
            };
            // Fail early, with the reason, on a Snapshot that cannot be restored.
            let snaps: Api<Snapshot> = Api::namespaced(client.clone(), &ns);
            let s = snaps.get(&snapshot).await.with_context(|| format!("reading Snapshot {ns}/{snapshot}"))?;
            let phase = s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str().to_string());
            if s.status.as_ref().and_then(|x| x.snapshot.as_ref()).and_then(|k| k.kopia_snapshot_id.as_ref()).is_none()
            {
                bail!(
                    "Snapshot {ns}/{snapshot} has no kopia snapshot to restore (phase {}); pick a Succeeded one: \
                     kubectl get snapshots -n {ns}",
                    phase.as_deref().unwrap_or("none yet")
                );
            }
            let name = name.unwrap_or_else(|| report::manual_name(&format!("{snapshot}-restore"), Utc::now()));
            let restore: Restore = serde_json::from_value(json!({
                "apiVersion": kopiur_api::names::API_VERSION, "kind": "Restore",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"source": {"snapshotRef": {"name": snapshot}}, "target": target}
            }))?;
            let wait = wait.then_some(Duration::from_secs(timeout));
            create_and_follow(&Api::namespaced(client.clone(), &ns), &restore, wait, |r: &Restore| {
                let st = r.status.clone().unwrap_or_default();
                (st.phase.map_or("Pending".into(), |p| p.as_str().to_string()), ready_text(&st.conditions))
            })
            .await
        }
        Command::Ack { repository, cluster, at, yes } => {
            let now = Utc::now();
            let at = match at {
                Some(raw) => report::parse_ack_at(&raw, now).map_err(anyhow::Error::msg)?,
                None => now,
            };
            let row = read_repository(&client, &ns, &repository, cluster).await?;
            print!("{}", report::ack_plan(&row, at));
            if !yes {
                println!("Nothing written. Re-run with --yes to acknowledge.");
                return Ok(2);
            }
            patch_repository(&client, &ns, &repository, cluster, &report::ack_patch(at)).await?;
            println!("acknowledged: {}={}", annotation::ALLOW_MASS_DELETION, report::ack_value(at));
            Ok(0)
        }
        Command::Reverify { repository, cluster } => {
            let patch =
                json!({"metadata": {"annotations": {annotation::REVERIFY_REQUESTED_AT: Utc::now().to_rfc3339()}}});
            patch_repository(&client, &ns, &repository, cluster, &patch).await?;
            println!(
                "re-verify requested for {repository}; the operator connects once (rate limited) and updates its phase"
            );
            Ok(0)
        }
        Command::Doctor { all_namespaces } => {
            // The installation is checked everywhere unless a namespace is asked for: the
            // context's namespace is where to write, not where the backups are.
            let asked = match (&cli.namespace, all_namespaces) {
                (Some(n), false) => Scope::Namespace(n.clone()),
                (Some(_), true) | (None, _) => Scope::All,
            };
            let findings = doctor(&client, &asked, client.default_namespace()).await;
            let (out, code) = report::doctor(&findings);
            print!("{out}");
            Ok(code)
        }
    }
}

async fn read_repository(client: &Client, ns: &str, name: &str, cluster: bool) -> Result<RepoRow> {
    if cluster {
        let r = Api::<ClusterRepository>::all(client.clone())
            .get(name)
            .await
            .with_context(|| format!("reading ClusterRepository {name}"))?;
        Ok(RepoRow {
            kind: "ClusterRepository",
            namespace: None,
            name: r.name_any(),
            uid: r.uid(),
            status: r.status.map(|s| s.common).unwrap_or_default(),
        })
    } else {
        let r = Api::<Repository>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .with_context(|| format!("reading Repository {ns}/{name} (a ClusterRepository needs --cluster)"))?;
        Ok(RepoRow {
            kind: "Repository",
            namespace: r.namespace(),
            name: r.name_any(),
            uid: r.uid(),
            status: r.status.unwrap_or_default(),
        })
    }
}

async fn patch_repository(
    client: &Client,
    ns: &str,
    name: &str,
    cluster: bool,
    patch: &serde_json::Value,
) -> Result<()> {
    let pp = PatchParams::default();
    if cluster {
        Api::<ClusterRepository>::all(client.clone())
            .patch(name, &pp, &Patch::Merge(patch))
            .await
            .with_context(|| format!("annotating ClusterRepository {name}"))?;
    } else {
        Api::<Repository>::namespaced(client.clone(), ns)
            .patch(name, &pp, &Patch::Merge(patch))
            .await
            .with_context(|| format!("annotating Repository {ns}/{name}"))?;
    }
    Ok(())
}

/// The namespaced objects of one kind in the scope.
async fn list<K>(client: &Client, scope: &Scope) -> kube::Result<Vec<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match scope.namespace() {
        Some(n) => Api::namespaced(client.clone(), n),
        None => Api::all(client.clone()),
    };
    Ok(api.list(&ListParams::default()).await?.items)
}

/// The API server's message when the error is a 403 (the user may not list there).
fn forbidden(e: &anyhow::Error) -> Option<String> {
    e.chain().find_map(|c| match c.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(s)) if s.is_forbidden() => Some(s.message.clone()),
        _ => None,
    })
}

/// Lists in `scope`; for all namespaces, a user who may not list across them gets the
/// `fallback` namespace instead, with the reason. Returns where it looked.
async fn list_or_fallback<K>(client: &Client, scope: &Scope, fallback: &str) -> Result<(Scope, Vec<K>, Option<String>)>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match list::<K>(client, scope).await.map_err(anyhow::Error::from) {
        Ok(items) => Ok((scope.clone(), items, None)),
        Err(e) if *scope == Scope::All && forbidden(&e).is_some() => {
            let here = Scope::Namespace(fallback.to_string());
            Ok((here.clone(), list::<K>(client, &here).await?, forbidden(&e)))
        }
        Err(e) => Err(e),
    }
}

fn snap_row(s: &Snapshot) -> SnapRow {
    let phase = if s.metadata.deletion_timestamp.is_some() {
        "Deleting".to_string()
    } else {
        s.status.as_ref().and_then(|x| x.phase.as_ref()).map_or("Pending".into(), |p| p.as_str().to_string())
    };
    SnapRow {
        namespace: s.namespace().unwrap_or_default(),
        name: s.name_any(),
        phase,
        repository: s.status.as_ref().and_then(|x| x.resolved.as_ref()).and_then(|r| r.repository.clone()),
    }
}

/// Repositories in the scope and every ClusterRepository; the second is why the
/// ClusterRepositories could not be listed, if they could not.
async fn repositories(client: &Client, repos: Vec<Repository>) -> (Vec<RepoRow>, Option<String>) {
    let mut rows: Vec<RepoRow> = repos
        .into_iter()
        .map(|r| RepoRow {
            kind: "Repository",
            namespace: r.namespace(),
            name: r.name_any(),
            uid: r.uid(),
            status: r.status.unwrap_or_default(),
        })
        .collect();
    // ClusterRepositories serve every namespace; a user who cannot list them still sees theirs.
    match Api::<ClusterRepository>::all(client.clone()).list(&ListParams::default()).await {
        Ok(l) => {
            rows.extend(l.items.into_iter().map(|r| RepoRow {
                kind: "ClusterRepository",
                namespace: None,
                name: r.name_any(),
                uid: r.uid(),
                status: r.status.map(|s| s.common).unwrap_or_default(),
            }));
            (rows, None)
        }
        Err(e) => (rows, Some(explain(&e.into()))),
    }
}

const REPOSITORIES_HINT: &str = "listing Repositories (are the kopiur CRDs installed? try: kubectl kopiur doctor)";

async fn status(client: &Client, scope: &Scope) -> Result<i32> {
    let now = Utc::now();
    let repos = list::<Repository>(client, scope).await.context(REPOSITORIES_HINT)?;
    let (rows, _) = repositories(client, repos).await;
    // A repository's Snapshots may live in other namespaces (every namespace, for a
    // ClusterRepository): they are counted everywhere the user may list.
    let (counted, snaps, why) = match scope.namespace() {
        Some(n) => list_or_fallback::<Snapshot>(client, &Scope::All, n).await,
        None => list::<Snapshot>(client, scope).await.map(|v| (Scope::All, v, None)).map_err(anyhow::Error::from),
    }
    .context("listing Snapshots")?;
    let snaps: Vec<SnapRow> = snaps.iter().map(snap_row).collect();
    print!("{}", report::repositories(&rows, &snaps, scope, now));
    if let Some(why) = why
        && !rows.is_empty()
    {
        println!("  (SNAPSHOTS counts the Snapshots in {counted} only: cannot list them in all namespaces: {why})");
    }
    let mut by_ns: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for s in snaps.iter().filter(|s| scope.contains(&s.namespace)) {
        by_ns.entry(&s.namespace).or_default().push(s.phase.clone());
    }
    println!();
    if by_ns.is_empty() {
        println!("No Snapshots in {scope}.");
    }
    for (n, phases) in by_ns {
        println!("Snapshots in {n}: {}", report::phase_counts(&phases));
    }
    Ok(0)
}

async fn doctor(client: &Client, asked: &Scope, context_ns: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    match client.apiserver_version().await {
        Ok(v) => out.push(Finding::ok(format!("API server reachable (v{}.{})", v.major, v.minor))),
        Err(e) => {
            out.push(Finding::fail(format!("cannot reach the API server with the current kubeconfig: {e}")));
            return out;
        }
    }
    // The CRDs: every kind the operator ships.
    match Api::<CustomResourceDefinition>::all(client.clone()).list(&ListParams::default()).await {
        Ok(l) => {
            let have: Vec<String> = l.items.iter().map(|c| c.name_any()).collect();
            let missing: Vec<String> =
                kopiur_api::crds().iter().map(|c| c.name_any()).filter(|n| !have.contains(n)).collect();
            if missing.is_empty() {
                out.push(Finding::ok(format!("all {} kopiur CRDs installed", kopiur_api::crds().len())));
            } else {
                out.push(Finding::fail(format!(
                    "missing CRDs: {} (install them: kubectl apply -f deploy/crds/)",
                    missing.join(", ")
                )));
                return out;
            }
        }
        Err(e) => {
            out.push(Finding::warn(format!("cannot list CRDs (needs cluster-wide read): {}", explain(&e.into()))))
        }
    }
    // The operator: its leader Lease, wherever it runs.
    let lp = ListParams::default().fields("metadata.name=kopiur-leader");
    match Api::<Lease>::all(client.clone()).list(&lp).await {
        Ok(l) => {
            let lease = l.items.into_iter().next();
            let spec = lease.as_ref().and_then(|l| l.spec.as_ref());
            out.push(report::lease_finding(
                spec.and_then(|s| s.holder_identity.as_deref()),
                spec.and_then(|s| s.renew_time.as_ref())
                    .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0)),
                spec.and_then(|s| s.lease_duration_seconds).map_or(15, i64::from),
                Utc::now(),
            ));
        }
        Err(e) => out.push(Finding::warn(format!("cannot read Leases to find the operator: {}", explain(&e.into())))),
    }
    // Without -n, everywhere; a user who may not list across namespaces gets the context's
    // namespace, and is told.
    match list_or_fallback::<Repository>(client, asked, context_ns).await {
        Ok((scope, repos, why)) => {
            if let Some(why) = why {
                out.push(Finding::warn(report::fallback_note("Repositories", &scope, &why)));
            }
            let (rows, cluster_unlisted) = repositories(client, repos).await;
            out.extend(report::repository_findings(&scope, &rows, cluster_unlisted.as_deref()));
        }
        Err(e) => out.push(Finding::fail(format!("{:#}", e.context(REPOSITORIES_HINT)))),
    }
    match list_or_fallback::<Snapshot>(client, asked, context_ns).await {
        Ok((scope, snaps, why)) => {
            if let Some(why) = why {
                out.push(Finding::warn(report::fallback_note("Snapshots", &scope, &why)));
            }
            let failed: Vec<String> = snaps
                .iter()
                .filter(|s| s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str()) == Some("Failed"))
                .map(|s| {
                    let reason = s
                        .status
                        .as_ref()
                        .and_then(|x| x.conditions.iter().find(|c| c.type_ == "Ready"))
                        .map(|c| c.reason.clone())
                        .unwrap_or_default();
                    format!("{}/{} ({reason})", s.namespace().unwrap_or_default(), s.name_any())
                })
                .collect();
            out.push(report::snapshot_finding(&scope, snaps.len(), &failed));
        }
        Err(e) => out.push(Finding::warn(format!("cannot list Snapshots in {asked}: {}", explain(&e)))),
    }
    out
}

fn is_terminal(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Unchanged" | "Failed" | "Completed")
}

/// Creates the object, prints it like kubectl does, and with `wait` follows it to the end.
async fn create_and_follow<K>(
    api: &Api<K>,
    obj: &K,
    wait: Option<Duration>,
    read: impl Fn(&K) -> (String, String),
) -> Result<i32>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    let kind = K::kind(&());
    api.create(&PostParams::default(), obj)
        .await
        .with_context(|| format!("creating {kind} {}/{name}", obj.namespace().unwrap_or_default()))?;
    println!("{}.{}/{name} created", kind.to_lowercase(), K::group(&()));
    match wait {
        None => Ok(0),
        Some(timeout) => wait_terminal(api, &name, timeout, read).await,
    }
}

/// Polls one object until its phase is terminal, printing each change of phase or Ready
/// reason; exits 1 when it Failed.
async fn wait_terminal<K>(
    api: &Api<K>,
    name: &str,
    timeout: Duration,
    read: impl Fn(&K) -> (String, String),
) -> Result<i32>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::new();
    loop {
        let (phase, ready) = read(&api.get(name).await?);
        let line = format!("{phase} {ready}");
        if line != last {
            println!("{name}: {}", line.trim_end());
            last = line;
        }
        if is_terminal(&phase) {
            return Ok(i32::from(phase == "Failed"));
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{name} is still {phase} after {}s", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn ready_text(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> String {
    conds.iter().find(|c| c.type_ == "Ready").map(|c| format!("{}: {}", c.reason, c.message)).unwrap_or_default()
}
