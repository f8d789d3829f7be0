//! The deletion scenarios of docs/design/test-tiers.md §13.2 that the 2026-12-01 audit (table A.2)
//! found covered only by unit or simulation tests, in their end-to-end form: a private local
//! control plane, Garage, the real controller and the real mover, every mover kopia call
//! audited. One environment for the whole binary; Snapshots are seeded directly (kopia CLI +
//! API writes, `support/seed.rs`) so nothing waits on a backup.
//!
//! Phase A (one controller, default settings, scenarios run concurrently, each on its own
//! Repository and namespace so counts and Events cannot mix):
//! - **T23** `onScheduleDelete: Delete`, 5 children; the schedule deleted: exactly 1 `snapdel-*`
//!   Job of 5 members, created ≥ 10 s after the last deletionTimestamp; manifests and CRs gone,
//!   then the Job reaped; never `DeletionHeld`.
//! - **T24** the same with 25 children: all 25 `DeletionHeld=True`/`MassDeletionBreaker`, 25
//!   `SnapshotDeletionHeld` and 1 `MassDeletionHeld` Events, `MassDeletionHeld=True`/
//!   `ThresholdExceeded`, held and pending gauges 25; 0 batch Jobs for the rest of the run.
//! - **T27** an ack of T0 + 365 d written at T0, 12 deletions at T0 + 60 s: all held,
//!   `ack.effective` = T0 ± 5 s.
//! - **T28** `allow-mass-deletion=tomorrow` on a held wave of 12: exactly 1
//!   `InvalidMassDeletionAck` over 10 repository reconciles, all stay held.
//! - **T34** (on T28's held wave) `skip-snapshot-cleanup` on one held member: gone within 10 s,
//!   its manifest kept, `SnapshotOrphaned`, `pendingExternal` down by 1.
//! - **T35** one deletion: 1 batch Job of 1 member, created 10–20 s after the deletionTimestamp.
//! - **T36** threshold 0, 50 deletions in 5 DeleteCollection calls over 8 s: exactly 1 batch
//!   Job of 50 members.
//! - **T37** threshold 0, 600 deletions: never held, exactly 3 batch Jobs.
//!
//! Phase B (a controller restart):
//! - **T41** a 20-child Retain cascade crossing a controller restart: 10 children deleted
//!   directly while the schedule is alive (their `decision: Delete` persisted), the controller
//!   SIGKILLed inside their 10 s quiet window, the schedule deleted (the garbage collector marks
//!   all 20), the controller restarted with a cold SnapshotSchedule store: 0 kopia deletes, all 20
//!   released with `SnapshotRetainedOnScheduleDelete`, all 20 manifests kept. Threshold 0 on
//!   that repository, so the breaker cannot be what saves them.
//! - **T39** the restarted controller runs with `KOPIUR_MAX_CONCURRENT_DELETE_JOBS=1`; two
//!   repositories with 5 deletions each (requested while it was down, so both are eligible at
//!   once): at most 1 non-terminal `snapdel-*` Job cluster-wide on a Job watch, and both drain.
//!
//! Shortened relative to the spec (the rest of the suite pays for every minute): T24's "0 batch
//! Jobs for 10 min" is asserted over the whole rest of the run (printed; 1–3 min), not 10 min.
//! Counts, Events and Job membership use the spec's exact values.
//!
//! Load sensitivity seen while measuring (2 cores shared with other test runs): the quiet
//! window is computed over the fire set, i.e. over members whose `decision: Delete` is already
//! persisted. When the controller's reconciles lag more than 10 s behind the deletionTimestamps
//! (seen once, ~28 s, with every other helper's tests running), T23's 5 children split into
//! batches of 3 and 2 and T23 fails; T35's 10–20 s window has come within 0 s of its bound
//! (20 s) under the same load. Both bounds are the spec's and are kept.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kopiur_api::{Repository, Snapshot};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

mod support;
use support::scenarios::*;
use support::status::condition_parts;
use support::*;

const SKIP: &str = "kopiur.home-operations.com/skip-snapshot-cleanup";
const PART: &str = "deletion-scenarios/part";
const T37_N: usize = 600;

/// Acceptance failures, collected so one run reports every scenario.
#[derive(Clone, Default)]
struct Fails(Arc<Mutex<Vec<String>>>);

impl Fails {
    fn check(&self, ok: bool, msg: impl Into<String>) {
        if !ok {
            let m = msg.into();
            println!("CHECK FAILED: {m}");
            self.0.lock().unwrap().push(m);
        }
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Deletes the named Snapshots one DELETE each (48 in flight), the way `kubectl delete -l`
/// does after its list.
async fn delete_names(client: &Client, ns: &str, names: &[String]) -> Result<()> {
    delete_snapshots(client, ns, names.to_vec(), 48).await
}

async fn repo(client: &Client, ns: &str, name: &str) -> Result<Repository> {
    Ok(Api::<Repository>::namespaced(client.clone(), ns).get(name).await?)
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}

/// Everything one scenario needs to name its objects.
#[derive(Clone)]
struct World {
    client: Client,
    jobs: JobWatch,
    snaps: SnapWatch,
    fails: Fails,
    log: std::path::PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_scenarios_end_to_end() -> Result<()> {
    let mut h = Harness::start().await?;
    let res = run(&mut h).await;
    if let Err(e) = &res {
        eprintln!("---- FAILED: {e:#}\n---- test environment logs ----\n{}", h.env.logs_summary(40));
        eprintln!("---- operator log tail ----\n{}", kopiur_testenv::process::log_tail(&h.log(), 80));
        h.env.keep_logs("deletion_scenarios_e2e");
    }
    h.stop_operator();
    res
}

async fn run(h: &mut Harness) -> Result<()> {
    let t0 = Instant::now();
    let client = h.client.clone();
    let fails = Fails::default();

    // ---- Seed (the controller not running yet, so nothing races the status writes).
    let ns: BTreeMap<&str, String> = {
        let mut m = BTreeMap::new();
        for k in ["s23", "s24", "s27", "s28", "s35", "s36", "s37"] {
            m.insert(k, h.env.namespace(k).await?);
        }
        m
    };
    let (k23, k24, k27, k28, k35, k36, k37) = futures::try_join!(
        h.kopia_repo("s23/"),
        h.kopia_repo("s24/"),
        h.kopia_repo("s27/"),
        h.kopia_repo("s28/"),
        h.kopia_repo("s35/"),
        h.kopia_repo("s36/"),
        h.kopia_repo("s37/"),
    )?;
    let n23 = names("c23", 5);
    let n39a = names("t39a", 5);
    let n24 = names("c24", 25);
    let n27 = names("t27", 12);
    let n28 = names("t28", 12);
    let n35 = names("t35", 1);
    let n39b = names("t39b", 5);
    let n36 = names("t36", 50);
    let n41 = names("c41", 20);
    let n37 = names("t37", T37_N);
    let (s23_all, s35_all, s36_all) = (
        [n23.clone(), n39a.clone()].concat(),
        [n35.clone(), n39b.clone()].concat(),
        [n36.clone(), n41.clone()].concat(),
    );
    let (i23, i24, i27, i28, i35, i36, i37) = futures::try_join!(
        k23.seed(&s23_all),
        k24.seed(&n24),
        k27.seed(&n27),
        k28.seed(&n28),
        k35.seed(&s35_all),
        k36.seed(&s36_all),
        k37.seed(&n37),
    )?;
    println!(
        "[seed] 7 kopia repositories, {} manifests, {:.1}s",
        5 + 5 + 25 + 12 + 12 + 1 + 5 + 50 + 20 + T37_N,
        secs(t0.elapsed())
    );

    let zero = json!({"deletionProtection": {"threshold": 0}});
    let r23 = h.repository(&ns["s23"], "r", "s23/", json!({})).await?;
    let r24 = h.repository(&ns["s24"], "r", "s24/", json!({})).await?;
    let r27 = h.repository(&ns["s27"], "r", "s27/", json!({})).await?;
    let r28 = h.repository(&ns["s28"], "r", "s28/", json!({})).await?;
    let r35 = h.repository(&ns["s35"], "r", "s35/", json!({})).await?;
    let r36 = h.repository(&ns["s36"], "r", "s36/", zero.clone()).await?;
    let r37 = h.repository(&ns["s37"], "r", "s37/", zero).await?;
    let (p23, p24, p27, p28, p35, p36, p37) = (
        RepoPin::of(&r23),
        RepoPin::of(&r24),
        RepoPin::of(&r27),
        RepoPin::of(&r28),
        RepoPin::of(&r35),
        RepoPin::of(&r36),
        RepoPin::of(&r37),
    );
    let s23_owner = schedule(&client, &ns["s23"], "s", "Delete").await?;
    let s24_owner = schedule(&client, &ns["s24"], "s", "Delete").await?;
    let s41_owner = schedule(&client, &ns["s36"], "s41", "Retain").await?;
    let cascade_delete = json!({"onScheduleDelete": "Delete"});
    let mut t36_items = items(&n36, &i36, "t36");
    for (i, it) in t36_items.iter_mut().enumerate() {
        it.labels.insert(PART.to_string(), (i / 10).to_string());
    }
    let (u23, u39a, u24, u27, u28, u35, u39b, u36, u41, u37) = futures::try_join!(
        seed_snapshots_with(
            &client,
            &ns["s23"],
            &p23,
            children(&n23, &i23, "t23", "s", &s23_owner),
            cascade_delete.clone(),
            4
        ),
        seed_snapshots(&client, &ns["s23"], &p23, items(&n39a, &i23, "t39a"), 4),
        seed_snapshots_with(&client, &ns["s24"], &p24, children(&n24, &i24, "t24", "s", &s24_owner), cascade_delete, 4),
        seed_snapshots(&client, &ns["s27"], &p27, items(&n27, &i27, "t27"), 4),
        seed_snapshots(&client, &ns["s28"], &p28, items(&n28, &i28, "t28"), 4),
        seed_snapshots(&client, &ns["s35"], &p35, items(&n35, &i35, "t35"), 2),
        seed_snapshots(&client, &ns["s35"], &p35, items(&n39b, &i35, "t39b"), 2),
        seed_snapshots(&client, &ns["s36"], &p36, t36_items, 4),
        // The default stamp: an absent onScheduleDelete is Retain.
        seed_snapshots_with(&client, &ns["s36"], &p36, children(&n41, &i36, "t41", "s41", &s41_owner), json!({}), 4),
        seed_snapshots(&client, &ns["s37"], &p37, items(&n37, &i37, "t37"), 16),
    )?;
    println!(
        "[seed] {} Snapshot CRs written, {:.1}s since start",
        5 + 5 + 25 + 12 + 12 + 1 + 5 + 50 + 20 + T37_N,
        secs(t0.elapsed())
    );

    let (snaps, snap_task) = SnapWatch::spawn(client.clone());
    let (jobs, job_task) = JobWatch::spawn(client.clone());
    for (set, n) in [("t23", 5), ("t24", 25), ("t27", 12), ("t28", 12), ("t35", 1), ("t36", 50), ("t37", T37_N)] {
        snaps.wait_seen(set, n).await?;
    }
    start_operator_with(h, &[("POD_NAME", "kopiur-controller-scenarios")]).await?;
    let started = Instant::now();
    println!("[start] controller started {:.1}s since start", secs(t0.elapsed()));
    let w =
        World { client: client.clone(), jobs: jobs.clone(), snaps: snaps.clone(), fails: fails.clone(), log: h.log() };

    // ---- Phase A: every scenario on its own repository, concurrently. T37 (600 deletions)
    // starts once the latency-sensitive T35 and T36 are done.
    // Each scenario starts as soon as its own repository is Ready.
    let hr: &Harness = &*h;
    let ready = |k: &'static str| {
        let ns = ns[k].clone();
        async move {
            hr.wait_repository_ready(&ns, "r", Duration::from_secs(180)).await?;
            println!("[start] repository {k} Ready {:.1}s after the controller started", secs(started.elapsed()));
            Ok::<_, anyhow::Error>(())
        }
    };
    let phase_a = Instant::now();
    // The quiet-window scenarios (T23, T35) run first and alone: the fire set only pools
    // members whose decision is persisted, so their bounds depend on the controller keeping
    // up. Then T24, T28/T34 and T36; T37's 600 deletions last, as they flood the queue. T27
    // (60 s of waiting) runs beside all of them.
    let held24 = Arc::new(Mutex::new(None::<Instant>));
    let chain = async {
        let (a, b) = tokio::join!(
            async {
                ready("s23").await?;
                t23(&w, &ns["s23"], &u23, &k23, &i23, &n23).await
            },
            async {
                ready("s35").await?;
                t35(&w, &ns["s35"], &u35, &n35).await
            },
        );
        for r in [a, b] {
            if let Err(e) = r {
                w.fails.check(false, format!("{e:#}"));
            }
        }
        let (a, b, c) = tokio::join!(
            async {
                ready("s24").await?;
                t24(&w, hr, &ns["s24"], &u24, &k24, &i24, &n24, held24.clone()).await
            },
            async {
                ready("s28").await?;
                t28_t34(&w, hr, &ns["s28"], &u28, &k28, &i28, &n28).await
            },
            async {
                ready("s36").await?;
                t36(&w, &ns["s36"], &u36, &k36, &i36, &n36).await
            },
        );
        for r in [a, b, c] {
            if let Err(e) = r {
                w.fails.check(false, format!("{e:#}"));
            }
        }
        ready("s37").await?;
        t37(&w, &ns["s37"], &u37, &k37, &i37, &n37).await
    };
    let (a, b) = tokio::join!(chain, async {
        ready("s27").await?;
        t27(&w, &ns["s27"], &u27, &k27, &i27, &n27).await
    });
    for r in [a, b] {
        if let Err(e) = r {
            fails.check(false, format!("{e:#}"));
        }
    }
    println!("[phase A] done {:.1}s after it began ({:.1}s since start)", secs(phase_a.elapsed()), secs(t0.elapsed()));

    // ---- Phase B: T41 across a controller restart, into T39's capped controller.
    let phase_b = Instant::now();
    let res = phase_b_run(&w, h, &ns, &u41, &n41, &k36, &i36, &u39a, &n39a, &k23, &i23, &u39b, &n39b, &k35, &i35).await;
    if let Err(e) = res {
        fails.check(false, format!("{e:#}"));
    }
    println!("[phase B] done {:.1}s after it began", secs(phase_b.elapsed()));

    // ---- T24, last: the held cascade stayed held for the whole run, with 0 batch Jobs.
    let held_since = *held24.lock().unwrap();
    if let Some(since) = held_since {
        let u: BTreeSet<String> = u24.values().cloned().collect();
        let touching = jobs.touching(&u);
        let still = snaps.set("t24");
        let present = still.iter().filter(|r| r.gone_at.is_none()).count();
        let held = still.iter().filter(|r| r.held.as_ref().is_some_and(|h| h.0 == "True")).count();
        let kept = k24.list().await?;
        println!(
            "[T24] {:.0}s after all 25 were held: {present} present, {held} held, batch Jobs touching them {}, kopia {}",
            since.elapsed().as_secs_f64(),
            touching.len(),
            kept.len()
        );
        fails.check(touching.is_empty(), format!("T24: batch Jobs for a held cascade: {touching:?}"));
        fails.check(present == 25 && held == 25, format!("T24: {present} present / {held} held at the end"));
        fails.check(kopia_ids(&n24, &i24).is_subset(&kept), "T24: a held manifest was deleted");
    }

    // No manifest deleted twice across the run.
    let all = successful_deletes(&h.audit.calls());
    let dup: Vec<_> = all.iter().filter(|(_, n)| **n > 1).collect();
    println!("[audit] {} manifests deleted by movers, {} more than once", all.len(), dup.len());
    fails.check(dup.is_empty(), format!("deleted more than once: {dup:?}"));
    snap_task.abort();
    job_task.abort();
    let f = fails.all();
    println!("deletion scenarios e2e total {:.1}s; {} check(s) failed", secs(t0.elapsed()), f.len());
    ensure!(f.is_empty(), "{} acceptance check(s) failed:\n  {}", f.len(), f.join("\n  "));
    Ok(())
}

/// The uid set of a name -> uid map.
fn uid_set(u: &BTreeMap<String, String>) -> BTreeSet<String> {
    u.values().cloned().collect()
}

/// T35: a lone deletion is one batch of one, created 10–20 s after its deletionTimestamp.
async fn t35(w: &World, ns: &str, u: &BTreeMap<String, String>, n: &[String]) -> Result<()> {
    let uid = u[&n[0]].clone();
    delete_names(&w.client, ns, n).await?;
    let took = w.snaps.wait_set_gone("t35", 1, Duration::from_secs(90)).await?;
    let rec = w.snaps.set("t35").into_iter().next().context("T35 Snapshot on the watch")?;
    let dts = rec.deletion_timestamp.context("T35: no deletionTimestamp seen")?;
    let js = w.jobs.touching(&BTreeSet::from([uid.clone()]));
    let lat = js.first().and_then(|j| j.created).map(|c| (c - dts).num_seconds());
    println!(
        "[T35] lone delete released {:.1}s after the DELETE; batch Jobs {:?}; Job created {lat:?} s after the deletionTimestamp",
        secs(took),
        js.iter().map(|j| (&j.name, j.members.len())).collect::<Vec<_>>()
    );
    w.fails.check(js.len() == 1 && js[0].members == vec![uid], format!("T35: one batch Job of 1 member, got {js:?}"));
    w.fails.check(lat.is_some_and(|l| (10..=20).contains(&l)), format!("T35: created {lat:?} s after, want 10–20"));
    Ok(())
}

/// T36: threshold 0, 50 deletions in 5 calls over 8 s pool into exactly 1 batch of 50.
async fn t36(
    w: &World,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
) -> Result<()> {
    let api: Api<Snapshot> = Api::namespaced(w.client.clone(), ns);
    let start = Instant::now();
    for part in 0..5u64 {
        tokio::time::sleep_until((start + Duration::from_secs(2 * part)).into()).await;
        api.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{SET}=t36,{PART}={part}")),
        )
        .await?;
    }
    let sent = start.elapsed();
    let took = w.snaps.wait_set_gone("t36", 50, Duration::from_secs(120)).await?;
    let recs = w.snaps.set("t36");
    let dts: Vec<_> = recs.iter().filter_map(|r| r.deletion_timestamp).collect();
    let span = dts.iter().max().zip(dts.iter().min()).map(|(a, b)| (*a - *b).num_seconds());
    let js = w.jobs.touching(&uid_set(u));
    let left = k.list().await?;
    println!(
        "[T36] 5 DeleteCollection calls in {:.1}s (deletionTimestamps span {span:?} s); drained {:.1}s later through {:?}",
        secs(sent),
        secs(took),
        js.iter().map(|j| (&j.name, j.members.len())).collect::<Vec<_>>()
    );
    w.fails.check(js.len() == 1 && js[0].members.len() == 50, format!("T36: exactly 1 batch of 50, got {js:?}"));
    w.fails.check(recs.iter().all(|r| !r.ever_held), "T36: a member was held at threshold 0");
    w.fails.check(kopia_ids(n, ids).is_disjoint(&left), "T36: a manifest survived its batch");
    Ok(())
}

/// T37: threshold 0, 600 deletions: never held, exactly 3 batch Jobs.
async fn t37(
    w: &World,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
) -> Result<()> {
    let start = Instant::now();
    delete_names(&w.client, ns, n).await?;
    let sent = start.elapsed();
    let took = w.snaps.wait_set_gone("t37", T37_N, Duration::from_secs(300)).await?;
    let recs = w.snaps.set("t37");
    let held = recs.iter().filter(|r| r.ever_held).count();
    let js = w.jobs.touching(&uid_set(u));
    let covered: BTreeSet<String> = js.iter().flat_map(|j| j.members.iter().cloned()).collect();
    let left = k.list().await?;
    println!(
        "[T37] {T37_N} DELETEs sent in {:.1}s; drained {:.1}s after the first; batch Jobs {} (members {:?}); ever held {held}",
        secs(sent),
        secs(took),
        js.len(),
        js.iter().map(|j| j.members.len()).collect::<Vec<_>>()
    );
    w.fails.check(held == 0, format!("T37: {held} members held at threshold 0"));
    w.fails.check(js.len() == 3, format!("T37: exactly 3 batch Jobs, got {}", js.len()));
    w.fails.check(js.iter().all(|j| j.members.len() <= 200), "T37: a batch over 200 members");
    w.fails.check(covered == uid_set(u), "T37: every member listed by a batch exactly");
    w.fails.check(kopia_ids(n, ids).is_disjoint(&left), "T37: manifests survived");
    Ok(())
}

/// T23: the cascade opt-in below the threshold is one batch after the quiet window.
async fn t23(
    w: &World,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
) -> Result<()> {
    Api::<kopiur_api::SnapshotSchedule>::namespaced(w.client.clone(), ns).delete("s", &DeleteParams::default()).await?;
    let took = w.snaps.wait_set_gone("t23", 5, Duration::from_secs(120)).await?;
    let recs = w.snaps.set("t23");
    let last = recs.iter().filter_map(|r| r.deletion_timestamp).max().context("T23: deletionTimestamps")?;
    let want = uid_set(u);
    let js = w.jobs.touching(&want);
    let after = js.first().and_then(|j| j.created).map(|c| (c - last).num_seconds());
    let left = k.list().await?;
    println!(
        "[T23] schedule deleted: 5 children drained {:.1}s later through {:?}, created {after:?} s after the last deletionTimestamp",
        secs(took),
        js.iter().map(|j| (&j.name, j.members.len())).collect::<Vec<_>>()
    );
    w.fails.check(
        js.len() == 1 && js[0].members.iter().cloned().collect::<BTreeSet<_>>() == want && js[0].members.len() == 5,
        format!("T23: exactly 1 snapdel Job with the 5 children, got {js:?}"),
    );
    w.fails.check(after.is_some_and(|a| a >= 10), format!("T23: Job created {after:?} s after the last deletion"));
    w.fails.check(recs.iter().all(|r| !r.ever_held), "T23: a child was DeletionHeld below the threshold");
    w.fails.check(kopia_ids(n, ids).is_disjoint(&left), "T23: a child's manifest survived");
    if let Some(j) = js.first() {
        let key = format!("{}/{}", j.namespace, j.name);
        let reaped = w
            .jobs
            .wait("T23 batch Job reaped", Duration::from_secs(60), |s| {
                s.by_key.get(&key).and_then(|r| r.gone_at).map(|g| g.duration_since(r_first(&s.by_key[&key])))
            })
            .await;
        println!("[T23] batch Job reaped: {reaped:?} after it appeared");
        w.fails.check(reaped.is_ok(), "T23: the batch Job was not deleted after its members drained");
    }
    Ok(())
}

fn r_first(j: &JobRec) -> Instant {
    j.first_seen.unwrap_or_else(Instant::now)
}

/// T24: the cascade opt-in above the threshold is held (and stays held: checked at the end).
#[allow(clippy::too_many_arguments)]
async fn t24(
    w: &World,
    h: &Harness,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
    held_at: Arc<Mutex<Option<Instant>>>,
) -> Result<()> {
    Api::<kopiur_api::SnapshotSchedule>::namespaced(w.client.clone(), ns).delete("s", &DeleteParams::default()).await?;
    let took = w.snaps.wait_set_held("t24", 25, Duration::from_secs(120)).await?;
    *held_at.lock().unwrap() = Some(Instant::now());
    let recs = w.snaps.set("t24");
    let bad: Vec<_> = recs
        .iter()
        .filter(|r| {
            r.held.as_ref().is_none_or(|h| h.1 != "MassDeletionBreaker") || r.decision.as_deref() != Some("Held")
        })
        .map(|r| (&r.name, &r.held, &r.decision))
        .collect();
    println!("[T24] schedule deleted: all 25 children DeletionHeld=True {:.1}s later", secs(took));
    w.fails.check(bad.is_empty(), format!("T24: not MassDeletionBreaker / decision Held: {bad:?}"));
    // The repository, the Events and the gauges follow within the dispatcher's next passes.
    let shown = wait_for("T24 repository, Events and gauges", Duration::from_secs(20), &w.log, || async {
        let r = repo(&w.client, ns, "r").await?;
        let cond = condition_parts(&r, "MassDeletionHeld");
        let dp = r.status.as_ref().and_then(|s| s.deletion_protection.clone()).unwrap_or_default();
        let (ev_held, ev_held_objs) = events(&w.client, ns, "SnapshotDeletionHeld").await?;
        let (ev_mdh, _) = events(&w.client, ns, "MassDeletionHeld").await?;
        let m = h.metrics().await?;
        let g = (
            metric(&m, "kopiur_snapshot_deletions_held", ns, "r"),
            metric(&m, "kopiur_snapshot_deletions_pending_external", ns, "r"),
        );
        let seen = (cond, dp.held, dp.pending_external, ev_held, ev_held_objs, ev_mdh, g);
        let ok = seen.0.as_ref().is_some_and(|c| c.0 == "True" && c.1 == "ThresholdExceeded")
            && seen.1 == 25
            && seen.2 == 25
            && seen.3 == 25
            && seen.4 == 25
            && seen.5 == 1
            && seen.6 == (Some(25.0), Some(25.0));
        Ok(ok.then_some(seen))
    })
    .await;
    match shown {
        Ok(s) => println!(
            "[T24] repository MassDeletionHeld {:?}; deletionProtection held {} pending {}; SnapshotDeletionHeld {} on {} Snapshots; MassDeletionHeld Events {}; gauges {:?}",
            s.0.map(|c| (c.0, c.1)),
            s.1,
            s.2,
            s.3,
            s.4,
            s.5,
            s.6
        ),
        Err(_) => {
            let r = repo(&w.client, ns, "r").await?;
            let m = h.metrics().await?;
            let seen = (
                condition_parts(&r, "MassDeletionHeld"),
                r.status.as_ref().and_then(|s| s.deletion_protection.clone()),
                events(&w.client, ns, "SnapshotDeletionHeld").await?,
                events(&w.client, ns, "MassDeletionHeld").await?,
                metric(&m, "kopiur_snapshot_deletions_held", ns, "r"),
                metric(&m, "kopiur_snapshot_deletions_pending_external", ns, "r"),
            );
            w.fails.check(
                false,
                format!("T24: want MassDeletionHeld=True/ThresholdExceeded, held=pending=25, 25 SnapshotDeletionHeld on 25, 1 MassDeletionHeld, gauges 25/25; saw {seen:?}"),
            );
        }
    }
    w.fails.check(kopia_ids(n, ids).is_subset(&k.list().await?), "T24: a held manifest was deleted");
    w.fails.check(w.jobs.touching(&uid_set(u)).is_empty(), "T24: a batch Job for a held member");
    Ok(())
}

/// T27: a future-dated ack is clamped to the moment the controller first saw it.
async fn t27(
    w: &World,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
) -> Result<()> {
    let t0 = chrono::Utc::now();
    let start = Instant::now();
    let raw = rfc3339(t0 + chrono::Duration::days(365));
    let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: raw}}});
    Api::<Repository>::namespaced(w.client.clone(), ns)
        .patch("r", &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    tokio::time::sleep_until((start + Duration::from_secs(60)).into()).await;
    delete_names(&w.client, ns, n).await?;
    let took = w.snaps.wait_set_held("t27", 12, Duration::from_secs(120)).await?;
    let r = repo(&w.client, ns, "r").await?;
    let ack = r.status.as_ref().and_then(|s| s.deletion_protection.as_ref()).and_then(|d| d.ack.clone());
    let eff = ack.as_ref().and_then(|a| a.effective.as_ref()).map(|t| t.timestamp());
    let off = eff.map(|e| e - t0.timestamp());
    println!(
        "[T27] ack {raw} written at T0 {}; 12 deletions at T0+60s all held {:.1}s later; status ack {:?}; effective - T0 = {off:?} s",
        rfc3339(t0),
        secs(took),
        ack
    );
    w.fails.check(ack.as_ref().is_some_and(|a| a.value == raw), format!("T27: ack value recorded {ack:?}"));
    w.fails.check(off.is_some_and(|o| o.abs() <= 5), format!("T27: ack.effective {off:?} s from T0, want ±5"));
    w.fails.check(w.jobs.touching(&uid_set(u)).is_empty(), "T27: a batch Job for a member after a clamped ack");
    w.fails.check(kopia_ids(n, ids).is_subset(&k.list().await?), "T27: a manifest was deleted");
    Ok(())
}

/// T28: an unparseable ack is one Warning and no release; then T34 on the same held wave.
async fn t28_t34(
    w: &World,
    h: &Harness,
    ns: &str,
    u: &BTreeMap<String, String>,
    k: &KopiaRepo,
    ids: &BTreeMap<String, String>,
    n: &[String],
) -> Result<()> {
    let repos: Api<Repository> = Api::namespaced(w.client.clone(), ns);
    delete_names(&w.client, ns, n).await?;
    let took = w.snaps.wait_set_held("t28", 12, Duration::from_secs(120)).await?;
    println!("[T28] 12 deletions held {:.1}s later", secs(took));
    let body = json!({"metadata": {"annotations": {ALLOW_MASS_DELETION: "tomorrow"}}});
    repos.patch("r", &PatchParams::default(), &Patch::Merge(&body)).await?;
    // 10 repository reconciles: 10 unrelated annotation writes 2 s apart (each one an update
    // event of the repository; the dispatcher also evaluates the ack every 2 s).
    for i in 0..10 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let body = json!({"metadata": {"annotations": {"deletion-scenarios/touch": i.to_string()}}});
        repos.patch("r", &PatchParams::default(), &Patch::Merge(&body)).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (invalid, _) = events(&w.client, ns, "InvalidMassDeletionAck").await?;
    let recs = w.snaps.set("t28");
    let held = recs.iter().filter(|r| r.gone_at.is_none() && r.held.as_ref().is_some_and(|h| h.0 == "True")).count();
    println!(
        "[T28] allow-mass-deletion=tomorrow over 10 reconciles: InvalidMassDeletionAck {invalid}; {held} of 12 still held"
    );
    w.fails.check(invalid == 1, format!("T28: exactly 1 InvalidMassDeletionAck, got {invalid}"));
    w.fails.check(held == 12, format!("T28: {held} of 12 still held"));
    w.fails.check(w.jobs.touching(&uid_set(u)).is_empty(), "T28: a batch Job after an invalid ack");
    w.fails.check(kopia_ids(n, ids).is_subset(&k.list().await?), "T28: a manifest was deleted");

    // ---- T34: skip-snapshot-cleanup on one held member.
    let before = repo(&w.client, ns, "r").await?.status.and_then(|s| s.deletion_protection).map(|d| d.pending_external);
    let target = n[0].clone();
    let target_uid = u[&target].clone();
    let body = json!({"metadata": {"annotations": {SKIP: ""}}});
    Api::<Snapshot>::namespaced(w.client.clone(), ns)
        .patch(&target, &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    let at = Instant::now();
    let gone = w
        .snaps
        .wait("T34 the skipped member gone", Duration::from_secs(10), |s| {
            s.by_uid.get(&target_uid).and_then(|r| r.gone_at).map(|g| g.duration_since(at))
        })
        .await;
    let orphaned = wait_for("T34 SnapshotOrphaned", Duration::from_secs(10), &w.log, || async {
        let l = Api::<k8s_openapi::api::core::v1::Event>::namespaced(w.client.clone(), ns)
            .list(&ListParams::default().fields("reason=SnapshotOrphaned"))
            .await?;
        Ok(l.items.iter().any(|e| e.involved_object.name.as_deref() == Some(target.as_str())).then_some(()))
    })
    .await;
    let after = wait_for("T34 pendingExternal down by 1", Duration::from_secs(10), &w.log, || async {
        let p = repo(&w.client, ns, "r").await?.status.and_then(|s| s.deletion_protection).map(|d| d.pending_external);
        let m = h.metrics().await?;
        let g = metric(&m, "kopiur_snapshot_deletions_pending_external", ns, "r");
        let want = before.map(|b| b - 1);
        Ok((p == want && g == want.map(f64::from)).then_some((p, g)))
    })
    .await;
    let kept = k.list().await?.contains(&ids[&target]);
    println!(
        "[T34] skip-snapshot-cleanup on a held member: gone {gone:?} after; SnapshotOrphaned {}; manifest kept {kept}; pendingExternal {before:?} -> {after:?}",
        orphaned.is_ok()
    );
    w.fails.check(gone.is_ok(), "T34: the skipped member was not gone within 10 s");
    w.fails.check(orphaned.is_ok(), "T34: no SnapshotOrphaned for the skipped member");
    w.fails.check(kept, "T34: the skipped member's manifest was deleted");
    w.fails.check(
        after.is_ok() && before.is_some(),
        format!("T34: pendingExternal (status and gauge) did not drop by 1 from {before:?}"),
    );
    Ok(())
}

/// T41 across a controller restart, then T39 on the restarted, capped controller.
#[allow(clippy::too_many_arguments)]
async fn phase_b_run(
    w: &World,
    h: &mut Harness,
    ns: &BTreeMap<&str, String>,
    u41: &BTreeMap<String, String>,
    n41: &[String],
    k36: &KopiaRepo,
    i36: &BTreeMap<String, String>,
    u39a: &BTreeMap<String, String>,
    n39a: &[String],
    k23: &KopiaRepo,
    i23: &BTreeMap<String, String>,
    u39b: &BTreeMap<String, String>,
    n39b: &[String],
    k35: &KopiaRepo,
    i35: &BTreeMap<String, String>,
) -> Result<()> {
    let client = &w.client;
    let s36 = ns["s36"].as_str();
    // Phase A's batches are all terminal (the cap is measured from a quiet cluster).
    w.jobs.wait("no batch Job in flight", Duration::from_secs(60), |s| (s.in_flight() == 0).then_some(())).await?;
    let mark = h.audit.calls().len();
    let u41_set = uid_set(u41);
    let ids41 = kopia_ids(n41, i36);

    // 10 children deleted directly while the schedule is alive: ordinary external deletions,
    // decision Delete persisted, waiting out the quiet window.
    let direct: Vec<String> = n41[..10].to_vec();
    let direct_uids = uids(&direct, u41);
    let deleted = Instant::now();
    delete_names(client, s36, &direct).await?;
    let decided = w
        .snaps
        .wait("10 direct deletions decided Delete", Duration::from_secs(6), |s| {
            let n = direct_uids.iter().filter(|u| s.by_uid.get(*u).is_some_and(|r| r.ever_decided_delete)).count();
            (n == direct_uids.len()).then_some(n)
        })
        .await;
    h.kill_operator();
    let killed_after = deleted.elapsed();
    // The restarted controller rewrites its log file: keep phase A's next to it.
    let _ = std::fs::copy(h.log(), h.log().with_extension("phase-a.log"));
    let n_decided = {
        let st = w.snaps.state.lock().unwrap();
        direct_uids.iter().filter(|u| st.by_uid.get(*u).is_some_and(|r| r.ever_decided_delete)).count()
    };
    println!(
        "[T41] 10 children deleted with their schedule alive; {n_decided} decided Delete; controller SIGKILLed {:.1}s after the DELETEs ({})",
        secs(killed_after),
        if decided.is_ok() { "all decided" } else { "not all decided within 6 s" }
    );
    w.fails.check(killed_after < Duration::from_secs(10), "T41: the kill came after the quiet window");
    w.fails.check(w.jobs.touching(&u41_set).is_empty(), "T41: a batch Job fired before the kill");

    // The schedule deleted while the controller is down: the garbage collector marks all 20.
    Api::<kopiur_api::SnapshotSchedule>::namespaced(client.clone(), s36)
        .delete("s41", &DeleteParams::default())
        .await?;
    w.snaps
        .wait("all 20 T41 children marked for deletion", Duration::from_secs(60), |s| {
            let v = s.set("t41");
            (v.len() == 20 && v.iter().all(|r| r.deletion_timestamp.is_some())).then_some(())
        })
        .await?;
    // T39's 10 deletions, requested while the controller is down: at the restart both
    // repositories have members past their quiet window at once.
    delete_names(client, &ns["s23"], n39a).await?;
    delete_names(client, &ns["s35"], n39b).await?;
    w.jobs.reset_peak();
    start_operator_with(h, &[("KOPIUR_MAX_CONCURRENT_DELETE_JOBS", "1"), ("POD_NAME", "kopiur-controller-scenarios")])
        .await?;
    let restarted = Instant::now();
    let (a, b, c) = tokio::join!(
        w.snaps.wait_set_gone("t41", 20, Duration::from_secs(90)),
        w.snaps.wait_set_gone("t39a", 5, Duration::from_secs(120)),
        w.snaps.wait_set_gone("t39b", 5, Duration::from_secs(120)),
    );

    // T41: 0 kopia deletes, every child released with its Warning, every manifest kept.
    let calls = h.audit.since(mark);
    let named: BTreeSet<String> = calls.iter().flat_map(|c| c.delete_ids()).filter(|id| ids41.contains(id)).collect();
    let kept = k36.list().await?;
    let retained = wait_for("T41 20 SnapshotRetainedOnScheduleDelete", Duration::from_secs(10), &w.log, || async {
        let (total, objs) = events(client, s36, "SnapshotRetainedOnScheduleDelete").await?;
        Ok((objs >= 20).then_some((total, objs)))
    })
    .await;
    let (rt, ro) = match &retained {
        Ok(x) => *x,
        Err(_) => events(client, s36, "SnapshotRetainedOnScheduleDelete").await?,
    };
    println!(
        "[T41] after the restart: children released {:?} after it; kopia deletes naming them {}; batch Jobs touching them {}; manifests kept {}/20; SnapshotRetainedOnScheduleDelete {rt} on {ro} children",
        a.as_ref().ok(),
        named.len(),
        w.jobs.touching(&u41_set).len(),
        ids41.intersection(&kept).count()
    );
    w.fails.check(a.is_ok(), "T41: the Retain cascade did not release every child after the restart");
    w.fails.check(named.is_empty(), format!("T41: kopia delete calls named {named:?}"));
    w.fails.check(w.jobs.touching(&u41_set).is_empty(), "T41: a batch Job for a cascade-retained child");
    w.fails.check(ids41.is_subset(&kept), "T41: a manifest of the Retain cascade was deleted");
    w.fails.check(ro == 20, format!("T41: SnapshotRetainedOnScheduleDelete on {ro} of 20 children"));

    // T39: the cap held cluster-wide, and both repositories drained.
    let peak = w.jobs.peak_in_flight();
    let ja = w.jobs.touching(&uid_set(u39a));
    let jb = w.jobs.touching(&uid_set(u39b));
    let (la, lb) = (k23.list().await?, k35.list().await?);
    println!(
        "[T39] cap 1: peak non-terminal batch Jobs cluster-wide {peak}; repository s23 drained {:?}, s35 drained {:?} after the restart; Jobs {:?} / {:?}",
        b.as_ref().ok(),
        c.as_ref().ok(),
        ja.iter().map(|j| (&j.namespace, &j.name, j.members.len())).collect::<Vec<_>>(),
        jb.iter().map(|j| (&j.namespace, &j.name, j.members.len())).collect::<Vec<_>>()
    );
    let _ = restarted;
    w.fails.check(peak <= 1, format!("T39: {peak} batch Jobs in flight at once under a cap of 1"));
    w.fails.check(b.is_ok() && c.is_ok(), "T39: a repository did not drain under the cap");
    w.fails.check(!ja.is_empty() && ja.iter().all(|j| j.namespace == ns["s23"]), format!("T39: Jobs for s23 {ja:?}"));
    w.fails.check(!jb.is_empty() && jb.iter().all(|j| j.namespace == ns["s35"]), format!("T39: Jobs for s35 {jb:?}"));
    w.fails.check(kopia_ids(n39a, i23).is_disjoint(&la), "T39: s23 manifests survived");
    w.fails.check(kopia_ids(n39b, i35).is_disjoint(&lb), "T39: s35 manifests survived");
    Ok(())
}
