//! A fault-injecting TCP proxy for tests: sits between msgbench and a broker and, on command,
//! resets every connection or turns into a blackhole.
//!
//! Modes (see [`FaultProxy`]):
//! - forward: bytes are relayed both ways (one thread per direction per connection);
//! - [`FaultProxy::refuse`]: chosen connections (by the order they arrive) are reset at once;
//! - [`FaultProxy::hold_first`]: the first connection is relayed only after a pause, a broker
//!   slow to answer its first client (as under load);
//! - [`FaultProxy::reset_all`]: every connection relayed so far is closed with a TCP RST on both
//!   sides (SO_LINGER 0, then close), as a middlebox or a crashed peer does; new connections
//!   are relayed again at once;
//! - [`FaultProxy::blackhole`]: nothing is forwarded any more, either way, on any connection,
//!   but no socket is closed, and new connections are accepted and held without being
//!   connected upstream: a silent network. Only a client's own timeouts (keep-alive, heartbeat,
//!   ack timeout) can notice;
//! - [`FaultProxy::restore`]: new connections are relayed again; the connections caught by the
//!   blackhole stay silent for good (a real partition does not resume a TCP stream its peer gave
//!   up on), so the client must open new ones.
//!
//! Plain std threads and blocking sockets: deterministic, no runtime to share with the test.
//! Each connection belongs to the epoch it was accepted in; a fault moves the epoch on, and a
//! relay thread forwards only while its connection's epoch is current, checked after every read
//! (reads time out every 50 ms so a silent connection notices too).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does with traffic now.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Forward,
    Blackhole,
}

struct Shared {
    upstream: SocketAddr,
    mode: Mutex<Mode>,
    /// Bumped by every fault: relays of an older epoch stop forwarding.
    epoch: AtomicU64,
    /// Every socket of the current and older epochs (client side and upstream side), for resets.
    socks: Mutex<Vec<(u64, TcpStream)>>,
    stop: AtomicBool,
    accepted: AtomicU64,
    /// Where each accepted connection came from, in order.
    peers: Mutex<Vec<SocketAddr>>,
    /// Accepted connections whose index (0-based) is in this range are reset at once.
    refuse: Mutex<std::ops::Range<u64>>,
    /// How long the first accepted connection waits before it is connected upstream.
    hold_first: Mutex<Duration>,
}

/// A proxy on 127.0.0.1 in front of `upstream`; stops (and closes everything) on drop.
pub struct FaultProxy {
    shared: Arc<Shared>,
    /// Where clients connect.
    pub port: u16,
}

impl FaultProxy {
    /// Starts forwarding from a free port to `upstream` (`127.0.0.1:PORT`).
    pub fn start(upstream: &str) -> FaultProxy {
        Self::start_on(0, upstream)
    }

    /// Starts forwarding from `port` (0: a free one) to `upstream`: a broker that advertises
    /// the proxy's address needs it at a known port. A port still held by the proxy before
    /// (its accept loop ends within 50 ms of its drop) is waited for, up to 5 s.
    pub fn start_on(port: u16, upstream: &str) -> FaultProxy {
        let upstream: SocketAddr = upstream.parse().expect("upstream as IP:PORT");
        let t = std::time::Instant::now();
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => break l,
                Err(_) if t.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("fault proxy: cannot listen on 127.0.0.1:{port}: {e}"),
            }
        };
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream,
            mode: Mutex::new(Mode::Forward),
            epoch: AtomicU64::new(0),
            socks: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
            peers: Mutex::new(Vec::new()),
            refuse: Mutex::new(0..0),
            hold_first: Mutex::new(Duration::ZERO),
        });
        let s = shared.clone();
        std::thread::spawn(move || accept_loop(listener, s));
        FaultProxy { shared, port }
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// The source address of every connection accepted so far, in order.
    pub fn peers(&self) -> Vec<SocketAddr> {
        self.shared.peers.lock().unwrap().clone()
    }

    /// Resets the connections accepted with these indexes (0-based) as soon as they arrive,
    /// as a server at its connection limit does; `n..u64::MAX` refuses every one from `n` on.
    pub fn refuse(&self, which: std::ops::Range<u64>) {
        *self.shared.refuse.lock().unwrap() = which;
    }

    /// The first connection accepted (from now on) is connected upstream only after `pause`;
    /// the others are not held up.
    pub fn hold_first(&self, pause: Duration) {
        *self.shared.hold_first.lock().unwrap() = pause;
    }

    /// Closes every connection with a reset (both sides); new ones are relayed.
    pub fn reset_all(&self) {
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        let socks = std::mem::take(&mut *self.shared.socks.lock().unwrap());
        for (_, s) in socks {
            rst(&s);
        }
    }

    /// Stops forwarding everything, closing nothing; connections accepted from now on are held
    /// unanswered.
    pub fn blackhole(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Blackhole;
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// New connections are relayed again (those caught by the blackhole stay silent).
    pub fn restore(&self) {
        *self.shared.mode.lock().unwrap() = Mode::Forward;
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        for (_, s) in std::mem::take(&mut *self.shared.socks.lock().unwrap()) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Closes `s` with a reset rather than a FIN: SO_LINGER on with a zero timeout, then shutdown
/// of our side's reading and the drop of this handle. Other handles of the same socket (the
/// relay threads' clones) keep it open until they close too, so the linger setting is what
/// makes their close a reset; the shutdown wakes them.
fn rst(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a properly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = s.shutdown(Shutdown::Read);
}

fn accept_loop(listener: TcpListener, s: Arc<Shared>) {
    let mut held = Vec::new(); // connections accepted during a blackhole: never answered
    while !s.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, peer)) => {
                s.peers.lock().unwrap().push(peer);
                c
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let index = s.accepted.fetch_add(1, Ordering::SeqCst);
        client.set_nonblocking(false).unwrap();
        if s.refuse.lock().unwrap().contains(&index) {
            rst(&client);
            continue;
        }
        if *s.mode.lock().unwrap() == Mode::Blackhole {
            held.push(client);
            continue;
        }
        let pause = *s.hold_first.lock().unwrap();
        if index == 0 && !pause.is_zero() {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(pause);
                relay_upstream(client, s)
            });
            continue;
        }
        relay_upstream(client, s.clone());
    }
}

/// Connects `client` to the upstream and relays both ways (a thread per direction).
fn relay_upstream(client: TcpStream, s: Arc<Shared>) {
    let Ok(up) = TcpStream::connect_timeout(&s.upstream, Duration::from_secs(2)) else {
        rst(&client); // upstream down: refuse, as the broker itself would
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = up.set_nodelay(true);
    let epoch = s.epoch.load(Ordering::SeqCst);
    {
        let mut socks = s.socks.lock().unwrap();
        socks.push((epoch, client.try_clone().unwrap()));
        socks.push((epoch, up.try_clone().unwrap()));
    }
    for (from, to) in [
        (client.try_clone().unwrap(), up.try_clone().unwrap()),
        (up, client),
    ] {
        let s = s.clone();
        std::thread::spawn(move || relay(from, to, epoch, s));
    }
}

/// Copies `from` to `to` while `epoch` is current. The end of `from` (FIN or error) is passed
/// on as a shutdown of `to`'s writing; a fault leaves both sockets as they are.
fn relay(mut from: TcpStream, mut to: TcpStream, epoch: u64, s: Arc<Shared>) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if s.epoch.load(Ordering::SeqCst) != epoch {
            park(from, to, s);
            return;
        }
        match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if s.epoch.load(Ordering::SeqCst) != epoch {
                    park(from, to, s);
                    return;
                }
                if to.write_all(&buf[..n]).is_err() {
                    let _ = from.shutdown(Shutdown::Both);
                    return;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// A fault hit the connection: after a reset, drops this thread's handles (the last handle's
/// close sends the RST, SO_LINGER being 0); in a blackhole, holds them, unread, until the proxy
/// stops or everything is reset.
fn park(from: TcpStream, to: TcpStream, s: Arc<Shared>) {
    if *s.mode.lock().unwrap() == Mode::Forward {
        return;
    }
    // Until the end, or a reset of everything (`reset_all` moves the epoch on): then these
    // handles go too, so the reset reaches connections the blackhole caught.
    let parked_in = s.epoch.load(Ordering::SeqCst);
    while !s.stop.load(Ordering::SeqCst) && s.epoch.load(Ordering::SeqCst) == parked_in {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop((from, to));
}
