//! Who listens where, within this process.
//!
//! ZeroMQ has no broker to meet at: the connecting side must know the binding side's endpoints,
//! and a publisher must know how many subscriptions to wait for. msgbench runs both sides in one
//! process and connects every consumer before the first producer, so the driver keeps this
//! small registry: consumers enter their topic filter (and, when they bind, their endpoint);
//! producers that bind enter their endpoint, and consumers connect to them as they appear.

use crate::options::Endpoint;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;

/// What a consumer receives: one topic exactly, or every topic starting with a prefix (a
/// consumer topic ending in `*`, e.g. `--subscribe 'bench.*'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    prefix: String,
    exact: bool,
}

impl Filter {
    /// The filter for a consumer topic: `name` is exact, `name*` is the prefix `name`.
    pub fn new(topic: &str) -> Filter {
        match topic.strip_suffix('*') {
            Some(prefix) => Filter {
                prefix: prefix.to_string(),
                exact: false,
            },
            None => Filter {
                prefix: topic.to_string(),
                exact: true,
            },
        }
    }

    /// Whether a message of `topic` is for this consumer.
    #[inline]
    pub fn matches(&self, topic: &[u8]) -> bool {
        if self.exact {
            topic == self.prefix.as_bytes()
        } else {
            topic.starts_with(self.prefix.as_bytes())
        }
    }

    /// The ZeroMQ subscription (a prefix of the topic frame).
    pub fn subscription(&self) -> &str {
        &self.prefix
    }
}

/// A consumer of this process.
#[derive(Debug, Clone)]
pub struct LocalConsumer {
    /// Consumer index.
    pub id: u32,
    /// Its topic filter.
    pub filter: Filter,
    /// Member of a queue group (competing consumers) rather than a fan-out subscriber.
    pub competing: bool,
    /// Where it listens, when consumers bind.
    pub endpoint: Option<Endpoint>,
}

/// A producer of this process that binds.
#[derive(Debug, Clone)]
pub struct BoundProducer {
    /// Its topics.
    pub topics: Vec<String>,
    /// Where it listens.
    pub endpoint: Endpoint,
}

/// The registry, shared by every client the driver creates.
#[derive(Debug)]
pub struct Registry {
    consumers: Mutex<Vec<LocalConsumer>>,
    producers: watch::Sender<Vec<BoundProducer>>,
    closing: AtomicBool,
    /// Whether this process runs producers at all (not so in a consumers-only segment).
    producing: AtomicBool,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            consumers: Mutex::new(Vec::new()),
            producers: watch::Sender::new(Vec::new()),
            closing: AtomicBool::new(false),
            producing: AtomicBool::new(false),
        }
    }
}

impl Registry {
    /// Enters a consumer (after it bound, if it binds).
    pub fn add_consumer(&self, c: LocalConsumer) {
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c);
    }

    /// The consumers that receive `topic`, by index.
    pub fn consumers_of(&self, topic: &str) -> Vec<LocalConsumer> {
        let mut v: Vec<LocalConsumer> = self
            .consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|c| c.filter.matches(topic.as_bytes()))
            .cloned()
            .collect();
        v.sort_by_key(|c| c.id);
        v
    }

    /// Enters a producer that is bound and accepting.
    pub fn add_producer(&self, p: BoundProducer) {
        self.producers.send_modify(|v| v.push(p));
    }

    /// The bound producers, now and as they come (entries are only ever appended).
    pub fn watch_producers(&self) -> watch::Receiver<Vec<BoundProducer>> {
        self.producers.subscribe()
    }

    /// Producers are closing: peers leaving from now on is the end of the run, not a failure.
    pub fn set_closing(&self) {
        self.closing.store(true, Ordering::Relaxed);
    }

    /// See [`Registry::set_closing`].
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Relaxed)
    }

    /// A producer is being set up in this process.
    pub fn set_producing(&self) {
        self.producing.store(true, Ordering::Relaxed);
    }

    /// Whether any producer runs in this process: if none, every peer a consumer has is a
    /// producer of another process (`--segment consumers`), whose end this process cannot
    /// tell from a failure.
    pub fn is_producing(&self) -> bool {
        self.producing.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_exact_unless_starred() {
        let f = Filter::new("bench.1");
        assert!(f.matches(b"bench.1"));
        assert!(!f.matches(b"bench.10"), "exact topics do not prefix-match");
        assert_eq!(f.subscription(), "bench.1");
        let f = Filter::new("bench.*");
        assert!(f.matches(b"bench.1") && f.matches(b"bench.10"));
        assert!(!f.matches(b"other"));
        assert_eq!(f.subscription(), "bench.");
    }

    #[test]
    fn consumers_of_a_topic() {
        let r = Registry::default();
        for (id, t) in [(1, "a"), (0, "a"), (2, "b"), (3, "*")] {
            r.add_consumer(LocalConsumer {
                id,
                filter: Filter::new(t),
                competing: false,
                endpoint: None,
            });
        }
        let ids: Vec<u32> = r.consumers_of("a").iter().map(|c| c.id).collect();
        assert_eq!(ids, [0, 1, 3]);
        assert_eq!(r.consumers_of("c").len(), 1);
    }
}
