//! The controller's error type and its requeue classes, shared by every kind (crate root, so
//! no kind imports another for it).

use std::time::Duration as StdDuration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    #[error("the work spec could not be built: {0}")]
    WorkSpec(String),
    /// Above the 100 KiB work-spec limit (too large for one environment variable).
    #[error("{0}")]
    WorkSpecTooLarge(String),
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// The merged mover settings are refused (`crate::mover_settings`); no Job is created.
    #[error("{0}")]
    MoverRefused(crate::mover_settings::Refusal),
}

impl From<kopiur_mover::job::JobError> for Error {
    fn from(e: kopiur_mover::job::JobError) -> Error {
        match e {
            kopiur_mover::job::JobError::WorkSpec(w @ kopiur_mover::workspec::WorkSpecError::TooLarge { .. }) => {
                Error::WorkSpecTooLarge(w.to_string())
            }
            other => Error::WorkSpec(other.to_string()),
        }
    }
}

/// Requeue classes: only the class decides timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequeueClass {
    Transient,
    Structural,
    Terminal,
}

impl RequeueClass {
    pub fn label(self) -> &'static str {
        match self {
            RequeueClass::Transient => "transient",
            RequeueClass::Structural => "structural",
            RequeueClass::Terminal => "terminal",
        }
    }
    pub fn requeue(self) -> StdDuration {
        match self {
            RequeueClass::Transient => StdDuration::from_secs(30),
            RequeueClass::Structural => StdDuration::from_secs(300),
            RequeueClass::Terminal => StdDuration::from_secs(1800),
        }
    }
}

impl Error {
    pub fn class(&self) -> RequeueClass {
        match self {
            Error::Kube(_) => RequeueClass::Transient,
            Error::WorkSpec(_) | Error::WorkSpecTooLarge(_) => RequeueClass::Structural,
            Error::InvalidSpec(_) => RequeueClass::Terminal,
            // A human changes the settings; re-checked every 5 minutes.
            Error::MoverRefused(_) => RequeueClass::Structural,
        }
    }
}
