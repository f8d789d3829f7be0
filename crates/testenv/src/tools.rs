//! Locates the cached tool binaries built by `testenv/build-tools.sh`.
//! The harness never builds: a missing tool fails with the command that builds it.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The pinned versions from `testenv/versions.env` (compiled in, so tests and the
/// build script can never disagree).
pub fn versions() -> std::collections::BTreeMap<&'static str, &'static str> {
    include_str!("../../../testenv/versions.env")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

pub fn version(key: &str) -> &'static str {
    versions().get(key).copied().unwrap_or_else(|| panic!("{key} missing from testenv/versions.env"))
}

/// `${KOPIUR_TESTENV_CACHE:-$HOME/.cache/kopiur-testenv}`.
pub fn cache_dir() -> PathBuf {
    if let Ok(d) = std::env::var("KOPIUR_TESTENV_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    Path::new(&home).join(".cache/kopiur-testenv")
}

/// Finds `<cache>/<prefix>*/bin/<bin>`; an env override (`KOPIUR_TESTENV_<NAME>`) wins.
fn find(env_override: &str, prefix: &str, bin: &str, tool: &str) -> Result<PathBuf> {
    if let Ok(p) = std::env::var(env_override) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{env_override}={} does not exist", p.display());
    }
    let cache = cache_dir();
    let mut hits: Vec<PathBuf> = std::fs::read_dir(&cache)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with(prefix) && !name.contains(".tmp.")
        })
        .map(|p| p.join("bin").join(bin))
        .filter(|p| p.is_file())
        .collect();
    // Newest build first when several wrapper hashes are cached.
    hits.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    hits.pop().with_context(|| {
        format!(
            "{bin} not found under {}/{prefix}*/bin: run `testenv/build-tools.sh {tool}` (or `cargo xtask test`, which builds it)",
            cache.display()
        )
    })
}

pub fn etcd() -> Result<PathBuf> {
    find("KOPIUR_TESTENV_ETCD", &format!("etcd-{}-", version("ETCD_VERSION")), "etcd", "etcd")
}
pub fn kube_apiserver() -> Result<PathBuf> {
    find("KOPIUR_TESTENV_KUBE_APISERVER", &format!("k8s-{}-", version("K8S_VERSION")), "kube-apiserver", "k8s")
}
pub fn kube_controller_manager() -> Result<PathBuf> {
    find(
        "KOPIUR_TESTENV_KUBE_CONTROLLER_MANAGER",
        &format!("k8s-{}-", version("K8S_VERSION")),
        "kube-controller-manager",
        "k8s",
    )
}
pub fn kopia() -> Result<PathBuf> {
    find("KOPIUR_TESTENV_KOPIA", &format!("kopia-{}-", version("KOPIA_VERSION")), "kopia", "kopia")
}
pub fn garage() -> Result<PathBuf> {
    find("KOPIUR_TESTENV_GARAGE", &format!("garage-v{}", version("GARAGE_VERSION")), "garage", "garage")
}
pub fn helm() -> Result<PathBuf> {
    find("KOPIUR_TESTENV_HELM", &format!("helm-{}-", version("HELM_VERSION")), "helm", "helm")
}

/// A binary of the CSI stack (`testenv/build-tools.sh csi`): `kopiur-csi-hostpath`,
/// `csi-provisioner`, `csi-snapshotter` or `snapshot-controller`. `KOPIUR_TESTENV_CSI_<NAME>`
/// overrides it.
pub fn csi_bin(name: &str) -> Result<PathBuf> {
    let key = format!("KOPIUR_TESTENV_CSI_{}", name.to_uppercase().replace('-', "_"));
    let prefix = format!("csi-{}-{}-", version("CSI_PROVISIONER_VERSION"), version("CSI_SNAPSHOTTER_VERSION"));
    find(&key, &prefix, name, "csi")
}

/// The snapshot CRDs (`snapshot.storage.k8s.io`) of the cached CSI stack's snapshotter,
/// shipped beside its binaries.
pub fn csi_crds() -> Result<Vec<PathBuf>> {
    let bin = csi_bin("snapshot-controller")?;
    let dir = bin.parent().and_then(Path::parent).context("the CSI cache directory")?.join("crds");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    if v.len() != 3 {
        bail!("expected the 3 snapshot CRDs in {}, found {v:?}: rerun `testenv/build-tools.sh csi`", dir.display());
    }
    Ok(v)
}

/// Finds a binary of this workspace (e.g. `kopiur-testnode`, `kopiur-mover`): an env
/// override `KOPIUR_BIN_<NAME>` wins, then the directory of the running executable and its
/// parent (integration tests live in `target/<profile>/deps`).
pub fn workspace_bin(name: &str) -> Result<PathBuf> {
    let key = format!("KOPIUR_BIN_{}", name.to_uppercase().replace('-', "_"));
    if let Ok(p) = std::env::var(&key) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    for dir in exe.ancestors().skip(1).take(3) {
        let cand = dir.join(name);
        if cand.is_file() {
            return Ok(cand);
        }
    }
    bail!(
        "{name} not found next to {}: run `cargo build --workspace --bins` first (cargo xtask test does)",
        exe.display()
    )
}
