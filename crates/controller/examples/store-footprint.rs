//! Where the controller's memory per Snapshot goes, measured with a counting allocator (no
//! cluster needed): `cargo run --release -p kopiur-controller --example store-footprint [rows] [row.json]`
//! (`KOPIUR_FOOTPRINT_SLIM=metadata` to measure without `heap::slim_snapshot`'s label cut).
//!
//! Builds `rows` (20,000) copies of one stored Snapshot (the bench prints one as the controller
//! leaves it; a built-in copy of such a row is used without a file), each with its own name and
//! uid, and reports the heap each piece of per-Snapshot state holds:
//! - the reflector store (`Arc<Snapshot>` plus its `ObjectRef` key);
//! - the `kopiur_resource_phase` series of the Snapshot kind, held as before and written at
//!   scrape time as now;
//! - the store-backed gauges of `snapshot::gauges` (transient, rebuilt every period);
//! - one rendering of `/metrics` (transient, per scrape).
//!
//! "malloc" figures add glibc's chunk overhead (8 bytes, rounded up to 16, at least 32), which
//! is what the resident set pays for many small blocks.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use kopiur_api::Snapshot;
use kopiur_controller::metrics::Metrics;
use kube::runtime::reflector;
use kube::runtime::watcher;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static CHUNKS: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

fn chunk(size: usize) -> isize {
    (size + 8).div_ceil(16).max(2) as isize * 16
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        CHUNKS.fetch_add(chunk(l.size()), Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        CHUNKS.fetch_sub(chunk(l.size()), Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        CHUNKS.fetch_add(chunk(new) - chunk(l.size()), Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[derive(Clone, Copy)]
struct Mark(isize, isize, isize);

fn mark() -> Mark {
    Mark(LIVE.load(Ordering::Relaxed), CHUNKS.load(Ordering::Relaxed), BLOCKS.load(Ordering::Relaxed))
}

fn report(what: &str, from: Mark, rows: usize) -> Mark {
    let now = mark();
    let (b, c, n) = (now.0 - from.0, now.1 - from.1, now.2 - from.2);
    println!(
        "{what:<58} {:>8.1} MiB requested, {:>8.1} MiB malloc, {:>6.0} B/row, {:>5.1} blocks/row",
        b as f64 / 1048576.0,
        c as f64 / 1048576.0,
        c as f64 / rows as f64,
        n as f64 / rows as f64
    );
    now
}

/// A catalog row as the controller leaves it after its start-up reconcile (printed by
/// `pipeline-bench`, `managedFields` removed): four labels, the kopia identity twice, timing,
/// size and the kstatus trio.
const ROW: &str = r#"{"apiVersion":"kopiur.home-operations.com/v1alpha1","kind":"Snapshot","metadata":{"creationTimestamp":"2026-12-03T03:41:50Z","generation":1,"labels":{"app.kubernetes.io/managed-by":"kopiur","kopiur.home-operations.com/origin":"discovered","kopiur.home-operations.com/repository-uid":"00000000-0000-0000-0000-00000000b000","kopiur.home-operations.com/snapshot-id":"00000000000000000000b00000000000"},"name":"bench-row-00000","namespace":"bench-b206a794","resourceVersion":"26714","uid":"ff4d8cc4-4fb2-40b1-9d65-16e0d77350e8"},"spec":{"deletionPolicy":"Retain","pin":false,"repository":{"kind":"Repository","name":"catalog-bench","namespace":"bench-b206a794"}},"status":{"conditions":[{"lastTransitionTime":"2026-12-03T03:44:17Z","message":"a kopia snapshot found in the repository","observedGeneration":1,"reason":"SnapshotDiscovered","status":"True","type":"Ready"},{"lastTransitionTime":"2026-12-03T03:44:17Z","message":"","observedGeneration":1,"reason":"SnapshotDiscovered","status":"False","type":"Reconciling"},{"lastTransitionTime":"2026-12-03T03:44:17Z","message":"","observedGeneration":1,"reason":"SnapshotDiscovered","status":"False","type":"Stalled"}],"observedGeneration":1,"origin":"discovered","phase":"Discovered","resolved":{"deletionPolicy":"Retain","identity":{"hostname":"bench-b206a794.data","sourcePath":"/data/0","username":"app"},"repository":{"kind":"Repository","name":"catalog-bench","namespace":"bench-b206a794","uid":"00000000-0000-0000-0000-00000000b000"},"repositoryUniqueId":"0123456789abcdef0123456789abcdef"},"snapshot":{"identity":{"hostname":"bench-b206a794.data","sourcePath":"/data/0","username":"app"},"kopiaSnapshotID":"00000000000000000000b00000000000"},"stats":{"sizeBytes":1073741824},"timing":{"durationSeconds":42,"endTime":"2026-11-01T00:00:42Z","startTime":"2026-11-01T00:00:00Z"}}}"#;

fn main() {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    // `KOPIUR_FOOTPRINT_SLIM=metadata` measures the store as it was before `slim_snapshot`
    // dropped the labels no reader reads (only `managedFields` and the kubectl copy dropped).
    let lean = std::env::var("KOPIUR_FOOTPRINT_SLIM").map_or(true, |v| v != "metadata");
    println!("slimmed with {}", if lean { "heap::slim_snapshot" } else { "heap::slim (metadata only)" });
    let row: serde_json::Value = match args.next() {
        Some(path) => serde_json::from_str(&std::fs::read_to_string(path).expect("read the row")).expect("a JSON row"),
        None => serde_json::from_str(ROW).unwrap(),
    };
    println!(
        "{rows} rows; size_of::<Snapshot>() = {} B; one row is {} B of JSON",
        size_of::<Snapshot>(),
        row.to_string().len()
    );
    {
        use kopiur_api::snapshot::*;
        println!(
            "inline sizes: ObjectMeta {} B, SnapshotSpec {} B (SnapshotSource {} B), SnapshotStatus {} B \
             (KopiaSnapshotRef {}, SnapshotStats {}, JobRef {}, SnapshotResolved {}, DeletionRecord {}, Condition {})",
            size_of::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(),
            size_of::<SnapshotSpec>(),
            size_of::<SnapshotSource>(),
            size_of::<SnapshotStatus>(),
            size_of::<KopiaSnapshotRef>(),
            size_of::<SnapshotStats>(),
            size_of::<JobRef>(),
            size_of::<SnapshotResolved>(),
            size_of::<DeletionRecord>(),
            size_of::<kopiur_api::shared::status::Condition>(),
        );
    }
    let objs: Vec<Snapshot> = (0..rows)
        .map(|i| {
            let mut v = row.clone();
            v["metadata"]["name"] = format!("bench-row-{i:05}").into();
            v["metadata"]["uid"] = format!("5b0e8f0a-1c2d-4e5f-8a9b-{i:012}").into();
            v["metadata"]["resourceVersion"] = format!("{}", 1_000_000 + i).into();
            let mut s: Snapshot = serde_json::from_value(v).unwrap();
            if lean {
                kopiur_controller::heap::slim_snapshot(&mut s);
            } else {
                kopiur_controller::heap::slim(&mut s.metadata);
            }
            s
        })
        .collect();

    // The labels map alone: a BTreeMap allocates a whole 11-slot leaf for its first entry.
    let before = mark();
    let labels: Vec<_> = objs.iter().map(|o| o.metadata.labels.clone()).collect();
    report("of which the labels maps (a copy)", before, rows);
    drop(labels);
    let m0 = mark();
    let (store, mut writer) = reflector::store::<Snapshot>();
    writer.apply_watcher_event(&watcher::Event::Init);
    for o in &objs {
        writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let m1 = report("reflector store (Arc<Snapshot> + ObjectRef key + map)", m0, rows);
    drop(objs);
    let _ = m1;

    let state: Vec<Arc<Snapshot>> = store.state();
    let m2 = mark();
    let metrics = Metrics::default();
    metrics.leader.set(1);
    kopiur_controller::resource_phase::publish(&metrics, &state);
    report("kopiur_resource_phase series of the Snapshot kind, as before (held)", m2, rows);
    kopiur_controller::snapshot::gauges::live_phase(&metrics, store.clone());
    let m3 = report("... replaced by lines written at scrape time (held)", m2, rows);
    let g = kopiur_controller::snapshot::gauges::compute(&state);
    report("snapshot gauges (rebuilt every 5 s)", m3, rows);
    drop(g);
    let before = mark();
    let text = metrics.render(&[]);
    report("one /metrics rendering (per scrape)", before, rows);
    println!("/metrics text: {:.1} MiB ({} B/row)", text.len() as f64 / 1048576.0, text.len() / rows);
    drop(text);
    // A second publish while the first is held: the transient of a replace.
    let before = mark();
    let series = kopiur_controller::resource_phase::series(&state);
    report("a second series map while the first is held (transient)", before, rows);
    drop(series);
    let before = mark();
    let again = store.state();
    report("store.state() (transient)", before, rows);
    drop(again);
}
