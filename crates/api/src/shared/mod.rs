//! Types shared by several kinds (docs/design/api-contract.md §2–§3).

pub mod backend;
pub mod cron_spec;
pub mod duration;
pub mod failure_policy;
pub mod identity;
pub mod marker;
pub mod mover;
pub mod phase;
pub mod refs;
pub mod retention;
pub mod status;

pub use backend::Backend;
pub use cron_spec::CronSpec;
pub use duration::Duration;
pub use failure_policy::FailurePolicy;
pub use identity::Identity;
pub use mover::{CacheSpec, MoverDefaults, MoverSpec};
pub use refs::{ConfigMapKeyRef, ObjectRef, PolicyRef, RepositoryKind, RepositoryRef, SecretKeyRef, SecretRef};
pub use retention::Retention;
