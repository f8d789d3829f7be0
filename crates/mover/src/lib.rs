//! The mover: the binary that runs kopia inside Jobs, and the controller<->mover contract
//! (the versioned work spec, the result documents and the pure Job builder).
pub mod batch_outcome;
pub mod job;
pub mod limits;
pub mod ops;
pub mod ownership;
pub mod permission;
pub mod result;
pub mod workspec;

pub use job::{JobInput, build_job, job_name};
pub use ops::{Ctx, Exit};
pub use workspec::{MAX_WORK_SPEC_BYTES, Operation, WorkSpec, WorkSpecError};
