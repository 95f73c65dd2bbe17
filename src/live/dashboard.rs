//! The web dashboard as a live view: every record goes to the dashboard server's thread over
//! its bounded channel ([`msgbench_dashboard::LiveFeed`]); nothing here waits.

use super::LiveView;
use msgbench_dashboard::LiveFeed;
use msgbench_report::Record;

/// Forwards each record to the live dashboard.
pub struct DashboardView {
    feed: LiveFeed,
}

impl DashboardView {
    /// A view feeding `feed`.
    pub fn new(feed: LiveFeed) -> Self {
        Self { feed }
    }
}

impl LiveView for DashboardView {
    fn record(&mut self, record: &Record) {
        self.feed.send(record);
    }

    fn finish(&mut self) {
        let dropped = self.feed.dropped();
        if dropped > 0 {
            eprintln!(
                "msgbench: the dashboard fell behind and skipped {dropped} record(s) (the results file has them all)"
            );
        }
    }
}
