//! The classifier and the JSON models against output captured from real kopia runs (see
//! `tests/fixtures/README.md` for where each file came from).
use kopiur_kopia::classify::{self, ErrorClass};
use kopiur_kopia::model::{self, MaintenanceInfo, RepositoryStatus, SnapshotManifest};

fn fixture(name: &str) -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn stderr_fixtures_classify() {
    use ErrorClass::*;
    let rows: &[(&str, ErrorClass, bool)] = &[
        ("fs_connect_wrong_password.stderr", AuthFailure, false),
        ("fs_connect_empty.stderr", NotFound, true),
        ("fs_connect_missing_path.stderr", NotFound, false),
        ("fs_create_existing.stderr", Unknown, false),
        ("fs_snapshot_missing_source.stderr", SourceError, false),
        ("fs_snapshot_delete_invalid.stderr", Unknown, false),
        ("connect_s3_refused.stderr", RepositoryUnavailable, false),
        ("connect_s3_proxy_refused.stderr", RepositoryUnavailable, false),
        ("connect_s3_reset.stderr", RepositoryUnavailable, false),
        ("connect_s3_dns.stderr", RepositoryUnavailable, false),
        ("connect_s3_empty_bucket.stderr", NotFound, true),
        ("connect_s3_missing_bucket.stderr", NotFound, true),
        ("create_s3_missing_bucket.stderr", NotFound, false),
        ("create_s3_existing.stderr", Unknown, false),
        ("connect_s3_wrong_password.stderr", AuthFailure, false),
        ("connect_s3_unknown_key.stderr", AccessDenied, false),
        ("connect_s3_wrong_secret.stderr", AccessDenied, false),
        ("snapshot_create_missing_source.stderr", SourceError, false),
    ];
    for (name, class, not_init) in rows {
        let text = fixture(name);
        let c = classify::classify(&text);
        assert_eq!((c.class, c.not_initialized), (*class, *not_init), "{name}: {text}");
    }
}

#[test]
fn special_fixtures() {
    assert!(classify::is_existing_data(&fixture("fs_create_existing.stderr")));
    assert!(classify::is_no_snapshots_matched(&fixture("fs_snapshot_delete_unknown.stderr")));
    assert!(classify::is_no_snapshots_matched(&fixture("snapshot_delete_unknown.stderr")));
    assert!(classify::is_no_changes_specified(&fixture("fs_policy_no_changes.stderr")));
    assert_eq!(
        classify::maintenance_owner_mismatch(&fixture("fs_maintenance_not_owner.stderr")).as_deref(),
        Some("kopiur@kopiur.t.r")
    );
    assert_eq!(
        classify::maintenance_owner_mismatch(&fixture("maintenance_run_not_owner.stderr")).as_deref(),
        Some("kopiur@maintenance")
    );
}

#[test]
fn json_fixtures_parse() {
    let st: RepositoryStatus =
        model::parse("repository status", &fixture("repository_status_filesystem.json")).unwrap();
    assert_eq!(st.unique_id_hex.len(), 64);
    assert_eq!(st.client_options.username, "kopiur-ops");
    let list: Vec<SnapshotManifest> = model::parse("snapshot list", &fixture("snapshot_list.json")).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].tag("kopiur-snapshot"), Some("t/s"));
    assert_eq!(list[0].stats.as_ref().unwrap().file_count, 30);
    assert_eq!(list[0].retention_reason, vec!["latest-1"]);
    let manifests: Vec<model::ManifestEntry> =
        model::parse("manifest list", &fixture("fs_manifest_list.json")).unwrap();
    let kinds: Vec<Option<&str>> = manifests.iter().map(|m| m.label("type")).collect();
    assert_eq!(kinds, [Some("policy"), Some("maintenance"), Some("snapshot")]);
    assert_eq!(manifests[0].snapshot_source(), None);
    assert_eq!(manifests[2].snapshot_source().as_deref(), Some("root@vm:/tmp/fixture/src"));
    assert_eq!(manifests[2].label("tag:kopiur-uid"), Some("abc"));
    let info: MaintenanceInfo = model::parse("maintenance info", &fixture("maintenance_info_never_run.json")).unwrap();
    assert_eq!(info.owner, "kopiur@kopiur.t.r");
    assert_eq!(info.schedule.run_count(), 0);
    assert!(info.quick.enabled);
}
