//! Targets for what msgbench reads besides protocol frames: the stamp in every received
//! payload, scenario files and results files.

use msgbench_core::scenario::{Scenario, resolve};
use msgbench_core::stamp::{STAMP_LEN, Stamp, TEXT_STAMP_LEN};
use msgbench_report::{Format, ReportBuilder, for_each_record, render};

/// The stamp decoder (`msgbench_core::stamp`): binary and text forms, and the search for a
/// text stamp anywhere in a payload; each stamp read writes back to one that reads the same.
pub fn stamp(data: &[u8]) {
    for s in [Stamp::read(data), Stamp::read_text(data), Stamp::find(data)] {
        let Ok(s) = s else { continue };
        let mut raw = [0u8; STAMP_LEN];
        s.write(&mut raw);
        assert_eq!(Stamp::read(&raw), Ok(s), "binary stamp round trip");
        let mut text = [0u8; TEXT_STAMP_LEN];
        s.write_text(&mut text);
        assert_eq!(Stamp::read_text(&text), Ok(s), "text stamp round trip");
    }
    let _ = Stamp::find_text(data);
}

/// Scenario files (`Scenario::from_str_named`, then `resolve` into a run plan). A payload
/// template named by path is dropped before resolving: the target reads no files.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(mut s) = Scenario::from_str_named(text, "fuzz.toml") else {
        return;
    };
    s.producers.payload_file = None;
    let _ = resolve(&s, 1);
}

/// Results files (`for_each_record` into a `ReportBuilder`, as `msgbench report` reads them),
/// rendered as text, CSV and JSON.
pub fn results_file(data: &[u8]) {
    let mut builder = ReportBuilder::new();
    if for_each_record(data, |r| builder.add(&r)).is_err() {
        return;
    }
    let Ok(report) = builder.finish() else {
        return;
    };
    let mut out = Vec::new();
    for format in [Format::Text, Format::Csv, Format::Json] {
        let _ = render(&report, format, &mut out);
        out.clear();
    }
}
