//! The one error type of the API crate.

/// Everything the pure domain logic can reject. Messages name the offending input and say
/// what a valid value looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "invalid duration {input:?}: {why}; use an integer number of seconds or <n>h/<n>m/<n>s groups such as 1h30m (no days: write 720h for 30 days)"
    )]
    InvalidDuration { input: String, why: &'static str },

    /// A cron expression that does not parse; the message names the cron field and value
    /// (for example `minute 61 out of range 0-59`). Callers prefix the object's field path.
    #[error("{0}")]
    InvalidCron(String),

    #[error("unknown IANA time zone {0:?}")]
    UnknownTimeZone(String),

    #[error("invalid identity {component} {value:?}: {why}")]
    InvalidIdentity { component: &'static str, value: String, why: &'static str },

    #[error("no schedule slot found after {after} within the search horizon for cron {cron:?}")]
    NoNextSlot { cron: String, after: String },
}
