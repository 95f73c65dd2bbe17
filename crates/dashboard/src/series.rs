//! Time series with bounded memory: the columns a chart shows, and a downsampler that keeps at
//! most [`DEFAULT_CAP`] points whatever the length of the run.
//!
//! Every series of a view shares one time axis, so points are rows: column 0 is the end of the
//! window (seconds since the start of the run), column 1 its length, and the other columns are
//! figures of that window. Each column says how two adjacent points merge ([`Merge`]): rates are
//! averaged weighted by window length, counts summed, latency percentiles and levels keep the
//! larger value (a merged point never hides a spike), cumulative counts keep the later value.
//!
//! Downsampling keeps a uniform resolution: raw points are folded into buckets of `stride` raw
//! points; when more than `cap` buckets are held, adjacent pairs merge and the stride doubles. A
//! 24-hour run at one point per second therefore ends with between `cap / 2` and `cap` points of
//! 32 seconds each. The browser runs the same algorithm on the points it receives live (the
//! merge kind of each column is part of the [`Schema`] sent to it), so both hold the same
//! picture.

use serde::Serialize;

/// Most points a [`Downsampler`] holds by default (a few thousand: uPlot draws that instantly).
pub const DEFAULT_CAP: usize = 4000;

/// How two adjacent points of one column become one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Merge {
    /// Mean weighted by window length (column 1): rates, CPU use.
    Mean,
    /// Sum: window lengths, counts per window.
    Sum,
    /// The larger value: latency percentiles, levels such as memory or connections held.
    Max,
    /// The later value: time, cumulative counts.
    Last,
}

/// One column of a series: what it is and how it merges.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    /// Stable key (`sent_per_s`, `e2e.p99`).
    pub key: String,
    /// Legend label.
    pub label: String,
    /// Chart it belongs to (columns with the same chart share one plot); empty for the axis.
    pub chart: String,
    /// Unit of the values (`msgs/s`, `ms`, `cores`, `bytes`, `count`, `s`).
    pub unit: String,
    /// How adjacent points merge.
    pub merge: Merge,
}

impl Column {
    /// A column.
    pub fn new(key: &str, label: &str, chart: &str, unit: &str, merge: Merge) -> Self {
        Column {
            key: key.into(),
            label: label.into(),
            chart: chart.into(),
            unit: unit.into(),
            merge,
        }
    }
}

/// A chart: the columns whose `chart` is its id are drawn in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chart {
    /// Id the columns refer to.
    pub id: String,
    /// Title shown above the plot.
    pub title: String,
    /// Unit of its values (all its columns share it).
    pub unit: String,
}

/// The columns of a series and the charts they are drawn in. Column 0 is the time axis (`t`,
/// seconds since the start of the run, [`Merge::Last`]) and column 1 the window length (`dt`,
/// [`Merge::Sum`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schema {
    /// Every column, in row order.
    pub columns: Vec<Column>,
    /// The charts, in display order.
    pub charts: Vec<Chart>,
}

impl Schema {
    /// A schema of the time axis, the window length and `columns`.
    pub fn new(columns: impl IntoIterator<Item = Column>) -> Self {
        let mut all = vec![
            Column::new("t", "time", "", "s", Merge::Last),
            Column::new("dt", "window", "", "s", Merge::Sum),
        ];
        all.extend(columns);
        Schema {
            columns: all,
            charts: Vec::new(),
        }
    }

    /// Adds a chart (shown after those added before).
    pub fn chart(&mut self, id: &str, title: &str, unit: &str) {
        self.charts.push(Chart {
            id: id.into(),
            title: title.into(),
            unit: unit.into(),
        });
    }

    /// Index of the column named `key`.
    pub fn index(&self, key: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.key == key)
    }

    /// Number of columns (the length of every row).
    pub fn len(&self) -> usize {
        self.columns.len()
    }

    /// Whether the schema has no columns (never true: it always has `t` and `dt`).
    pub fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }
}

/// One point: a value per column of its [`Schema`]; `NaN` is "no value" (serialized as
/// `null`, which charts draw as a gap).
pub type Row = Vec<f64>;

/// Merges `b` (the later point) into `a` by the schema's rules. Missing values (`NaN`) never
/// win: the merge of a value and a gap is the value.
pub fn merge_into(schema: &Schema, a: &mut Row, b: &Row) {
    let (wa, wb) = (a[1], b[1]);
    for (k, col) in schema.columns.iter().enumerate() {
        let (x, y) = (a[k], b[k]);
        a[k] = if x.is_nan() {
            y
        } else if y.is_nan() {
            x
        } else {
            match col.merge {
                Merge::Last => y,
                Merge::Sum => x + y,
                Merge::Max => x.max(y),
                Merge::Mean => {
                    let w = wa + wb;
                    if w > 0.0 && wa.is_finite() && wb.is_finite() {
                        (x * wa + y * wb) / w
                    } else {
                        (x + y) / 2.0
                    }
                }
            }
        };
    }
}

/// Points of one view with bounded memory (see the module docs).
#[derive(Debug, Clone, Serialize)]
pub struct Downsampler {
    /// The columns.
    pub schema: Schema,
    /// Most points held (complete buckets and the pending one).
    pub cap: usize,
    /// Raw points per bucket.
    pub stride: u64,
    /// Complete buckets, oldest first.
    pub points: Vec<Row>,
    /// The bucket being filled and how many raw points it holds (fewer than `stride`).
    pub pending: Option<(Row, u64)>,
    /// Raw points pushed so far.
    pub raw_points: u64,
}

impl Downsampler {
    /// Keeps at most `cap` points (at least 2) of `schema`.
    pub fn new(schema: Schema, cap: usize) -> Self {
        Downsampler {
            schema,
            cap: cap.max(2),
            stride: 1,
            points: Vec::new(),
            pending: None,
            raw_points: 0,
        }
    }

    /// Adds one raw point.
    ///
    /// # Panics
    /// If the row's length is not the schema's (a programming error).
    pub fn push(&mut self, row: Row) {
        assert_eq!(
            row.len(),
            self.schema.len(),
            "row does not match the schema"
        );
        self.raw_points += 1;
        let (bucket, n) = match self.pending.take() {
            None => (row, 1),
            Some((mut acc, n)) => {
                merge_into(&self.schema, &mut acc, &row);
                (acc, n + 1)
            }
        };
        if n < self.stride {
            self.pending = Some((bucket, n));
            return;
        }
        self.points.push(bucket);
        if self.points.len() >= self.cap {
            self.halve();
        }
    }

    /// Merges adjacent pairs of complete buckets and doubles the stride (called when `cap`
    /// complete buckets are held, so with the pending one there are never more than `cap`).
    fn halve(&mut self) {
        let old = std::mem::take(&mut self.points);
        let mut out = Vec::with_capacity(old.len() / 2 + 1);
        let mut it = old.into_iter();
        while let Some(mut a) = it.next() {
            if let Some(b) = it.next() {
                merge_into(&self.schema, &mut a, &b);
                out.push(a);
            } else {
                // An odd bucket out holds only `stride` raw points: it becomes the pending
                // bucket of the doubled stride, so every complete bucket stays uniform.
                self.pending = Some((a, self.stride));
            }
        }
        self.points = out;
        self.stride *= 2;
    }

    /// Every point to draw: the complete buckets, then the pending one (partial) if any.
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.points
            .iter()
            .chain(self.pending.as_ref().map(|(r, _)| r))
    }

    /// Number of points [`Downsampler::rows`] yields.
    pub fn len(&self) -> usize {
        self.points.len() + usize::from(self.pending.is_some())
    }

    /// Whether no point was pushed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new([
            Column::new("rate", "rate", "a", "msgs/s", Merge::Mean),
            Column::new("count", "count", "a", "count", Merge::Sum),
            Column::new("p99", "p99", "b", "ms", Merge::Max),
            Column::new("total", "total", "c", "count", Merge::Last),
        ])
    }

    fn raw(i: u64) -> Row {
        let spike = if i == 77_777 { 1000.0 } else { (i % 10) as f64 };
        vec![(i + 1) as f64, 1.0, 100.0, 1.0, spike, i as f64]
    }

    #[test]
    fn a_day_of_points_stays_bounded_and_exact_where_it_must_be() {
        let mut d = Downsampler::new(schema(), DEFAULT_CAP);
        let n = 86_400u64;
        let mut most = 0;
        for i in 0..n {
            d.push(raw(i));
            most = most.max(d.len());
        }
        assert!(most <= DEFAULT_CAP, "held {most} points");
        assert!(d.len() >= DEFAULT_CAP / 2, "too coarse: {} points", d.len());
        assert_eq!(d.raw_points, n);
        // Window lengths and sums add up to the raw figures; nothing is lost by merging.
        let dt: f64 = d.rows().map(|r| r[1]).sum();
        let count: f64 = d.rows().map(|r| r[3]).sum();
        assert_eq!(dt, n as f64);
        assert_eq!(count, n as f64);
        // Rates are window-weighted means; the spike survives as a maximum; the last point
        // ends at the last raw point.
        assert!(d.rows().all(|r| (r[2] - 100.0).abs() < 1e-9));
        assert_eq!(d.rows().map(|r| r[4]).fold(0.0, f64::max), 1000.0);
        let last = d.rows().last().unwrap();
        assert_eq!(last[0], n as f64);
        assert_eq!(last[5], (n - 1) as f64);
        // Complete buckets are uniform: each holds `stride` raw points.
        assert!(d.points.iter().all(|r| r[1] == d.stride as f64));
        assert_eq!(d.stride, 32);
    }

    #[test]
    fn short_runs_are_not_downsampled() {
        let mut d = Downsampler::new(schema(), DEFAULT_CAP);
        for i in 0..100 {
            d.push(raw(i));
        }
        assert_eq!(d.len(), 100);
        assert_eq!(d.stride, 1);
        assert!(d.pending.is_none());
    }

    #[test]
    fn gaps_do_not_erase_values() {
        let s = schema();
        let mut a = vec![1.0, 1.0, f64::NAN, 2.0, f64::NAN, 5.0];
        merge_into(&s, &mut a, &vec![2.0, 1.0, 10.0, 3.0, 4.0, f64::NAN]);
        assert_eq!(a[..5], [2.0, 2.0, 10.0, 5.0, 4.0]);
        assert_eq!(a[5], 5.0);
    }

    #[test]
    fn means_are_weighted_by_window_length() {
        let s = schema();
        let mut a = vec![1.0, 1.0, 100.0, 0.0, 0.0, 0.0];
        merge_into(&s, &mut a, &vec![4.0, 3.0, 200.0, 0.0, 0.0, 0.0]);
        assert_eq!(a[2], 175.0);
        assert_eq!(a[1], 4.0);
    }
}
