//! Labels every object kopiur creates carries; shared by every kind, so it lives at the crate root.

/// `app.kubernetes.io/managed-by: kopiur`.
pub fn managed_labels() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(kopiur_mover::job::LABEL_MANAGED_BY.to_string(), "kopiur".to_string())])
}

pub fn origin(snap: &kopiur_api::Snapshot) -> kopiur_api::shared::phase::SnapshotOrigin {
    use kopiur_api::names::{label, origin};
    use kopiur_api::shared::phase::SnapshotOrigin;
    use kube::ResourceExt;
    if let Some(o) = snap.status.as_ref().and_then(|s| s.origin.clone()) {
        return o;
    }
    match snap.labels().get(label::ORIGIN).map(String::as_str) {
        Some(origin::SCHEDULED) => SnapshotOrigin::Scheduled,
        Some(origin::DISCOVERED) => SnapshotOrigin::Discovered,
        Some(origin::ADOPTED) => SnapshotOrigin::Adopted,
        Some(origin::REPLICATED) => SnapshotOrigin::Replicated,
        Some(_) | None => SnapshotOrigin::Manual,
    }
}
