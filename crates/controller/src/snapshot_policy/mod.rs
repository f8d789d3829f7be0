//! SnapshotPolicy: `plan` selects what GFS retention prunes, `fork` guards the pinned identity,
//! `reconcile` applies both.
pub mod fork;
pub mod kstatus;
pub mod plan;
pub mod reconcile;
mod report;
