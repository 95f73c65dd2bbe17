//! Shared by the integration tests: plans built the way the CLI builds them (a `Scenario`
//! resolved by `plan::resolve`), the real runner, and an observer that keeps what it is told.
#![allow(dead_code)] // each test binary uses its own part

use msgbench_core::driver::EventSink;
use msgbench_core::runner::{self, EventKind, Observer, RunError, RunEvent, RunOutcome};
use msgbench_core::scenario::{
    ConsumersSection, OutputSection, PhasesSection, ProducersSection, RunPlan, Scenario, resolve,
};
use msgbench_core::shutdown::Shutdown;
use msgbench_driver_http::{HttpDriver, HttpOptions, HttpStats};
use msgbench_metrics::{IntervalStats, Phase, PhaseTotals};
use msgbench_serve::http::{HttpServer, ServerCounts};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Keeps every event and counts intervals.
#[derive(Default)]
pub struct Collect {
    pub events: Vec<RunEvent>,
    pub intervals: u32,
}

impl Observer for Collect {
    fn interval(&mut self, _iv: &IntervalStats) {
        self.intervals += 1;
    }
    fn event(&mut self, ev: &RunEvent) {
        self.events.push(ev.clone());
    }
}

impl Collect {
    /// Events whose detail contains `text`. Match on text, not kind: events the runner had
    /// not read live when the run ended are recorded by its closing sweep as kind "event".
    pub fn mentioning(&self, text: &str) -> Vec<&RunEvent> {
        self.events
            .iter()
            .filter(|e| e.detail.contains(text))
            .collect()
    }

    /// Events reported by the driver (not the runner's own phase and connect events).
    pub fn driver_events(&self) -> Vec<&RunEvent> {
        self.events
            .iter()
            .filter(|e| !matches!(e.kind, EventKind::Phase | EventKind::Connected))
            .collect()
    }
}

/// A count-bounded plan: `producers` connections sending `messages` requests in total of 128
/// bytes, `window` in flight per connection, no consumers, no warm-up.
pub fn plan(target: &str, producers: u32, messages: u64, window: usize) -> RunPlan {
    let s = Scenario {
        target: Some(target.into()),
        producers: ProducersSection {
            per_topic: Some(producers),
            max_in_flight: Some(window),
            size: Some("128".into()),
            ..Default::default()
        },
        consumers: ConsumersSection {
            per_topic: Some(0),
            ..Default::default()
        },
        phases: PhasesSection {
            warmup: Some("0s".into()),
            messages: Some(messages),
            drain: Some("5s".into()),
            ..Default::default()
        },
        output: OutputSection {
            tick: Some("100ms".into()),
            connect_timeout: Some("3s".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    resolve(&s, 0x4854_5450).expect("plan")
}

/// Runs `plan` with an HTTP driver for `opts`; the driver's statistics come back with the
/// outcome.
pub async fn run(
    plan: &RunPlan,
    opts: HttpOptions,
) -> (Result<RunOutcome, RunError>, Collect, Arc<HttpStats>) {
    let (sink, rx) = EventSink::channel();
    let driver =
        HttpDriver::new(&plan.target, opts, &plan.tls, sink, plan.connect_timeout).expect("driver");
    let stats = driver.stats();
    let mut obs = Collect::default();
    let out = runner::run(Arc::new(driver), plan, rx, &mut obs, Shutdown::new()).await;
    (out, obs, stats)
}

/// The measure phase's totals.
pub fn measure(out: &RunOutcome) -> &PhaseTotals {
    out.phases
        .iter()
        .find(|p| p.phase == Phase::Measure)
        .expect("a measure phase")
}

/// A built-in server on 127.0.0.1 (port chosen by the system); stops when the guard drops.
pub struct Served {
    pub url: String,
    pub counts: Arc<ServerCounts>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    pub async fn start(server: HttpServer) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/bench", listener.local_addr().unwrap());
        let counts = server.counts();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(listener, async {
            let _ = rx.await;
        }));
        Served {
            url,
            counts,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the server and waits for it to finish.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

pub fn opts(method: &str, http2: bool) -> HttpOptions {
    HttpOptions {
        method: method.into(),
        headers: vec![("x-msgbench".into(), "test".into())],
        http2,
        path: None,
        proxy: None,
    }
}
