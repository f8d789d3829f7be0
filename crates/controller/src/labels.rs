//! Labels every object kopiur creates carries; shared by every kind, so it lives at the crate root.

/// `app.kubernetes.io/managed-by: kopiur`.
pub fn managed_labels() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(kopiur_mover::job::LABEL_MANAGED_BY.to_string(), "kopiur".to_string())])
}
