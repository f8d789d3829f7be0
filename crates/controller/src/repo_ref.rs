//! Which repository a consumer's `RepositoryRef` points at; shared by every kind (crate root).

/// Whether a consumer that references `r` (in `consumer_ns`) points at this repository.
pub fn refers_to(
    r: &kopiur_api::shared::RepositoryRef,
    consumer_ns: &str,
    kind: kopiur_api::shared::RepositoryKind,
    repo_ns: Option<&str>,
    repo_name: &str,
) -> bool {
    use kopiur_api::shared::RepositoryKind;
    if r.kind != kind || r.name != repo_name {
        return false;
    }
    match kind {
        RepositoryKind::Repository => r.namespace.as_deref().unwrap_or(consumer_ns) == repo_ns.unwrap_or_default(),
        RepositoryKind::ClusterRepository => true,
    }
}
