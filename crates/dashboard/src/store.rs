//! The run history: one SQLite row per run with its summary and the path of its results file.
//!
//! The row is an index, not the record: the results file stays the contract, and the run page
//! of the dashboard renders from it. The summary columns are what the runs list shows and
//! searches without opening every file. One row per results file (re-recording a file, as
//! `--import` of a file already known does, updates its row).
//!
//! Several `msgbench run` processes may finish at once: the database uses WAL journaling and a
//! busy timeout, so writers wait for each other and readers (the dashboard) never block them.

use crate::DashboardError;
use msgbench_report::RunReport;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The schema version this build writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id               INTEGER PRIMARY KEY,
    name             TEXT NOT NULL,
    tags             TEXT NOT NULL DEFAULT '',
    target           TEXT NOT NULL,
    run_id           INTEGER NOT NULL DEFAULT 0,
    started_unix_ms  INTEGER NOT NULL,
    duration_s       REAL NOT NULL,
    sent_per_s       REAL NOT NULL,
    received_per_s   REAL NOT NULL,
    e2e_p50_ns       INTEGER NOT NULL,
    e2e_p99_ns       INTEGER NOT NULL,
    e2e_max_ns       INTEGER NOT NULL,
    publish_p50_ns   INTEGER NOT NULL,
    publish_p99_ns   INTEGER NOT NULL,
    publish_max_ns   INTEGER NOT NULL,
    lost             INTEGER NOT NULL,
    duplicated       INTEGER NOT NULL,
    interrupted      INTEGER NOT NULL,
    complete         INTEGER NOT NULL,
    results_path     TEXT NOT NULL UNIQUE,
    recorded_unix_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_started ON runs(started_unix_ms);
";

/// The summary of one run as the history keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// Row id (0 before it is stored).
    pub id: i64,
    /// Run name from the plan.
    pub name: String,
    /// Tags from the plan (`tags` as a list of strings, or `key=value` for a table), if any.
    pub tags: Vec<String>,
    /// Target URL, credentials removed.
    pub target: String,
    /// The run id stamped in every message.
    pub run_id: u32,
    /// Wall-clock start, Unix milliseconds.
    pub started_unix_ms: i64,
    /// Seconds from start to end.
    pub duration_s: f64,
    /// Messages sent per second in the measure phase.
    pub sent_per_s: f64,
    /// Messages received per second (measure phase and its drain).
    pub received_per_s: f64,
    /// End-to-end latency median, ns.
    pub e2e_p50_ns: i64,
    /// End-to-end latency 99th percentile, ns.
    pub e2e_p99_ns: i64,
    /// Largest end-to-end latency, ns.
    pub e2e_max_ns: i64,
    /// Publish latency median, ns.
    pub publish_p50_ns: i64,
    /// Publish latency 99th percentile, ns.
    pub publish_p99_ns: i64,
    /// Largest publish latency, ns.
    pub publish_max_ns: i64,
    /// Messages lost.
    pub lost: i64,
    /// Duplicate deliveries.
    pub duplicated: i64,
    /// Stopped early by Ctrl-C or SIGTERM.
    pub interrupted: bool,
    /// The results file has its `end` record.
    pub complete: bool,
    /// Absolute path of the results file.
    pub results_path: String,
    /// When the row was written, Unix milliseconds.
    pub recorded_unix_ms: i64,
}

fn ns(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Tags of a plan: `tags = ["a", "b"]` gives `a`, `b`; `tags = { env = "ci" }` gives `env=ci`.
pub fn plan_tags(plan: &serde_json::Value) -> Vec<String> {
    match plan.get("tags") {
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        Some(serde_json::Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v.as_str() {
                Some(s) => format!("{k}={s}"),
                None => format!("{k}={v}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

impl RunSummary {
    /// The summary of `report`, whose results file is `results_path` (made absolute here).
    pub fn from_report(report: &RunReport, results_path: &Path) -> Self {
        let r = report.result.as_ref();
        let path = std::fs::canonicalize(results_path)
            .or_else(|_| std::path::absolute(results_path))
            .unwrap_or_else(|_| results_path.to_path_buf());
        RunSummary {
            id: 0,
            name: report.name.clone(),
            tags: plan_tags(&report.begin.plan),
            target: report.target.clone(),
            run_id: report
                .begin
                .plan
                .get("run_id")
                .and_then(|v| v.as_u64())
                .map_or(0, |v| v as u32),
            started_unix_ms: ns(report.begin.started_unix_ms),
            duration_s: report.duration_s,
            sent_per_s: r.map_or(0.0, |r| r.sent_per_s),
            received_per_s: r.map_or(0.0, |r| r.received_per_s),
            e2e_p50_ns: r.map_or(0, |r| ns(r.e2e.p50)),
            e2e_p99_ns: r.map_or(0, |r| ns(r.e2e.p99)),
            e2e_max_ns: r.map_or(0, |r| ns(r.e2e.max)),
            publish_p50_ns: r.map_or(0, |r| ns(r.publish.p50)),
            publish_p99_ns: r.map_or(0, |r| ns(r.publish.p99)),
            publish_max_ns: r.map_or(0, |r| ns(r.publish.max)),
            lost: ns(report.integrity.lost),
            duplicated: ns(report.integrity.duplicated),
            interrupted: report.interrupted,
            complete: report.complete,
            results_path: path.to_string_lossy().into_owned(),
            recorded_unix_ms: 0,
        }
    }
}

/// Where the history lives unless told otherwise: `$MSGBENCH_RESULTS_DB`, else
/// `$XDG_DATA_HOME/msgbench/runs.db`, else `~/.local/share/msgbench/runs.db`.
pub fn default_path() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = env("MSGBENCH_RESULTS_DB") {
        return Some(PathBuf::from(p));
    }
    if let Some(d) = env("XDG_DATA_HOME") {
        return Some(PathBuf::from(d).join("msgbench").join("runs.db"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".local/share/msgbench/runs.db"))
}

/// One search term: `name:x`, `tag:x`, `target:x`, or a bare word matching any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Field(&'static str, String),
    Any(String),
}

fn parse_query(q: &str) -> Vec<Term> {
    q.split_whitespace()
        .map(|w| {
            for (prefix, col) in [("name:", "name"), ("tag:", "tags"), ("target:", "target")] {
                if let Some(v) = w.strip_prefix(prefix) {
                    return Term::Field(col, v.to_string());
                }
            }
            Term::Any(w.to_string())
        })
        .filter(|t| !matches!(t, Term::Field(_, v) | Term::Any(v) if v.is_empty()))
        .collect()
}

/// `%x%` with LIKE's wildcards in `x` escaped (by `\`).
fn like_pattern(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('%');
    for ch in s.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('%');
    out
}

/// The run history database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

const COLUMNS: &str = "id, name, tags, target, run_id, started_unix_ms, duration_s, sent_per_s, \
    received_per_s, e2e_p50_ns, e2e_p99_ns, e2e_max_ns, publish_p50_ns, publish_p99_ns, \
    publish_max_ns, lost, duplicated, interrupted, complete, results_path, recorded_unix_ms";

fn from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    let tags: String = r.get(2)?;
    Ok(RunSummary {
        id: r.get(0)?,
        name: r.get(1)?,
        tags: serde_json::from_str(&tags).unwrap_or_default(),
        target: r.get(3)?,
        run_id: r.get::<_, i64>(4)? as u32,
        started_unix_ms: r.get(5)?,
        duration_s: r.get(6)?,
        sent_per_s: r.get(7)?,
        received_per_s: r.get(8)?,
        e2e_p50_ns: r.get(9)?,
        e2e_p99_ns: r.get(10)?,
        e2e_max_ns: r.get(11)?,
        publish_p50_ns: r.get(12)?,
        publish_p99_ns: r.get(13)?,
        publish_max_ns: r.get(14)?,
        lost: r.get(15)?,
        duplicated: r.get(16)?,
        interrupted: r.get(17)?,
        complete: r.get(18)?,
        results_path: r.get(19)?,
        recorded_unix_ms: r.get(20)?,
    })
}

impl Store {
    /// Opens (creating the file and its directory if needed) the history at `path`.
    ///
    /// # Errors
    /// [`DashboardError::Store`] when the directory cannot be created or the file is not a
    /// database of this format.
    pub fn open(path: &Path) -> Result<Self, DashboardError> {
        let err = |e: &dyn std::fmt::Display| DashboardError::Store {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
        }
        let conn = Connection::open(path).map_err(|e| err(&e))?;
        let store = Store {
            conn,
            path: path.to_path_buf(),
        };
        store.init().map_err(|e| err(&e))?;
        Ok(store)
    }

    /// An in-memory history (tests).
    pub fn in_memory() -> Result<Self, DashboardError> {
        let conn = Connection::open_in_memory().map_err(|e| DashboardError::Store {
            path: PathBuf::from(":memory:"),
            message: e.to_string(),
        })?;
        let store = Store {
            conn,
            path: PathBuf::from(":memory:"),
        };
        store.init().map_err(|message| DashboardError::Store {
            path: store.path.clone(),
            message,
        })?;
        Ok(store)
    }

    fn init(&self) -> Result<(), String> {
        let sql = |e: rusqlite::Error| e.to_string();
        self.conn
            .busy_timeout(Duration::from_secs(10))
            .map_err(sql)?;
        // WAL: readers never block the writer (a run finishing while the dashboard reads).
        let _mode: String = self
            .conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(sql)?;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(sql)?;
        if version > SCHEMA_VERSION {
            return Err(format!(
                "written by a newer msgbench (history schema {version}; this one knows {SCHEMA_VERSION})"
            ));
        }
        self.conn.execute_batch(CREATE).map_err(sql)?;
        self.conn
            .execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
            .map_err(sql)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> DashboardError {
        DashboardError::Store {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Records a run (replacing the row of the same results file); returns its row id.
    pub fn insert(&self, s: &RunSummary) -> Result<i64, DashboardError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        self.conn
            .query_row(
                "INSERT INTO runs (name, tags, target, run_id, started_unix_ms, duration_s, \
                 sent_per_s, received_per_s, e2e_p50_ns, e2e_p99_ns, e2e_max_ns, publish_p50_ns, \
                 publish_p99_ns, publish_max_ns, lost, duplicated, interrupted, complete, \
                 results_path, recorded_unix_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20) \
                 ON CONFLICT(results_path) DO UPDATE SET name = excluded.name, tags = excluded.tags, \
                 target = excluded.target, run_id = excluded.run_id, \
                 started_unix_ms = excluded.started_unix_ms, duration_s = excluded.duration_s, \
                 sent_per_s = excluded.sent_per_s, received_per_s = excluded.received_per_s, \
                 e2e_p50_ns = excluded.e2e_p50_ns, e2e_p99_ns = excluded.e2e_p99_ns, \
                 e2e_max_ns = excluded.e2e_max_ns, publish_p50_ns = excluded.publish_p50_ns, \
                 publish_p99_ns = excluded.publish_p99_ns, publish_max_ns = excluded.publish_max_ns, \
                 lost = excluded.lost, duplicated = excluded.duplicated, \
                 interrupted = excluded.interrupted, complete = excluded.complete, \
                 recorded_unix_ms = excluded.recorded_unix_ms \
                 RETURNING id",
                params![
                    s.name,
                    serde_json::to_string(&s.tags).unwrap_or_else(|_| "[]".into()),
                    s.target,
                    i64::from(s.run_id),
                    s.started_unix_ms,
                    s.duration_s,
                    s.sent_per_s,
                    s.received_per_s,
                    s.e2e_p50_ns,
                    s.e2e_p99_ns,
                    s.e2e_max_ns,
                    s.publish_p50_ns,
                    s.publish_p99_ns,
                    s.publish_max_ns,
                    s.lost,
                    s.duplicated,
                    s.interrupted,
                    s.complete,
                    s.results_path,
                    now,
                ],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// Runs matching `query`, newest first, at most `limit`. Each whitespace-separated term
    /// must match (case-insensitive substring): `name:x`, `tag:x` and `target:x` look in one
    /// field, a bare word in any of the three.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<RunSummary>, DashboardError> {
        let mut sql = format!("SELECT {COLUMNS} FROM runs WHERE 1 = 1");
        let mut args: Vec<String> = Vec::new();
        for term in parse_query(query) {
            match term {
                Term::Field(col, v) => {
                    args.push(like_pattern(&v));
                    sql.push_str(&format!(" AND {col} LIKE ?{} ESCAPE '\\'", args.len()));
                }
                Term::Any(v) => {
                    args.push(like_pattern(&v));
                    let n = args.len();
                    sql.push_str(&format!(
                        " AND (name LIKE ?{n} ESCAPE '\\' OR tags LIKE ?{n} ESCAPE '\\' \
                         OR target LIKE ?{n} ESCAPE '\\')"
                    ));
                }
            }
        }
        sql.push_str(&format!(
            " ORDER BY started_unix_ms DESC, id DESC LIMIT {}",
            limit.min(i64::MAX as usize)
        ));
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params_from_iter(args.iter()), from_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))
    }

    /// The run with row id `id`.
    pub fn get(&self, id: i64) -> Result<Option<RunSummary>, DashboardError> {
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"),
                [id],
                from_row,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Number of runs recorded.
    pub fn count(&self) -> Result<u64, DashboardError> {
        self.conn
            .query_row("SELECT COUNT(*) FROM runs", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(name: &str, tags: &[&str], target: &str, started: i64, path: &str) -> RunSummary {
        RunSummary {
            id: 0,
            name: name.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            target: target.into(),
            run_id: 7,
            started_unix_ms: started,
            duration_s: 10.0,
            sent_per_s: 1000.0,
            received_per_s: 999.0,
            e2e_p50_ns: 1_000,
            e2e_p99_ns: 5_000,
            e2e_max_ns: 9_000,
            publish_p50_ns: 500,
            publish_p99_ns: 900,
            publish_max_ns: 1_000,
            lost: 1,
            duplicated: 2,
            interrupted: false,
            complete: true,
            results_path: path.into(),
            recorded_unix_ms: 0,
        }
    }

    fn names(v: &[RunSummary]) -> Vec<&str> {
        v.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn insert_get_and_search() {
        let st = Store::in_memory().unwrap();
        let a = st
            .insert(&summary(
                "nats baseline",
                &["env=ci", "nightly"],
                "nats://h:4222",
                1000,
                "/r/a.jsonl",
            ))
            .unwrap();
        st.insert(&summary(
            "mqtt qos1",
            &["nightly"],
            "mqtt://h:1883",
            2000,
            "/r/b.jsonl",
        ))
        .unwrap();
        st.insert(&summary("100%_done", &[], "mem://", 3000, "/r/c.jsonl"))
            .unwrap();
        assert_eq!(st.count().unwrap(), 3);

        let got = st.get(a).unwrap().unwrap();
        assert_eq!(got.name, "nats baseline");
        assert_eq!(got.tags, vec!["env=ci", "nightly"]);
        assert_eq!(got.e2e_p99_ns, 5_000);
        assert!(got.recorded_unix_ms > 0);
        assert!(st.get(9999).unwrap().is_none());

        // Newest first; every term must match; fields can be named.
        assert_eq!(
            names(&st.search("", 10).unwrap()),
            ["100%_done", "mqtt qos1", "nats baseline"]
        );
        assert_eq!(
            names(&st.search("nightly", 10).unwrap()),
            ["mqtt qos1", "nats baseline"]
        );
        assert_eq!(
            names(&st.search("tag:ENV=ci", 10).unwrap()),
            ["nats baseline"]
        );
        assert_eq!(names(&st.search("target:mqtt", 10).unwrap()), ["mqtt qos1"]);
        assert_eq!(
            names(&st.search("nightly target:nats", 10).unwrap()),
            ["nats baseline"]
        );
        assert_eq!(
            names(&st.search("name:nats target:mqtt", 10).unwrap()),
            Vec::<&str>::new()
        );
        assert_eq!(
            names(&st.search("name:base", 10).unwrap()),
            ["nats baseline"]
        );
        // LIKE wildcards in a term are literal characters.
        assert_eq!(names(&st.search("100%_", 10).unwrap()), ["100%_done"]);
        assert_eq!(names(&st.search("%", 10).unwrap()), ["100%_done"]);
        assert_eq!(st.search("", 2).unwrap().len(), 2);
    }

    #[test]
    fn the_same_results_file_is_one_row() {
        let st = Store::in_memory().unwrap();
        let a = st
            .insert(&summary("first", &[], "mem://", 1, "/r/a.jsonl"))
            .unwrap();
        let b = st
            .insert(&summary("again", &[], "mem://", 1, "/r/a.jsonl"))
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(st.count().unwrap(), 1);
        assert_eq!(st.get(a).unwrap().unwrap().name, "again");
    }

    #[test]
    fn a_file_store_is_created_with_its_directory_and_reopened() {
        let dir = std::env::temp_dir().join(format!("msgbench-store-{}", std::process::id()));
        let path = dir.join("deep/runs.db");
        {
            let st = Store::open(&path).unwrap();
            st.insert(&summary("kept", &[], "mem://", 1, "/r/k.jsonl"))
                .unwrap();
        }
        let st = Store::open(&path).unwrap();
        assert_eq!(names(&st.search("kept", 5).unwrap()), ["kept"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_is_not_a_database_is_a_clear_error() {
        let dir = std::env::temp_dir().join(format!("msgbench-store-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("runs.db");
        std::fs::write(
            &path,
            "this is not sqlite, just text long enough to have a header....",
        )
        .unwrap();
        let e = Store::open(&path).unwrap_err().to_string();
        assert!(e.contains("runs.db"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_history_from_a_newer_msgbench_is_refused() {
        let dir = std::env::temp_dir().join(format!("msgbench-store-new-{}", std::process::id()));
        let path = dir.join("runs.db");
        drop(Store::open(&path).unwrap());
        let c = Connection::open(&path).unwrap();
        c.execute_batch("PRAGMA user_version = 99").unwrap();
        drop(c);
        let e = Store::open(&path).unwrap_err().to_string();
        assert!(e.contains("newer msgbench"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn tags_from_plans() {
        let list = serde_json::json!({"tags": ["a", "b"]});
        assert_eq!(plan_tags(&list), ["a", "b"]);
        let table = serde_json::json!({"tags": {"env": "ci", "n": 3}});
        assert_eq!(plan_tags(&table), ["env=ci", "n=3"]);
        assert!(plan_tags(&serde_json::json!({})).is_empty());
    }
}
