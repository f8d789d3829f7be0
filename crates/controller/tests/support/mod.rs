//! The one support module of the environment tests (`tests/*_e2e.rs`, `tests/e2e_repository*.rs`)
//! and of the benchmarks under `examples/` that seed the same way. A test mounts it with
//! `mod support;` (an example with `#[path = "../tests/support/mod.rs"] mod support;`) and uses
//! the parts it needs; the rest is dead code in that binary, hence the `allow` below.
//!
//! - [`env`]: the private control plane, Garage and the operator namespace ([`env::Stack`]);
//!   [`harness`]: the general harness built on it, with the auditing kopia wrapper and the
//!   operator ([`harness::Harness`]).
//! - [`repos`]: Garage Secrets, S3 backends, Repository and PVC manifests, kopia repositories
//!   created directly ([`repos::KopiaRepo`]).
//! - [`audit`]: the auditing kopia wrapper and its call log.
//! - [`seed`]: Succeeded Snapshots written straight through the API.
//! - [`jobs`]: the recorder of every batch delete Job.
//! - [`metrics`]: the one parser of the operator's `/metrics` text.
//! - [`status`]: phase and condition accessors of kopiur objects, Event counts.
//! - [`wait`]: polling waits (`wait_for` and the common ones built on it); the watch-fed waits
//!   are in [`phase_watch`] (every version of one object, every kopiur Job) and [`recorder`]
//!   (every version of every object of a kind).
//! - [`scenarios`]: the watch-fed recorders of the deletion scenarios.
//! - [`admission`]: the chart's ValidatingAdmissionPolicy for `pruned-by`.
//! - [`realnode`]: the node image archives of the real-node tests.
//!
//! The parts a test uses most are re-exported here, so `use support::*` brings the harness,
//! the seeding, the audit, the Job recorder, the metrics parser and the waits.
#![allow(dead_code)]

pub mod admission;
pub mod audit;
pub mod env;
pub mod harness;
pub mod jobs;
pub mod metrics;
pub mod phase_watch;
pub mod realnode;
pub mod recorder;
pub mod repos;
pub mod scenarios;
pub mod seed;
pub mod status;
pub mod wait;

#[allow(unused_imports)]
pub use audit::*;
#[allow(unused_imports)]
pub use harness::*;
#[allow(unused_imports)]
pub use jobs::*;
#[allow(unused_imports)]
pub use metrics::{metric, sample};
#[allow(unused_imports)]
pub use repos::{KopiaRepo, PASSWORD};
#[allow(unused_imports)]
pub use seed::*;
#[allow(unused_imports)]
pub use wait::wait_for;
