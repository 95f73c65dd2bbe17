//! The target URL: `zmq://HOST:PORT?pattern=...&bind=...&peers=N&sndhwm=N&onhwm=...`,
//! parsed once, strictly.
//!
//! Every option is checked here, so a typo fails the run before anything binds or connects,
//! with an error that names the option.

use msgbench_core::driver::DriverError;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// ZeroMQ's default send high-water mark (`ZMQ_SNDHWM`), in messages.
pub const DEFAULT_SNDHWM: u32 = 1000;

/// A TCP endpoint: where a client binds or connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl Endpoint {
    /// As a connect target.
    pub fn target(&self) -> msgbench_net::Target {
        msgbench_net::Target {
            host: self.host.clone(),
            port: self.port,
        }
    }
}

impl fmt::Display for Endpoint {
    /// ZeroMQ's notation: `tcp://HOST:PORT`, IPv6 in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "tcp://[{}]:{}", self.host, self.port)
        } else {
            write!(f, "tcp://{}:{}", self.host, self.port)
        }
    }
}

/// What a PUB producer does with a message for a subscriber that already has `sndhwm`
/// messages waiting in the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnHwm {
    /// Wait until the subscriber takes more (backpressure: nothing is lost in the generator).
    Wait,
    /// Drop it for that subscriber, as libzmq's PUB socket does; counted and reported, and lost
    /// at the consumer.
    Drop,
}

/// The socket pair a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// PUSH → PULL: each message goes to one consumer (round robin): competing consumers.
    PushPull,
    /// (X)PUB → SUB: each message goes to every consumer whose subscription matches: fan-out.
    PubSub,
}

/// Which side listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindSide {
    /// Consumer `i` binds `PORT + i`; producers connect to the consumers of their topic.
    Consumer,
    /// Producer `i` binds `PORT + i`; consumers connect to the producers of their topic.
    Producer,
}

impl BindSide {
    /// The role that binds, for messages.
    pub fn role(self) -> &'static str {
        match self {
            BindSide::Consumer => "consumer",
            BindSide::Producer => "producer",
        }
    }
}

/// Everything the URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Host to bind on and connect to (IPv6 without brackets).
    pub host: String,
    /// Base port: the binding client `i` uses `port + i`; 0 lets the system pick a free port for
    /// each (only useful when both sides run in this process).
    pub port: u16,
    /// PUSH/PULL or PUB/SUB.
    pub pattern: Pattern,
    /// Which side binds.
    pub bind: BindSide,
    /// Peers in another process, for a topic that has no client of the other side in this one
    /// (see the crate docs).
    pub peers: u16,
    /// Messages that may wait in the generator for one peer (ZeroMQ's `ZMQ_SNDHWM`).
    pub sndhwm: u32,
    /// What PUB does at the high-water mark (PUSH always goes to another peer or waits).
    pub onhwm: OnHwm,
}

fn config(msg: impl Into<String>) -> DriverError {
    DriverError::Config(msg.into())
}

impl Options {
    /// Parses `zmq://HOST:PORT[?pattern=pushpull|pubsub][&bind=consumer|producer][&peers=N]`.
    ///
    /// # Errors
    /// [`DriverError::Config`] naming the part or option that is wrong.
    pub fn parse(url: &str) -> Result<Options, DriverError> {
        let rest = url
            .strip_prefix("zmq://")
            .ok_or_else(|| config(format!("`{url}` is not a zmq:// URL")))?;
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        if authority.contains('/') {
            return Err(config(format!(
                "zmq URL `{url}`: a path is not supported (options go in the query: ?pattern=pubsub)"
            )));
        }
        if authority.contains('@') {
            return Err(config(format!(
                "zmq URL `{url}`: ZeroMQ (NULL mechanism) takes no credentials"
            )));
        }
        let (host, port) = authority.rsplit_once(':').ok_or_else(|| {
            config(format!(
                "zmq URL `{url}` needs a port: zmq://HOST:PORT (ZeroMQ has no default port)"
            ))
        })?;
        let port: u16 = port.parse().map_err(|_| {
            config(format!(
                "zmq URL `{url}`: port `{port}` is not a number 0-65535"
            ))
        })?;
        let host = parse_host(host).ok_or_else(|| {
            config(format!(
                "zmq URL `{url}`: `{host}` is not a host name or IP address"
            ))
        })?;

        let mut o = Options {
            host,
            port,
            pattern: Pattern::PushPull,
            bind: BindSide::Consumer,
            peers: 1,
            sndhwm: DEFAULT_SNDHWM,
            onhwm: OnHwm::Wait,
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if seen.contains(&key) {
                return Err(config(format!("zmq option `{key}` is given twice")));
            }
            seen.push(key);
            match key {
                "pattern" => {
                    o.pattern = match value {
                        "pushpull" | "push-pull" => Pattern::PushPull,
                        "pubsub" | "pub-sub" => Pattern::PubSub,
                        _ => {
                            return Err(config(format!(
                                "zmq option pattern=`{value}`: expected pushpull or pubsub"
                            )));
                        }
                    }
                }
                "bind" => {
                    o.bind = match value {
                        "consumer" | "consumers" => BindSide::Consumer,
                        "producer" | "producers" => BindSide::Producer,
                        _ => {
                            return Err(config(format!(
                                "zmq option bind=`{value}`: expected consumer or producer"
                            )));
                        }
                    }
                }
                "peers" => {
                    o.peers = value.parse().map_err(|_| {
                        config(format!(
                            "zmq option peers=`{value}`: expected a number of peers (0-65535)"
                        ))
                    })?;
                }
                "sndhwm" | "hwm" => {
                    o.sndhwm = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        config(format!(
                            "zmq option {key}=`{value}`: expected a number of messages, at \
                             least 1 (libzmq's 0 for \"no limit\" is not offered: the \
                             generator's memory would be the limit)"
                        ))
                    })?;
                }
                "onhwm" => {
                    o.onhwm = match value {
                        "wait" | "block" => OnHwm::Wait,
                        "drop" => OnHwm::Drop,
                        _ => {
                            return Err(config(format!(
                                "zmq option onhwm=`{value}`: expected wait or drop"
                            )));
                        }
                    }
                }
                "rcvhwm" => {
                    return Err(config(
                        "zmq option `rcvhwm` is not supported: msgbench's consumers keep no \
                         receive queue (they read at most 64 KiB ahead of the run and hand each \
                         message over as it is parsed), so the socket's kernel buffer is the \
                         only one; use sndhwm on the producer's side",
                    ));
                }
                _ => {
                    return Err(config(format!(
                        "unknown zmq option `{key}` (known: pattern, bind, peers, sndhwm, onhwm)"
                    )));
                }
            }
        }
        if o.onhwm == OnHwm::Drop && o.pattern == Pattern::PushPull {
            return Err(config(
                "zmq option onhwm=drop applies to pattern=pubsub: a PUSH socket never drops, \
                 at the high-water mark it sends to another consumer or waits",
            ));
        }
        Ok(o)
    }

    /// The endpoint the binding client with index `i` uses.
    ///
    /// # Errors
    /// [`DriverError::Config`] when `port + i` leaves the port range.
    pub fn endpoint(&self, i: u32) -> Result<Endpoint, DriverError> {
        if self.port == 0 {
            return Ok(Endpoint {
                host: self.host.clone(),
                port: 0,
            });
        }
        let port = u32::from(self.port) + i;
        let port = u16::try_from(port).map_err(|_| {
            config(format!(
                "zmq: {} {i} would bind port {} + {i} = {port}, past 65535; use a lower base port",
                self.bind.role(),
                self.port
            ))
        })?;
        Ok(Endpoint {
            host: self.host.clone(),
            port,
        })
    }

    /// Endpoints of peers in another process: `PORT .. PORT + peers`.
    ///
    /// # Errors
    /// [`DriverError::Config`] with port 0 (a peer elsewhere has no port to guess).
    pub fn remote_endpoints(&self) -> Result<Vec<Endpoint>, DriverError> {
        if self.port == 0 && self.peers > 0 {
            return Err(config(
                "zmq: port 0 (any free port) only works when both sides run in this process; \
                 peers in another process need a fixed port",
            ));
        }
        (0..u32::from(self.peers))
            .map(|i| self.endpoint(i))
            .collect()
    }
}

/// `127.0.0.1`, `[::1]`, `localhost`: an IP literal or a plausible host name.
fn parse_host(s: &str) -> Option<String> {
    if let Some(v6) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().ok().map(|ip| ip.to_string());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip.to_string());
    }
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_')
    {
        return Some(s.to_string());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_options() {
        let o = Options::parse("zmq://127.0.0.1:5555").unwrap();
        assert_eq!(o.pattern, Pattern::PushPull);
        assert_eq!(o.bind, BindSide::Consumer);
        assert_eq!(o.peers, 1);
        assert_eq!((o.sndhwm, o.onhwm), (DEFAULT_SNDHWM, OnHwm::Wait));
        let o = Options::parse("zmq://127.0.0.1:5555?pattern=pubsub&sndhwm=10&onhwm=drop").unwrap();
        assert_eq!((o.sndhwm, o.onhwm), (10, OnHwm::Drop));
        let o = Options::parse("zmq://127.0.0.1:5555").unwrap();
        assert_eq!(o.endpoint(2).unwrap().to_string(), "tcp://127.0.0.1:5557");
        let o = Options::parse("zmq://[::1]:6000/?pattern=pubsub&bind=producer&peers=3").unwrap();
        assert_eq!(o.pattern, Pattern::PubSub);
        assert_eq!(o.bind, BindSide::Producer);
        assert_eq!(o.endpoint(0).unwrap().to_string(), "tcp://[::1]:6000");
        assert_eq!(o.remote_endpoints().unwrap().len(), 3);
        let o = Options::parse("zmq://localhost:0").unwrap();
        assert_eq!(o.endpoint(7).unwrap().to_string(), "tcp://localhost:0");
        assert!(o.remote_endpoints().is_err());
    }

    #[test]
    fn errors_name_the_option() {
        let e = |u: &str| Options::parse(u).unwrap_err().to_string();
        assert!(e("zmq://127.0.0.1:1?pattern=reqrep").contains("pattern=`reqrep`"));
        assert!(e("zmq://127.0.0.1:1?bind=both").contains("bind=`both`"));
        assert!(e("zmq://127.0.0.1:1?peers=x").contains("peers=`x`"));
        assert!(e("zmq://127.0.0.1:1?sndhwm=0").contains("sndhwm=`0`"));
        assert!(e("zmq://127.0.0.1:1?sndhwm=lots").contains("sndhwm=`lots`"));
        assert!(e("zmq://127.0.0.1:1?onhwm=maybe").contains("onhwm=`maybe`"));
        assert!(e("zmq://127.0.0.1:1?onhwm=drop").contains("PUSH socket never drops"));
        assert!(e("zmq://127.0.0.1:1?rcvhwm=10").contains("`rcvhwm` is not supported"));
        assert!(e("zmq://127.0.0.1:1?colour=red").contains("unknown zmq option `colour`"));
        assert!(e("zmq://127.0.0.1:1?bind=consumer&bind=producer").contains("twice"));
        assert!(e("zmq://127.0.0.1").contains("needs a port"));
        assert!(e("zmq://127.0.0.1:99999").contains("port `99999`"));
        assert!(e("tcp://127.0.0.1:1").contains("not a zmq:// URL"));
        assert!(e("zmq://u:p@127.0.0.1:1").contains("no credentials"));
        assert!(e("zmq://bad host:1").contains("not a host name"));
        let far = Options::parse("zmq://127.0.0.1:65535").unwrap();
        assert!(
            far.endpoint(1)
                .unwrap_err()
                .to_string()
                .contains("past 65535")
        );
    }
}
