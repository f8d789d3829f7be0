//! The only code that runs the `kopia` binary: argv builders per backend, typed `--json`
//! models, a process runner with deadlines, and the ordered classification of kopia's
//! stderr into error classes and connect verdicts. No Kubernetes here.
pub mod algorithms;
pub mod backend;
pub mod classify;
pub mod cmd;
pub mod error;
pub mod model;
pub mod run;
pub mod verdict;

pub use backend::{Backend, FilesystemBackend, S3Backend};
pub use classify::{Classification, ErrorClass, classify};
pub use cmd::{Identity, KopiaCommand};
pub use error::KopiaError;
pub use run::{KopiaEnv, Output, Runner};
pub use verdict::{ConnectVerdict, connect_verdict};
