//! The image contents the build host provides: the musl toolchain, the cargo build of the
//! image binaries, kopia and busybox, each checked to be a static executable.
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use super::node::BUSYBOX;
use super::{Arch, Kind, PROFILE, check_static_elf, mib, oci};
use crate::{cargo, repo_root, run, step};

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd).arg(arg).output().is_ok_and(|o| o.status.success())
}

fn apt_install(pkgs: &[&str], why: &str) -> Result<()> {
    let list = pkgs.join(" ");
    step(&format!("Installing {list} (Debian packages): {why}"));
    ensure!(have("apt-get", "--version"), "apt-get not found: install {list} (or the equivalent) yourself");
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(pkgs)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

pub(super) fn ensure_toolchain(arch: Arch) -> Result<()> {
    let target = arch.rust_target();
    // Added on first use, not listed in rust-toolchain.toml: every other command (and CI) would
    // download both targets' std for nothing.
    if let Ok(o) = Command::new("rustup").args(["target", "list", "--installed"]).current_dir(repo_root()).output()
        && o.status.success()
        && !String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == target)
    {
        step(&format!("Adding the Rust target {target} (static musl binaries)"));
        run(Command::new("rustup").args(["target", "add", target]).current_dir(repo_root()))?;
    }
    let (cc, pkgs) = arch.c_compiler();
    if !have(cc, "--version") {
        apt_install(pkgs, &format!("{cc} compiles ring's C code for {target}"))?;
    }
    Ok(())
}

/// Runs `cmd`, printing a line every minute so a long, quiet step (LTO link) shows it is alive.
fn run_with_heartbeat(cmd: &mut Command, what: &str) -> Result<Duration> {
    let t0 = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let beat = {
        let done = done.clone();
        let what = what.to_string();
        std::thread::spawn(move || {
            let mut last = Instant::now();
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                if last.elapsed() >= Duration::from_secs(60) {
                    last = Instant::now();
                    eprintln!("    ... {what}: still running ({:.0?})", t0.elapsed());
                }
            }
        })
    };
    let res = run(cmd);
    done.store(true, Ordering::Relaxed);
    let _ = beat.join();
    res.map(|()| t0.elapsed())
}

/// The `channel` of `rust-toolchain.toml`'s `[toolchain]` table.
pub(super) fn toolchain_channel(toml: &str) -> Result<String> {
    let mut in_toolchain = false;
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            in_toolchain = line == "[toolchain]";
        } else if in_toolchain
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == "channel"
        {
            let v = v.split('#').next().unwrap_or_default().trim().trim_matches('"').trim();
            ensure!(
                !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
                "rust-toolchain.toml: channel {v:?} is not a plain name"
            );
            return Ok(v.to_string());
        }
    }
    bail!("rust-toolchain.toml has no [toolchain] channel")
}

/// The cargo target directory of the image binaries: `$KOPIUR_IMAGE_BUILD_DIR`, else
/// `<test-tool cache>/image-build-<toolchain channel>`. Outside the repository so a fresh clone
/// (or `cargo clean`) does not redo the 15-minute release build of the dependencies; per
/// toolchain because another compiler rebuilds everything anyway.
pub fn image_build_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("KOPIUR_IMAGE_BUILD_DIR").filter(|d| !d.is_empty()) {
        return Ok(repo_root().join(d));
    }
    let text =
        std::fs::read_to_string(repo_root().join("rust-toolchain.toml")).context("reading rust-toolchain.toml")?;
    Ok(testenv_cache().join(format!("image-build-{}", toolchain_channel(&text)?)))
}

/// The workspace's own packages (`cargo metadata --no-deps`).
fn workspace_packages() -> Result<Vec<String>> {
    let out = cargo().args(["metadata", "--no-deps", "--format-version", "1"]).output()?;
    ensure!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
    let names: Vec<String> = meta["packages"]
        .as_array()
        .context("cargo metadata lists no packages")?
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_string))
        .collect();
    ensure!(!names.is_empty(), "cargo metadata lists no packages");
    Ok(names)
}

/// The image binaries, built in [`image_build_dir`], with the bytes read before another
/// checkout can build there.
///
/// Every checkout gives the workspace's crates the same artifact names there (cargo hashes a
/// path package by its path inside the workspace), and cargo's freshness check compares the
/// checkout's source mtimes with the artifacts: a checkout with older sources would take
/// another checkout's binaries as up to date. So the directory is locked for the build, it
/// records which checkout built last, and a different checkout first removes the workspace
/// crates' artifacts (`cargo clean -p`); the dependencies stay.
pub(super) fn build_binaries(arch: Arch) -> Result<Vec<(Kind, Vec<u8>)>> {
    let target = arch.rust_target();
    let dir = image_build_dir()?;
    step(&format!(
        "Building kopiur-controller and kopiur-mover for {target} (profile `{PROFILE}`: release, LTO, stripped) in {} \
         (KOPIUR_IMAGE_BUILD_DIR; kept outside the repository, so a fresh clone reuses the dependencies; a cold build \
         takes about 15 min on 2 cores, a no-change rebuild a second)",
        dir.display()
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let lock_path = dir.join("kopiur-xtask.lock");
    let lock = std::fs::File::create(&lock_path).with_context(|| format!("creating {}", lock_path.display()))?;
    if lock.try_lock().is_err() {
        eprintln!("    waiting for another `cargo xtask images` building in {}", dir.display());
        lock.lock().with_context(|| format!("locking {}", lock_path.display()))?;
    }
    let marker = dir.join(format!("kopiur-checkout-{target}"));
    let me = repo_root().display().to_string();
    match std::fs::read_to_string(&marker) {
        Ok(last) if last.trim() == me => {}
        last => {
            let who = last.map(|l| format!("by {}", l.trim())).unwrap_or_else(|_| "by an unknown checkout".into());
            eprintln!("    the workspace crates there were built {who}: removing them (the dependencies stay)");
            let mut clean = cargo();
            clean.args(["clean", "--profile", PROFILE, "--target", target]).arg("--target-dir").arg(&dir);
            for p in workspace_packages()? {
                clean.args(["-p", &p]);
            }
            run(&mut clean)?;
        }
    }
    let mut c = cargo();
    c.args(["build", "--locked", "--profile", PROFILE, "--target", target]).arg("--target-dir").arg(&dir);
    for k in Kind::ALL {
        c.args(["-p", k.name(), "--bin", k.name()]);
    }
    let (cc, _) = arch.c_compiler();
    let env_target = target.replace('-', "_");
    c.env(format!("CC_{env_target}"), cc);
    if arch == Arch::Arm64 {
        c.env(format!("AR_{env_target}"), "aarch64-linux-gnu-ar");
        c.env(format!("CARGO_TARGET_{}_LINKER", env_target.to_uppercase()), cc);
    }
    // Written before the build: a failed build may have replaced some of another checkout's
    // artifacts, and this checkout's next build must not clean again what is already its own.
    std::fs::write(&marker, format!("{me}\n")).with_context(|| format!("writing {}", marker.display()))?;
    let took = run_with_heartbeat(&mut c, "cargo build")?;
    eprintln!("    binaries built in {took:.1?}");
    let bin_dir = dir.join(target).join(PROFILE);
    let bins = Kind::ALL.iter().map(|&k| Ok((k, read_binary(&bin_dir.join(k.name()), arch)?))).collect();
    drop(lock);
    bins
}

pub(super) fn versions_env(key: &str) -> Result<String> {
    let text = std::fs::read_to_string(repo_root().join("testenv/versions.env"))?;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
        .with_context(|| format!("{key} missing from testenv/versions.env"))
}

pub(super) fn testenv_cache() -> PathBuf {
    if let Some(d) = std::env::var_os("KOPIUR_TESTENV_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/kopiur-testenv")
}

/// The wrapper-module hash `testenv/build-tools.sh` names its kopia directory with.
fn kopia_wrapper_hash() -> Result<String> {
    use sha2::Digest as _;
    let w = repo_root().join("testenv/go/kopia");
    let mut h = sha2::Sha256::new();
    h.update(std::fs::read(w.join("go.mod"))?);
    h.update(std::fs::read(w.join("go.sum"))?);
    Ok(hex::encode(h.finalize())[..12].to_string())
}

/// kopia at the version pinned in `testenv/versions.env`, `CGO_ENABLED=0`. amd64 is the
/// test tool cache's own build (`testenv/build-tools.sh kopia`); other architectures are
/// cross-compiled from the same wrapper module into a directory the test harness never picks.
pub(super) fn kopia(arch: Arch) -> Result<PathBuf> {
    let ver = versions_env("KOPIA_VERSION")?;
    let hash = kopia_wrapper_hash()?;
    let cache = testenv_cache();
    if arch == Arch::Amd64 {
        step(&format!("kopia {ver} (CGO_ENABLED=0) from the test-tool cache; built there when missing (3-6 min)"));
        run(Command::new("bash").arg(repo_root().join("testenv/build-tools.sh")).arg("kopia"))?;
        let p = cache.join(format!("kopia-{ver}-{hash}/bin/kopia"));
        ensure!(p.is_file(), "{} missing after testenv/build-tools.sh kopia", p.display());
        return Ok(p);
    }
    let dir = cache.join(format!("kopia-linux-{}-{ver}-{hash}", arch.name()));
    let bin = dir.join("bin/kopia");
    if bin.is_file() {
        step(&format!("kopia {ver} for linux/{}: cached ({})", arch.name(), bin.display()));
        return Ok(bin);
    }
    step(&format!("Cross-compiling kopia {ver} for linux/{} (CGO_ENABLED=0; 3-6 min cold)", arch.name()));
    let tmp = cache.join(format!("kopia-linux-{}-{ver}-{hash}.tmp.{}", arch.name(), std::process::id()));
    std::fs::create_dir_all(tmp.join("bin"))?;
    let mut c = Command::new("go");
    c.current_dir(repo_root().join("testenv/go/kopia"))
        .args(["build", "-p", "2", "-trimpath", "-tags", "nohtmlui", "-ldflags", "-s -w", "-o"])
        .arg(tmp.join("bin/kopia"))
        .arg("github.com/kopia/kopia")
        .env("GOOS", "linux")
        .env("GOARCH", arch.name())
        .env("CGO_ENABLED", "0")
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-buildvcs=false")
        .env("GOMODCACHE", cache.join("go/mod"))
        .env("GOCACHE", cache.join("go/build"));
    run_with_heartbeat(&mut c, "go build kopia")?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&tmp, &dir)?;
    Ok(bin)
}

pub(super) fn read_binary(path: &Path, arch: Arch) -> Result<Vec<u8>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    check_static_elf(&data, arch)
        .with_context(|| format!("{} is not a static {} executable", path.display(), arch.name()))?;
    Ok(data)
}

/// Debian's static busybox for the node images; `busybox-static` is installed when
/// `/bin/busybox` is missing or is the dynamic build of the `busybox` package.
pub(super) fn busybox() -> Result<Vec<u8>> {
    let why = match std::fs::read(BUSYBOX) {
        Ok(d) => match check_static_elf(&d, Arch::Amd64) {
            Ok(()) => None,
            Err(e) => Some(format!("{BUSYBOX} is not a static amd64 executable ({e:#})")),
        },
        Err(e) => Some(format!("{BUSYBOX}: {e}")),
    };
    if let Some(why) = why {
        apt_install(&["busybox-static"], &format!("the test node's images are made of it; {why}"))?;
    }
    let data = read_binary(Path::new(BUSYBOX), Arch::Amd64)?;
    let banner = Command::new(BUSYBOX)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).lines().next().map(str::to_string))
        .unwrap_or_default();
    eprintln!("    {BUSYBOX}: {banner} ({}, {})", mib(data.len()), oci::sha256(&data));
    Ok(data)
}
