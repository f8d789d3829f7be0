//! `cargo xtask test`'s runner. Every test binary is built once; the fast tiers (pure,
//! property, simulation, contract) run one after another, and the environment tiers — each
//! binary starts its own private control plane, Garage and operator and spends most of its
//! time waiting on cron ticks, probes and Jobs — run a few binaries at a time, so wall-clock
//! waits overlap instead of adding up. Each environment binary's output goes to a log file and
//! is printed whole when the binary ends, so concurrent runs never interleave.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One built test executable.
#[derive(Clone, Debug)]
pub struct TestBin {
    /// `<package>::<target>`, e.g. `kopiur-controller::deletion_e2e`.
    pub label: String,
    pub target: String,
    pub exe: PathBuf,
    /// The package directory: cargo runs test binaries from there.
    pub cwd: PathBuf,
}

/// Test targets that start a local control plane, Garage or kopia (the environment tiers).
/// Listed longest first, by their durations in a full `cargo xtask test` with 3 at a time on
/// the 2-core development machine (the comments): the pool starts them in this order, so the
/// longest ones begin at once and the short ones fill the slots that free up
/// (longest-processing-time-first), instead of a long binary starting late and running alone
/// at the end.
pub const ENVIRONMENT_TARGETS: &[&str] = &[
    "pipeline_outage_e2e",      // 830 s: the outage replay, the critical path
    "pipeline_acceptance_e2e",  // 342 s
    "e2e_repository",           // 366 s (with the T01/T02/T08/T18/T44 side repositories; T44 5 min down)
    "death_spiral_e2e",         // 345-442 s (alone; body 305-340 s incl. growing 2,000 index blobs; slow teardown)
    "real_node_e2e",            // 277 s (measured alone)
    "csi_staging_e2e",          // 156 s in CI: real node + CSI, snapshot-controller stopped 30 s, 20 s timeout
    "populator_e2e",            // 200 s locally: real node + CSI, 14 populates and faults between them
    "deletion_e2e",             // 243 s
    "breaker_close_fast_e2e",   // 211 s (measured alone; a 168 s cut, then Ready within 60 s)
    "e2e_repository_faults",    // 203 s (with T14, T17's mid-outage Snapshot and T45)
    "deletion_scenarios_e2e",   // 118-168 s (up to 282 s on a loaded machine)
    "control_plane_faults_e2e", // 168 s (a 60 s apiserver stall, apiserver and etcd restarts)
    "pipeline_e2e",             // 121 s
    "maintenance_e2e",          // 115 s
    "backend_mounts_e2e",       // 99 s (measured alone)
    "component",                // 103 s
    "conditions_e2e",           // 68 s (52 s to 99 s over three runs on the shared machine)
    "policy_e2e",               // 83-92 s (measured alone; a cron slot and a 30 s error requeue)
    "pin_e2e",                  // 84 s (measured alone)
    "repository_checks_e2e",    // 65 s (measured alone; 55 s in the test body)
    "catalog_e2e",              // 62 s
    "mover_pod_wedged_e2e",     // 58 s
    "garage_kopia",             // 51 s
    "real_node_csi",            // 31 s (measured alone; 25 s of it the test body and teardown)
    "real_node",                // 37 s
    "features_e2e",             // 35 s (measured alone)
    "controlplane",             // 32 s
    "node_agent",               // 31 s
    "cli_e2e",                  // 23 s
    "helm_install",             // 23 s
    "api_crds",                 // 21 s
    "job_in_cluster",           // 17 s
    "private_env",              // 14 s
    "node_restart",             // 13 s
    "lifecycle_e2e",            // 11 s (measured alone)
    "admission_e2e",            // 10 s (no Garage, no operator)
    "mover_signals",            // 2 s: real kopia, no cluster
];

/// The environment binaries run at most this many at a time by default. They mostly wait on
/// cron ticks, probes and Jobs, so on the 2-core development machine 3 at a time kept every
/// timing figure well inside its limit while the outage replay still set the pace.
pub const DEFAULT_JOBS: usize = 3;

/// The environment binaries run at most this many at a time (`KOPIUR_TEST_JOBS`, default
/// [`DEFAULT_JOBS`]).
pub fn parallelism(raw: Option<&str>) -> Result<usize> {
    match raw.map(str::trim) {
        None | Some("") => Ok(DEFAULT_JOBS),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            Ok(_) | Err(_) => bail!("KOPIUR_TEST_JOBS must be a positive integer, got {v:?}"),
        },
    }
}

/// Parses `cargo test --no-run --message-format=json` output into the test executables.
pub fn parse_artifacts(stdout: &str) -> Result<Vec<TestBin>> {
    let mut out = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line).context("parsing cargo's JSON message")?;
        if v["reason"] != "compiler-artifact" || v["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = v["executable"].as_str() else { continue };
        let target = v["target"]["name"].as_str().context("artifact without a target name")?.to_string();
        let manifest = v["manifest_path"].as_str().context("artifact without a manifest path")?;
        let cwd = Path::new(manifest).parent().context("manifest path without a directory")?.to_path_buf();
        let package = v["package_id"].as_str().map(package_name).unwrap_or_default();
        let kind = v["target"]["kind"][0].as_str().unwrap_or("test");
        let label = match kind {
            "lib" => format!("{package} (unit)"),
            "bin" => format!("{package}::{target} (bin unit)"),
            _ => format!("{package}::{target}"),
        };
        out.push(TestBin { label, target, exe: PathBuf::from(exe), cwd });
    }
    if out.is_empty() {
        bail!("cargo built no test executables");
    }
    Ok(out)
}

/// The package name out of a cargo package id (`path+file:///…/crates/api#kopiur-api@0.1.0`
/// or the older `name version (source)` form).
fn package_name(id: &str) -> String {
    if let Some((_, frag)) = id.rsplit_once('#') {
        return frag.split('@').next().unwrap_or(frag).to_string();
    }
    id.split_whitespace().next().unwrap_or(id).to_string()
}

/// Splits into (fast, environment), the environment ones ordered as [`ENVIRONMENT_TARGETS`];
/// an environment-looking target missing from the list (`*e2e*`) still goes to the pool, last.
pub fn partition(bins: Vec<TestBin>) -> (Vec<TestBin>, Vec<TestBin>) {
    let rank = |b: &TestBin| ENVIRONMENT_TARGETS.iter().position(|t| *t == b.target);
    let (mut env, fast): (Vec<TestBin>, Vec<TestBin>) =
        bins.into_iter().partition(|b| rank(b).is_some() || b.target.contains("e2e"));
    env.sort_by_key(|b| rank(b).unwrap_or(usize::MAX));
    (fast, env)
}

/// The outcome of one binary.
pub struct Outcome {
    pub label: String,
    pub ok: bool,
    pub elapsed: Duration,
    /// For a failed pooled binary: the lines that say why (see [`failure_excerpt`]).
    pub why: Vec<String>,
}

/// The lines of a failed binary's output that say why it failed: each panic message (the
/// `panicked at` line and the message lines after it, up to the backtrace), each `Error:`
/// returned by a test, every line a test marked with `FAILED:`, and where the environment's
/// logs were kept (`ENVIRONMENT LOGS KEPT:`). Repeated in the summary,
/// so the reason sits at the end of the run's output instead of thousands of lines above it.
pub fn failure_excerpt(text: &str) -> Vec<String> {
    const MAX_LINES: usize = 60;
    let mut out = Vec::new();
    let mut in_panic = false;
    for line in text.lines() {
        let t = line.trim_start();
        if in_panic {
            if t.is_empty() || t.starts_with("stack backtrace:") || t.starts_with("note: run with") {
                in_panic = false;
            } else {
                out.push(line.to_string());
            }
        } else if t.contains("panicked at ") || t.starts_with("Error: ") || t.starts_with("Caused by:") {
            out.push(line.to_string());
            in_panic = true;
        } else if t.contains("FAILED:") {
            out.push(line.to_string());
        }
        if out.len() >= MAX_LINES {
            out.push("… (more in the log)".into());
            break;
        }
    }
    // Where the environment's logs were kept, however long the excerpt above.
    out.extend(text.lines().filter(|l| l.trim_start().starts_with("ENVIRONMENT LOGS KEPT:")).map(str::to_string));
    out
}

fn command(bin: &TestBin, nocapture: bool) -> Command {
    let mut c = Command::new(&bin.exe);
    c.arg("--test-threads=2").current_dir(&bin.cwd);
    // A backtrace buries the failure message under a hundred frames of test harness; the
    // message and the test's own log lines say what went wrong. `KOPIUR_TEST_BACKTRACE=1`
    // keeps the caller's RUST_BACKTRACE.
    if std::env::var("KOPIUR_TEST_BACKTRACE").as_deref() != Ok("1") {
        c.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
    }
    // The environment tests print their acceptance figures (counts, durations); their output
    // is captured to a file and shown whole, so it never interleaves with another binary's.
    if nocapture {
        c.arg("--nocapture");
    }
    c
}

/// Runs the fast binaries in order, streaming their output.
pub fn run_sequential(bins: &[TestBin]) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for b in bins {
        eprintln!("\n---- {} ----", b.label);
        let t = Instant::now();
        let st = command(b, false).status().with_context(|| format!("running {}", b.exe.display()))?;
        out.push(Outcome { label: b.label.clone(), ok: st.success(), elapsed: t.elapsed(), why: Vec::new() });
    }
    Ok(out)
}

struct Running {
    bin: TestBin,
    child: Child,
    log: PathBuf,
    started: Instant,
}

/// The environment binaries that run the real node from the node images
/// (`cargo xtask node-images`): they wait for the image build, which runs beside the pool.
pub const NEEDS_NODE_IMAGES: &[&str] =
    &["real_node_e2e", "csi_staging_e2e", "populator_e2e", "real_node_csi", "real_node"];

/// Whether a queued environment binary may start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    Go,
    /// Not yet: the pool starts a later binary in its place and asks again.
    Wait,
    /// Never: it is recorded as failed with these lines.
    Fail(Vec<String>),
}

/// A command that runs beside the tests (the node image build: CPU-bound, while the
/// environment binaries mostly wait), its output kept in a log and printed when it ends.
pub struct Background {
    label: String,
    child: Child,
    log: PathBuf,
    started: Instant,
    result: Option<(bool, Duration)>,
    /// When it ended, as a watcher thread saw it: the figure is its own run time, not the
    /// moment a gate happened to ask.
    ended: std::sync::Arc<std::sync::Mutex<Option<Instant>>>,
}

impl Background {
    pub fn spawn(label: &str, mut cmd: Command, log: PathBuf) -> Result<Background> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::File::create(&log)?;
        let child = cmd
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {label}"))?;
        eprintln!("==> started {label} in the background (log {})", log.display());
        let ended = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (watch, pid) = (ended.clone(), child.id());
        std::thread::spawn(move || {
            // Watches for the exit without reaping it (the owner still collects the status): an
            // exited, unreaped process is a zombie (`Z` in /proc/<pid>/stat); a gone one ended too.
            loop {
                let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|st| st.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()));
                if matches!(state, None | Some('Z' | 'X')) {
                    *watch.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        Ok(Background { label: label.into(), child, log, started: Instant::now(), result: None, ended })
    }

    /// `Some(success)` once it has ended (its log is printed the first time).
    pub fn poll(&mut self) -> Result<Option<bool>> {
        if self.result.is_none()
            && let Some(st) = self.child.try_wait()?
        {
            self.finish(st.success());
        }
        Ok(self.result.map(|(ok, _)| ok))
    }

    /// Waits for it to end.
    pub fn wait(&mut self) -> Result<bool> {
        if self.result.is_none() {
            let st = self.child.wait()?;
            self.finish(st.success());
        }
        Ok(self.result.is_some_and(|(ok, _)| ok))
    }

    fn finish(&mut self, ok: bool) {
        let ended = *self.ended.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let elapsed = ended.unwrap_or_else(Instant::now).saturating_duration_since(self.started);
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        eprintln!("\n---- {} ({elapsed:.0?}, {}) ----", self.label, if ok { "ok" } else { "FAILED" });
        eprint!("{text}");
        self.result = Some((ok, elapsed));
    }

    /// The outcome for the summary (call after [`Background::wait`]).
    pub fn outcome(&self) -> Outcome {
        let (ok, elapsed) = self.result.unwrap_or((false, self.started.elapsed()));
        let why = if ok { Vec::new() } else { vec![format!("{} failed: see {}", self.label, self.log.display())] };
        Outcome { label: self.label.clone(), ok, elapsed, why }
    }
}

/// The binaries that start the CSI stack (`testenv/build-tools.sh csi`, built in the
/// background beside the tests: a cold build is minutes of Go the other tiers do not need).
pub const NEEDS_CSI: &[&str] = &["csi_staging_e2e", "populator_e2e", "real_node_csi"];

/// One background build's answer for a binary that needs it.
fn background_gate(what: &str, b: &mut Background) -> Result<Gate> {
    Ok(match b.poll()? {
        None => Gate::Wait,
        Some(true) => Gate::Go,
        Some(false) => Gate::Fail(vec![format!("not run: {what} failed to build (see {})", b.log.display())]),
    })
}

/// The gate of the real-node binaries: open once the background image build succeeded, and
/// for those that start the CSI stack, once its tools are built too.
pub fn node_image_gate(bin: &TestBin, images: &mut Background, csi: &mut Background) -> Result<Gate> {
    let t = bin.target.as_str();
    let images = if NEEDS_NODE_IMAGES.contains(&t) { background_gate("the node images", images)? } else { Gate::Go };
    let csi = if NEEDS_CSI.contains(&t) { background_gate("the CSI tools", csi)? } else { Gate::Go };
    Ok(match (images, csi) {
        (Gate::Fail(why), _) | (_, Gate::Fail(why)) => Gate::Fail(why),
        (Gate::Wait, _) | (_, Gate::Wait) => Gate::Wait,
        (Gate::Go, Gate::Go) => Gate::Go,
    })
}

/// Whether `target` must wait because a real-node binary is among the `running` targets.
fn waits_for_the_node(running: &[&str], target: &str) -> bool {
    NEEDS_NODE_IMAGES.contains(&target) && running.iter().any(|r| NEEDS_NODE_IMAGES.contains(r))
}

/// The first queued binary `gate` lets start; binaries it fails are recorded in `out`.
fn next_ready(
    queue: &mut std::collections::VecDeque<TestBin>,
    gate: &mut dyn FnMut(&TestBin) -> Result<Gate>,
    out: &mut Vec<Outcome>,
) -> Result<Option<TestBin>> {
    let mut i = 0;
    while i < queue.len() {
        match gate(&queue[i])? {
            Gate::Go => return Ok(queue.remove(i)),
            Gate::Wait => i += 1,
            Gate::Fail(why) => {
                let b = queue.remove(i).expect("index in range");
                eprintln!("\n---- {} (not started, FAILED) ----\n{}", b.label, why.join("\n"));
                out.push(Outcome { label: b.label, ok: false, elapsed: Duration::ZERO, why });
            }
        }
    }
    Ok(None)
}

/// Runs the environment binaries `jobs` at a time, in order, skipping over those `gate` holds
/// back for now; each one's output is printed when it ends.
pub fn run_pool(
    bins: &[TestBin],
    jobs: usize,
    log_dir: &Path,
    gate: &mut dyn FnMut(&TestBin) -> Result<Gate>,
) -> Result<Vec<Outcome>> {
    std::fs::create_dir_all(log_dir)?;
    let mut queue: std::collections::VecDeque<TestBin> = bins.iter().cloned().collect();
    let mut running: Vec<Running> = Vec::new();
    let mut out = Vec::new();
    let mut last_note = Instant::now();
    while !queue.is_empty() || !running.is_empty() {
        loop {
            if running.len() >= jobs {
                break;
            }
            // One real node per machine (a host lock): a second real-node binary would only
            // hold a slot while it waits for the lock, so it starts once the first has ended.
            let busy: Vec<&str> = running.iter().map(|r| r.bin.target.as_str()).collect();
            let mut exclusive =
                |b: &TestBin| if waits_for_the_node(&busy, &b.target) { Ok(Gate::Wait) } else { gate(b) };
            let Some(bin) = next_ready(&mut queue, &mut exclusive, &mut out)? else { break };
            let log = log_dir.join(format!("{}.log", bin.target));
            let file = std::fs::File::create(&log)?;
            let child = command(&bin, true)
                .stdout(Stdio::from(file.try_clone()?))
                .stderr(Stdio::from(file))
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", bin.exe.display()))?;
            eprintln!("==> started {} (log {})", bin.label, log.display());
            running.push(Running { bin, child, log, started: Instant::now() });
        }
        let mut i = 0;
        while i < running.len() {
            match running[i].child.try_wait()? {
                None => i += 1,
                Some(st) => {
                    let r = running.swap_remove(i);
                    let elapsed = r.started.elapsed();
                    let text = std::fs::read_to_string(&r.log).unwrap_or_default();
                    eprintln!(
                        "\n---- {} ({:.0?}, {}) ----",
                        r.bin.label,
                        elapsed,
                        if st.success() { "ok" } else { "FAILED" }
                    );
                    eprint!("{text}");
                    let why = if st.success() { Vec::new() } else { failure_excerpt(&text) };
                    out.push(Outcome { label: r.bin.label, ok: st.success(), elapsed, why });
                }
            }
        }
        if last_note.elapsed() > Duration::from_secs(120) && !running.is_empty() {
            let names: Vec<String> =
                running.iter().map(|r| format!("{} {:.0?}", r.bin.target, r.started.elapsed())).collect();
            eprintln!("    … still running: {}; queued: {}", names.join(", "), queue.len());
            last_note = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(out)
}

/// Prints the per-binary summary; errors when any failed.
pub fn summarize(outcomes: &[Outcome]) -> Result<()> {
    let mut by_label: BTreeMap<&str, &Outcome> = BTreeMap::new();
    for o in outcomes {
        by_label.insert(&o.label, o);
    }
    eprintln!("\n==> Summary: {} test binaries", outcomes.len());
    for o in by_label.values() {
        eprintln!("    {:<6} {:>7.1}s  {}", if o.ok { "ok" } else { "FAILED" }, o.elapsed.as_secs_f64(), o.label);
    }
    for o in by_label.values().filter(|o| !o.ok && !o.why.is_empty()) {
        eprintln!("\n==> Why {} failed:", o.label);
        for l in &o.why {
            eprintln!("    {l}");
        }
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.ok).map(|o| o.label.as_str()).collect();
    if !failed.is_empty() {
        bail!("{} test binaries failed: {}", failed.len(), failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(target: &str) -> TestBin {
        TestBin { label: target.into(), target: target.into(), exe: PathBuf::new(), cwd: PathBuf::new() }
    }

    #[test]
    fn artifacts_are_parsed_from_cargo_json() {
        let json = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/controller#kopiur-controller@0.1.0","manifest_path":"/w/crates/controller/Cargo.toml","target":{"kind":["test"],"name":"deletion_e2e"},"profile":{"test":true},"executable":"/w/target/debug/deps/deletion_e2e-1"}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/api#kopiur-api@0.1.0","manifest_path":"/w/crates/api/Cargo.toml","target":{"kind":["lib"],"name":"kopiur_api"},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/api#kopiur-api@0.1.0","manifest_path":"/w/crates/api/Cargo.toml","target":{"kind":["lib"],"name":"kopiur_api"},"profile":{"test":true},"executable":"/w/target/debug/deps/kopiur_api-2"}
{"reason":"build-finished","success":true}"#;
        let bins = parse_artifacts(json).unwrap();
        assert_eq!(bins.len(), 2);
        assert_eq!(bins[0].label, "kopiur-controller::deletion_e2e");
        assert_eq!(bins[0].cwd, PathBuf::from("/w/crates/controller"));
        assert_eq!(bins[1].label, "kopiur-api (unit)");
        assert!(parse_artifacts("{\"reason\":\"build-finished\"}").is_err(), "no executables is an error");
        assert!(parse_artifacts("{not json").is_err());
    }

    #[test]
    fn environment_binaries_are_pooled_longest_first() {
        let (fast, env) =
            partition(vec![bin("cron"), bin("catalog_e2e"), bin("deletion_e2e"), bin("new_e2e"), bin("deletion_sim")]);
        let f: Vec<&str> = fast.iter().map(|b| b.target.as_str()).collect();
        let e: Vec<&str> = env.iter().map(|b| b.target.as_str()).collect();
        assert_eq!(f, ["cron", "deletion_sim"]);
        assert_eq!(e, ["deletion_e2e", "catalog_e2e", "new_e2e"]);
    }

    #[test]
    fn the_known_long_binaries_start_first_in_duration_order() {
        // The pool is given every environment binary in whatever order cargo listed them.
        let mut given: Vec<TestBin> = ENVIRONMENT_TARGETS.iter().rev().map(|t| bin(t)).collect();
        given.insert(3, bin("zz_new_e2e"));
        given.push(bin("cron"));
        let (fast, env) = partition(given);
        assert_eq!(fast.iter().map(|b| b.target.as_str()).collect::<Vec<_>>(), ["cron"]);
        let order: Vec<&str> = env.iter().map(|b| b.target.as_str()).collect();
        assert_eq!(
            order[..11],
            [
                "pipeline_outage_e2e",
                "pipeline_acceptance_e2e",
                "e2e_repository",
                "death_spiral_e2e",
                "real_node_e2e",
                "csi_staging_e2e",
                "populator_e2e",
                "deletion_e2e",
                "breaker_close_fast_e2e",
                "e2e_repository_faults",
                "deletion_scenarios_e2e",
            ]
        );
        assert_eq!(order.last(), Some(&"zz_new_e2e"), "an unlisted environment binary runs last");
        assert_eq!(order.len(), ENVIRONMENT_TARGETS.len() + 1);
        let distinct: std::collections::BTreeSet<&&str> = ENVIRONMENT_TARGETS.iter().collect();
        assert_eq!(distinct.len(), ENVIRONMENT_TARGETS.len(), "each target listed once");
    }

    #[test]
    fn the_failure_excerpt_keeps_the_reason_and_drops_the_backtrace() {
        let log = "running 1 test\n[ 12.0s] r Ready\nSCENARIO FAILED: idle: idle objects were written: [\"policy/idle-03\"]\n\
thread 'acc' panicked at crates/controller/tests/x.rs:10:5:\nassertion failed: 1 scenario(s) failed\n  left: 1\n\
stack backtrace:\n   0: std::panicking::begin_panic\n   1: x::main\n\
Error: 1 scenario(s) failed: [\"idle\"]\n\nCaused by:\n    idle objects were written\n\ntest acc ... FAILED\n";
        let why = failure_excerpt(log);
        assert_eq!(
            why,
            [
                "SCENARIO FAILED: idle: idle objects were written: [\"policy/idle-03\"]",
                "thread 'acc' panicked at crates/controller/tests/x.rs:10:5:",
                "assertion failed: 1 scenario(s) failed",
                "  left: 1",
                "Error: 1 scenario(s) failed: [\"idle\"]",
                "Caused by:",
                "    idle objects were written",
            ]
        );
        assert!(failure_excerpt("running 1 test\ntest ok ... ok\n").is_empty());
        let flood: String = (0..500).map(|i| format!("FAILED: {i}\n")).collect();
        assert_eq!(failure_excerpt(&flood).len(), 61, "bounded");
        let kept = format!("{flood}ENVIRONMENT LOGS KEPT: /w/target/test-env-logs/deletion_e2e-42 (5 files)\n");
        let why = failure_excerpt(&kept);
        assert_eq!(why.len(), 62);
        assert_eq!(
            why.last().map(String::as_str),
            Some("ENVIRONMENT LOGS KEPT: /w/target/test-env-logs/deletion_e2e-42 (5 files)")
        );
    }

    #[test]
    fn held_binaries_are_skipped_not_blocking_and_failed_gates_are_recorded() {
        let mut queue: std::collections::VecDeque<TestBin> =
            ["real_node_e2e", "deletion_e2e", "real_node", "cli_e2e"].iter().map(|t| bin(t)).collect();
        let mut out = Vec::new();
        let mut images_done = false;
        let mut gate = |b: &TestBin| -> Result<Gate> {
            Ok(if !NEEDS_NODE_IMAGES.contains(&b.target.as_str()) || images_done { Gate::Go } else { Gate::Wait })
        };
        let first = next_ready(&mut queue, &mut gate, &mut out).unwrap().unwrap();
        assert_eq!(first.target, "deletion_e2e", "a held real-node binary does not block the queue");
        let second = next_ready(&mut queue, &mut gate, &mut out).unwrap().unwrap();
        assert_eq!(second.target, "cli_e2e");
        assert!(next_ready(&mut queue, &mut gate, &mut out).unwrap().is_none(), "only held binaries left");
        assert_eq!(queue.len(), 2);
        images_done = true;
        let mut gate = |b: &TestBin| -> Result<Gate> {
            Ok(if !NEEDS_NODE_IMAGES.contains(&b.target.as_str()) || images_done { Gate::Go } else { Gate::Wait })
        };
        assert_eq!(next_ready(&mut queue, &mut gate, &mut out).unwrap().unwrap().target, "real_node_e2e");
        let mut failing = |_: &TestBin| -> Result<Gate> { Ok(Gate::Fail(vec!["images failed".into()])) };
        assert!(next_ready(&mut queue, &mut failing, &mut out).unwrap().is_none());
        assert_eq!(out.len(), 1);
        assert!(!out[0].ok && out[0].why == vec!["images failed".to_string()]);
        assert!(queue.is_empty());
    }

    #[test]
    fn csi_binaries_wait_for_the_csi_tools_and_the_images() {
        use std::process::Command;
        let dir = std::env::temp_dir().join(format!("kopiur-gate-{}", std::process::id()));
        let spawn = |label: &str, script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]);
            Background::spawn(label, c, dir.join(format!("{label}.log"))).unwrap()
        };
        let (mut images, mut csi) = (spawn("images", "exit 0"), spawn("csi", "sleep 30"));
        images.wait().unwrap();
        assert_eq!(node_image_gate(&bin("real_node_e2e"), &mut images, &mut csi).unwrap(), Gate::Go, "no CSI needed");
        assert_eq!(node_image_gate(&bin("deletion_e2e"), &mut images, &mut csi).unwrap(), Gate::Go);
        for t in NEEDS_CSI {
            assert_eq!(node_image_gate(&bin(t), &mut images, &mut csi).unwrap(), Gate::Wait, "{t} waits for CSI");
        }
        let _ = csi.child.kill();
        csi.wait().unwrap();
        let g = node_image_gate(&bin("populator_e2e"), &mut images, &mut csi).unwrap();
        assert!(matches!(&g, Gate::Fail(why) if why[0].contains("the CSI tools failed")), "{g:?}");
        assert_eq!(node_image_gate(&bin("real_node"), &mut images, &mut csi).unwrap(), Gate::Go);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_background_build_reports_its_own_run_time_not_when_it_was_asked() {
        let log = std::env::temp_dir().join(format!("kopiur-bg-{}.log", std::process::id()));
        let mut c = std::process::Command::new("sh");
        c.args(["-c", "sleep 1"]);
        let mut b = Background::spawn("sleep", c, log.clone()).unwrap();
        std::thread::sleep(Duration::from_secs(3));
        assert!(b.wait().unwrap());
        let took = b.outcome().elapsed;
        assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2500), "{took:?}");
        let _ = std::fs::remove_file(log);
    }

    #[test]
    fn one_real_node_binary_runs_at_a_time() {
        assert!(waits_for_the_node(&["deletion_e2e", "real_node_e2e"], "csi_staging_e2e"));
        assert!(!waits_for_the_node(&["deletion_e2e"], "csi_staging_e2e"));
        assert!(!waits_for_the_node(&["real_node_e2e"], "deletion_e2e"), "others are not held");
        assert!(!waits_for_the_node(&[], "real_node"));
    }

    #[test]
    fn parallelism_is_validated() {
        assert_eq!(parallelism(None).unwrap(), 3);
        assert_eq!(parallelism(Some("")).unwrap(), 3, "empty reads as unset");
        assert_eq!(parallelism(Some(" 2 ")).unwrap(), 2);
        assert_eq!(parallelism(Some("1")).unwrap(), 1);
        assert!(parallelism(Some("0")).is_err());
        assert!(parallelism(Some("two")).is_err());
    }
}
