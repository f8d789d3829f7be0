//! Identity resolution and shape rules (docs/design/api-contract.md §2.5), and the maintenance lease names
//! (docs/design/mover.md §2.2).

use crate::Error;
use crate::shared::Identity;
use crate::shared::status::ResolvedIdentity;
use crate::snapshot_policy::{PinnedIdentity, SourcePathStrategy};

/// 1–253 bytes, no `@`, `:`, whitespace or control characters.
pub fn validate_component(component: &'static str, value: &str) -> Result<(), Error> {
    let invalid = |why| Error::InvalidIdentity { component, value: value.to_owned(), why };
    if value.is_empty() {
        return Err(invalid("must not be empty"));
    }
    if value.len() > 253 {
        return Err(invalid("must be at most 253 bytes"));
    }
    if value.contains('@') {
        return Err(invalid("must not contain '@'"));
    }
    if value.contains(':') {
        return Err(invalid("must not contain ':'"));
    }
    if value.chars().any(char::is_whitespace) {
        return Err(invalid("must not contain whitespace"));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid("must not contain control characters"));
    }
    Ok(())
}

/// The identity a policy writes as: the explicit override, else the policy name and the
/// namespace.
pub fn resolve_identity(
    policy_name: &str,
    namespace: &str,
    explicit: Option<&Identity>,
) -> Result<PinnedIdentity, Error> {
    let username = explicit.and_then(|i| i.username.as_deref()).unwrap_or(policy_name);
    let hostname = explicit.and_then(|i| i.hostname.as_deref()).unwrap_or(namespace);
    validate_component("username", username)?;
    validate_component("hostname", hostname)?;
    Ok(PinnedIdentity { username: username.to_owned(), hostname: hostname.to_owned() })
}

/// The kopia source path of one PVC: the override, else `/pvc/<name>` or
/// `/pvc/<namespace>/<name>`.
pub fn source_path(
    strategy: SourcePathStrategy,
    pvc_namespace: &str,
    pvc_name: &str,
    override_path: Option<&str>,
) -> String {
    if let Some(path) = override_path {
        return path.to_owned();
    }
    match strategy {
        SourcePathStrategy::PvcName => format!("/pvc/{pvc_name}"),
        SourcePathStrategy::PvcNamespacedName => format!("/pvc/{pvc_namespace}/{pvc_name}"),
    }
}

pub fn resolved(identity: &PinnedIdentity, source_path: String) -> ResolvedIdentity {
    ResolvedIdentity {
        username: identity.username.clone(),
        hostname: identity.hostname.clone(),
        source_path: Some(source_path),
    }
}

/// The maintenance lease owner: `kopiur/<ns>/<repo>`, or `kopiur/clusterrepository/<repo>`.
pub fn lease_owner(namespace: Option<&str>, repository: &str) -> String {
    match namespace {
        Some(ns) => format!("kopiur/{ns}/{repository}"),
        None => format!("kopiur/clusterrepository/{repository}"),
    }
}

/// The lease host: `kopiur.` plus the owner's segments after `kopiur/` joined with `.`,
/// lower-cased, anything outside `[a-z0-9.-]` replaced by `-`.
pub fn lease_host(owner: &str) -> String {
    let rest = owner.strip_prefix("kopiur/").unwrap_or(owner);
    let joined = rest.split('/').collect::<Vec<_>>().join(".").to_lowercase();
    let cleaned: String = joined
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-' { c } else { '-' })
        .collect();
    format!("kopiur.{cleaned}")
}

/// The kopia maintenance owner, `kopiur@<lease host>`.
pub fn maintenance_owner(owner: &str) -> String {
    format!("kopiur@{}", lease_host(owner))
}

/// Keys the operator reserves on labels and annotations.
pub fn is_reserved_key(key: &str) -> bool {
    key.starts_with(crate::names::PREFIX) || key == crate::names::label::MANAGED_BY
}
