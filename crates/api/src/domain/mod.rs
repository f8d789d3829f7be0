//! Pure domain logic shared by the controller, the mover and the CLI. Everything here takes
//! the current time as an argument and never reads the clock.

pub mod cron;
pub mod hash;
pub mod identity;
pub mod resolve;
pub mod retention;
