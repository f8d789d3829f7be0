//! Ordered classification of kopia's stderr into error classes.
//!
//! kopia exits 1 for every failure, so the text is all there is. Rules are substrings of the
//! lower-cased text, applied in order; the first match wins. The order is the point:
//! a password error in a message that also names a host must not read as an outage, an
//! empty bucket must not read as "unreachable", a transport failure during upload is an
//! outage and not a source problem, and a missing source path is a source problem rather
//! than a missing repository.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The error classes shared by the mover, the controller and status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorClass {
    AuthFailure,
    AccessDenied,
    PermissionDenied,
    Locked,
    NotFound,
    RepositoryUnavailable,
    SourceError,
    /// The endpoint's TLS certificate was rejected (or TLS and plain HTTP are mixed up): a
    /// configuration error a human fixes (a CA bundle, the endpoint scheme), never an outage.
    CertificateError,
    Unknown,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 9] = [
        ErrorClass::AuthFailure,
        ErrorClass::AccessDenied,
        ErrorClass::PermissionDenied,
        ErrorClass::Locked,
        ErrorClass::CertificateError,
        ErrorClass::NotFound,
        ErrorClass::RepositoryUnavailable,
        ErrorClass::SourceError,
        ErrorClass::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::AuthFailure => "AuthFailure",
            ErrorClass::AccessDenied => "AccessDenied",
            ErrorClass::PermissionDenied => "PermissionDenied",
            ErrorClass::Locked => "Locked",
            ErrorClass::NotFound => "NotFound",
            ErrorClass::RepositoryUnavailable => "RepositoryUnavailable",
            ErrorClass::SourceError => "SourceError",
            ErrorClass::CertificateError => "CertificateError",
            ErrorClass::Unknown => "Unknown",
        }
    }

    /// Whether retrying the same operation may succeed without a human changing anything.
    pub fn retryable(self) -> bool {
        match self {
            ErrorClass::Locked | ErrorClass::RepositoryUnavailable | ErrorClass::SourceError => true,
            ErrorClass::AuthFailure
            | ErrorClass::AccessDenied
            | ErrorClass::PermissionDenied
            | ErrorClass::NotFound
            | ErrorClass::CertificateError
            | ErrorClass::Unknown => false,
        }
    }

    /// Reads a label back; labels from a newer version read as `Unknown`.
    pub fn from_label(s: &str) -> ErrorClass {
        ErrorClass::ALL.into_iter().find(|c| c.as_str() == s).unwrap_or(ErrorClass::Unknown)
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ErrorClass {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(ErrorClass::from_label(s))
    }
}

/// A class plus whether the storage is reachable but holds no repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Classification {
    pub class: ErrorClass,
    pub not_initialized: bool,
}

impl Classification {
    pub const fn of(class: ErrorClass) -> Classification {
        Classification { class, not_initialized: false }
    }

    /// A fixed one-line summary per class: kopia's text carries temporary names, ports and
    /// blob ids, which would churn conditions; the raw text goes to the stderr tail instead.
    pub fn summary(&self) -> &'static str {
        match (self.class, self.not_initialized) {
            (ErrorClass::NotFound, true) => "no kopia repository is initialized in the configured storage",
            (ErrorClass::NotFound, false) => "the repository storage, bucket, path or snapshot was not found",
            (ErrorClass::AuthFailure, _) => "the repository password is wrong or missing",
            (ErrorClass::AccessDenied, _) => "the storage backend denied access: check the backend credentials",
            (ErrorClass::PermissionDenied, _) => "a local file permission was denied",
            (ErrorClass::Locked, _) => "the repository is locked by another operation",
            (ErrorClass::RepositoryUnavailable, _) => "the repository storage is unreachable",
            (ErrorClass::SourceError, _) => "the backup source could not be read",
            (ErrorClass::CertificateError, _) => CERTIFICATE_SUMMARY,
            (ErrorClass::Unknown, _) => "kopia failed with an unrecognized error",
        }
    }
}

/// The one-line fix for a rejected certificate, shared with the controller's conditions.
pub const CERTIFICATE_SUMMARY: &str = "the storage endpoint's TLS certificate was rejected (untrusted CA, wrong host name, \
     expired, or TLS against a plain-HTTP endpoint): put the CA that signed it in a ConfigMap and set \
     spec.backend.s3.tls.caBundleRef, or fix the endpoint's certificate or scheme";

/// One classification rule: the class it yields and the lower-case substrings that select it.
struct Rule {
    class: ErrorClass,
    not_initialized: bool,
    any_of: &'static [&'static str],
}

/// The ordered rule table. Keep `Locked` free of a bare `lock`: `block` and `clock skew`
/// must not match it.
const RULES: &[Rule] = &[
    Rule {
        class: ErrorClass::AuthFailure,
        not_initialized: false,
        any_of: &["invalid repository password", "incorrect password", "unable to derive", "password prompt error"],
    },
    Rule {
        class: ErrorClass::AccessDenied,
        not_initialized: false,
        any_of: &[
            "access denied",
            "accessdenied",
            "forbidden",
            "not authorized",
            "access key id you provided does not exist",
            "signature we calculated does not match",
            "invalid signature",
            "provided token has expired",
            "missing credentials",
        ],
    },
    Rule {
        class: ErrorClass::PermissionDenied,
        not_initialized: false,
        any_of: &["permission denied", "operation not permitted", "eacces"],
    },
    Rule {
        class: ErrorClass::Locked,
        not_initialized: false,
        any_of: &[
            "repository is locked",
            "another process",
            "lock is held",
            "unable to acquire lock",
            "repository upgrade in progress",
        ],
    },
    Rule { class: ErrorClass::NotFound, not_initialized: true, any_of: &["not initialized"] },
    // Before the transport rule: `tls:` and `x509` there cover handshake timeouts, while a
    // rejected certificate is configuration, and must never open the circuit breaker.
    Rule {
        class: ErrorClass::CertificateError,
        not_initialized: false,
        any_of: &[
            "x509:",
            "tls: failed to verify certificate",
            "certificate signed by unknown authority",
            "certificate is valid for",
            "certificate is not valid for",
            "certificate has expired",
            "certificate is not yet valid",
            "tls: bad certificate",
            "tls: unknown certificate authority",
            "server gave http response to https client",
            "first record does not look like a tls handshake",
        ],
    },
    Rule {
        class: ErrorClass::RepositoryUnavailable,
        not_initialized: false,
        any_of: &[
            "connection refused",
            "connection reset",
            "dial tcp",
            "no route to host",
            "network is unreachable",
            "no such host",
            "server misbehaving",
            "timeout",
            "timed out",
            "deadline exceeded",
            "tls:",
            "x509",
            "certificate",
            "service unavailable",
            "internal error",
            ": eof",
        ],
    },
    Rule {
        class: ErrorClass::SourceError,
        not_initialized: false,
        any_of: &[
            "failed to prepare source",
            "upload error",
            "unsupported source",
            "fatal error(s) while snapshotting",
        ],
    },
    Rule {
        class: ErrorClass::NotFound,
        not_initialized: false,
        any_of: &[
            "no such file or directory",
            "not found",
            "does not exist",
            "unable to find snapshot",
            "nosuchbucket",
        ],
    },
    Rule {
        class: ErrorClass::RepositoryUnavailable,
        not_initialized: false,
        any_of: &["error connecting to repository", "unable to open repository", "can't connect to storage"],
    },
];

/// Classifies kopia's stderr. Empty or unmatched text is `Unknown`, never an outage.
pub fn classify(stderr: &str) -> Classification {
    let lower = stderr.to_lowercase();
    for rule in RULES {
        if rule.any_of.iter().any(|needle| lower.contains(needle)) {
            return Classification { class: rule.class, not_initialized: rule.not_initialized };
        }
    }
    Classification::of(ErrorClass::Unknown)
}

// Texts that are not failures of the operation that printed them.

/// `snapshot create` found nothing changed (with `--ignore-identical-snapshots`).
pub fn is_unchanged(stderr: &str) -> bool {
    stderr.to_lowercase().contains("not saving snapshot because no files have been changed")
}

/// `snapshot delete` of an id that is already gone.
pub fn is_no_snapshots_matched(stderr: &str) -> bool {
    stderr.to_lowercase().contains("no snapshots matched")
}

/// A kopia manifest id: 32 lowercase hex digits. Anything else `snapshot delete` would read as
/// a root object id, which can match many snapshots.
pub fn is_manifest_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `policy set` / `maintenance set` with nothing to change.
pub fn is_no_changes_specified(stderr: &str) -> bool {
    stderr.to_lowercase().contains("no changes specified")
}

/// `repository create` refused because the storage already holds data.
pub fn is_existing_data(stderr: &str) -> bool {
    let l = stderr.to_lowercase();
    l.contains("found existing data in storage location")
        || l.contains("repository already initialized")
        || l.contains("blobcfg blob exists, but format blob is not found")
}

/// `maintenance run` by a non-owner; returns the owner kopia named.
pub fn maintenance_owner_mismatch(stderr: &str) -> Option<String> {
    const NEEDLE: &str = "maintenance must be run by designated user: ";
    let lower = stderr.to_lowercase();
    let i = lower.find(NEEDLE)?;
    // Owner names are ASCII (`user@host`), so the byte offset into the original is the same.
    let rest = stderr.get(i + NEEDLE.len()..)?;
    let owner: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
    Some(owner.trim_end_matches(['.', ',', ';']).to_string())
}

/// Fatal file errors during `snapshot create` (exit 1, but the manifest was saved).
pub fn is_fatal_file_errors(stderr: &str) -> bool {
    stderr.to_lowercase().contains("fatal error(s) while snapshotting")
}

/// `sync-to` into a destination that holds a different repository.
pub fn is_incompatible_destination(stderr: &str) -> bool {
    stderr.to_lowercase().contains("destination repository contains incompatible data")
}
