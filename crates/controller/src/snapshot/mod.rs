//! Snapshot: one backup invocation. `plan` decides the run path, `reconcile` observes and
//! applies it, `delete` runs the `snapshot-cleanup` finalizer, `job` builds the mover Jobs.
mod batch_outcome;
pub mod delete;
pub mod dispatch;
pub mod gauges;
pub mod job;
mod observe;
pub mod pin;
pub mod plan;
pub mod reconcile;
pub mod refusal;
mod stage;
