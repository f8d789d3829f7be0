//! SnapshotSchedule: `observe` reads the facts, `plan` decides the slot disposition,
//! `report` words the conditions, `apply` makes the writes, and `reconcile` runs them in order.
mod apply;
pub mod kstatus;
mod observe;
pub mod plan;
pub mod reconcile;
mod report;
