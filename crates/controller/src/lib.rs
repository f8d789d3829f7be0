//! The kopiur controller: one reconciler per kind over reflector stores, the repository
//! circuit breaker (`health`), consumer gating, metrics and leader election.
pub mod catalog;
pub mod client_metrics;
pub mod config;
pub mod deletion;
pub mod error_events;
pub mod features;
pub mod field_registry;
pub mod gating;
pub mod health;
pub mod heap;
pub mod http;
pub mod leader;
pub mod maintenance;
pub mod metrics;
pub mod mover_rbac;
pub mod mover_pods;
pub mod mover_settings;
pub mod preflight;
pub mod replication;
pub mod repository;
pub mod restore;
pub mod snapshot;
pub mod snapshot_policy;
pub mod snapshot_schedule;
pub mod synced;
pub mod wedged;
