//! SnapshotSchedule: `plan` decides the slot disposition, `reconcile` applies it.
pub mod plan;
pub mod reconcile;
