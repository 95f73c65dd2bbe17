//! When a run releases its load: as soon as everything is connected, or at a wall-clock instant
//! shared by the segments of a segmented run (`--start-at`), and when a segment, which cannot
//! know what the other segments still send, may stop waiting for deliveries.

use crate::clock::now_ns;
use crate::scenario::RunPlan;

/// How long a segment's consumers must have received nothing before its drain ends.
pub(crate) const SEGMENT_QUIET_NS: u64 = 1_000_000_000;

/// When to release the load: `lead_ns` from now, or at the plan's `start_at` if that is later.
/// A start instant already past (connecting took too long) releases at once and says how late.
pub(crate) fn release_instant(plan: &RunPlan, lead_ns: u64) -> (u64, Option<String>) {
    let now = now_ns();
    let asap = now + lead_ns;
    let Some(at_ms) = plan.start_at_unix_ms else {
        return (asap, None);
    };
    // The wall clock this process measures with: anchored (and corrected) or the kernel's.
    let wall_now = if crate::clock::anchored() {
        now
    } else {
        crate::clock::realtime_ns()
    };
    let at_wall = at_ms.saturating_mul(1_000_000);
    let t0 = now + at_wall.saturating_sub(wall_now);
    if t0 >= asap {
        return (t0, None);
    }
    let late_ms = (asap - t0) as f64 / 1e6;
    (
        asap,
        Some(format!(
            "late start: the load was released {late_ms:.1} ms after --start-at (connecting took longer than the time left); this segment's intervals are shifted by that much against the others"
        )),
    )
}
