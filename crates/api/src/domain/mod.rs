//! Pure domain logic shared by the controller, the mover and the CLI.
