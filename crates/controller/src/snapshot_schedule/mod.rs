//! SnapshotSchedule: `plan` decides the slot disposition, `reconcile` applies it.
pub mod kstatus;
pub mod plan;
pub mod reconcile;
