//! argv builders: provider flags, identity, and that secrets never enter argv.
use kopiur_kopia::backend::{Backend, BucketPrefix, FilesystemBackend, S3Backend};
use kopiur_kopia::cmd::{self, CacheSizes, Identity, RestoreOptions, SnapshotCreateOptions};
use kopiur_kopia::{KopiaError, model};

fn s3() -> Backend {
    Backend::S3(S3Backend {
        bucket: "b".into(),
        endpoint: Some("http://127.0.0.1:3900".into()),
        prefix: Some("p/".into()),
        region: Some("garage".into()),
        disable_tls: true,
        ..Default::default()
    })
}

#[test]
fn connect_s3() {
    let id = Identity::new("kopiur-ops", "kopiur.t.r");
    let c = cmd::connect(&s3(), &id, true, &CacheSizes { content_mb: Some(100), metadata_mb: None }).unwrap();
    assert_eq!(
        c.args,
        [
            "repository",
            "connect",
            "s3",
            "--bucket=b",
            "--endpoint=127.0.0.1:3900",
            "--prefix=p/",
            "--region=garage",
            "--disable-tls",
            "--override-username=kopiur-ops",
            "--override-hostname=kopiur.t.r",
            "--content-cache-size-mb=100",
            "--readonly"
        ]
    );
}

#[test]
fn filesystem_requires_absolute_path() {
    let ok = Backend::Filesystem(FilesystemBackend { path: "/repo".into() });
    assert_eq!(ok.provider_flags().unwrap(), ["filesystem", "--path=/repo"]);
    let bad = Backend::Filesystem(FilesystemBackend { path: "repo".into() });
    assert!(matches!(bad.provider_flags(), Err(KopiaError::InvalidSpec(_))));
}

#[test]
fn other_backends_are_typed_but_unsupported() {
    let b = Backend::Gcs(BucketPrefix { bucket: "x".into(), prefix: None });
    assert!(!b.supported());
    assert!(matches!(b.provider_flags(), Err(KopiaError::UnsupportedBackend("gcs"))));
    let json = serde_json::to_string(&b).unwrap();
    assert_eq!(json, r#"{"gcs":{"bucket":"x"}}"#);
}

#[test]
fn snapshot_create_flags() {
    let c = cmd::snapshot_create(
        "/source",
        &SnapshotCreateOptions {
            override_source: Some("app@ns:/pvc/data".into()),
            tags: vec![("kopiur-snapshot".into(), "ns/s1".into()), ("kopiur-uid".into(), "u-1".into())],
            description: Some("d".into()),
            ..Default::default()
        },
    );
    assert_eq!(c.args[..3], ["snapshot", "create", "/source"]);
    assert!(c.args.contains(&"--json".to_string()));
    assert!(c.args.contains(&"--override-source=app@ns:/pvc/data".to_string()));
    assert!(c.args.contains(&"--tags=kopiur-snapshot:ns/s1".to_string()));
    assert!(c.args.contains(&"--tags=kopiur-uid:u-1".to_string()));
}

#[test]
fn keep_forever_pin() {
    let c = cmd::policy_keep_forever(&Identity::new("app", "ns"));
    assert_eq!(
        c.args,
        [
            "policy",
            "set",
            "app@ns",
            "--keep-latest=1000000000",
            "--keep-hourly=0",
            "--keep-daily=0",
            "--keep-weekly=0",
            "--keep-monthly=0",
            "--keep-annual=0"
        ]
    );
}

#[test]
fn restore_switches_render_both_ways() {
    let c = cmd::snapshot_restore(
        "abc",
        "/restore",
        &RestoreOptions { skip_owners: Some(true), overwrite_files: Some(false), ..Default::default() },
    );
    assert!(c.args.contains(&"--skip-owners".to_string()));
    assert!(c.args.contains(&"--no-overwrite-files".to_string()));
    assert!(!c.args.iter().any(|a| a.contains("delete-extra")));
}

#[test]
fn delete_always_confirms() {
    let c = cmd::snapshot_delete(&["a".into(), "b".into()]);
    assert_eq!(c.args, ["snapshot", "delete", "a", "b", "--delete"]);
}

#[test]
fn json_parsing() {
    let st: model::RepositoryStatus = model::parse(
        "repository status",
        "note\n{\"uniqueIDHex\":\"abcd\",\"clientOptions\":{\"hostname\":\"h\",\"username\":\"u\"},\"extra\":1}",
    )
    .unwrap();
    assert_eq!(st.unique_id_hex, "abcd");
    assert_eq!(st.client_options.hostname, "h");
    let v: Vec<model::SnapshotManifest> =
        model::parse_stream("snapshot create", "{\"id\":\"a\"}\n{\"id\":\"b\"}\n").unwrap();
    assert_eq!(v.len(), 2);
    assert!(matches!(
        model::parse::<model::RepositoryStatus>("repository status", ""),
        Err(KopiaError::EmptyOutput { .. })
    ));
    assert!(matches!(
        model::parse::<model::RepositoryStatus>("repository status", "{nope"),
        Err(KopiaError::BadJson { .. })
    ));
}

#[test]
fn path_policy_flags_cover_every_policy_field() {
    let p = cmd::PathPolicy {
        ignore_identical_snapshots: true,
        compression: Some("zstd".into()),
        add_ignore: vec!["/tmp".into()],
        ignore_file_errors: Some(true),
        ignore_dir_errors: Some(false),
        ignore_unknown_types: Some(true),
        ignore_cache_dirs: Some(false),
        never_compress: vec!["*.zip".into(), "*.gz".into()],
        max_parallel_snapshots: Some(2),
    };
    assert_eq!(
        cmd::policy_set_path("u@h:/data", &p).args,
        [
            "policy",
            "set",
            "u@h:/data",
            "--ignore-identical-snapshots=true",
            "--compression=zstd",
            "--add-ignore=/tmp",
            "--ignore-file-errors=true",
            "--ignore-dir-errors=false",
            "--ignore-unknown-types=true",
            "--ignore-cache-dirs=false",
            "--add-never-compress=*.zip",
            "--add-never-compress=*.gz",
            "--max-parallel-snapshots=2",
        ]
    );
    // Absent knobs leave kopia's values alone.
    assert_eq!(
        cmd::policy_set_path("u@h:/data", &cmd::PathPolicy::default()).args,
        ["policy", "set", "u@h:/data", "--ignore-identical-snapshots=false"]
    );
}

#[test]
fn sync_to_flags_cover_every_sync_field() {
    let dest = Backend::Filesystem(FilesystemBackend { path: "/mirror".into() });
    let o = cmd::SyncOptions {
        delete: true,
        parallel: Some(4),
        must_exist: true,
        times: true,
        update: Some(false),
        max_download_speed: Some(1000),
        max_upload_speed: Some(2000),
    };
    let args = cmd::sync_to(&dest, &o).unwrap().args;
    let tail: Vec<&str> = args.iter().map(String::as_str).skip_while(|a| *a != "--no-progress").collect();
    assert_eq!(
        tail,
        [
            "--no-progress",
            "--delete",
            "--parallel=4",
            "--must-exist",
            "--times",
            "--no-update",
            "--max-download-speed=1000",
            "--max-upload-speed=2000"
        ]
    );
    let plain = cmd::sync_to(&dest, &cmd::SyncOptions { update: Some(true), ..Default::default() }).unwrap().args;
    assert_eq!(plain.last().map(String::as_str), Some("--update"));
}

#[test]
fn create_renders_every_format_option_and_ecc() {
    use kopiur_kopia::algorithms::Algorithm;
    use kopiur_kopia::cmd::CreateOptions;
    let id = Identity::new("kopiur-ops", "kopiur.t.r");
    let opts = CreateOptions {
        encryption: Some("CHACHA20-POLY1305-HMAC-SHA256".into()),
        block_hash: Some("BLAKE3-256".into()),
        object_splitter: Some("DYNAMIC-1M-BUZHASH".into()),
        ecc: Some("REED-SOLOMON-CRC32".into()),
        ecc_overhead_percent: Some(2),
    };
    let c = cmd::create(&s3(), &id, &opts, &CacheSizes { content_mb: None, metadata_mb: Some(50) }).unwrap();
    assert_eq!(
        c.args,
        [
            "repository",
            "create",
            "s3",
            "--bucket=b",
            "--endpoint=127.0.0.1:3900",
            "--prefix=p/",
            "--region=garage",
            "--disable-tls",
            "--override-username=kopiur-ops",
            "--override-hostname=kopiur.t.r",
            "--metadata-cache-size-mb=50",
            "--encryption=CHACHA20-POLY1305-HMAC-SHA256",
            "--block-hash=BLAKE3-256",
            "--object-splitter=DYNAMIC-1M-BUZHASH",
            "--ecc=REED-SOLOMON-CRC32",
            "--ecc-overhead-percent=2",
        ]
    );
    // Each flag is the one the algorithm list is checked against.
    for (a, v) in [
        (Algorithm::Encryption, "CHACHA20-POLY1305-HMAC-SHA256"),
        (Algorithm::BlockHash, "BLAKE3-256"),
        (Algorithm::ObjectSplitter, "DYNAMIC-1M-BUZHASH"),
        (Algorithm::Ecc, "REED-SOLOMON-CRC32"),
    ] {
        assert!(c.args.contains(&format!("{}={v}", a.flag())), "{a:?}");
        assert!(a.is_known(v), "{a:?} {v}");
    }
    // Unset options leave kopia's defaults: no format flag at all.
    let plain = cmd::create(&s3(), &id, &CreateOptions::default(), &CacheSizes::default()).unwrap();
    assert!(!plain.args.iter().any(|a| Algorithm::ALL.iter().any(|x| a.starts_with(x.flag()))), "{:?}", plain.args);
}
