//! The kopiur controller: one reconciler per kind over reflector stores, the repository
//! circuit breaker (`health`), metrics and leader election.
pub mod health;
