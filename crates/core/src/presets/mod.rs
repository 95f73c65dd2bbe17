//! Presets: ready-made scenarios for systems whose users expect their old tool's defaults. A
//! preset is the bottom layer of a run's scenario: a scenario file and flags given with it
//! override whatever it sets.
//!
//! - [`ecp`]: the ENTSO-E ECP/MADES business-application API over AMQP 1.0 (what
//!   go-mades-bench measures).

pub mod ecp;
