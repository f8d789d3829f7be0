//! Restore: `observe` reads the facts, `plan` decides the one-shot run path, `reconcile`
//! applies it.
mod observe;
pub mod plan;
mod plan_populate;
pub mod populate;
pub mod reconcile;
pub mod tenancy;
