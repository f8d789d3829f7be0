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
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};

use crate::{repo_root, step};

mod binaries;
mod node;
pub mod oci;
pub mod tar;

use binaries::{build_binaries, busybox, ensure_toolchain, kopia, read_binary};
use node::{NODE_IMAGES_JSON, NODE_REGISTRY, NODE_TAG, NodeKind, node_image};
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
fn mib(n: usize) -> String {
    format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
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
use binaries::{image_build_dir, testenv_cache, toolchain_channel, versions_env};
#[cfg(test)]
use node::{BUSYBOX, BUSYBOX_APPLETS};
#[cfg(test)]
mod tests;
