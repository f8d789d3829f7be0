//! The repository's reconcile-time (R) and cross-object (X) checks end to end (docs/design/api-contract.md §0,
//! docs/design/api-contract.md §1.8, §4.1, §4.6, §15), on a private control plane, process node, Garage and the real mover
//! behind the auditing kopia wrapper, in one shared environment:
//! - an unknown kopia algorithm name in `spec.create`, and a mover request above its limit, park
//!   the repository `Pending`, `Ready=False`, `Stalled=True / InvalidSpec`; an unknown
//!   `scheduleDefaults.timezone` does so with `InvalidSchedule` and a message naming the field and the zone (docs/design/api-contract.md §15); a
//!   password Secret reference into another namespace with `CrossNamespaceReference`. Each gets
//!   one Warning Event of that reason and never a Job (a watch sees every Job);
//! - fixing the zone lifts the refusal: the repository bootstraps and is Ready;
//! - known names, `ecc` included, reach the real `kopia repository create` (the wrapper's log
//!   shows the flags and exit 0) and the repository is Ready;
//! - a `mode: ReadOnly` repository is Ready with `RepositoryWritable=False / RepositoryReadOnly`,
//!   and the condition goes once the mode is `ReadWrite` again;
//! - the algorithm lists the operator checks against are exactly the pinned kopia's.
mod support;
use support::phase_watch;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kopiur_api::Repository;
use kopiur_kopia::algorithms::Algorithm;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use phase_watch::{JobWatch, PhaseWatch};
use serde_json::json;
use support::status::{StatusExt, condition_parts as cond, events_about};
use support::{Harness, wait_for};

/// Status describes the current generation.
fn current(r: &Repository) -> bool {
    r.status.as_ref().and_then(|s| s.observed_generation) == r.metadata.generation
}

/// Refused by reason `reason` with `message` (checked by the caller when it is not exact).
fn refused(r: &Repository, reason: &str) -> bool {
    current(r)
        && r.phase() == "Pending"
        && cond(r, "Stalled").is_some_and(|(s, why, _)| s == "True" && why == reason)
        && cond(r, "Ready").is_some_and(|(s, why, _)| s == "False" && why == reason)
        && cond(r, "Reconciling").is_some_and(|(s, _, _)| s == "False")
}

/// The notes of the Warning Events of `reason` on `name`, one entry per occurrence (an Event
/// the recorder aggregated into a series counts as many times as it occurred).
async fn warnings(h: &Harness, ns: &str, name: &str, reason: &str) -> Result<Vec<String>> {
    Ok(events_about(&h.client, ns, name, reason)
        .await?
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .flat_map(|e| {
            let n = e.series.as_ref().map_or(1, |s| s.count.max(1) as usize);
            std::iter::repeat_n(e.note.unwrap_or_default(), n)
        })
        .collect())
}

/// The names kopia's own flag parser lists for `flag` ("enum value must be one of A,B,…, got").
fn kopia_names(kopia: &std::path::Path, dir: &std::path::Path, a: Algorithm) -> Result<Vec<String>> {
    let out = std::process::Command::new(kopia)
        .args(["repository", "create", "filesystem"])
        .arg(format!("--path={}", dir.join("never").display()))
        .arg(format!("{}=kopiur-not-an-algorithm", a.flag()))
        .env("KOPIA_CONFIG_PATH", dir.join("repository.config"))
        .env("KOPIA_LOG_DIR", dir.join("logs"))
        .env("KOPIA_CACHE_DIRECTORY", dir.join("cache"))
        .env("KOPIA_PASSWORD", "unused")
        .env("KOPIA_CHECK_FOR_UPDATES", "false")
        .output()?;
    ensure!(!out.status.success(), "kopia accepted {}=kopiur-not-an-algorithm", a.flag());
    let err = String::from_utf8_lossy(&out.stderr);
    let list = err
        .split("enum value must be one of ")
        .nth(1)
        .and_then(|rest| rest.split(", got").next())
        .with_context(|| format!("no enum list in kopia's answer to {}: {err}", a.flag()))?;
    Ok(list.split(',').map(str::to_string).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repository_r_and_x_checks_and_read_only_end_to_end() -> Result<()> {
    let started = Instant::now();
    // The lists the R check uses are the pinned kopia's, name for name.
    let kopia = kopiur_testenv::tools::kopia()?;
    let scratch = tempfile::tempdir()?;
    for a in Algorithm::ALL {
        assert_eq!(
            kopia_names(&kopia, scratch.path(), a)?,
            a.known(),
            "{a:?}: the operator's list differs from kopia's"
        );
    }

    let mut h = Harness::start().await?;
    h.start_operator().await?;
    let _guard = h.env.log_guard();
    let ns = h.env.namespace("checks").await?;
    let repos: Api<Repository> = Api::namespaced(h.client.clone(), &ns);
    let jobs = JobWatch::start(h.client.clone());
    let t = Duration::from_secs(180);
    let watch = |name: &str| PhaseWatch::start(repos.clone(), name, Repository::phase);
    let (w_algo, w_limits, w_tz, w_xns, w_ok, w_ro) =
        (watch("algo-bad"), watch("limits"), watch("tz"), watch("xns"), watch("algo-ok"), watch("ro"));
    // ReadOnly never creates: it connects to a repository made directly.
    h.kopia_repo("ro/").await?;

    let algo_bad = h
        .repository(
            &ns,
            "algo-bad",
            "algo-bad/",
            json!({"create": {"encryption": "AES-NOPE", "hash": "BLAKE3-256", "ecc": {"algorithm": "RS", "overheadPercent": 2}}}),
        )
        .await?;
    let limits = h
        .repository(
            &ns,
            "limits",
            "limits/",
            json!({"moverDefaults": {"resources": {"requests": {"cpu": "2", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}}),
        )
        .await?;
    let tz = h.repository(&ns, "tz", "tz/", json!({"scheduleDefaults": {"timezone": "Mars/Olympus"}})).await?;
    // The Secret exists in the operator namespace too: the reference is refused, not missing.
    h.secret(&h.op_ns).await?;
    let xns = h
        .repository(
            &ns,
            "xns",
            "xns/",
            json!({"encryption": {"passwordSecretRef": {"name": "kopia", "namespace": h.op_ns}}}),
        )
        .await?;
    let ok_create = json!({"create": {"encryption": "CHACHA20-POLY1305-HMAC-SHA256", "hash": "BLAKE3-256",
        "splitter": "DYNAMIC-1M-BUZHASH", "ecc": {"algorithm": "REED-SOLOMON-CRC32", "overheadPercent": 2}}});
    h.repository(&ns, "algo-ok", "algo-ok/", ok_create).await?;
    h.repository(&ns, "ro", "ro/", json!({"mode": "ReadOnly"})).await?;

    // Each refusal: Pending, Ready=False and Stalled=True with the reason, for this generation.
    let r = w_algo.wait("algo-bad Stalled InvalidSpec", t, |r| refused(r, "InvalidSpec")).await?.object;
    let msg = cond(&r, "Stalled").unwrap().2;
    assert_eq!(
        msg,
        "spec.create.encryption: \"AES-NOPE\" is not a kopia encryption algorithm, use one of \
         AES256-GCM-HMAC-SHA256, CHACHA20-POLY1305-HMAC-SHA256 (create.* is immutable once set); \
         spec.create.ecc.algorithm: \"RS\" is not a kopia error-correction algorithm, use one of REED-SOLOMON-CRC32 \
         (create.* is immutable once set)"
    );
    let r = w_limits.wait("limits Stalled InvalidSpec", t, |r| refused(r, "InvalidSpec")).await?.object;
    assert_eq!(
        cond(&r, "Stalled").unwrap().2,
        "spec.moverDefaults.resources: requests.cpu 2 is above limits.cpu 1 (a request must not exceed its limit)"
    );
    let r = w_tz.wait("tz Stalled InvalidSchedule", t, |r| refused(r, "InvalidSchedule")).await?.object;
    assert_eq!(
        cond(&r, "Stalled").unwrap().2,
        "spec.scheduleDefaults.timezone: unknown IANA time zone \"Mars/Olympus\""
    );
    let r =
        w_xns.wait("xns Stalled CrossNamespaceReference", t, |r| refused(r, "CrossNamespaceReference")).await?.object;
    assert_eq!(
        cond(&r, "Stalled").unwrap().2,
        format!(
            "spec.encryption.passwordSecretRef.namespace is {op}, but this repository's Jobs run in namespace {ns} \
             and read Secrets only from there; put the Secret in {ns} and drop the namespace",
            op = h.op_ns
        )
    );

    // Known names and ecc reach the real `kopia repository create`, which accepts them.
    w_ok.wait("algo-ok Ready", t, |r| r.phase() == "Ready").await?;
    let creates: Vec<_> = h
        .audit
        .calls()
        .into_iter()
        .filter(|c| c.args.len() > 2 && c.args[0] == "repository" && c.args[1] == "create")
        .collect();
    let ok: Vec<_> = creates.iter().filter(|c| c.args.iter().any(|a| a == "--prefix=algo-ok/")).collect();
    ensure!(ok.len() == 1, "one create for algo-ok, got {ok:?}");
    for flag in [
        "--encryption=CHACHA20-POLY1305-HMAC-SHA256",
        "--block-hash=BLAKE3-256",
        "--object-splitter=DYNAMIC-1M-BUZHASH",
        "--ecc=REED-SOLOMON-CRC32",
        "--ecc-overhead-percent=2",
    ] {
        ensure!(ok[0].args.iter().any(|a| a == flag), "{flag} missing from {:?}", ok[0].args);
    }
    assert_eq!(ok[0].rc, Some(0), "kopia accepted the create: {:?}", ok[0]);

    // ReadOnly: Ready, and not writable.
    let r = w_ro.wait("ro Ready", t, |r| r.phase() == "Ready" && current(r)).await?.object;
    assert_eq!(
        cond(&r, "RepositoryWritable"),
        Some((
            "False".into(),
            "RepositoryReadOnly".into(),
            "spec.mode is ReadOnly: backups are refused and maintenance is skipped; restores and reads work".into()
        ))
    );
    assert_eq!(cond(&r, "Ready").map(|c| c.0), Some("True".into()));
    let mark = w_ro.mark();
    repos.patch("ro", &PatchParams::default(), &Patch::Merge(json!({"spec": {"mode": "ReadWrite"}}))).await?;
    w_ro.wait_since("ro: RepositoryWritable gone", mark, t, |r| {
        current(r) && r.phase() == "Ready" && cond(r, "RepositoryWritable").is_none()
    })
    .await?;

    // Fixing the zone lifts the refusal: a bootstrap (this prefix is empty, so a create), Ready.
    let mark = w_tz.mark();
    repos
        .patch(
            "tz",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scheduleDefaults": {"timezone": "Europe/Berlin"}}})),
        )
        .await?;
    w_tz.wait_since("tz Ready", mark, t, |r| r.phase() == "Ready" && current(r)).await?;
    assert_eq!(cond(&repos.get("tz").await?, "Stalled").map(|c| c.0), Some("False".into()));

    // Never a Job for a refused repository (the watch saw every Job since before they
    // existed), and they are still refused now.
    for (repo, reason, watch) in [
        (&algo_bad, "InvalidSpec", &w_algo),
        (&limits, "InvalidSpec", &w_limits),
        (&xns, "CrossNamespaceReference", &w_xns),
    ] {
        let uid = repo.uid().unwrap_or_default();
        let launched = jobs.owned_by(&uid);
        ensure!(launched.is_empty(), "{} launched a Job: {launched:?}", repo.name_any());
        let latest = watch.latest().context("seen")?.object;
        ensure!(refused(&latest, reason), "{} is no longer refused: {:?}", repo.name_any(), latest.status);
    }
    let tz_jobs = jobs.owned_by(&tz.uid().unwrap_or_default());
    ensure!(!tz_jobs.is_empty(), "tz bootstrapped once the zone was fixed");
    ensure!(
        !h.audit.calls().iter().any(|c| c.args.iter().any(|a| a.contains("AES-NOPE") || a.contains("Mars"))),
        "a refused value reached kopia"
    );

    // One Warning Event per refusal and generation, however many reconciles ran.
    for (name, reason) in [
        ("algo-bad", "InvalidSpec"),
        ("limits", "InvalidSpec"),
        ("tz", "InvalidSchedule"),
        ("xns", "CrossNamespaceReference"),
    ] {
        wait_for(&format!("{name}: a {reason} Event"), Duration::from_secs(30), &h.log(), || async {
            Ok((!warnings(&h, &ns, name, reason).await?.is_empty()).then_some(()))
        })
        .await?;
        let notes = warnings(&h, &ns, name, reason).await?;
        assert_eq!(notes.len(), 1, "{name}: {notes:?}");
    }
    eprintln!("repository_checks_e2e: {:.0?}", started.elapsed());
    Ok(())
}
