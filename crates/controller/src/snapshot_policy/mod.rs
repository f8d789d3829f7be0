//! SnapshotPolicy: `plan` selects what GFS retention prunes, `reconcile` applies it.
pub mod plan;
pub mod reconcile;
pub mod sources;
