//! Code generation (placeholder until the CRD generator lands).
pub fn run(_repo_root: &std::path::Path, _check: bool) -> anyhow::Result<()> {
    Ok(())
}
