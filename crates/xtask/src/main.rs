//! `cargo xtask demo|test|gen|bench|tools|images` — the project's two promised commands plus
//! codegen, benchmarks, the test tools and the container images. Each step says what it is
//! doing, because cold builds take a while.
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

mod r#gen;
mod images;
mod rbac;
mod testrun;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

fn step(msg: &str) {
    eprintln!("\n==> {msg}");
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("    $ {}", format_cmd(cmd));
    let st = cmd.status().with_context(|| format!("running {}", format_cmd(cmd)))?;
    if !st.success() {
        bail!("`{}` failed with {st}", format_cmd(cmd));
    }
    Ok(())
}

fn format_cmd(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// A nested cargo, with the environment a plain `cargo build` in the repository has.
///
/// `cargo run` (how `cargo xtask` starts) hands this process the xtask crate's own variables
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, `CARGO_PKG_VERSION_MAJOR`, ...). Build scripts that
/// track them with `rerun-if-env-changed` (ring's does) would see other values than in a plain
/// `cargo build`, and, through `CARGO_MANIFEST_DIR`, other values in every clone: ring and all
/// that depends on it (rustls, kube) would rebuild, and a shared target directory
/// (`cargo xtask images`) would never be reused across clones.
fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(repo_root());
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(is_cargo_run_package_var) {
            c.env_remove(k);
        }
    }
    c
}

/// The variables `cargo run` sets for the package it runs (not the ones cargo itself reads).
fn is_cargo_run_package_var(k: &str) -> bool {
    k.starts_with("CARGO_PKG_")
        || k.starts_with("CARGO_MANIFEST_")
        || k.starts_with("CARGO_BIN_EXE_")
        || matches!(
            k,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
        )
}

/// Builds (or reuses from the cache) the named tools of `testenv/build-tools.sh`; none: its
/// default list (etcd, k8s, kopia, Garage, the CSI stack).
fn build_tools(tools: &[&str]) -> Result<()> {
    step(
        "Test-environment tools (cached outside the repo; a cold build takes about 20 min on 2 cores, longer while other builds run)",
    );
    run(Command::new("bash").arg(repo_root().join("testenv/build-tools.sh")).args(tools))
}

fn build_workspace_bins() -> Result<()> {
    step("Building the workspace binaries (operator, mover, node agent, harness)");
    run(cargo().args(["build", "--workspace", "--bins"]))
}

/// promtool (Debian's `prometheus` package) unit-tests the shipped alert rules.
fn ensure_promtool() -> Result<()> {
    if Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    step("Installing promtool (Debian package prometheus) for the alert-rule tests");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends", "prometheus"])
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn test() -> Result<()> {
    let t0 = Instant::now();
    // The CSI stack is built beside the tests (below): only three real-node binaries need it.
    build_tools(&["etcd", "k8s", "kopia", "garage", "helm"])?;
    ensure_promtool()?;
    step("Generated files are up to date (cargo xtask gen --check)");
    generate(true)?;
    build_workspace_bins()?;
    // The node images (a CPU-bound release build) build beside the tests, which mostly wait on
    // cron ticks, probes and Jobs; only the real-node binaries wait for them.
    let log_dir = repo_root().join("target/xtask-test-logs");
    step("Container images for the test node: built in the background; the real-node binaries start once they are");
    let mut node_images = testrun::Background::spawn(
        "node images (cargo xtask node-images)",
        {
            // Through cargo, not this process's executable: the workspace build above rebuilt
            // target/debug/xtask, so this process's own file is gone (`… (deleted)`).
            let mut c = cargo();
            c.args(["run", "--quiet", "--package", "xtask", "--", "node-images"]);
            c
        },
        log_dir.join("node-images.log"),
    )?;
    let mut csi_tools = testrun::Background::spawn(
        "CSI tools (testenv/build-tools.sh csi)",
        {
            let mut c = Command::new("bash");
            c.arg(repo_root().join("testenv/build-tools.sh")).arg("csi");
            c
        },
        log_dir.join("csi-tools.log"),
    )?;
    step("Building every test target");
    let out = cargo()
        .args(["test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("building the test targets")?;
    if !out.status.success() {
        bail!("building the test targets failed with {}", out.status);
    }
    let (fast, env) = testrun::partition(testrun::parse_artifacts(&String::from_utf8_lossy(&out.stdout))?);
    let jobs = testrun::parallelism(std::env::var("KOPIUR_TEST_JOBS").ok().as_deref())?;
    step(&format!("Fast tiers: pure, property, simulation, contract ({} binaries, one at a time)", fast.len()));
    let mut outcomes = testrun::run_sequential(&fast)?;
    step("Doc tests");
    let doc = Instant::now();
    let doc_ok = cargo().args(["test", "--workspace", "--doc"]).status()?.success();
    outcomes.push(testrun::Outcome { label: "doc tests".into(), ok: doc_ok, elapsed: doc.elapsed(), why: Vec::new() });
    step(&format!(
        "Environment tiers: component (kopia + Garage) and end-to-end (local control plane); {} binaries, {jobs} at a time",
        env.len()
    ));
    outcomes.extend(testrun::run_pool(&env, jobs, &log_dir, &mut |b| {
        testrun::node_image_gate(b, &mut node_images, &mut csi_tools)
    })?);
    node_images.wait()?;
    outcomes.push(node_images.outcome());
    csi_tools.wait()?;
    outcomes.push(csi_tools.outcome());
    let res = testrun::summarize(&outcomes);
    eprintln!("\ncargo xtask test finished in {:.0?}", t0.elapsed());
    res
}

/// `cargo xtask demo [--process-node]`: the real node runs kopiur from its images (root only:
/// it adds a bridge, iptables rules and cgroups, all removed on Ctrl-C); `--process-node` runs
/// the operator as a local process and Job pods through the process node agent.
fn demo(args: &[String]) -> Result<()> {
    let process_node = match args {
        [] => false,
        [a] if a == "--process-node" => true,
        _ => bail!("usage: cargo xtask demo [--process-node]"),
    };
    build_tools(&["etcd", "k8s", "kopia", "garage", "helm"])?;
    build_workspace_bins()?;
    let bin = repo_root().join("target/debug/kopiur-testenv");
    if process_node {
        step("Starting the local control plane, node agent, Garage S3 and the demo (Ctrl-C stops everything)");
        return run(Command::new(bin).args(["demo", "--process-node"]));
    }
    images::build_for_node()?;
    step(
        "Starting the local control plane, the real node (containerd, kubelet, kube-proxy), Garage S3, kopiur by helm from its images, and the demo (Ctrl-C stops and cleans up everything)",
    );
    run(Command::new(bin).arg("demo"))
}

fn bench() -> Result<()> {
    // No real node in the benchmarks, so not the CSI stack.
    build_tools(&["etcd", "k8s", "kopia", "garage"])?;
    step("Building release binaries for benchmarks");
    run(cargo().args(["build", "--workspace", "--bins"]))?;
    step("Benchmarks");
    run(Command::new(repo_root().join("target/debug/kopiur-testenv")).arg("bench"))?;
    // A debug build: the mover only spawns kopia and waits on it, so its optimisation level
    // does not move the figure, and a release build of its dependency tree takes minutes here.
    step("Mover backup throughput against raw kopia snapshot create (debug build of the mover)");
    run(cargo().args(["build", "-p", "kopiur-mover", "--bins", "--example", "kopiur-mover-bench"]))?;
    run(&mut Command::new(repo_root().join("target/debug/examples/kopiur-mover-bench")))?;
    // ADR-0006: an acknowledged 600-deletion wave drained through batch delete Jobs.
    step("Mass-deletion wave: time from the ack to 600 finalizers drained, repository connects per wave");
    run(cargo().args(["build", "-p", "kopiur-controller", "--bins", "--example", "deletion-wave-bench"]))?;
    run(&mut Command::new(repo_root().join("target/debug/examples/deletion-wave-bench")))?;
    // The controller's memory is measured on a release build (what users run); the harness
    // around it stays a debug build.
    step(
        "Pipeline scale: controller RSS at 2,000 / 10,000 Snapshots, reconcile throughput, created->Job latency, idle writes",
    );
    run(cargo().args(["build", "--release", "-p", "kopiur-controller", "--bin", "kopiur-controller"]))?;
    run(cargo().args(["build", "-p", "kopiur-controller", "--example", "pipeline-bench"]))?;
    run(Command::new(repo_root().join("target/debug/examples/pipeline-bench"))
        .env("KOPIUR_BIN_KOPIUR_CONTROLLER", repo_root().join("target/release/kopiur-controller")))
}

/// Every generated file: CRDs (from the api crate) and the least-privilege RBAC.
fn generate(check: bool) -> Result<()> {
    let root = repo_root();
    r#gen::run(&root, check)?;
    generate_rbac(check)?;
    sync_chart_copies(check)
}

fn generate_rbac(check: bool) -> Result<()> {
    let root = repo_root();
    let path = root.join("deploy/rbac/kopiur-rbac.yaml");
    let want = rbac::render();
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    if have == want {
        return Ok(());
    }
    if check {
        bail!("{} is out of date: run `cargo xtask gen` and commit the result", path.display());
    }
    std::fs::create_dir_all(path.parent().unwrap())?;
    std::fs::write(&path, want)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// The Helm chart carries copies of the generated CRDs and RBAC (Helm can only read files
/// inside the chart directory).
fn sync_chart_copies(check: bool) -> Result<()> {
    let root = repo_root();
    let chart = root.join("deploy/helm/kopiur");
    let mut drift = Vec::new();
    for (src_dir, dst_dir) in [("deploy/crds", "crds"), ("deploy/rbac", "rbac")] {
        for e in std::fs::read_dir(root.join(src_dir))?.flatten() {
            let src = e.path();
            let dst = chart.join(dst_dir).join(e.file_name());
            let want = std::fs::read(&src)?;
            if std::fs::read(&dst).ok().as_ref() == Some(&want) {
                continue;
            }
            if check {
                drift.push(dst.display().to_string());
            } else {
                std::fs::create_dir_all(dst.parent().unwrap())?;
                std::fs::write(&dst, want)?;
                eprintln!("wrote {}", dst.display());
            }
        }
    }
    if !drift.is_empty() {
        bail!("chart copies out of date (run `cargo xtask gen`): {}", drift.join(", "));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("demo") => demo(&args[1..]),
        Some("bench") => bench(),
        Some("gen") => generate(args.iter().any(|a| a == "--check")),
        Some("tools") => build_tools(&args[1..].iter().map(String::as_str).collect::<Vec<_>>()),
        Some("images") => images::images(&args[1..]),
        Some("node-images") => images::build_for_node().map(drop),
        _ => {
            eprintln!(
                "usage: cargo xtask <command>\n\n  demo [--process-node]  the local control plane, a real node, Garage and kopiur from its images with a demo backup schedule\n  test          every test tier, building what it needs\n  gen [--check] regenerate deploy/crds (and RBAC); --check fails on drift\n  bench         print benchmark figures\n  tools [NAME]  build or reuse the cached test tools (etcd k8s kopia garage helm)\n  images [--arch amd64|arm64] [--registry PREFIX] [--tag TAG] [--node-images]\n                kopiur-controller and kopiur-mover as OCI archives under target/images (no Docker);\n                --node-images adds the test node's pause and busybox images (test only)\n  node-images   what `test` and `demo` build for the test node: all four images as localhost/<name>:testenv,\n                twice (the digests must repeat), listed in target/images/node-images.json"
            );
            return ExitCode::from(2);
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_cargo_drops_the_variables_of_cargo_run() {
        for k in [
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_CRATE_NAME",
            "OUT_DIR",
        ] {
            assert!(is_cargo_run_package_var(k), "{k}");
        }
        for k in ["CARGO", "CARGO_HOME", "CARGO_TARGET_DIR", "CARGO_BUILD_JOBS", "CARGO_INCREMENTAL", "RUSTFLAGS", "CC"]
        {
            assert!(!is_cargo_run_package_var(k), "{k} is cargo's own setting");
        }
        // The test binary itself runs with CARGO_MANIFEST_DIR set, as xtask does under `cargo run`.
        let c = cargo();
        let removed: Vec<_> = c.get_envs().filter(|(_, v)| v.is_none()).map(|(k, _)| k.to_owned()).collect();
        if std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
            assert!(removed.iter().any(|k| k == "CARGO_MANIFEST_DIR"), "{removed:?}");
        }
    }
}
