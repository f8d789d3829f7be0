//! Issue 19 "Slow is not down", end to end: the death spiral on a real kopia repository.
//!
//! One environment: a real kopia repository grown to at least 2,000 index blobs
//! ([`index_growth`], legacy index format so a quick maintenance compacts at once) in Garage,
//! reached only through a fault proxy, the real controller and mover.
//!
//! Slow: the proxy adds [`LATENCY`] to every chunk, so a cold connect takes longer than the
//! Repository's initial connect deadline (half a cold connect measured through the proxy, at
//! most [`INITIAL_DEADLINE`], set through
//! `spec.bootstrap.failurePolicy.activeDeadlineSeconds`). A connect killed by its deadline while
//! the backend answers is `TimedOut`, never an unreachable reason; the deadline grows until the
//! connect fits; the repository is Ready with no human action; its `IndexBlobHealth` goes False,
//! it asks its Maintenance for a quick run (`QuickMaintenanceRequested`), the run compacts the
//! index blobs and the next probe reports the count fallen below the threshold. Every connect
//! Job over the run is counted against a bound derived from the deadline's doubling and the
//! probe cadence.
//!
//! Refused: the same repository with the proxy refusing connections goes Degraded for an
//! unreachable reason; a requested maintenance run parks (Pending, `RepositoryNotReady`) and no
//! maintenance Job is created, and no Job but the breaker's own strict connects targets the
//! repository until the proxy passes again; then the repository is Ready and the parked run
//! runs.
//!
//! Slow after Ready: every index blob is put back ([`index_growth::copy_to_garage`]) and the
//! latency raised, so a probe outlives the deadline the fast connects earned: the repository is
//! Degraded for `TimedOut` (both `Ready` and `BackendReachable`), the breaker asks for a quick
//! run, the Maintenance launches it while the repository is still Degraded (not gated), and the
//! repository is Ready again with the count fallen, with no human action.
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use kopiur_api::domain::identity::{lease_owner, maintenance_owner};
use kopiur_api::names::{event, reason};
use kopiur_api::{Maintenance, Repository};
use kopiur_testenv::TestEnv;
use kopiur_testenv::garage::Garage;
use kopiur_testenv::index_growth::{self, Kopia};
use kopiur_testenv::operator::Operator;
use kopiur_testenv::proxy::{FaultProxy, Mode};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use support::status::event_count;

mod support;
use phase_watch::{JobSeen, JobWatch, PhaseWatch};
use support::phase_watch;

const PASSWORD: &str = "death spiral";
const TARGET: usize = 2_000;
const NS: &str = "spiral";
const PREFIX: &str = "spiral/";
/// Added to every chunk both ways. Calibrated on 2,033 index blobs: a cold `repository connect`
/// takes 7.9 s straight to Garage, 16 s at 5 ms, 21 s at 10 ms, 26 s at 20 ms, 71 s at 50 ms.
const LATENCY: Duration = Duration::from_millis(5);
/// The most the Repository's initial connect deadline may be. The deadline in use is half a
/// cold connect measured through the proxy at [`LATENCY`] on this machine (at least 2 s), so
/// the first connect exceeds it however fast the machine is: with a fixed 10 s, a fast
/// machine's 8 s connect fit, no version said `TimedOut`, and the scenario's premise failed.
const INITIAL_DEADLINE: i64 = 10;

/// The initial deadline for a cold connect through the proxy that took `cold`: half of it,
/// between 2 s and [`INITIAL_DEADLINE`].
fn initial_deadline(cold: Duration) -> i64 {
    ((cold.as_secs_f64() / 2.0).floor() as i64).clamp(2, INITIAL_DEADLINE)
}
/// Scenario C's latency: a cold connect over the grown index (about 55 s, between the calibrated
/// 26 s at 20 ms and 71 s at 50 ms) outlives
/// the deadline a fast connect earns (3 × a few seconds + 30 s).
const SLOWER: Duration = Duration::from_millis(40);

/// Scenario C's latency for the deadline `earned`: [`SLOWER`], or more when a loaded machine
/// earned a longer deadline, so the first slow probe outlives the deadline by about 15 s
/// whatever it is. The slope is what CI runs measured (45–51 s of cold connect at 40 ms, about
/// 1.2 s per ms), not the calibration's 1.5: with 1.5 an earned 48 s got 46 ms, the first slow
/// probe fitted the deadline, the deadline grew with it, and no probe timed out.
fn slower_for(earned: Option<i64>) -> Duration {
    let need_ms = ((earned.unwrap_or(0) as f64 + 15.0) / 1.2).ceil() as u64;
    SLOWER.max(Duration::from_millis(need_ms.min(90)))
}
/// The probe cadence (`spec.health.probe.interval`).
const PROBE_INTERVAL: i64 = 30;
const THRESHOLD: i64 = 1000;
const KNOBS: [(&str, &str); 2] =
    [("KOPIUR_STRICT_RETRY_BASE_SECONDS", "15"), ("KOPIUR_STRICT_RETRY_CAP_SECONDS", "60")];

fn ptr<'a>(o: &'a DynamicObject, p: &str) -> Option<&'a Value> {
    o.data.pointer(p)
}

fn ready_reason(o: &DynamicObject) -> String {
    ptr(o, "/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// `phase/Ready reason`, so every transition of either shows in the watch.
fn state(o: &DynamicObject) -> String {
    let phase = ptr(o, "/status/phase").and_then(Value::as_str).unwrap_or_default();
    format!("{phase}/{}", ready_reason(o))
}

fn reachable_reason(o: &DynamicObject) -> String {
    ptr(o, "/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "BackendReachable"))
        .and_then(|c| c["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn phase(o: &DynamicObject) -> String {
    ptr(o, "/status/phase").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn int(o: &DynamicObject, p: &str) -> Option<i64> {
    ptr(o, p).and_then(Value::as_i64)
}

fn index_blobs(o: &DynamicObject) -> Option<i64> {
    int(o, "/status/storageStats/indexBlobCount")
}

fn is_maintenance(j: &JobSeen) -> bool {
    j.labels.contains_key("kopiur.home-operations.com/maintenance")
}

fn describe(jobs: &[JobSeen]) -> String {
    jobs.iter()
        .map(|j| {
            let end = match (j.complete_seen, j.failed_seen) {
                (Some(_), _) => "complete",
                (_, Some(_)) => "failed",
                _ => "open",
            };
            format!("{} [{} {}] {end}", j.name, j.op(), j.probe_kind())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_is_not_down_maintenance_cures_it_and_a_refused_backend_parks_it() -> Result<()> {
    let started = Instant::now();
    let say = |m: String| println!("[{:>6.1}s] {m}", started.elapsed().as_secs_f64());
    let dir = tempfile::tempdir()?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let owner = maintenance_owner(&lease_owner(Some(NS), "r"));
    let work = dir.path().join("kopia");
    // The control plane starts while the repository grows.
    let (env, grown) = tokio::join!(
        TestEnv::start(kopiur_testenv::Options::default()),
        index_growth::grow_into_garage(&g, &work, PREFIX, PASSWORD, &owner, TARGET)
    );
    let (env, grown) = (&env?, grown?);
    say(format!(
        "grown: {} index blobs (setup {:.1} s, growth {:.1} s, copy {:.1} s; a cold connect straight to Garage {:.1} s)",
        grown.index_blobs,
        grown.setup.as_secs_f64(),
        grown.grow.as_secs_f64(),
        grown.copy.as_secs_f64(),
        grown.direct_connect.as_secs_f64()
    ));
    let _guard = env.log_guard();
    let client = env.client().await?;
    let proxy = FaultProxy::start(g.s3_addr()).await?;
    proxy.set(Mode::Latency(LATENCY));
    // A cold connect through the slow proxy, as the first connect Job will make it.
    let cold = Kopia::new(&g, &dir.path().join("calibrate"), PASSWORD)?
        .fresh("cold")
        .connect_s3(&g, &proxy.endpoint(), PREFIX, Duration::from_secs(300))
        .await?;
    let initial = initial_deadline(cold);
    say(format!("a cold connect through the proxy: {:.1} s; initial deadline {initial} s", cold.as_secs_f64()));
    let op_ns = env.namespace("kopiur-system").await?;
    let op = Operator::start(env, &op_ns, &KNOBS).await?;
    kopiur_testenv::operator::ensure_namespace(&client, NS).await?;
    let jobs = JobWatch::start(client.clone());

    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "kopia", "namespace": NS},
        "stringData": {"KOPIA_PASSWORD": PASSWORD, "AWS_ACCESS_KEY_ID": g.access_key(),
                       "AWS_SECRET_ACCESS_KEY": g.secret_key()}
    }))?;
    Api::<Secret>::namespaced(client.clone(), NS).create(&PostParams::default(), &s).await?;
    let ar = ApiResource::erase::<Repository>(&());
    let repos: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &ar);
    let w = PhaseWatch::start(repos.clone(), "r", state);
    let maints: Api<Maintenance> = Api::namespaced(client.clone(), NS);
    // Yearly slots: the only quick run in scenario A is the one the repository asks for.
    let m: Maintenance = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Maintenance",
        "metadata": {"name": "m", "namespace": NS},
        "spec": {"repository": {"name": "r"}, "schedule": {"quick": {"cron": "0 0 1 1 *"}, "full": {"cron": "30 0 1 1 *"}}}
    }))?;
    maints.create(&PostParams::default(), &m).await?;
    let r: Repository = serde_json::from_value(json!({
        "apiVersion": "kopiur.home-operations.com/v1alpha1", "kind": "Repository",
        "metadata": {"name": "r", "namespace": NS},
        "spec": {
            "backend": {"s3": {"bucket": g.bucket(), "endpoint": format!("http://{}", proxy.endpoint()),
                               "region": g.region(), "prefix": PREFIX}},
            "encryption": {"passwordSecretRef": {"name": "kopia"}},
            "bootstrap": {"failurePolicy": {"activeDeadlineSeconds": initial}},
            "health": {"indexBlobWarnThreshold": THRESHOLD,
                       "probe": {"interval": format!("{PROBE_INTERVAL}s"), "failureThreshold": 1}}
        }
    }))?;
    let a_start = Instant::now();
    Api::<Repository>::namespaced(client.clone(), NS).create(&PostParams::default(), &r).await?;
    say(format!("scenario A: Repository r behind {LATENCY:?} of latency, initial deadline {initial} s"));

    // ---- Scenario A: slow, not down. ----
    let first = w
        .wait("r Ready with the grown index-blob count", Duration::from_secs(300), |o| {
            phase(o) == "Ready" && index_blobs(o).is_some_and(|n| n >= TARGET as i64)
        })
        .await?;
    let first_ready = first.at.duration_since(a_start);
    say(format!(
        "r Ready after {:.1} s: indexBlobCount {:?}, lastConnectSeconds {:?}, bootstrapDeadlineSeconds {:?}",
        first_ready.as_secs_f64(),
        index_blobs(&first.object),
        int(&first.object, "/status/health/lastConnectSeconds"),
        int(&first.object, "/status/health/bootstrapDeadlineSeconds"),
    ));
    let cured = w
        .wait("r Ready with the index-blob count below the threshold", Duration::from_secs(300), |o| {
            phase(o) == "Ready" && index_blobs(o).is_some_and(|n| n < THRESHOLD)
        })
        .await?;
    let a_secs = cured.at.duration_since(a_start).as_secs_f64();
    let m_uid = maints.get("m").await?.uid().unwrap_or_default();
    let r_uid = cured.object.uid().unwrap_or_default();
    let m_jobs: Vec<JobSeen> = jobs.owned_by(&m_uid).into_iter().filter(is_maintenance).collect();
    let r_jobs = jobs.owned_by(&r_uid);
    let states = w.transitions_since(0);
    say(format!(
        "r cured after {a_secs:.1} s: indexBlobCount {:?}, lastConnectSeconds {:?}, bootstrapDeadlineSeconds {:?}",
        index_blobs(&cured.object),
        int(&cured.object, "/status/health/lastConnectSeconds"),
        int(&cured.object, "/status/health/bootstrapDeadlineSeconds"),
    ));
    say(format!("r phase/Ready-reason transitions: {states:?}"));
    say(format!("maintenance Jobs: {}", describe(&m_jobs)));
    say(format!("connect Jobs owned by r ({}): {}", r_jobs.len(), describe(&r_jobs)));
    // Slow is never read as down.
    for s in &states {
        let (ph, why) = s.split_once('/').unwrap_or((s, ""));
        ensure!(
            ph != "Degraded" || why == reason::TIMED_OUT,
            "Degraded for {why}, not {}: {states:?}",
            reason::TIMED_OUT
        );
        ensure!(
            why != reason::BACKEND_UNREACHABLE && why != "RepositoryUnavailable" && why != "ProbeDeadlineExceeded",
            "a slow backend read as down ({why}): {states:?}"
        );
    }
    ensure!(
        states.iter().any(|s| s.ends_with(&format!("/{}", reason::TIMED_OUT))),
        "the cold connect exceeded the initial deadline, so some version says {}: {states:?}",
        reason::TIMED_OUT
    );
    ensure!(
        m_jobs.iter().any(|j| j.complete_seen.is_some() && j.first_seen >= first.at),
        "a maintenance Job ran to completion after r was Ready: {}",
        describe(&m_jobs)
    );
    let requested = event_count(&client, NS, "r", event::QUICK_MAINTENANCE_REQUESTED).await?;
    ensure!(requested >= 1, "r asked its Maintenance for a quick run ({requested} Events)");
    ensure!(phase(&cured.object) == "Ready", "Ready at the end with no human action");
    // The bound: the deadline doubles from the initial one until a connect fits (the first
    // Ready's measured connect), each doubling one killed Job, then one connect that fits; after
    // that one probe per interval, plus one reverify or strict connect per phase change.
    let connect = int(&first.object, "/status/health/lastConnectSeconds").unwrap_or(0).max(1);
    let doublings = (connect as f64 / initial as f64).log2().ceil().max(0.0) as usize + 1;
    let changes = states.len();
    let bound = doublings + 1 + (a_secs as usize).div_ceil(PROBE_INTERVAL as usize) + changes;
    say(format!(
        "scenario A figures: Ready after {:.1} s, cured after {a_secs:.1} s; {} connect Jobs (bound {bound}: \
         {doublings} deadline kills at most for a {connect} s connect from {initial} s, 1 that fits, \
         one per {PROBE_INTERVAL} s probe, one per phase change); {} maintenance Job(s); {requested} \
         QuickMaintenanceRequested",
        first_ready.as_secs_f64(),
        r_jobs.len(),
        m_jobs.len()
    ));
    ensure!(r_jobs.len() <= bound, "{} connect Jobs over {a_secs:.0} s, bound {bound}", r_jobs.len());

    // ---- Scenario B: refused, the same repository. ----
    let mark = w.mark().saturating_sub(1);
    let before: Vec<String> = jobs.in_namespace(NS).into_iter().map(|j| j.uid).collect();
    proxy.set(Mode::Refuse);
    let cut = Instant::now();
    say("scenario B: the proxy refuses every connection".into());
    let degraded =
        w.wait_since("r Degraded (unreachable)", mark, Duration::from_secs(180), |o| phase(o) == "Degraded").await?;
    let why = ready_reason(&degraded.object);
    let reach = reachable_reason(&degraded.object);
    say(format!(
        "r Degraded after {:.1} s: Ready reason {why}, BackendReachable reason {reach}",
        degraded.at.duration_since(cut).as_secs_f64()
    ));
    ensure!(
        why != reason::TIMED_OUT && reach != reason::TIMED_OUT,
        "a refused backend is down, not slow: {why}/{reach}"
    );
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    maints
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"kopiur.home-operations.com/run-requested": at}}})),
        )
        .await?;
    // Parked for a while: the manual run stays Pending for the repository, no maintenance Job.
    let parked_for = Duration::from_secs(20);
    tokio::time::sleep(parked_for).await;
    let mm = maints.get("m").await?;
    let mv = serde_json::to_value(&mm)?;
    let manual = mv.pointer("/status/manualRun/phase").and_then(Value::as_str).unwrap_or_default().to_string();
    let m_ready = mv
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| {
            (c["status"].as_str().unwrap_or_default().to_string(), c["reason"].as_str().unwrap_or_default().to_string())
        })
        .unwrap_or_default();
    say(format!("m after {parked_for:?} refused: manual run {manual:?}, Ready {m_ready:?}"));
    ensure!(manual == "Pending", "the requested run is parked Pending: {manual:?}");
    ensure!(m_ready == ("False".to_string(), reason::REPOSITORY_NOT_READY.to_string()), "parked: {m_ready:?}");
    let during: Vec<JobSeen> = jobs.in_namespace(NS).into_iter().filter(|j| !before.contains(&j.uid)).collect();
    let not_strict: Vec<JobSeen> =
        during.iter().filter(|j| is_maintenance(j) || j.probe_kind() != "strict").cloned().collect();
    say(format!("Jobs while refused ({}): {}", during.len(), describe(&during)));
    ensure!(
        not_strict.iter().all(|j| j.first_seen <= degraded.at + Duration::from_secs(2)),
        "no Job but the breaker's strict connects once Degraded: {}",
        describe(&not_strict)
    );

    proxy.set(Mode::Pass);
    let back = Instant::now();
    say("the proxy passes again".into());
    let again = w.wait("r Ready again", Duration::from_secs(180), |o| phase(o) == "Ready").await.context("recovery")?;
    let ran = jobs
        .wait("the parked maintenance run", Duration::from_secs(180), |j| {
            is_maintenance(j) && j.complete_seen.is_some() && !before.contains(&j.uid)
        })
        .await?;
    ensure!(ran.first_seen >= back, "the parked run launched only after the backend returned");
    say(format!(
        "scenario B figures: Degraded {:.1} s after the cut ({why}); Ready {:.1} s after the return; the parked \
         maintenance Job launched {:.1} s after the return; {} Job(s) while refused, all strict connects",
        degraded.at.duration_since(cut).as_secs_f64(),
        again.at.duration_since(back).as_secs_f64(),
        ran.first_seen.duration_since(back).as_secs_f64(),
        during.len()
    ));

    // ---- Scenario C: slow after Ready: Degraded for TimedOut, and maintenance is not gated. ----
    // The bucket holds the grown repository again (every index blob back) and the proxy is
    // slower: the next probe outlives the deadline the fast connects earned.
    let ready_before = w.latest().context("r")?.object;
    let earned = int(&ready_before, "/status/health/bootstrapDeadlineSeconds");
    let req_before = event_count(&client, NS, "r", event::QUICK_MAINTENANCE_REQUESTED).await?;
    let regrow = index_growth::copy_to_garage(&g, &work, PREFIX, PASSWORD, true).await?;
    let slower = slower_for(earned);
    proxy.set(Mode::Latency(slower));
    let c_start = Instant::now();
    let mark = w.mark().saturating_sub(1);
    let c_before: Vec<String> = jobs.in_namespace(NS).into_iter().map(|j| j.uid).collect();
    say(format!(
        "scenario C: {TARGET}+ index blobs back ({:.1} s), {slower:?} of latency; the deadline r earned: {earned:?} s",
        regrow.as_secs_f64()
    ));
    let slow =
        w.wait_since("r Degraded for TimedOut", mark, Duration::from_secs(240), |o| phase(o) == "Degraded").await?;
    let slow_why = ready_reason(&slow.object);
    say(format!(
        "r Degraded {:.1} s after the slowdown: Ready reason {slow_why}, BackendReachable reason {}",
        slow.at.duration_since(c_start).as_secs_f64(),
        reachable_reason(&slow.object)
    ));
    ensure!(slow_why == reason::TIMED_OUT, "slow, not down: Degraded for {slow_why}");
    // No request: the breaker opening for TimedOut asks the Maintenance for a quick run, and
    // the Maintenance is not gated by a repository Degraded for TimedOut.
    let cure = jobs
        .wait("a maintenance Job while Degraded", Duration::from_secs(120), |j| {
            is_maintenance(j) && !c_before.contains(&j.uid)
        })
        .await?;
    let state_then = w.latest().map(|s| s.phase).unwrap_or_default();
    say(format!(
        "maintenance Job {} launched {:.1} s after r went Degraded, r then {state_then}",
        cure.name,
        cure.first_seen.saturating_duration_since(slow.at).as_secs_f64()
    ));
    ensure!(state_then.starts_with("Degraded/"), "the maintenance Job launched while r was Degraded: {state_then}");
    let done = w
        .wait("r Ready, compacted", Duration::from_secs(300), |o| {
            phase(o) == "Ready" && index_blobs(o).is_some_and(|n| n < THRESHOLD)
        })
        .await?;
    let c_states = w.transitions_since(mark);
    for s in &c_states {
        let (ph, why) = s.split_once('/').unwrap_or((s, ""));
        ensure!(ph != "Degraded" || why == reason::TIMED_OUT, "slow read as {why}: {c_states:?}");
    }
    let cure_seen = jobs.in_namespace(NS).into_iter().find(|j| j.uid == cure.uid).context("cure Job")?;
    ensure!(
        cure_seen.complete_seen.is_some(),
        "the maintenance Job completed: {}",
        describe(std::slice::from_ref(&cure_seen))
    );
    let c_jobs: Vec<JobSeen> = jobs.owned_by(&r_uid).into_iter().filter(|j| !c_before.contains(&j.uid)).collect();
    let c_secs = done.at.duration_since(c_start).as_secs_f64();
    say(format!("r transitions: {c_states:?}"));
    say(format!(
        "scenario C figures: Degraded (TimedOut) {:.1} s after the slowdown, Ready with indexBlobCount {:?} {c_secs:.1} s \
         after it (lastConnectSeconds {:?}, bootstrapDeadlineSeconds {:?}); connect Jobs {}: {}",
        slow.at.duration_since(c_start).as_secs_f64(),
        index_blobs(&done.object),
        int(&done.object, "/status/health/lastConnectSeconds"),
        int(&done.object, "/status/health/bootstrapDeadlineSeconds"),
        c_jobs.len(),
        describe(&c_jobs)
    ));
    let req_after = event_count(&client, NS, "r", event::QUICK_MAINTENANCE_REQUESTED).await?;
    ensure!(req_after > req_before, "the TimedOut breaker asked for a quick run ({req_before} -> {req_after} Events)");
    let c_bound = (c_secs as usize).div_ceil(PROBE_INTERVAL as usize) + c_states.len() + 2;
    ensure!(c_jobs.len() <= c_bound, "{} connect Jobs in {c_secs:.0} s, bound {c_bound}", c_jobs.len());
    // Teardown: no Job left crawling through the latency, the operator stopped first.
    proxy.set(Mode::Pass);
    let mut op = op;
    op.stop();
    say("done (operator stopped)".into());
    Ok(())
}

/// Scenario C's latency gives the first slow probe about 15 s past any earned deadline.
#[test]
fn scenario_c_outlives_the_earned_deadline_with_the_measured_slope() {
    assert_eq!(slower_for(Some(33)), SLOWER, "the usual deadline keeps 40 ms");
    assert_eq!(slower_for(None), SLOWER);
    assert_eq!(slower_for(Some(48)), Duration::from_millis(53), "ci12's deadline: 46 ms was too little");
    assert_eq!(slower_for(Some(400)), Duration::from_millis(90), "capped");
}

#[test]
fn the_initial_deadline_is_half_a_cold_connect_within_bounds() {
    assert_eq!(initial_deadline(Duration::from_secs_f64(8.4)), 4, "a fast machine: the 8 s connect exceeds 4 s");
    assert_eq!(initial_deadline(Duration::from_secs(60)), INITIAL_DEADLINE);
    assert_eq!(initial_deadline(Duration::from_secs(1)), 2);
}

/// Calibration (run by hand): grows the repository and times a cold connect through the proxy
/// at several latencies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn calibrate_connect_latency() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let g = Garage::start(&dir.path().join("garage")).await?;
    let grown =
        index_growth::grow_into_garage(&g, &dir.path().join("kopia"), PREFIX, PASSWORD, "kopiur@calibrate", TARGET)
            .await?;
    println!("grown: {grown:?}");
    let proxy = FaultProxy::start(g.s3_addr()).await?;
    let k = Kopia::new(&g, &dir.path().join("probe"), PASSWORD)?;
    for ms in [0u64, 5, 10, 20, 50] {
        proxy.set(if ms == 0 { Mode::Pass } else { Mode::Latency(Duration::from_millis(ms)) });
        let c = k.fresh(&format!("c{ms}"));
        let t = Instant::now();
        let r = c.connect_s3(&g, &proxy.endpoint(), PREFIX, Duration::from_secs(300)).await;
        println!("latency {ms} ms: cold connect {:?} ({:?})", t.elapsed(), r.map(|_| "ok"));
    }
    Ok(())
}
