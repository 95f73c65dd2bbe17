//! One module per subcommand.

pub mod compare;
pub mod dashboard;
pub mod drivers;
pub mod groups;
pub mod merge;
pub mod report;
pub mod run;
pub mod search;
pub mod serve;
pub mod serve_ecp;
pub mod validate;
pub mod verdict;

use crate::cli::args::FormatArg;
use msgbench_report::Format;

/// The report crate's format for a CLI format flag.
pub fn format(f: FormatArg) -> Format {
    match f {
        FormatArg::Text => Format::Text,
        FormatArg::Json => Format::Json,
        FormatArg::Csv => Format::Csv,
        FormatArg::Html => Format::Html,
    }
}
