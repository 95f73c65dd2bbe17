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

/// Scenario files (`Scenario::parse` with the drivers' sections, then `resolve` into a run
/// plan and each section into its driver's plan). A payload template named by path is dropped
/// before resolving: the target reads no files.
pub fn scenario(data: &[u8]) {
    use msgbench_core::scenario::SectionSpec;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let sections = [
        SectionSpec::of::<msgbench_driver_amqp::options::AmqpSection>(),
        SectionSpec::of::<msgbench_driver_amqp10::options::Amqp10Section>(),
        SectionSpec::of::<msgbench_driver_http::options::HttpSection>(),
    ];
    let Ok(mut s) = Scenario::parse(text, "fuzz.toml", &sections) else {
        return;
    };
    s.producers.payload_file = None;
    if let Ok(mut plan) = resolve(&s, 1) {
        for spec in &sections {
            let _ = (spec.resolve)(&s.drivers, &mut plan);
        }
    }
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
