//! Issue 19 "Close fast, still bounded", end to end: two repositories on one Garage behind one
//! fault proxy, the real mover and controller, the strict-retry holdoff shortened to 40 s
//! doubling to 240 s (long against the controller's 20 s cheap endpoint check).
//!
//! The proxy is cut in `Reset` mode (it accepts TCP and resets at once, so a bare TCP connect
//! would say "up"). Both breakers open, and the cut lasts until each has failed two strict
//! retries and stamped a 160 s holdoff. The backend is restored right after that retry; the
//! holdoff-only schedule would reconnect when that holdoff ends. Instead each repository is
//! Ready within 60 s of the return (measured and printed, with the holdoff it would have
//! waited), through exactly one strict connect Job launched early, one
//! `RepositoryEndpointAnswering` Event each, the cheap checks counted down then answers, and
//! no phase but Degraded until that connect folded (every version on a watch).
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use chrono::Utc;
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::Repository;
use kopiur_testenv::operator::Operator;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use support::env::Stack;
use support::status::{StatusExt, events_about};

mod support;
use phase_watch::{JobWatch, PhaseWatch};
use support::phase_watch;

const BASE: i64 = 40;
const CAP: i64 = 240;
/// The holdoff stamped by the second failed strict retry (40, 80, 160).
const LONG: i64 = 160;
/// The bound on Ready after the return (the cheap check runs every 20 s).
const BOUND: Duration = Duration::from_secs(60);
const KNOBS: [(&str, &str); 2] =
    [("KOPIUR_STRICT_RETRY_BASE_SECONDS", "40"), ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "240")];
const REPOS: [&str; 2] = ["one", "two"];

fn holdoff(r: &Repository) -> Option<(i32, i64, chrono::DateTime<Utc>)> {
    let sr = r.status.as_ref()?.health.as_ref()?.strict_retry.clone()?;
    Some((sr.attempt, sr.holdoff_seconds, sr.next_attempt_at?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_repositories_close_within_a_minute_of_the_backend_returning() -> Result<()> {
    let started = Instant::now();
    let say = |m: String| println!("[{:>6.1}s] {m}", started.elapsed().as_secs_f64());
    let Stack { client, garage: g, op_ns, env, dir: _dir } = Stack::start().await?;
    let env = &env;
    let _guard = env.log_guard();
    let proxy = FaultProxy::start(g.s3_addr()).await?;
    let op = Operator::start(env, &op_ns, &KNOBS).await?;
    let ns = env.namespace("closefast").await?;
    let jobs = JobWatch::start(client.clone());

    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": ns},
        "stringData": {"KOPIA_PASSWORD": "close fast", "AWS_ACCESS_KEY_ID": g.access_key(),
                       "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns).create(&PostParams::default(), &s).await?;
    let repos: Api<Repository> = Api::namespaced(client.clone(), &ns);
    let mut watches = Vec::new();
    for name in REPOS {
        watches.push(PhaseWatch::start(repos.clone(), name, Repository::phase));
        let r: Repository = serde_json::from_value(json!({
            "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", proxy.endpoint()),
                                   "region": g.region(), "prefix": format!("{name}/")}},
                "encryption": {"passwordSecretRef": {"name": "kopia"}},
                "health": {"probe": {"interval": "30s", "failureThreshold": 1}}
            }
        }))?;
        repos.create(&PostParams::default(), &r).await?;
    }
    for (name, w) in REPOS.iter().zip(&watches) {
        w.wait(&format!("{name} Ready"), Duration::from_secs(180), |r| r.phase() == "Ready").await?;
    }
    say("both repositories Ready".into());

    // The cut: accept, then reset. Both breakers open and hold through two failed retries.
    let marks: Vec<usize> = watches.iter().map(|w| w.mark().saturating_sub(1)).collect();
    proxy.set(Mode::Reset);
    let cut_at = Instant::now();
    say("backend cut (proxy resets every connection)".into());
    let mut stamps = Vec::new();
    for (name, w) in REPOS.iter().zip(&watches) {
        let seen = w
            .wait(&format!("{name}: Degraded with the {LONG} s holdoff"), Duration::from_secs(420), |r| {
                r.phase() == "Degraded" && holdoff(r).is_some_and(|(_, h, _)| h >= LONG)
            })
            .await?;
        stamps.push(holdoff(&seen.object).context("strictRetry")?);
    }
    // Restore right after the latest of those strict retries failed.
    proxy.set(Mode::Pass);
    let back = Instant::now();
    let back_utc = Utc::now();
    let cut_for = back - cut_at;
    say(format!("backend restored after {cut_for:?}; stamped retries {stamps:?}"));
    let before: Vec<String> = jobs.in_namespace(&ns).into_iter().map(|j| j.uid).collect();

    let mut lines = Vec::new();
    for (i, (name, w)) in REPOS.iter().zip(&watches).enumerate() {
        let ready =
            w.wait(&format!("{name} Ready again"), BOUND + Duration::from_secs(30), |r| r.phase() == "Ready").await?;
        let latency = ready.at.saturating_duration_since(back);
        let (attempt, held, next_at) = stamps[i];
        let holdoff_only = (next_at - back_utc).num_seconds();
        ensure!(
            latency <= BOUND,
            "{name}: Ready {latency:?} after the backend returned (bound {BOUND:?}; holdoff-only {holdoff_only} s)"
        );
        ensure!(holdoff_only >= 90, "{name}: the restore came right after a strict retry: {holdoff_only} s left");
        // Every version since the cut: Ready, Degraded, then Ready; never Ready before the
        // strict connect folded (a cheap answer moves no phase).
        let t = w.transitions_since(marks[i]);
        ensure!(t == ["Ready", "Degraded", "Ready"], "{name}: transitions {t:?}");
        let owner = ready.object.uid().unwrap_or_default();
        let after: Vec<_> = jobs.owned_by(&owner).into_iter().filter(|j| !before.contains(&j.uid)).collect();
        ensure!(after.len() == 1, "{name}: one connect Job after the return: {after:?}");
        ensure!(after[0].probe_kind() == "strict", "{name}: the early connect is strict: {after:?}");
        ensure!(
            after[0].annotations.get("kopiur.home-operations.com/early-strict").map(String::as_str) == Some("true"),
            "{name}: the Job is marked early: {after:?}"
        );
        let early_by = (next_at - after[0].created).num_seconds();
        ensure!(early_by >= 60, "{name}: launched {early_by} s before its stamped retry");
        let during: Vec<_> = jobs.owned_by(&owner).into_iter().filter(|j| before.contains(&j.uid)).collect();
        lines.push(format!(
            "{name}: Ready {:.1} s after the return (holdoff-only: {holdoff_only} s more, attempt {attempt} held \
             {held} s); connect Jobs since it was created: {} ({} up to the return, then 1 strict launched \
             {early_by} s early; holdoff-only: the same {} plus 1 strict at the stamp)",
            latency.as_secs_f64(),
            during.len() + after.len(),
            during.len(),
            during.len(),
        ));
    }
    for name in REPOS {
        let answering = events_about(&client, &ns, name, "RepositoryEndpointAnswering").await?;
        let n: i32 = answering.iter().map(|e| e.series.as_ref().map(|s| s.count).unwrap_or(1).max(1)).sum();
        ensure!(n == 1, "{name}: one RepositoryEndpointAnswering Event: {answering:?}");
        let note = answering[0].note.clone().unwrap_or_default();
        ensure!(note.contains("answers again") && note.contains("instead of at"), "{note}");
        let closed = events_about(&client, &ns, name, "RepositoryBreakerClosed").await?;
        ensure!(closed.len() == 1, "{name}: closed once: {closed:?}");
        let series = |o: &str| {
            format!(
                "kopiur_repository_endpoint_checks_total{{kind=\"Repository\",namespace=\"{ns}\",name=\"{name}\",outcome=\"{o}\"}}"
            )
        };
        let down = op.metric(&series("down")).await.unwrap_or(0.0);
        let answers = op.metric(&series("answers")).await.unwrap_or(0.0);
        ensure!(down >= 1.0 && answers >= 1.0, "{name}: cheap checks counted: down {down}, answers {answers}");
        // The cadence bounds the checks: at most one per 20 s while open (plus the first).
        let open_for = cut_for.as_secs_f64() + BOUND.as_secs_f64();
        ensure!(down + answers <= open_for / 20.0 + 2.0, "{name}: {down} + {answers} checks in {open_for:.0} s");
        lines.push(format!("{name}: cheap checks: {down} down, {answers} answers"));
    }
    println!(
        "8-minute-cut acceptance, shortened knobs (holdoff {BASE} s doubling to {CAP} s, check every 20 s), cut {cut_for:?}:\n  {}",
        lines.join("\n  ")
    );
    say("done".into());
    Ok(())
}
