//! The crate's one error enum. `class()` is exhaustive by construction: a new variant does
//! not compile until it is mapped.
use std::time::Duration;

use crate::classify::{Classification, ErrorClass};

#[derive(Debug, thiserror::Error)]
pub enum KopiaError {
    /// The kopia binary could not be started.
    #[error("failed to start kopia ({bin}): {source}")]
    Spawn {
        bin: String,
        #[source]
        source: std::io::Error,
    },
    /// The mover's own deadline fired; kopia never times out a stalled S3 response itself.
    #[error("kopia {command} timed out after {}s", after.as_secs())]
    Timeout { command: &'static str, after: Duration },
    /// kopia exited non-zero (or was killed by a signal: `exit_code` is `None`).
    #[error("kopia {command} failed ({}): {}", classification.class, classification.summary())]
    Failed { command: &'static str, exit_code: Option<i32>, classification: Classification, stderr_tail: Vec<String> },
    /// stdout was not the JSON the command promises.
    #[error("kopia {command} printed unparseable JSON: {message}")]
    BadJson { command: &'static str, message: String },
    /// A `--json` command printed nothing.
    #[error("kopia {command} printed no JSON")]
    EmptyOutput { command: &'static str },
    /// The backend kind is typed but the mover cannot drive it yet.
    #[error("the {0} backend is not supported yet")]
    UnsupportedBackend(&'static str),
    /// A value that can never make a valid command line.
    #[error("invalid kopia invocation: {0}")]
    InvalidSpec(String),
}

impl KopiaError {
    /// The error class (for status, verdicts and retry decisions).
    pub fn classification(&self) -> Classification {
        match self {
            KopiaError::Failed { classification, .. } => *classification,
            KopiaError::Timeout { .. } => Classification::of(ErrorClass::RepositoryUnavailable),
            KopiaError::Spawn { .. }
            | KopiaError::BadJson { .. }
            | KopiaError::EmptyOutput { .. }
            | KopiaError::UnsupportedBackend(_)
            | KopiaError::InvalidSpec(_) => Classification::of(ErrorClass::Unknown),
        }
    }

    pub fn class(&self) -> ErrorClass {
        self.classification().class
    }

    pub fn timed_out(&self) -> bool {
        match self {
            KopiaError::Timeout { .. } => true,
            KopiaError::Spawn { .. }
            | KopiaError::Failed { .. }
            | KopiaError::BadJson { .. }
            | KopiaError::EmptyOutput { .. }
            | KopiaError::UnsupportedBackend(_)
            | KopiaError::InvalidSpec(_) => false,
        }
    }

    /// A one-line summary without volatile details (ports, temp names, blob ids).
    pub fn summary(&self) -> String {
        match self {
            KopiaError::Failed { command, classification, .. } => {
                format!("kopia {command}: {}", classification.summary())
            }
            KopiaError::Timeout { .. }
            | KopiaError::Spawn { .. }
            | KopiaError::BadJson { .. }
            | KopiaError::EmptyOutput { .. }
            | KopiaError::UnsupportedBackend(_)
            | KopiaError::InvalidSpec(_) => self.to_string(),
        }
    }

    pub fn stderr_tail(&self) -> &[String] {
        match self {
            KopiaError::Failed { stderr_tail, .. } => stderr_tail,
            KopiaError::Timeout { .. }
            | KopiaError::Spawn { .. }
            | KopiaError::BadJson { .. }
            | KopiaError::EmptyOutput { .. }
            | KopiaError::UnsupportedBackend(_)
            | KopiaError::InvalidSpec(_) => &[],
        }
    }

    pub fn exit_code(&self) -> Option<i32> {
        match self {
            KopiaError::Failed { exit_code, .. } => *exit_code,
            KopiaError::Timeout { .. }
            | KopiaError::Spawn { .. }
            | KopiaError::BadJson { .. }
            | KopiaError::EmptyOutput { .. }
            | KopiaError::UnsupportedBackend(_)
            | KopiaError::InvalidSpec(_) => None,
        }
    }
}
