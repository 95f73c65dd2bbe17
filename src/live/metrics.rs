//! `msgbench run --metrics ADDR`: the live figures in the Prometheus text format at
//! `http://ADDR/metrics` while the run lasts.
//!
//! The view hands each record to a task on the run's runtime over an unbounded channel (one
//! record per interval, so it never blocks the aggregation thread); that task folds the records
//! into a [`Exporter`] and renders the page once per batch. A small HTTP/1.1 responder answers
//! every request with the latest page (a clone of an `Arc`), so scrapes never wait for the
//! fold and never touch the run. Serving stops when the run ends ([`LiveView::finish`]).

use super::LiveView;
use anyhow::{Context, Result, bail};
use msgbench_report::Record;
use msgbench_report::prometheus::{CONTENT_TYPE, Exporter};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Longest request head read, bytes.
const MAX_HEAD: usize = 8192;
/// A client has this long to send its request head.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// `--metrics` value to a socket address: `PORT` and `:PORT` mean 127.0.0.1 (loopback only,
/// unless an address is given); `HOST:PORT` as given (port 0 picks a free port).
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    let s = s.trim();
    let full = if let Ok(port) = s.parse::<u16>() {
        format!("127.0.0.1:{port}")
    } else if let Some(port) = s.strip_prefix(':') {
        format!("127.0.0.1:{port}")
    } else {
        s.to_string()
    };
    let mut addrs = full.to_socket_addrs().with_context(|| {
        format!("--metrics {s}: not an address (expected PORT, :PORT or HOST:PORT)")
    })?;
    match addrs.next() {
        Some(a) => Ok(a),
        None => bail!("--metrics {s}: the host name resolves to no address"),
    }
}

/// The Prometheus endpoint of one run.
pub struct MetricsView {
    records: Option<mpsc::UnboundedSender<Record>>,
    stop: Option<watch::Sender<bool>>,
    addr: SocketAddr,
}

impl MetricsView {
    /// Binds `addr` and starts serving on `rt` (nothing to serve until the first record).
    pub fn start(rt: &tokio::runtime::Runtime, addr: SocketAddr) -> Result<MetricsView> {
        let listener = rt
            .block_on(TcpListener::bind(addr))
            .with_context(|| format!("--metrics: cannot listen on {addr}"))?;
        let addr = listener.local_addr()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let (page_tx, page_rx) = watch::channel(Arc::new(Exporter::new().render()));
        let (stop_tx, stop_rx) = watch::channel(false);
        rt.spawn(fold(rx, page_tx));
        rt.spawn(serve(listener, page_rx, stop_rx));
        Ok(MetricsView {
            records: Some(tx),
            stop: Some(stop_tx),
            addr,
        })
    }

    /// Where it listens (the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl LiveView for MetricsView {
    fn record(&mut self, record: &Record) {
        if let Some(tx) = &self.records {
            // Fails only once the fold task is gone (runtime shutting down): nothing to show.
            let _ = tx.send(record.clone());
        }
    }

    fn finish(&mut self) {
        self.records = None;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

/// Folds records as they come and publishes the rendered page after each batch.
async fn fold(mut rx: mpsc::UnboundedReceiver<Record>, page: watch::Sender<Arc<String>>) {
    let mut exporter = Exporter::new();
    while let Some(r) = rx.recv().await {
        exporter.add(&r);
        while let Ok(r) = rx.try_recv() {
            exporter.add(&r);
        }
        let _ = page.send(Arc::new(exporter.render()));
    }
}

async fn serve(
    listener: TcpListener,
    page: watch::Receiver<Arc<String>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let page = page.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(READ_TIMEOUT * 2, answer(stream, page)).await;
                });
            }
        }
    }
}

/// Reads one request head and answers it; the connection closes after the response.
async fn answer(mut stream: TcpStream, page: watch::Receiver<Arc<String>>) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                "request head too large\n",
                false,
            )
            .await;
        }
        let n = match tokio::time::timeout(READ_TIMEOUT, stream.read(&mut buf)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let body = page.borrow().clone();
            respond(&mut stream, "200 OK", CONTENT_TYPE, &body, head_only).await
        }
        ("GET" | "HEAD", "/") => {
            respond(
                &mut stream,
                "200 OK",
                "text/plain; charset=utf-8",
                "msgbench: Prometheus metrics of the running benchmark at /metrics\n",
                head_only,
            )
            .await
        }
        ("GET" | "HEAD", _) => {
            respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                "not found: try /metrics\n",
                head_only,
            )
            .await
        }
        _ => {
            respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                "only GET and HEAD\n",
                false,
            )
            .await
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &str,
    head_only: bool,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&out).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, request: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn addresses() {
        assert_eq!(
            parse_addr("9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_addr(":9464").unwrap(),
            "127.0.0.1:9464".parse().unwrap()
        );
        assert_eq!(
            parse_addr("0.0.0.0:80").unwrap(),
            "0.0.0.0:80".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        let e = parse_addr("nonsense").unwrap_err().to_string();
        assert!(e.contains("--metrics nonsense"), "{e}");
        assert!(parse_addr("127.0.0.1:99999").is_err());
    }

    #[test]
    fn serves_the_latest_records_until_finished() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let mut v = MetricsView::start(&rt, "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = v.local_addr();
        assert_ne!(addr.port(), 0);
        let f = std::fs::File::open("crates/report/tests/fixtures/run.jsonl").unwrap();
        let records = msgbench_report::read_records(std::io::BufReader::new(f)).unwrap();
        for r in &records {
            v.record(r);
        }
        let mut body = String::new();
        for _ in 0..100 {
            body = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            if body.contains("msgbench_run_finished{run=\"msgbench\",target=\"mem://fixture\"} 1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
        assert!(body.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
        assert!(
            body.contains("msgbench_messages_sent_total{run=\"msgbench\",target=\"mem://fixture\",phase=\"measure\"} 10001"),
            "{body}"
        );
        let (head, payload) = body.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, payload.len());
        let head_only = get(addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(head_only.ends_with("\r\n\r\n"), "HEAD has no body");
        assert!(get(addr, "GET /nope HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        v.finish();
        let mut closed = false;
        for _ in 0..100 {
            if std::net::TcpStream::connect(addr).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(closed, "the endpoint stops with the run");
    }
}
