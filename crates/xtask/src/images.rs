//! `cargo xtask images`: the controller and mover images, built without a container engine.
//!
//! Static musl binaries (release profile, stripped), kopia from the test-tool cache (built
//! with `CGO_ENABLED=0`), the host's CA bundle and the files under `deploy/images/rootfs`
//! become two layers per image: a base layer (identical for both images) and the binaries.
//! The result is an OCI image layout in one tar per image and platform under
//! `<target dir>/images/`. `deploy/images/*.Containerfile` build the same contents with an
//! engine (the release workflow uses them).
//!
//! The cargo build of the image binaries has its own target directory outside the repository
//! ([`image_build_dir`]), so a fresh clone reuses the compiled dependencies.
//!
//! `--node-images` adds two test-only images for the test environment's kubelet + containerd
//! node, made of Debian's static busybox ([`NodeKind`]). [`build_for_node`] builds all four
//! twice for `cargo xtask test` and `cargo xtask demo` and checks the digests repeat.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::{cargo, repo_root, run, step};

pub mod oci;
pub mod tar;

use tar::Entry;

/// Where the binaries go in the image; also the start of `PATH`.
pub const BIN_DIR: &str = "/usr/local/bin";
pub const USER: &str = "65532:65532";
pub const HOME: &str = "/home/nonroot";
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
pub const PATH_ENV: &str = "/usr/local/bin:/usr/bin:/bin";
/// The Cargo profile the images are built with (`Cargo.toml`: release, stripped).
pub const PROFILE: &str = "image";

const PASSWD: &str = include_str!("../../../deploy/images/rootfs/etc/passwd");
const GROUP: &str = include_str!("../../../deploy/images/rootfs/etc/group");
const NSSWITCH: &str = include_str!("../../../deploy/images/rootfs/etc/nsswitch.conf");

/// The two images this project ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Controller,
    Mover,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Controller, Kind::Mover];

    /// Image name and the binary it runs (its ENTRYPOINT).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Controller => "kopiur-controller",
            Kind::Mover => "kopiur-mover",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Kind::Controller => "kopiur: Kopia-native Kubernetes backup operator (controller)",
            Kind::Mover => "kopiur: mover Job image (kopiur-mover and kopia)",
        }
    }

    /// Whether the image carries kopia. The controller never runs kopia itself: it only
    /// builds command lines for the mover Jobs.
    pub fn has_kopia(self) -> bool {
        self == Kind::Mover
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub fn parse(s: &str) -> Result<Arch> {
        match s {
            "amd64" | "x86_64" => Ok(Arch::Amd64),
            "arm64" | "aarch64" => Ok(Arch::Arm64),
            _ => bail!("unknown architecture {s:?} (expected amd64 or arm64)"),
        }
    }

    /// GOARCH and OCI `architecture`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    pub fn platform(self) -> oci::Platform {
        oci::Platform {
            architecture: self.name().into(),
            os: "linux".into(),
            variant: (self == Arch::Arm64).then(|| "v8".into()),
        }
    }

    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-musl",
            Arch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// C compiler for the target (ring's C and assembly) and the Debian packages that have it.
    fn c_compiler(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Arch::Amd64 => ("musl-gcc", &["musl-tools"]),
            Arch::Arm64 => ("aarch64-linux-gnu-gcc", &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"]),
        }
    }

    /// ELF `e_machine`.
    fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 0x3e,
            Arch::Arm64 => 0xb7,
        }
    }
}

/// What goes into one image besides its fixed files.
pub struct Inputs<'a> {
    pub kind: Kind,
    pub arch: Arch,
    /// `--registry` (e.g. `registry.example/team`), without a trailing `/`.
    pub registry: Option<&'a str>,
    pub tag: &'a str,
    pub version: &'a str,
    pub epoch: u64,
    pub ca_bundle: Vec<u8>,
    /// (file name under [`BIN_DIR`], contents).
    pub binaries: Vec<(String, Vec<u8>)>,
}

pub fn reference(kind: Kind, registry: Option<&str>, tag: &str) -> String {
    named_reference(kind.name(), registry, tag)
}

fn named_reference(name: &str, registry: Option<&str>, tag: &str) -> String {
    match registry {
        Some(r) => format!("{r}/{name}:{tag}"),
        None => format!("{name}:{tag}"),
    }
}

/// The runtime configuration both build paths share (the Containerfiles repeat it; a test
/// checks they agree).
pub fn run_config(kind: Kind, version: &str) -> oci::RunConfig {
    let labels = BTreeMap::from(
        [
            ("org.opencontainers.image.title", kind.name()),
            ("org.opencontainers.image.description", kind.description()),
            ("org.opencontainers.image.version", version),
            ("org.opencontainers.image.licenses", "Apache-2.0"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    oci::RunConfig {
        user: USER.into(),
        env: vec![
            format!("PATH={PATH_ENV}"),
            format!("HOME={HOME}"),
            "USER=nonroot".into(),
            format!("SSL_CERT_FILE={CA_BUNDLE}"),
        ],
        entrypoint: vec![format!("{BIN_DIR}/{}", kind.name())],
        working_dir: "/".into(),
        labels,
    }
}

/// The base layer: users, CA bundle, `/tmp`, the non-root home. The same for both images.
pub fn base_layer(ca_bundle: Vec<u8>) -> oci::Layer {
    oci::Layer {
        comment: "kopiur base: /etc/passwd, /etc/group, /etc/nsswitch.conf, CA bundle, /tmp, /home/nonroot".into(),
        entries: vec![
            Entry::file("etc/passwd", 0o644, PASSWD),
            Entry::file("etc/group", 0o644, GROUP),
            Entry::file("etc/nsswitch.conf", 0o644, NSSWITCH),
            Entry::file(CA_BUNDLE, 0o644, ca_bundle),
            Entry::dir("tmp", 0o1777),
            Entry::dir("root", 0o700),
            Entry::dir("home/nonroot", 0o755).owned_by(65532, 65532),
        ],
    }
}

pub fn image(i: Inputs<'_>) -> oci::Image {
    let names: Vec<&str> = i.binaries.iter().map(|(n, _)| n.as_str()).collect();
    let bins = oci::Layer {
        comment: format!("kopiur {}: {}", i.version, names.join(", ")),
        entries: i.binaries.into_iter().map(|(n, data)| Entry::file(&format!("{BIN_DIR}/{n}"), 0o755, data)).collect(),
    };
    oci::Image {
        reference: reference(i.kind, i.registry, i.tag),
        platform: i.arch.platform(),
        run: run_config(i.kind, i.version),
        layers: vec![base_layer(i.ca_bundle), bins],
        epoch: i.epoch,
    }
}

/// Where Debian's `busybox-static` installs its binary, and where the node images carry it.
pub const BUSYBOX: &str = "/bin/busybox";
/// The pod sandbox's user, as in the upstream pause image (no `/etc/passwd` needed: numeric).
pub const PAUSE_USER: &str = "65535:65535";
/// The busybox image's `PATH`: everything is in `/bin`.
pub const NODE_PATH_ENV: &str = "/bin";
/// The applets the busybox image links to `/bin/busybox` besides `/bin/sh`. A shell needs none
/// of them (busybox's `sh` runs its applets without a `PATH` lookup, through `/proc/self/exe`);
/// they are for a container whose command names an applet itself (`command: ["sleep", "60"]`).
pub const BUSYBOX_APPLETS: &[&str] = &[
    "cat",
    "chmod",
    "chown",
    "cp",
    "dd",
    "echo",
    "env",
    "false",
    "find",
    "grep",
    "head",
    "id",
    "ln",
    "ls",
    "mkdir",
    "mv",
    "rm",
    "rmdir",
    "sha256sum",
    "sleep",
    "stat",
    "sync",
    "tail",
    "test",
    "touch",
    "true",
    "wc",
];
/// The registry and tag [`build_for_node`] builds with. containerd and the CRI keep a name with
/// a `localhost/` host part as written; a bare name would be normalised to a default registry.
pub const NODE_REGISTRY: &str = "localhost";
pub const NODE_TAG: &str = "testenv";
/// What [`build_for_node`] writes next to the archives for the test harness.
pub const NODE_IMAGES_JSON: &str = "node-images.json";

/// The test environment's own images (`--node-images`), for its kubelet + containerd node:
/// never shipped, amd64 only, made of Debian's `busybox-static`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// The pod sandbox image containerd starts for every pod (`sandbox_image`).
    Pause,
    /// A shell and the usual tools for test workloads.
    Busybox,
}

impl NodeKind {
    pub const ALL: [NodeKind; 2] = [NodeKind::Pause, NodeKind::Busybox];

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Pause => "kopiur-testenv-pause",
            NodeKind::Busybox => "kopiur-testenv-busybox",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            NodeKind::Pause => "kopiur test environment only: pod sandbox (busybox sleep infinity)",
            NodeKind::Busybox => "kopiur test environment only: busybox shell for test workloads",
        }
    }
}

pub fn node_run_config(kind: NodeKind, version: &str) -> oci::RunConfig {
    let labels = BTreeMap::from(
        [
            ("org.opencontainers.image.title", kind.name()),
            ("org.opencontainers.image.description", kind.description()),
            ("org.opencontainers.image.version", version),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let (user, entrypoint) = match kind {
        NodeKind::Pause => (PAUSE_USER, vec![BUSYBOX.to_string(), "sleep".into(), "infinity".into()]),
        NodeKind::Busybox => ("0:0", vec!["/bin/sh".to_string()]),
    };
    oci::RunConfig {
        user: user.into(),
        env: vec![format!("PATH={NODE_PATH_ENV}")],
        entrypoint,
        working_dir: "/".into(),
        labels,
    }
}

/// A node image: a layer with `/bin/busybox` (the same in both images), and for the busybox
/// image a second one with `/bin/sh` and the applet links and `/tmp`.
pub fn node_image(
    kind: NodeKind,
    registry: Option<&str>,
    tag: &str,
    version: &str,
    epoch: u64,
    busybox: Vec<u8>,
) -> oci::Image {
    let base = oci::Layer {
        comment: "busybox-static: /bin/busybox".into(),
        entries: vec![Entry::file(BUSYBOX, 0o755, busybox)],
    };
    let mut layers = vec![base];
    if kind == NodeKind::Busybox {
        let mut entries = vec![Entry::symlink("bin/sh", "busybox"), Entry::dir("tmp", 0o1777)];
        entries.extend(BUSYBOX_APPLETS.iter().map(|a| Entry::symlink(&format!("bin/{a}"), "busybox")));
        layers
            .push(oci::Layer { comment: format!("/bin/sh and {} applet links, /tmp", BUSYBOX_APPLETS.len()), entries });
    }
    oci::Image {
        reference: named_reference(kind.name(), registry, tag),
        platform: Arch::Amd64.platform(),
        run: node_run_config(kind, version),
        layers,
        epoch,
    }
}

/// A statically linked ELF executable for `arch` (no `PT_INTERP` program header).
pub fn check_static_elf(data: &[u8], arch: Arch) -> Result<()> {
    let u16_at = |o: usize| data.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    ensure!(data.len() > 64 && &data[..4] == b"\x7fELF" && data[4] == 2 && data[5] == 1, "not a 64-bit LE ELF file");
    let machine = u16_at(18).context("short ELF header")?;
    ensure!(
        machine == arch.elf_machine(),
        "ELF machine {machine:#x}, expected {:#x} ({})",
        arch.elf_machine(),
        arch.name()
    );
    let phoff = usize::try_from(u64::from_le_bytes(data[32..40].try_into()?))?;
    let phentsize = usize::from(u16_at(54).context("short ELF header")?);
    let phnum = usize::from(u16_at(56).context("short ELF header")?);
    for i in 0..phnum {
        let off = phoff + i * phentsize;
        let p_type = data.get(off..off + 4).context("program header past the end")?;
        ensure!(u32::from_le_bytes(p_type.try_into()?) != 3, "dynamically linked (has an ELF interpreter)");
    }
    Ok(())
}

struct Options {
    arches: Vec<Arch>,
    registry: Option<String>,
    tag: Option<String>,
    node_images: bool,
}

fn parse_args(args: &[String]) -> Result<Options> {
    let mut o = Options {
        arches: Vec::new(),
        registry: std::env::var("KOPIUR_IMAGE_REGISTRY").ok().filter(|s| !s.is_empty()),
        tag: None,
        node_images: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |flag: &str| it.next().cloned().with_context(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--arch" => {
                for s in val("--arch")?.split(',') {
                    o.arches.push(Arch::parse(s.trim())?);
                }
            }
            "--registry" => o.registry = Some(val("--registry")?),
            "--tag" => o.tag = Some(val("--tag")?),
            "--node-images" => o.node_images = true,
            _ => bail!(
                "unknown argument {a:?} (expected --arch amd64|arm64[,..], --registry PREFIX, --tag TAG, --node-images)"
            ),
        }
    }
    if o.arches.is_empty() {
        o.arches.push(Arch::Amd64);
    }
    o.arches.dedup();
    ensure!(
        !o.node_images || o.arches.contains(&Arch::Amd64),
        "--node-images builds linux/amd64 images only: add amd64 to --arch"
    );
    if let Some(r) = &mut o.registry {
        ensure!(!r.contains("://"), "--registry takes a name prefix such as registry.example/team, not a URL");
        *r = r.trim_end_matches('/').to_string();
    }
    Ok(o)
}

pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo_root().join("target"))
}

fn source_date_epoch() -> Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) if !s.is_empty() => s.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={s} is not a number")),
        _ => Ok(0),
    }
}

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

fn ensure_toolchain(arch: Arch) -> Result<()> {
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
fn toolchain_channel(toml: &str) -> Result<String> {
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
fn build_binaries(arch: Arch) -> Result<Vec<(Kind, Vec<u8>)>> {
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

fn versions_env(key: &str) -> Result<String> {
    let text = std::fs::read_to_string(repo_root().join("testenv/versions.env"))?;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
        .with_context(|| format!("{key} missing from testenv/versions.env"))
}

fn testenv_cache() -> PathBuf {
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
fn kopia(arch: Arch) -> Result<PathBuf> {
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

fn read_binary(path: &Path, arch: Arch) -> Result<Vec<u8>> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    check_static_elf(&data, arch)
        .with_context(|| format!("{} is not a static {} executable", path.display(), arch.name()))?;
    Ok(data)
}

fn mib(n: usize) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
}

/// Debian's static busybox for the node images; `busybox-static` is installed when
/// `/bin/busybox` is missing or is the dynamic build of the `busybox` package.
fn busybox() -> Result<Vec<u8>> {
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

/// One written archive.
#[derive(Clone, Debug)]
pub struct Built {
    /// Image name without registry and tag (`kopiur-mover`, `kopiur-testenv-pause`).
    pub name: &'static str,
    pub reference: String,
    pub arch: Arch,
    pub manifest_digest: String,
    pub archive: PathBuf,
    /// A test-only node image (`--node-images`).
    pub node: bool,
}

/// Builds `img`, reads the archive back (the whole digest chain and the run configuration)
/// and writes it to `<out_dir>/<name>-<tag>-linux-<arch>.oci.tar`.
fn write_archive(
    img: &oci::Image,
    name: &'static str,
    arch: Arch,
    tag: &str,
    out_dir: &Path,
    show: bool,
) -> Result<Built> {
    let layout = oci::build(img)?;
    let archive = layout.archive(img.epoch)?;
    let checked = oci::verify(&archive).context("self-check of the written layout")?;
    ensure!(
        checked.manifest_digest == layout.manifest.digest
            && checked.reference == layout.reference
            && checked.platform == arch.platform()
            && checked.config.config == img.run
            && checked.layers.len() == img.layers.len(),
        "self-check read back another image than it wrote"
    );
    let path = out_dir.join(format!("{name}-{tag}-linux-{}.oci.tar", arch.name()));
    std::fs::write(&path, &archive).with_context(|| format!("writing {}", path.display()))?;
    let layers: usize = layout.layers.iter().map(|l| l.size as usize).sum();
    if show {
        eprintln!(
            "    {}  linux/{}\n      manifest {}\n      config   {}\n      archive  {}  ({}, layers {} compressed)\n      file     {}",
            layout.reference,
            arch.name(),
            layout.manifest.digest,
            layout.config.digest,
            oci::sha256(&archive),
            mib(archive.len()),
            mib(layers),
            path.display()
        );
    }
    Ok(Built {
        name,
        reference: layout.reference,
        arch,
        manifest_digest: layout.manifest.digest.clone(),
        archive: path,
        node: false,
    })
}

/// Every image `o` asks for, written under `<target dir>/images/`. `show`: print each image's
/// digests, sizes and file.
fn build_all(o: &Options, show: bool) -> Result<Vec<Built>> {
    let version = env!("CARGO_PKG_VERSION");
    let tag = o.tag.clone().unwrap_or_else(|| version.to_string());
    let epoch = source_date_epoch()?;
    let ca_bundle = std::fs::read(CA_BUNDLE).with_context(|| {
        format!("reading the build host's CA bundle {CA_BUNDLE} (Debian: apt-get install ca-certificates)")
    })?;
    let out_dir = target_dir().join("images");
    std::fs::create_dir_all(&out_dir)?;
    let mut written = Vec::new();
    for &arch in &o.arches {
        ensure_toolchain(arch)?;
        let kopia = read_binary(&kopia(arch)?, arch)?;
        let built = build_binaries(arch)?;
        step(&format!("Assembling the linux/{} images (OCI layout, gzip layers, sha256)", arch.name()));
        for (kind, bin) in built {
            let mut binaries = vec![(kind.name().to_string(), bin)];
            if kind.has_kopia() {
                binaries.push(("kopia".into(), kopia.clone()));
            }
            let img = image(Inputs {
                kind,
                arch,
                registry: o.registry.as_deref(),
                tag: &tag,
                version,
                epoch,
                ca_bundle: ca_bundle.clone(),
                binaries,
            });
            written.push(write_archive(&img, kind.name(), arch, &tag, &out_dir, show)?);
        }
        if o.node_images && arch == Arch::Amd64 {
            step("Test-only node images (pod sandbox and busybox) from Debian's busybox-static");
            let bb = busybox()?;
            for kind in NodeKind::ALL {
                let img = node_image(kind, o.registry.as_deref(), &tag, version, epoch, bb.clone());
                let b = write_archive(&img, kind.name(), arch, &tag, &out_dir, show)?;
                written.push(Built { node: true, ..b });
            }
        }
    }
    Ok(written)
}

pub fn images(args: &[String]) -> Result<()> {
    let t0 = Instant::now();
    let o = parse_args(args)?;
    let written = build_all(&o, true)?;
    eprintln!("\ncargo xtask images finished in {:.0?}. Load or push them with:", t0.elapsed());
    for b in written.iter().filter(|b| !b.node) {
        let (r, p) = (&b.reference, &b.archive);
        let p = p.strip_prefix(repo_root()).unwrap_or(p).display();
        eprintln!(
            "  {r}:\n    docker load -i {p}    |  podman load -i {p}\n    kind load image-archive {p}    |  k3s ctr images import {p}\n    skopeo copy oci-archive:{p} docker://<your-registry>/{}",
            r.rsplit('/').next().unwrap_or(r)
        );
    }
    let node: Vec<&str> = written.iter().filter(|b| b.node).map(|b| b.reference.as_str()).collect();
    if !node.is_empty() {
        eprintln!("  test-only (the test environment's node; never ship them): {}", node.join(", "));
    }
    if o.registry.is_none() {
        eprintln!(
            "\nThe images are named without a registry. containerd (kind, k3s) matches image names literally, so for\n\
             those build with `--registry <prefix>` and pass the same prefix to helm (docs/install.md)."
        );
    }
    Ok(())
}

/// Fails unless both builds wrote the same images with the same manifest digests.
fn check_reproducible(first: &[Built], second: &[Built]) -> Result<()> {
    let key = |b: &Built| (b.reference.clone(), b.arch.name());
    let a: BTreeMap<_, &str> = first.iter().map(|b| (key(b), b.manifest_digest.as_str())).collect();
    let b: BTreeMap<_, &str> = second.iter().map(|b| (key(b), b.manifest_digest.as_str())).collect();
    ensure!(
        a.len() == first.len() && a.keys().eq(b.keys()),
        "the two builds wrote different image sets: {:?} and {:?}",
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>()
    );
    let differ: Vec<String> = a
        .iter()
        .filter(|(k, d)| b[*k] != **d)
        .map(|((r, arch), d)| format!("{r} linux/{arch}: {d} then {}", b[&(r.clone(), *arch)]))
        .collect();
    ensure!(
        differ.is_empty(),
        "images not reproducible, two builds gave different digests:\n  {}",
        differ.join("\n  ")
    );
    Ok(())
}

/// `node-images.json`: what the test harness loads into the node's containerd.
fn node_images_json(built: &[Built]) -> Result<String> {
    let images: Vec<serde_json::Value> = built
        .iter()
        .map(|b| {
            serde_json::json!({
                "name": b.name,
                "reference": b.reference,
                "platform": format!("linux/{}", b.arch.name()),
                "archive": b.archive.display().to_string(),
                "manifest_digest": b.manifest_digest,
                "test_only": b.node,
            })
        })
        .collect();
    Ok(serde_json::to_string_pretty(&serde_json::json!({ "images": images }))? + "\n")
}

/// The images the test environment's kubelet + containerd node runs: kopiur-controller,
/// kopiur-mover and the node images, named `localhost/<name>:testenv`, linux/amd64. Built twice
/// (the second cargo build has nothing to do); fails unless every manifest digest repeats.
/// Writes `<target dir>/images/node-images.json` and returns the archives.
pub fn build_for_node() -> Result<Vec<PathBuf>> {
    let t0 = Instant::now();
    let o = Options {
        arches: vec![Arch::Amd64],
        registry: Some(NODE_REGISTRY.into()),
        tag: Some(NODE_TAG.into()),
        node_images: true,
    };
    step(&format!(
        "Container images for the test node ({NODE_REGISTRY}/<name>:{NODE_TAG}, linux/amd64), built twice to check they \
         are reproducible"
    ));
    let first = build_all(&o, true)?;
    let t1 = t0.elapsed();
    step("Images, second build (cargo has nothing to do): every manifest digest must repeat");
    let second = build_all(&o, false)?;
    check_reproducible(&first, &second)?;
    let json = target_dir().join("images").join(NODE_IMAGES_JSON);
    let tmp = json.with_extension(format!("json.tmp.{}", std::process::id()));
    std::fs::write(&tmp, node_images_json(&second)?).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &json).with_context(|| format!("writing {}", json.display()))?;
    for b in &second {
        eprintln!("    {:<44} {}", b.reference, b.manifest_digest);
    }
    eprintln!("images reproducible: {} images, identical digests in two builds", second.len());
    eprintln!("    first build {t1:.0?}, second {:.0?}; listed in {}", t0.elapsed() - t1, json.display());
    Ok(second.into_iter().map(|b| b.archive).collect())
}

#[cfg(test)]
mod tests;
