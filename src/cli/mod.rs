//! Command-line parsing (`args`) and flag + scenario resolution (`plan`).

pub mod args;
pub mod plan;
