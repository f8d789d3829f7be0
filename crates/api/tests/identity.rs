//! Identity resolution and shape rules (docs/design/api-contract.md §2.5) and lease names (docs/design/mover.md §2.2).

use kopiur_api::domain::identity::*;
use kopiur_api::shared::Identity;
use kopiur_api::snapshot_policy::SourcePathStrategy;

#[test]
fn defaults_are_policy_name_and_namespace_and_overrides_win() {
    let id = resolve_identity("jellyfin", "media", None).unwrap();
    assert_eq!((id.username.as_str(), id.hostname.as_str()), ("jellyfin", "media"));
    let explicit = Identity { username: Some("me".into()), hostname: None };
    let id = resolve_identity("jellyfin", "media", Some(&explicit)).unwrap();
    assert_eq!((id.username.as_str(), id.hostname.as_str()), ("me", "media"));
}

#[test]
fn components_reject_at_colon_whitespace_control_and_length() {
    for bad in ["me@home", "a:b", "a b", "tab\there", "nul\u{0}", ""] {
        assert!(validate_component("username", bad).is_err(), "{bad:?}");
    }
    assert!(validate_component("hostname", &"x".repeat(253)).is_ok());
    // 127 two-byte characters = 254 bytes: within the pattern's 253 characters, over the byte limit.
    assert!(validate_component("hostname", &"é".repeat(127)).is_err());
    let msg = validate_component("username", "me@home").unwrap_err().to_string();
    assert!(msg.contains("username") && msg.contains("me@home"), "{msg}");
}

#[test]
fn source_paths_follow_the_strategy_unless_overridden() {
    assert_eq!(source_path(SourcePathStrategy::PvcName, "media", "data", None), "/pvc/data");
    assert_eq!(source_path(SourcePathStrategy::PvcNamespacedName, "media", "data", None), "/pvc/media/data");
    assert_eq!(source_path(SourcePathStrategy::PvcName, "media", "data", Some("/srv")), "/srv");
    let id = resolve_identity("p", "ns", None).unwrap();
    assert_eq!(resolved(&id, "/pvc/data".into()).to_string(), "p@ns:/pvc/data");
}

#[test]
fn lease_names_match_the_documented_example() {
    let owner = lease_owner(Some("media"), "nas");
    assert_eq!(owner, "kopiur/media/nas");
    assert_eq!(maintenance_owner(&owner), "kopiur@kopiur.media.nas");
    assert_eq!(lease_owner(None, "Shared_Repo"), "kopiur/clusterrepository/Shared_Repo");
    assert_eq!(lease_host("kopiur/clusterrepository/Shared_Repo"), "kopiur.clusterrepository.shared-repo");
    assert!(is_reserved_key("kopiur.home-operations.com/pruned-by"));
    assert!(is_reserved_key("app.kubernetes.io/managed-by"));
    assert!(!is_reserved_key("app.kubernetes.io/name"));
}
