//! `spec.pin` and the [next] SnapshotReplication kind, end to end on one private control plane,
//! Garage, real kopia, the operator and the real mover (docs/design/api-contract.md §7.1, §7.2, §7.4, §1.1, §12,
//! docs/design/api-contract.md §15):
//!
//! - Two Succeeded Snapshots ask for a pin while their repository is not Ready (its password
//!   Secret is missing): each shows `Pinned=False / PinJobRunning` saying it waits for the
//!   repository, and no pin Job exists. Once the Secret appears and the repository turns Ready,
//!   `<name>-pin` runs (op label `pin`, `pin-target: "true"`), never before the repository's
//!   Ready transition.
//! - The real snapshot: its one pin Job makes exactly one repository connect and one
//!   `kopia snapshot pin <id> --add=kopiur`; `status.pinned: true`, `Pinned=True / Pinned`, and a
//!   fresh `kopia snapshot list --json` shows the pin `kopiur` on the manifest
//!   `status.snapshot.kopiaSnapshotID` names (kopia rewrites a changed manifest under a new id). `pin: false` replaces the Job with a
//!   `--remove=kopiur` one: `status.pinned: false`, the condition gone, the pin gone from kopia.
//! - The Snapshot whose manifest id does not exist: the pin fails as kopia says,
//!   `Pinned=False / PinJobFailed` carries the mover's message (`status.failure.op: pin`), the
//!   Job follows the Job rules (a non-retryable class is one pod whatever `backoffLimit` says),
//!   and the Snapshot stays Succeeded without ever launching a backup Job.
//! - A SnapshotReplication is accepted by the apiserver and answered `Stalled /
//!   FeatureNotImplemented` with the exact message, `observedGeneration` following each edit, one
//!   Warning Event per generation and no Job.
//! - The pin pod connects as `kopiur-ops` at the repository's lease host (docs/design/mover.md §2.2).
//! - Beside it, on repositories of their own (`snapshot_rows`): a ReadOnly refusal
//!   (`RepositoryWritable=False`, `kopiur_snapshot_refusals_total`), Ready `RepositoryNotFound`,
//!   Stalled `MissingCredentialsSecret` resumed by the Secret, one `InvalidSpec` per invalid
//!   generation of a discovered row, `DiscoveredSnapshotUnplaced`, and a Restore's
//!   `ReferentAvailable` both ways.
mod support;
use support::phase_watch;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kopiur_api::{Repository, Snapshot, SnapshotReplication};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use phase_watch::{JobWatch, PhaseWatch};
use serde_json::{Value, json};
use support::status::{condition_parts as cond, events_about};
use support::{Harness, RepoPin, SeedSnap};

const PIN_NAME: &str = "kopiur";
const PIN_TARGET: &str = "kopiur.home-operations.com/pin-target";
/// A manifest id kopia does not know (32 hex digits, like a real one).
const NO_SUCH_ID: &str = "00000000000000000000000000000000";

fn pinned_state(s: &Snapshot) -> String {
    let st = s.status.as_ref();
    let pinned = st.and_then(|x| x.pinned).map(|p| p.to_string()).unwrap_or_else(|| "-".into());
    let c = cond(s, "Pinned").map(|c| format!("{}/{}", c.0, c.1)).unwrap_or_else(|| "-".into());
    format!("pinned={pinned} Pinned={c}")
}

/// `kopia snapshot list --all --json` through a fresh connection (fresh config and cache, so no
/// cached manifest list hides a change a mover just made): manifest id -> pins.
async fn kopia_pins(h: &Harness, prefix: &str) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let dir = tempfile::tempdir()?;
    let kopia = kopiur_testenv::tools::kopia()?;
    let run = |args: Vec<String>| {
        let mut c = tokio::process::Command::new(&kopia);
        c.args(&args)
            .env("KOPIA_CONFIG_PATH", dir.path().join("repository.config"))
            .env("KOPIA_CACHE_DIRECTORY", dir.path().join("cache"))
            .env("KOPIA_LOG_DIR", dir.path().join("logs"))
            .env("KOPIA_CHECK_FOR_UPDATES", "false")
            .env("KOPIA_PASSWORD", support::PASSWORD)
            .env("AWS_ACCESS_KEY_ID", h.garage.access_key())
            .env("AWS_SECRET_ACCESS_KEY", h.garage.secret_key())
            .kill_on_drop(true);
        async move {
            let out = tokio::time::timeout(Duration::from_secs(60), c.output()).await.context("kopia timed out")??;
            ensure!(out.status.success(), "kopia {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            Ok::<_, anyhow::Error>(out.stdout)
        }
    };
    run(vec![
        "repository".into(),
        "connect".into(),
        "s3".into(),
        format!("--bucket={}", h.garage.bucket()),
        format!("--endpoint={}", h.garage.s3_endpoint()),
        format!("--prefix={prefix}"),
        format!("--region={}", h.garage.region()),
        "--disable-tls".into(),
        "--readonly".into(),
    ])
    .await?;
    let out = run(vec!["snapshot".into(), "list".into(), "--all".into(), "--json".into()]).await?;
    let list: Vec<Value> = serde_json::from_slice(&out)?;
    Ok(list
        .iter()
        .map(|m| {
            let pins = m["pins"].as_array().into_iter().flatten().filter_map(|p| p.as_str().map(str::to_string));
            (m["id"].as_str().unwrap_or_default().to_string(), pins.collect())
        })
        .collect())
}

async fn warning_events(h: &Harness, ns: &str, name: &str, reason: &str) -> Result<usize> {
    Ok(events_about(&h.client, ns, name, reason)
        .await?
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        // A repeat of the same Event is recorded as a series on one object.
        .map(|e| e.series.as_ref().map(|s| s.count as usize).unwrap_or(1))
        .sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_jobs_apply_and_remove_the_kopia_pin_and_snapshot_replication_is_gated() -> Result<()> {
    let started = std::time::Instant::now();
    let mut h = Harness::start().await?;
    h.start_operator().await?;
    let _guard = h.env.log_guard();
    let jobs = JobWatch::start(h.client.clone());
    let ns = h.env.namespace("pin").await?;
    let t = Duration::from_secs(120);
    // The Snapshot, Restore and catalog rows run beside the pin flow on their own repositories.
    let rows = async {
        let started = std::time::Instant::now();
        snapshot_rows(&h, &jobs).await.context("snapshot rows")?;
        eprintln!("pin_e2e: snapshot rows took {:?}", started.elapsed());
        Ok::<(), anyhow::Error>(())
    };
    let pin = async {
        // SnapshotReplication first: it needs nothing else and runs while the rest is set up.
        let srepls: Api<SnapshotReplication> = Api::namespaced(h.client.clone(), &ns);
        let copy: SnapshotReplication = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotReplication",
            "metadata": {"name": "copy", "namespace": ns},
            "spec": {"sourceRef": {"name": "repo"}, "destinationRef": {"name": "offsite"},
                     "schedule": {"cron": "0 4 * * *"},
                     "selection": {"identities": {"include": ["app@pin"]}, "latestOnly": true},
                     "migrate": {"parallel": 2, "policies": "copy"},
                     "pruning": {"mirrorSource": {}}}
        }))?;
        let copy = srepls.create(&PostParams::default(), &copy).await?;
        let copy_uid = copy.uid().unwrap_or_default();
        let copy_watch = PhaseWatch::start(srepls.clone(), "copy", |r: &SnapshotReplication| {
            let st = r.status.as_ref();
            let stalled = st.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Stalled"));
            format!("gen={:?} stalled={:?}", st.and_then(|s| s.observed_generation), stalled.map(|c| &c.reason))
        });
        let msg = "SnapshotReplication is not implemented in this release";
        let gated = |r: &SnapshotReplication, generation: i64| {
            let st = r.status.as_ref();
            let c = |t: &str| st.and_then(|s| s.conditions.iter().find(|c| c.type_ == t));
            st.and_then(|s| s.observed_generation) == Some(generation)
                && c("Stalled").is_some_and(|c| {
                    c.status == "True"
                        && c.reason == "FeatureNotImplemented"
                        && c.message == msg
                        && c.observed_generation == Some(generation)
                })
                && c("Ready")
                    .is_some_and(|c| c.status == "False" && c.reason == "FeatureNotImplemented" && c.message == msg)
                && c("Reconciling").is_some_and(|c| c.status == "False")
        };
        copy_watch.wait("SnapshotReplication Stalled at generation 1", t, |r| gated(r, 1)).await?;

        // The repository exists but cannot bootstrap yet: its password Secret is missing.
        let repo_kopia = h.kopia_repo("pin/").await?;
        let ids = repo_kopia.seed(&["data".to_string()]).await?;
        let real_id = ids["data"].clone();
        let repos: Api<Repository> = Api::namespaced(h.client.clone(), &ns);
        let repo: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": "repo", "namespace": ns},
            "spec": {
                "backend": {"s3": {"bucket": h.garage.bucket(), "endpoint": format!("http://{}", h.garage.s3_addr()),
                                   "region": h.garage.region(), "prefix": "pin/"}},
                "encryption": {"passwordSecretRef": {"name": "kopia-late"}}
            }
        }))?;
        let repo = repos.create(&PostParams::default(), &repo).await?;
        let item = |name: &str, id: &str| SeedSnap {
            name: name.into(),
            kopia_id: id.into(),
            labels: BTreeMap::new(),
            owner: None,
            origin: "manual",
        };
        let uids = support::seed_snapshots(
            &h.client,
            &ns,
            &RepoPin::of(&repo),
            vec![item("good", &real_id), item("bad", NO_SUCH_ID)],
            2,
        )
        .await?;
        let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &ns);
        let good = PhaseWatch::start(snaps.clone(), "good", pinned_state);
        let bad = PhaseWatch::start(snaps.clone(), "bad", pinned_state);
        let pp = PatchParams::default();
        snaps.patch("good", &pp, &Patch::Merge(json!({"spec": {"pin": true}}))).await?;
        snaps
            .patch("bad", &pp, &Patch::Merge(json!({"spec": {"pin": true, "failurePolicy": {"backoffLimit": 1}}})))
            .await?;

        // Parked at the repository gate: PinJobRunning, saying so, and no Job.
        for (w, name) in [(&good, "good"), (&bad, "bad")] {
            w.wait(&format!("{name}: Pinned=False/PinJobRunning waiting for the repository"), t, |s| {
                cond(s, "Pinned").is_some_and(|(st, r, m)| {
                    st == "False" && r == "PinJobRunning" && m.contains("waits for the repository")
                })
            })
            .await?;
        }
        ensure!(
            repos.get("repo").await?.status.and_then(|s| s.phase).map(|p| p.as_str().to_string())
                != Some("Ready".into())
        );
        for name in ["good", "bad"] {
            ensure!(jobs.owned_by(&uids[name]).is_empty(), "{name}: a Job ran while the repository was not Ready");
        }

        // The Secret appears; the repository becomes Ready; only then do the pin Jobs run.
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "kopia-late", "namespace": ns},
            "stringData": {"KOPIA_PASSWORD": support::PASSWORD, "AWS_ACCESS_KEY_ID": h.garage.access_key(),
                           "AWS_SECRET_ACCESS_KEY": h.garage.secret_key()}
        }))?;
        Api::<Secret>::namespaced(h.client.clone(), &ns).create(&PostParams::default(), &secret).await?;
        h.wait_repository_ready(&ns, "repo", t).await?;
        let ready_at = repos
            .get("repo")
            .await?
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.last_transition_time.0)
            .context("Ready condition")?;

        let pinned = good
            .wait("good: Pinned=True/Pinned and status.pinned true", t, |s| {
                s.status.as_ref().and_then(|x| x.pinned) == Some(true)
                    && cond(s, "Pinned").is_some_and(|(st, r, _)| st == "True" && r == "Pinned")
            })
            .await?;
        ensure!(
            pinned.object.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) == Some("Succeeded"),
            "the pin leaves the phase alone"
        );
        let good_jobs = jobs.owned_by(&uids["good"]);
        ensure!(good_jobs.len() == 1, "one pin Job for the add: {good_jobs:?}");
        let add_job = &good_jobs[0];
        ensure!(add_job.name == "good-pin" && add_job.op() == "pin", "the pin Job: {add_job:?}");
        ensure!(add_job.annotations.get(PIN_TARGET).map(String::as_str) == Some("true"), "{add_job:?}");
        ensure!(
            add_job.created.timestamp() >= ready_at.as_second(),
            "the pin Job was created before the repository was Ready"
        );
        // One connect and one pin in that Job's pod.
        let calls = h.audit.calls();
        let pin_calls: Vec<_> =
            calls.iter().filter(|c| c.args.starts_with(&["snapshot".into(), "pin".into()])).collect();
        let add_calls: Vec<_> = pin_calls.iter().filter(|c| c.args.get(2) == Some(&real_id)).collect();
        ensure!(add_calls.len() == 1, "one kopia snapshot pin for the add: {add_calls:?}");
        ensure!(
            add_calls[0].args[3] == format!("--add={PIN_NAME}") && add_calls[0].rc == Some(0),
            "{:?}",
            add_calls[0]
        );
        let host = add_calls[0].host.clone();
        let connects: Vec<_> = calls.iter().filter(|c| c.host == host && c.is_connect()).collect();
        ensure!(connects.len() == 1, "the pin pod connected {} times", connects.len());
        // docs/design/mover.md §2.2: the pin connects as kopiur-ops at the repository's lease host.
        let lease_host = format!("kopiur.{ns}.repo");
        ensure!(
            connects[0].args.contains(&"--override-username=kopiur-ops".to_string())
                && connects[0].args.contains(&format!("--override-hostname={lease_host}")),
            "the pin connect is not kopiur-ops@{lease_host}: {:?}",
            connects[0].args
        );
        // kopia saves the changed manifest under a new id: the status follows it (the Snapshot's
        // deletion deletes by that id).
        let pinned_id = pinned
            .object
            .status
            .as_ref()
            .and_then(|s| s.snapshot.as_ref())
            .and_then(|s| s.kopia_snapshot_id.clone())
            .context("kopiaSnapshotID")?;
        let pins = kopia_pins(&h, "pin/").await?;
        ensure!(
            pins.get(&pinned_id).is_some_and(|p| p.contains(PIN_NAME)),
            "kopia shows no pin on {pinned_id}: {pins:?}"
        );
        ensure!(pins.len() == 1, "one manifest, whatever its id: {pins:?}");

        // The failing pin: the mover's message, one pod (a non-retryable class is FailJob at once),
        // the phase untouched and never a backup Job.
        let failed = bad
            .wait("bad: Pinned=False/PinJobFailed", t, |s| {
                cond(s, "Pinned").is_some_and(|(st, r, _)| st == "False" && r == "PinJobFailed")
            })
            .await?;
        let st = failed.object.status.clone().unwrap_or_default();
        let failure = st.failure.clone().context("status.failure")?;
        ensure!(failure.op.as_deref() == Some("pin"), "failure: {failure:?}");
        let mover_msg = failure.message.clone().unwrap_or_default();
        let (_, _, c_msg) = cond(&failed.object, "Pinned").unwrap_or_default();
        ensure!(!mover_msg.is_empty() && c_msg.ends_with(&mover_msg), "condition {c_msg:?} vs mover {mover_msg:?}");
        ensure!(c_msg.contains(&format!("kopia snapshot pin {NO_SUCH_ID} --add {PIN_NAME}")), "{c_msg}");
        ensure!(st.phase.as_ref().map(|p| p.as_str()) == Some("Succeeded") && st.pinned == Some(false), "{st:?}");
        let bad_pods: BTreeSet<String> =
            h.audit.calls().iter().filter(|c| c.args.iter().any(|a| a == NO_SUCH_ID)).map(|c| c.host.clone()).collect();
        let expected_pods = if failure.retry_recommended { 2 } else { 1 };
        ensure!(
            bad_pods.len() == expected_pods,
            "pods that ran the failing pin: {bad_pods:?} (retryable: {})",
            failure.retry_recommended
        );
        let bad_jobs = jobs.owned_by(&uids["bad"]);
        ensure!(bad_jobs.len() == 1 && bad_jobs[0].name == "bad-pin" && bad_jobs[0].op() == "pin", "{bad_jobs:?}");

        // Unpin: the add Job is replaced by a remove Job; status and kopia follow.
        let mark = good.mark();
        snaps.patch("good", &pp, &Patch::Merge(json!({"spec": {"pin": false}}))).await?;
        good.wait_since("good: status.pinned false, Pinned gone", mark, t, |s| {
            s.status.as_ref().and_then(|x| x.pinned) == Some(false) && cond(s, "Pinned").is_none()
        })
        .await?;
        let good_jobs = jobs.owned_by(&uids["good"]);
        ensure!(good_jobs.len() == 2, "one add and one remove Job: {good_jobs:?}");
        let remove = good_jobs.iter().find(|j| j.uid != add_job.uid).context("remove Job")?;
        ensure!(
            remove.annotations.get(PIN_TARGET).map(String::as_str) == Some("false") && remove.complete_seen.is_some(),
            "{remove:?}"
        );
        let removes: Vec<_> = h
            .audit
            .calls()
            .into_iter()
            .filter(|c| c.args.starts_with(&["snapshot".into(), "pin".into()]) && c.args.get(2) == Some(&pinned_id))
            .filter(|c| c.args.get(3).map(String::as_str) == Some(&format!("--remove={PIN_NAME}")))
            .collect();
        ensure!(removes.len() == 1 && removes[0].rc == Some(0), "{removes:?}");
        let pins = kopia_pins(&h, "pin/").await?;
        let unpinned = snaps.get("good").await?;
        let unpinned_id =
            unpinned.status.as_ref().and_then(|s| s.snapshot.as_ref()).and_then(|s| s.kopia_snapshot_id.clone());
        ensure!(
            unpinned_id.as_ref().is_some_and(|id| pins.get(id).is_some_and(|p| p.is_empty())) && pins.len() == 1,
            "kopia still shows a pin, or the status lost the manifest ({unpinned_id:?}): {pins:?}"
        );
        for name in ["good", "bad"] {
            ensure!(
                jobs.owned_by(&uids[name]).iter().all(|j| j.op() == "pin"),
                "{name}: a terminal Snapshot launched a backup Job"
            );
        }

        // SnapshotReplication: an edit moves observedGeneration, with one more Event; never a Job.
        srepls.patch("copy", &pp, &Patch::Merge(json!({"spec": {"suspend": true}}))).await?;
        copy_watch.wait("SnapshotReplication Stalled at generation 2", t, |r| gated(r, 2)).await?;
        // The Event follows the status write that reports the generation.
        support::wait_for(
            "two FeatureNotImplemented Events (one per generation)",
            Duration::from_secs(10),
            &h.log(),
            || async { Ok((warning_events(&h, &ns, "copy", "FeatureNotImplemented").await? >= 2).then_some(())) },
        )
        .await?;
        ensure!(
            warning_events(&h, &ns, "copy", "FeatureNotImplemented").await? == 2,
            "one Warning Event per generation"
        );
        ensure!(jobs.owned_by(&copy_uid).is_empty(), "a SnapshotReplication launched a Job");
        let phase = srepls.get("copy").await?.status.and_then(|s| s.phase).map(|p| p.as_str().to_string());
        ensure!(phase.as_deref() == Some("Pending"), "phase {phase:?}");
        Ok::<(), anyhow::Error>(())
    };
    tokio::try_join!(pin, rows)?;
    eprintln!("pin_e2e: scenario time {:?}", started.elapsed());
    Ok(())
}

/// Warning Events with `reason` about the cluster-scoped object `kind`/`name`, in any namespace.
async fn cluster_warnings(h: &Harness, kind: &str, name: &str, reason: &str) -> Result<Vec<String>> {
    let evs: Api<Event> = Api::all(h.client.clone());
    Ok(evs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
        })
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .map(|e| e.note.unwrap_or_default())
        .collect())
}

fn ready_of(s: &Snapshot) -> String {
    let c = |t: &str| cond(s, t).map(|c| format!("{}/{}", c.0, c.1)).unwrap_or_else(|| "-".into());
    let phase = s.status.as_ref().and_then(|x| x.phase.as_ref()).map(|p| p.as_str().to_string());
    format!(
        "phase={} Ready={} Stalled={} Credentials={} Writable={} gen={:?}",
        phase.unwrap_or_else(|| "-".into()),
        c("Ready"),
        c("Stalled"),
        c("CredentialsAvailable"),
        c("RepositoryWritable"),
        s.status.as_ref().and_then(|x| x.observed_generation)
    )
}

fn is_cond(s: &Snapshot, t: &str, status: &str, reason: &str) -> bool {
    cond(s, t).is_some_and(|c| c.0 == status && c.1 == reason)
}

/// Rows of issue #16 on their own repositories, beside the pin flow:
///
/// - docs/design/api-contract.md §7.4 / docs/design/pipeline.md §5.2: a Snapshot against a `mode: ReadOnly` Repository is refused:
///   `Failed`, Ready `RepositoryReadOnly` (Stalled), `RepositoryWritable=False /
///   RepositoryReadOnly`, no Job, `kopiur_snapshot_refusals_total{reason="RepositoryReadOnly"}` 1.
/// - docs/design/api-contract.md §7.4 (the readiness gate of docs/design/repository-breaker.md §4): a Snapshot whose policy names a repository that does
///   not exist parks `Pending`, Ready `RepositoryNotFound`, Stalled, no Job.
/// - docs/design/api-contract.md §7.4: a ClusterRepository consumer whose namespace lacks the credentials Secret is
///   `Pending`, Stalled `MissingCredentialsSecret` with `CredentialsAvailable=False`, no Job; the
///   Secret's creation moves it on within 10 s (`CredentialsAvailable=True / Found`, then the
///   missing source PVC parks it).
/// - docs/design/api-contract.md §7.6: a discovered row with `deletionPolicy: Delete` emits one Warning `InvalidSpec`
///   per generation while it stays invalid, none once it says `Retain`; it stays `Discovered`.
/// - docs/design/repository-breaker.md §3.12: the ClusterRepository's first listing finds a kopia snapshot whose
///   hostname names no existing namespace and there is no `catalog.fallbackNamespace`: one
///   Warning `DiscoveredSnapshotUnplaced` on the ClusterRepository, no row created.
/// - docs/design/api-contract.md §9: `ReferentAvailable` False `RestoreReferentMissing` for a Restore of a Snapshot
///   that does not exist, True `RestoreReferentFound` for a Restore of an existing policy.
async fn snapshot_rows(h: &Harness, jobs: &JobWatch) -> Result<()> {
    use kopiur_api::Restore;
    let t = Duration::from_secs(120);
    let pp = PostParams::default();
    let ns = h.env.namespace("rows").await?;
    let nc = h.env.namespace("rows-nc").await?;
    // Two kopia repositories made directly: an empty one behind the ReadOnly Repository, and
    // one holding a snapshot by `seed@deletion-e2e` (no such namespace) behind the
    // ClusterRepository.
    h.kopia_repo("rows-ro/").await?;
    let c_kopia = h.kopia_repo("rows-c/").await?;
    c_kopia.seed(&["orphan".to_string()]).await?;
    h.repository(&ns, "ro", "rows-ro/", json!({"mode": "ReadOnly"})).await?;
    let shared = h.cluster_repository("rows-shared", "rows-c/", json!({"list": [nc]})).await?;
    ensure!(
        Api::<k8s_openapi::api::core::v1::Namespace>::all(h.client.clone()).get_opt("deletion-e2e").await?.is_none(),
        "the seeded hostname must name no namespace"
    );

    let policies: Api<kopiur_api::SnapshotPolicy> = Api::namespaced(h.client.clone(), &ns);
    let nc_policies: Api<kopiur_api::SnapshotPolicy> = Api::namespaced(h.client.clone(), &nc);
    let policy = |name: &str, ns: &str, repository: Value| -> Result<kopiur_api::SnapshotPolicy> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "SnapshotPolicy",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"repository": repository, "copyMethod": "Direct", "sources": [{"pvc": {"name": "data"}}]}
        }))?)
    };
    policies.create(&pp, &policy("p-ro", &ns, json!({"name": "ro"}))?).await?;
    policies.create(&pp, &policy("p-gone", &ns, json!({"name": "nope"}))?).await?;
    nc_policies.create(&pp, &policy("p-c", &nc, json!({"kind": "ClusterRepository", "name": "rows-shared"}))?).await?;
    let snapshot = |name: &str, ns: &str, labels: Value, spec: Value| -> Result<Snapshot> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Snapshot",
            "metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec
        }))?)
    };
    let snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &ns);
    let nc_snaps: Api<Snapshot> = Api::namespaced(h.client.clone(), &nc);
    let ro_w = PhaseWatch::start(snaps.clone(), "ro-1", ready_of);
    let gone_w = PhaseWatch::start(snaps.clone(), "gone-1", ready_of);
    let disc_w = PhaseWatch::start(snaps.clone(), "disc-1", ready_of);
    let nc_w = PhaseWatch::start(nc_snaps.clone(), "nc-1", ready_of);
    let mut uids = BTreeMap::new();
    for (api, name, ns_, labels, spec) in [
        (&snaps, "ro-1", &ns, json!({}), json!({"policyRef": {"name": "p-ro"}})),
        (&snaps, "gone-1", &ns, json!({}), json!({"policyRef": {"name": "p-gone"}})),
        (&nc_snaps, "nc-1", &nc, json!({}), json!({"policyRef": {"name": "p-c"}})),
        (
            &snaps,
            "disc-1",
            &ns,
            json!({"kopiur.home-operations.com/origin": "discovered"}),
            json!({"deletionPolicy": "Delete"}),
        ),
    ] {
        let created = api.create(&pp, &snapshot(name, ns_, labels, spec)?).await?;
        uids.insert(name, created.uid().unwrap_or_default());
    }

    // The absent repository: Blocked, Stalled RepositoryNotFound, parked Pending.
    let gone = gone_w
        .wait("gone-1 Pending, Stalled RepositoryNotFound", t, |s| {
            ready_of(s).starts_with("phase=Pending")
                && is_cond(s, "Ready", "False", "RepositoryNotFound")
                && is_cond(s, "Stalled", "True", "RepositoryNotFound")
                && is_cond(s, "Reconciling", "False", "RepositoryNotFound")
        })
        .await?;
    let (_, _, m) = cond(&gone.object, "Ready").unwrap_or_default();
    ensure!(m.contains("nope") && m.contains("does not exist"), "RepositoryNotFound message: {m}");

    // The discovered row: Discovered, one InvalidSpec for generation 1.
    disc_w
        .wait("disc-1 Discovered at generation 1", t, |s| {
            ready_of(s).starts_with("phase=Discovered")
                && s.status.as_ref().and_then(|x| x.observed_generation) == Some(1)
        })
        .await?;
    support::wait_for("disc-1: one InvalidSpec", Duration::from_secs(10), &h.log(), || async {
        Ok((warning_events(h, &ns, "disc-1", "InvalidSpec").await? >= 1).then_some(()))
    })
    .await?;
    let pp_ = PatchParams::default();
    snaps.patch("disc-1", &pp_, &Patch::Merge(json!({"spec": {"description": "still Delete"}}))).await?;
    disc_w
        .wait("disc-1 observed generation 2", t, |s| s.status.as_ref().and_then(|x| x.observed_generation) == Some(2))
        .await?;
    support::wait_for("disc-1: a second InvalidSpec (generation 2)", Duration::from_secs(10), &h.log(), || async {
        Ok((warning_events(h, &ns, "disc-1", "InvalidSpec").await? >= 2).then_some(()))
    })
    .await?;
    snaps.patch("disc-1", &pp_, &Patch::Merge(json!({"spec": {"deletionPolicy": "Retain"}}))).await?;
    let fixed = disc_w
        .wait("disc-1 observed generation 3", t, |s| s.status.as_ref().and_then(|x| x.observed_generation) == Some(3))
        .await?;
    // The Event of a generation follows the status write recording it; give a stray one time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = warning_events(h, &ns, "disc-1", "InvalidSpec").await?;
    ensure!(n == 2, "InvalidSpec Events on disc-1: {n}, want one per invalid generation (2)");
    ensure!(ready_of(&fixed.object).starts_with("phase=Discovered"), "{}", ready_of(&fixed.object));
    ensure!(fixed.object.finalizers().is_empty(), "a discovered row carries no finalizer");

    // The ReadOnly repository: a refusal.
    h.wait_repository_ready(&ns, "ro", t).await?;
    let refused = ro_w
        .wait("ro-1 Failed RepositoryReadOnly with RepositoryWritable=False", t, |s| {
            ready_of(s).starts_with("phase=Failed")
                && is_cond(s, "Ready", "False", "RepositoryReadOnly")
                && is_cond(s, "Stalled", "True", "RepositoryReadOnly")
                && is_cond(s, "RepositoryWritable", "False", "RepositoryReadOnly")
        })
        .await?;
    let refusals = |m: &str| {
        support::sample(
            m,
            "kopiur_snapshot_refusals_total",
            &[("namespace", &ns), ("name", "ro-1"), ("reason", "RepositoryReadOnly")],
        )
    };
    let n = support::wait_for("the refusal counted", Duration::from_secs(10), &h.log(), || async {
        Ok(refusals(&h.metrics().await?))
    })
    .await?;
    ensure!(n == 1.0, "kopiur_snapshot_refusals_total for ro-1 = {n}, want 1");
    ensure!(refused.object.status.as_ref().and_then(|s| s.job.as_ref()).is_none(), "a refused Snapshot records no Job");

    // The ClusterRepository: its first listing cannot place the snapshot of `deletion-e2e`.
    h.wait_cluster_repository_ready("rows-shared", t).await?;
    let unplaced =
        support::wait_for("DiscoveredSnapshotUnplaced on rows-shared", Duration::from_secs(30), &h.log(), || async {
            let v = cluster_warnings(h, "ClusterRepository", "rows-shared", "DiscoveredSnapshotUnplaced").await?;
            Ok((!v.is_empty()).then_some(v))
        })
        .await?;
    ensure!(
        unplaced.len() == 1 && unplaced[0].contains("deletion-e2e"),
        "one DiscoveredSnapshotUnplaced naming the hostname: {unplaced:?}"
    );
    let shared_uid = shared.uid().unwrap_or_default();
    let rows = Api::<Snapshot>::all(h.client.clone())
        .list(&ListParams::default().labels(&format!("kopiur.home-operations.com/repository-uid={shared_uid}")))
        .await?;
    ensure!(
        rows.items.is_empty(),
        "an unplaced snapshot was materialized: {:?}",
        rows.items.iter().map(|s| s.name_any()).collect::<Vec<_>>()
    );

    // The consumer without credentials: Stalled, then resumed by the Secret.
    nc_w.wait("nc-1 Pending, Stalled MissingCredentialsSecret, CredentialsAvailable=False", t, |s| {
        ready_of(s).starts_with("phase=Pending")
            && is_cond(s, "Ready", "False", "MissingCredentialsSecret")
            && is_cond(s, "Stalled", "True", "MissingCredentialsSecret")
            && is_cond(s, "Reconciling", "False", "MissingCredentialsSecret")
            && is_cond(s, "CredentialsAvailable", "False", "MissingCredentialsSecret")
    })
    .await?;
    let mark = nc_w.mark();
    h.secret(&nc).await?;
    nc_w.wait_since(
        "nc-1 CredentialsAvailable=True/Found, then parked on its missing PVC",
        mark,
        Duration::from_secs(10),
        |s| is_cond(s, "CredentialsAvailable", "True", "Found") && is_cond(s, "Ready", "False", "SourcePvcMissing"),
    )
    .await?;

    // Restores: ReferentAvailable.
    let restores: Api<Restore> = Api::namespaced(h.client.clone(), &ns);
    let restore = |name: &str, source: Value, policy: Value| -> Result<Restore> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Restore",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"source": source, "repository": {"name": "ro"}, "policy": policy,
                     "target": {"pvc": {"name": format!("{name}-target"), "capacity": "1Gi"}}}
        }))?)
    };
    restores
        .create(
            &pp,
            &restore("rs-missing", json!({"snapshotRef": {"name": "no-such"}}), json!({"onMissingSnapshot": "Fail"}))?,
        )
        .await?;
    restores
        .create(
            &pp,
            &restore("rs-policy", json!({"fromPolicy": {"name": "p-ro"}}), json!({"onMissingSnapshot": "Continue"}))?,
        )
        .await?;
    let referent = |r: &Restore| {
        r.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "ReferentAvailable"))
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let missing = PhaseWatch::start(restores.clone(), "rs-missing", |r: &Restore| {
        format!("{:?}", r.status.as_ref().and_then(|s| s.phase.clone()))
    });
    let found = PhaseWatch::start(restores.clone(), "rs-policy", |r: &Restore| {
        format!("{:?}", r.status.as_ref().and_then(|s| s.phase.clone()))
    });
    let m = missing
        .wait("rs-missing ReferentAvailable=False/RestoreReferentMissing", t, |r| {
            referent(r).is_some_and(|c| c.0 == "False" && c.1 == "RestoreReferentMissing")
        })
        .await?;
    let (_, _, msg) = referent(&m.object).unwrap_or_default();
    ensure!(msg == format!("Snapshot {ns}/no-such does not exist"), "ReferentAvailable message: {msg}");
    found
        .wait("rs-policy ReferentAvailable=True/RestoreReferentFound", t, |r| {
            referent(r).is_some_and(|c| c.0 == "True" && c.1 == "RestoreReferentFound")
        })
        .await?;

    // None of these launched a Job.
    for (name, uid) in &uids {
        ensure!(jobs.owned_by(uid).is_empty(), "{name} launched a Job: {:?}", jobs.owned_by(uid));
    }
    let gone_now = snaps.get("gone-1").await?;
    ensure!(ready_of(&gone_now).starts_with("phase=Pending"), "gone-1 left its park: {}", ready_of(&gone_now));
    Ok(())
}
