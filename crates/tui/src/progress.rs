//! The plain mode's progress line: on a terminal, one line kept below the per-second table
//! showing the phase, a bar, the percentage and the time (or messages) left.
//!
//! [`format_progress`] is the pure part (a [`Status`] in, one line of text out); [`ProgressLine`]
//! follows the records and keeps that line at the bottom of stderr with `indicatif`, printing the
//! table's lines above it so the two never interleave. It draws nothing when stderr is not a
//! terminal (indicatif hides itself there), and callers only create it for long runs
//! ([`crate::plan::PlanInfo::is_long`]).

use crate::format;
use crate::plan::{RunPhase, RunProgress, Status};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use msgbench_report::Record;

/// Runs shorter than this (warm-up plus measure) get no progress line.
pub const LONG_RUN_S: f64 = 10.0;

/// The progress line for `st`, with a bar `bar_width` cells wide; `None` when there is nothing
/// to show (before the first phase, after the end).
pub fn format_progress(st: &Status, bar_width: usize) -> Option<String> {
    let name = match st.phase {
        RunPhase::Starting | RunPhase::Done { .. } => return None,
        p => p.name(),
    };
    let mut parts: Vec<String> = Vec::new();
    let mut head = format!("{name:<7}");
    if let Some(f) = st.fraction {
        let full = ((f * bar_width as f64).floor() as usize).min(bar_width);
        head.push_str(&format!(
            " [{}{}] {:>3.0}%",
            "█".repeat(full),
            "░".repeat(bar_width - full),
            (f * 100.0).floor()
        ));
    } else if st.phase == RunPhase::Drain {
        head.push_str(" waiting for in-flight messages");
    }
    parts.push(head);
    if let Some((done, of, unit)) = st.units {
        parts.push(format!(
            "{} / {} {unit}",
            format::count(done),
            format::count(of)
        ));
    }
    if let Some(left) = st.left_s {
        let estimated = st.units.is_some();
        let bound = st.phase == RunPhase::Drain;
        parts.push(format!(
            "{}{} left",
            if estimated {
                "~"
            } else if bound {
                "≤ "
            } else {
                ""
            },
            format::duration(left)
        ));
    }
    if let Some(next) = &st.next {
        parts.push(format!("then {next}"));
    }
    Some(parts.join(" · "))
}

/// Keeps the progress line below the per-second table on a terminal.
pub struct ProgressLine {
    progress: RunProgress,
    bar: Option<ProgressBar>,
    min_s: f64,
}

impl Default for ProgressLine {
    fn default() -> Self {
        Self::new()
    }
}

impl ProgressLine {
    /// A progress line for runs of at least [`LONG_RUN_S`] (or a message count); it appears with
    /// the first interval.
    pub fn new() -> Self {
        Self {
            progress: RunProgress::new(),
            bar: None,
            min_s: LONG_RUN_S,
        }
    }

    /// Takes a record into account and redraws the line.
    pub fn record(&mut self, r: &Record) {
        self.progress.apply(r);
        if matches!(r, Record::End(_)) {
            self.finish();
            return;
        }
        if !matches!(r, Record::Interval(_) | Record::Event(_)) {
            return;
        }
        let long = self
            .progress
            .plan
            .as_ref()
            .is_some_and(|p| p.is_long(self.min_s));
        let line = format_progress(&self.progress.status(), 24);
        match (&self.bar, line) {
            (Some(bar), Some(line)) => bar.set_message(line),
            (Some(_), None) => self.finish(),
            (None, Some(line)) if long && matches!(r, Record::Interval(_)) => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                bar.set_style(
                    ProgressStyle::with_template("{wide_msg}")
                        .expect("a static template without keys is valid"),
                );
                bar.set_message(line);
                self.bar = Some(bar);
            }
            _ => {}
        }
    }

    /// Prints `line` on stderr above the progress line (or plainly when there is none).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(bar) if !bar.is_hidden() => bar.println(line),
            _ => eprintln!("{line}"),
        }
    }

    /// Removes the line (the final report follows).
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(phase: RunPhase) -> Status {
        Status {
            phase,
            now_s: 0.0,
            fraction: None,
            left_s: None,
            units: None,
            next: None,
        }
    }

    #[test]
    fn duration_goal_shows_bar_percent_and_time_left() {
        let st = Status {
            fraction: Some(0.45),
            left_s: Some(16.5),
            next: Some("drain ≤ 5.0s".into()),
            ..status(RunPhase::Measure)
        };
        assert_eq!(
            format_progress(&st, 10).unwrap(),
            "measure [████░░░░░░]  45% · 17s left · then drain ≤ 5.0s"
        );
    }

    #[test]
    fn message_goal_shows_counts_and_an_estimate() {
        let st = Status {
            fraction: Some(0.1234),
            left_s: Some(62.0),
            units: Some((1_234_000, 10_000_000, "msgs")),
            ..status(RunPhase::Measure)
        };
        assert_eq!(
            format_progress(&st, 4).unwrap(),
            "measure [░░░░]  12% · 1,234,000 / 10,000,000 msgs · ~1m 02s left"
        );
    }

    #[test]
    fn full_and_empty_bars_stay_within_width() {
        for f in [0.0, 0.999, 1.0] {
            let st = Status {
                fraction: Some(f),
                ..status(RunPhase::Warmup)
            };
            let line = format_progress(&st, 8).unwrap();
            let cells = line.chars().filter(|c| *c == '█' || *c == '░').count();
            assert_eq!(cells, 8, "{line}");
        }
        let done = Status {
            fraction: Some(1.0),
            ..status(RunPhase::Warmup)
        };
        assert!(format_progress(&done, 4).unwrap().contains("100%"));
    }

    #[test]
    fn drain_is_an_upper_bound_and_start_and_end_show_nothing() {
        let st = Status {
            left_s: Some(4.2),
            ..status(RunPhase::Drain)
        };
        assert_eq!(
            format_progress(&st, 10).unwrap(),
            "drain   waiting for in-flight messages · ≤ 4.2s left"
        );
        assert_eq!(format_progress(&status(RunPhase::Starting), 10), None);
        assert_eq!(
            format_progress(&status(RunPhase::Done { interrupted: true }), 10),
            None
        );
    }
}
