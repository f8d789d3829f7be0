//! The repository circuit breaker: one sensor (connect verdicts), one streak, one state
//! machine. Pure: every function takes the facts and `now`, nothing reads a clock or a client.
//!
//! - `verdict`: what one connect says (and how a strict connect routes);
//! - `fold`: folding one verdict into status (open, half-open, close, terminal);
//! - `gate`: the create gate, the reinitialize ack, the terminal gate;
//! - `holdoff`: strict-retry holdoff, suspect probe cadence, bootstrap deadline;
//! - `plan`: the whole decision for one reconcile;
//! - `kstatus`: the conditions that status shows;
//! - `index_blobs`: the `IndexBlobHealth` condition and its transition Event.
pub mod fold;
pub mod gate;
pub mod holdoff;
pub mod index_blobs;
pub mod kstatus;
pub mod messages;
pub mod plan;
pub mod types;
pub mod verdict;

#[cfg(test)]
mod tests;

pub use fold::{Effect, Event, EventType, success_fold};
pub use gate::{CreateGate, create_gate};
pub use holdoff::strict_retry_holdoff;
pub use plan::{Decision, Launch, Plan, plan};
pub use types::*;
pub use verdict::Verdict;
