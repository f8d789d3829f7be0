//! The node image archives `cargo xtask test` builds for the real-node tests.
use std::path::PathBuf;

use anyhow::{Context, Result, ensure};

/// The `*-testenv-linux-amd64.oci.tar` archives in `KOPIUR_IMAGES_DIR` (default
/// `target/images`), sorted; the controller's only when `with_controller` (a test that runs
/// the controller as a process leaves it out). The mover and pause archives must be there.
pub fn node_images(with_controller: bool) -> Result<Vec<PathBuf>> {
    let dir = std::env::var_os("KOPIUR_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| kopiur_testenv::controlplane::repo_root().join("target/images"));
    let hint = "run `cargo xtask images --node-images --registry localhost --tag testenv`";
    let name = |p: &PathBuf| p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("{}: {hint}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| name(p).ends_with("-testenv-linux-amd64.oci.tar"))
        .filter(|p| with_controller || !name(p).starts_with("kopiur-controller"))
        .collect();
    v.sort();
    let mut want = vec!["kopiur-mover", "kopiur-testenv-pause", "kopiur-testenv-busybox"];
    if with_controller {
        want.push("kopiur-controller");
    }
    for w in want {
        ensure!(
            v.iter().any(|p| name(p).starts_with(&format!("{w}-testenv"))),
            "{w} archive missing in {}: {hint}",
            dir.display()
        );
    }
    Ok(v)
}
