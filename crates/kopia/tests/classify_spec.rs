//! The classifier against the catalogue of strings of docs/design/mover.md §2.5. Real kopia
//! captures live in `classify_fixtures.rs`.
use kopiur_kopia::classify::{self, Classification, ErrorClass};
use kopiur_kopia::{ConnectVerdict, KopiaError, connect_verdict};

fn class(s: &str) -> Classification {
    classify::classify(s)
}

#[test]
fn spec_catalogue() {
    use ErrorClass::*;
    let rows: &[(&str, ErrorClass, bool)] = &[
        (
            "error connecting to repository: unable to create format manager: invalid repository password",
            AuthFailure,
            false,
        ),
        (
            "open repository: unable to open repository: unable to create format manager: invalid repository password",
            AuthFailure,
            false,
        ),
        ("error connecting to repository: repository not initialized in the provided storage", NotFound, true),
        (
            "can't connect to storage: error retrieving storage config from bucket \"b\": Access Denied.",
            AccessDenied,
            false,
        ),
        ("Forbidden: No such key: GK1a2b3c4d5e6f7a8b9c0d1e2f", AccessDenied, false),
        ("Forbidden: Invalid signature", AccessDenied, false),
        ("The Access Key Id you provided does not exist in our records.", AccessDenied, false),
        (
            "The request signature we calculated does not match the signature you provided. Check your key and signing method.",
            AccessDenied,
            false,
        ),
        ("dial tcp 127.0.0.1:9000: connect: connection refused", RepositoryUnavailable, false),
        ("dial tcp: lookup minio.backup.svc: no such host", RepositoryUnavailable, false),
        ("i/o timeout", RepositoryUnavailable, false),
        ("context deadline exceeded", RepositoryUnavailable, false),
        ("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer", RepositoryUnavailable, false),
        // A rejected certificate is configuration (a CA bundle to add), never an outage.
        ("x509: certificate signed by unknown authority", CertificateError, false),
        (
            "error connecting to repository: unable to get repository storage: Get \"https://127.0.0.1:9443/b/?location=\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
            CertificateError,
            false,
        ),
        (
            "tls: failed to verify certificate: x509: certificate is valid for localhost, not s3.example",
            CertificateError,
            false,
        ),
        ("http: server gave HTTP response to HTTPS client", CertificateError, false),
        ("net/http: TLS handshake timeout", RepositoryUnavailable, false),
        (
            "unable to complete GetBlob(kopia.repository,0,-1) despite 10 retries: dial tcp 10.0.0.9:9000: connect: connection refused",
            RepositoryUnavailable,
            false,
        ),
        (
            "can't connect to storage: cannot access storage path: stat /repo: no such file or directory",
            NotFound,
            false,
        ),
        ("unable to get repository storage: error listing blobs: The specified bucket does not exist", NotFound, false),
        ("unable to get repository storage: error listing blobs: Bucket not found: backups", NotFound, false),
        ("unable to get repository storage: found existing data in storage location", Unknown, false),
        (
            "failed to prepare source: unable to get local filesystem entry: resolveSymlink: stat: lstat /source: no such file or directory",
            SourceError,
            false,
        ),
        ("upload error: unsupported source: app@media:/pvc/data", SourceError, false),
        (
            "clock skew detected: local clock is out of sync with repository timestamp by more than allowed 5m0s",
            Unknown,
            false,
        ),
        (
            "ERROR error connecting to repository: dial tcp 1.2.3.4:9000: connect: connection refused",
            RepositoryUnavailable,
            false,
        ),
        ("unable to read index block", Unknown, false),
        ("repository upgrade in progress", Locked, false),
        ("", Unknown, false),
    ];
    for (text, want, not_init) in rows {
        let got = class(text);
        assert_eq!((got.class, got.not_initialized), (*want, *not_init), "{text}");
    }
}

#[test]
fn order_matters() {
    // A password error naming a host is not an outage.
    assert_eq!(
        class("error connecting to repository at dial tcp host:1: invalid repository password").class,
        ErrorClass::AuthFailure
    );
    // An empty bucket is never "unreachable", although connect wording is present.
    assert_eq!(
        class("error connecting to repository: repository not initialized in the provided storage").class,
        ErrorClass::NotFound
    );
    // A transport failure during upload is an outage, not a source problem.
    assert_eq!(
        class("upload error: dial tcp 1.2.3.4:1: connect: connection refused").class,
        ErrorClass::RepositoryUnavailable
    );
    // A missing source is a source problem, not a missing repository.
    assert_eq!(class("failed to prepare source: lstat /x: no such file or directory").class, ErrorClass::SourceError);
    // `block` and `clock skew` never read as Locked.
    assert_ne!(class("unable to read index block").class, ErrorClass::Locked);
    assert_ne!(class("clock skew detected").class, ErrorClass::Locked);
}

#[test]
fn special_texts() {
    assert!(classify::is_unchanged("Not saving snapshot because no files have been changed since previous snapshot"));
    assert!(classify::is_no_snapshots_matched("no snapshots matched 0123456789abcdef0123456789abcdef"));
    assert!(classify::is_no_changes_specified("no changes specified"));
    // Manifest ids are 32 lowercase hex digits; root object ids carry a prefix or are file hashes
    // of another length, and anything else is no id.
    assert!(classify::is_manifest_id("3549d9143e3191812b7f52f0a5b6e8d6"));
    for not in ["k090a63adf22075b6d2c84bddc62809d5", "3549D9143E3191812B7F52F0A5B6E8D6", "3549d914", "", "../../etc"] {
        assert!(!classify::is_manifest_id(not), "{not}");
    }
    assert!(classify::is_existing_data("unable to get repository storage: found existing data in storage location"));
    assert_eq!(
        classify::maintenance_owner_mismatch("maintenance must be run by designated user: kopiur@kopiur.media.nas\n"),
        Some("kopiur@kopiur.media.nas".to_string())
    );
    assert_eq!(classify::maintenance_owner_mismatch("something else"), None);
}

#[test]
fn labels_round_trip() {
    for c in ErrorClass::ALL {
        assert_eq!(ErrorClass::from_label(c.as_str()), c);
    }
    assert_eq!(ErrorClass::from_label("SomethingNew"), ErrorClass::Unknown);
}

#[test]
fn summaries_are_fixed_per_class() {
    let a = KopiaError::Failed {
        command: "repository connect",
        exit_code: Some(1),
        classification: class("dial tcp 127.0.0.1:39123: connect: connection refused"),
        stderr_tail: vec![],
    };
    let b = KopiaError::Failed {
        command: "repository connect",
        exit_code: Some(1),
        classification: class("dial tcp 127.0.0.1:41877: connect: connection refused"),
        stderr_tail: vec![],
    };
    assert_eq!(a.summary(), b.summary());
    assert!(!a.summary().contains("39123"));
    let t = KopiaError::Timeout { command: "repository connect", after: std::time::Duration::from_secs(120) };
    assert_eq!(t.to_string(), "kopia repository connect timed out after 120s");
    assert_eq!(t.class(), ErrorClass::RepositoryUnavailable);
}

#[test]
fn verdicts() {
    let fail = |s: &str| KopiaError::Failed {
        command: "repository connect",
        exit_code: Some(1),
        classification: class(s),
        stderr_tail: vec![],
    };
    let timeout = KopiaError::Timeout { command: "repository connect", after: std::time::Duration::from_secs(1) };
    assert_eq!(connect_verdict(None, true), ConnectVerdict::Reachable);
    assert_eq!(connect_verdict(Some(&timeout), true), ConnectVerdict::ProbeDeadlineExceeded);
    let ni = fail("repository not initialized in the provided storage");
    assert_eq!(connect_verdict(Some(&ni), true), ConnectVerdict::RepositoryVanished);
    assert_eq!(connect_verdict(Some(&ni), false), ConnectVerdict::NotInitialized);
    assert_eq!(connect_verdict(Some(&fail("connection refused")), true), ConnectVerdict::BackendUnreachable);
    assert_eq!(
        connect_verdict(Some(&fail("cannot access storage path: stat /r: no such file or directory")), true),
        ConnectVerdict::BackendUnreachable
    );
    assert_eq!(
        connect_verdict(Some(&fail("invalid repository password")), true),
        ConnectVerdict::ConnectFailed(ErrorClass::AuthFailure)
    );
}
