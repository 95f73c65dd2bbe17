//! How a driver crate presents itself to the binary: what `msgbench drivers` lists, the URL
//! schemes it answers to, its scenario section, and how it is built from a run plan. The binary
//! keeps one list of the registered driver types and dispatches on it; nothing else in it names
//! a driver (docs/adding-a-driver.md).

use crate::driver::{Capabilities, Driver, DriverError, EventSink};
use crate::scenario::{RunPlan, SectionSpec};

/// A driver as `msgbench drivers` lists it.
#[derive(Debug, Clone, Copy)]
pub struct DriverInfo {
    /// Driver name.
    pub name: &'static str,
    /// URL schemes it answers to.
    pub schemes: &'static [&'static str],
    /// One line about it.
    pub about: &'static str,
    /// What it supports at most (some depend on options: the driver's `capabilities()` says
    /// what one run has).
    pub caps: Capabilities,
    /// Its scenario section (`[amqp]`), if it has options of its own.
    pub section: Option<SectionSpec>,
}

impl DriverInfo {
    /// Whether `url`'s scheme is one of this driver's.
    pub fn answers(&self, url: &str) -> bool {
        self.schemes.contains(&scheme(url))
    }
}

/// The scheme of a URL (what comes before `://`).
pub fn scheme(url: &str) -> &str {
    url.split("://").next().unwrap_or("")
}

/// A driver type the binary can list and build. Implemented next to the driver, in its crate.
pub trait Registered: Driver + Sized {
    /// What it is and which URLs it takes.
    const INFO: DriverInfo;

    /// Whether this driver takes `url`: by default, whether the scheme is one of
    /// [`DriverInfo::schemes`]. Two drivers may share a scheme and split it by URL (AMQP 1.0
    /// with and without a broker).
    fn accepts(url: &str) -> bool {
        Self::INFO.answers(url)
    }

    /// Checks the options in `url` before anything connects (a wrong one is the user's, said
    /// before the run starts). Default: nothing to check beyond what `build` does.
    fn check_url(_url: &str) -> Result<(), DriverError> {
        Ok(())
    }

    /// Builds the driver for `url` from a resolved plan (its own options are in
    /// [`RunPlan::drivers`]); driver events go to `events`.
    fn build(url: &str, plan: &RunPlan, events: EventSink) -> Result<Self, DriverError>;
}

/// Command-line flags that several drivers read, defined once on `msgbench run` (clap refuses
/// a flag defined twice) and handed to each driver's flags when they become its section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommonFlags {
    /// `--persistent`: messages that survive a broker restart (AMQP 0-9-1 delivery mode 2,
    /// AMQP 1.0 durable header).
    pub persistent: bool,
    /// `--ack-every N`: consumers acknowledge N deliveries at a time.
    pub ack_every: Option<u32>,
}
