//! A SnapshotPolicy's rules that other kinds read too: which sources it selects, identity
//! collisions between policies, and unknown compressors. Pure functions over the objects; shared
//! by the Snapshot, SnapshotSchedule and SnapshotPolicy reconcilers, so they live at the crate root.
pub mod collision;
pub mod compression;
pub mod hostname;
pub mod sources;
