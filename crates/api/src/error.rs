//! The one error type of the API crate.

/// Everything the pure domain logic can reject. Messages name the offending input and say
/// what a valid value looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("invalid duration {input:?}: {why}; use an integer number of seconds or <n>h/<n>m/<n>s groups such as 1h30m (no days: write 720h for 30 days)")]
    InvalidDuration { input: String, why: &'static str },

    #[error("{field}: {message}")]
    InvalidSchedule { field: String, message: String },

    #[error("unknown IANA time zone {0:?}")]
    UnknownTimeZone(String),

    #[error("invalid identity {component} {value:?}: {why}")]
    InvalidIdentity { component: &'static str, value: String, why: &'static str },

    #[error("{field}: set exactly one of: {choices}")]
    UnionNotExactlyOne { field: &'static str, choices: &'static str },

    #[error("no schedule slot found after {after} within the search horizon for cron {cron:?}")]
    NoNextSlot { cron: String, after: String },
}
