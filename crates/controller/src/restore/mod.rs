//! Restore: `plan` decides the one-shot run path, `reconcile` applies it.
pub mod plan;
pub mod reconcile;
