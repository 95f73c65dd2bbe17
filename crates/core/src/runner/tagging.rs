//! What a producer adds to a message besides the stamped payload: its tracking key (registered
//! with the [`Tracker`] before the send) and its metadata (ids and properties rendered from the
//! plan's templates). One [`Tagger`] per producer; it reuses its strings, so a message costs
//! the tracker's own copy of its key and nothing else.

use super::tracker::{Gate, Tracker};
use crate::clock::{now_ns, unix_ms};
use crate::meta::{Meta, Value};
use crate::scenario::{MessagePlan, PropertyTemplate, Template, TemplateVars};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What every producer of a run shares.
#[derive(Debug, Clone)]
pub(crate) struct Tagging {
    pub message: MessagePlan,
    /// The tracking key template (runs with stages).
    pub key: Option<Template>,
    pub tracker: Option<Arc<Tracker>>,
    /// The stage recorded at the publish confirmation (or at the send, without confirms).
    pub ack_stage: Option<u16>,
    /// Run-wide message counter (`{n}`).
    pub n: Arc<AtomicU64>,
    pub run: u32,
}

/// A producer's tagger.
pub(crate) struct Tagger {
    shared: Tagging,
    producer: u32,
    meta: Meta,
    /// Keys of outstanding messages, by token (same ring as the ack window).
    keys: Vec<String>,
    mask: u64,
    /// Unix ns minus monotonic ns, for creation times.
    wall_offset_ns: i128,
}

/// The rendered key was already tracked: the key template does not make keys unique.
#[derive(Debug)]
pub(crate) struct DuplicateKey(pub String);

impl Tagger {
    /// `capacity`: the ack window's ring size (a power of two).
    pub fn new(shared: Tagging, producer: u32, capacity: usize) -> Tagger {
        let cap = capacity.next_power_of_two().max(1);
        let meta = Meta {
            message_id: shared.message.message_id.as_ref().map(|_| String::new()),
            correlation_id: shared
                .message
                .correlation_id
                .as_ref()
                .map(|_| String::new()),
            creation_time_ms: None,
            properties: shared
                .message
                .properties
                .iter()
                .map(|(n, p)| {
                    let v = match p {
                        PropertyTemplate::Str(_) => Value::Str(String::new()),
                        PropertyTemplate::Bool(b) => Value::Bool(*b),
                        PropertyTemplate::Int(i) => Value::Int(*i),
                    };
                    (n.clone(), v)
                })
                .collect(),
            topic: None,
        };
        Tagger {
            producer,
            meta,
            keys: vec![String::new(); if shared.key.is_some() { cap } else { 0 }],
            mask: cap as u64 - 1,
            wall_offset_ns: unix_ms() as i128 * 1_000_000 - now_ns() as i128,
            shared,
        }
    }

    /// The window to take a place in before each send, if a stage is the trigger.
    pub fn gate(&self) -> Option<&Gate> {
        self.shared.tracker.as_deref().and_then(Tracker::gate)
    }

    /// The stage the publish confirmation is recorded as.
    pub fn ack_stage(&self) -> Option<u16> {
        self.shared.ack_stage
    }

    /// Renders the key and metadata of the message with `token` (stamp sequence `seq`,
    /// intended at `intended_ns`) and registers it with the tracker. Returns the metadata to
    /// send, if the plan has any.
    pub fn prepare(
        &mut self,
        token: u64,
        seq: u64,
        intended_ns: u64,
    ) -> Result<Option<&Meta>, DuplicateKey> {
        let mut vars = TemplateVars {
            key: "",
            n: self.shared.n.fetch_add(1, Ordering::Relaxed) + 1,
            seq,
            producer: self.producer,
            run: self.shared.run,
        };
        let mut key_slot = None;
        if let Some(t) = &self.shared.key {
            let slot = (token & self.mask) as usize;
            t.render(&vars, &mut self.keys[slot]);
            if let Some(tr) = &self.shared.tracker
                && !tr.register(&self.keys[slot], intended_ns)
            {
                return Err(DuplicateKey(self.keys[slot].clone()));
            }
            key_slot = Some(slot);
        }
        if self.shared.message.is_empty() {
            return Ok(None);
        }
        if let Some(slot) = key_slot {
            vars.key = &self.keys[slot];
        }
        let m = &self.shared.message;
        if let (Some(t), Some(out)) = (&m.message_id, &mut self.meta.message_id) {
            t.render(&vars, out);
        }
        if let (Some(t), Some(out)) = (&m.correlation_id, &mut self.meta.correlation_id) {
            t.render(&vars, out);
        }
        for ((_, tpl), (_, v)) in m.properties.iter().zip(self.meta.properties.iter_mut()) {
            if let (PropertyTemplate::Str(t), Value::Str(out)) = (tpl, v) {
                t.render(&vars, out);
            }
        }
        let wall = intended_ns as i128 + self.wall_offset_ns;
        self.meta.creation_time_ms = Some((wall.max(0) / 1_000_000) as u64);
        Ok(Some(&self.meta))
    }

    /// The send of `token` failed: the message never left, so it is not tracked.
    pub fn unsent(&self, token: u64) {
        if let (Some(tr), Some(_)) = (&self.shared.tracker, &self.shared.key) {
            tr.unregister(&self.keys[(token & self.mask) as usize]);
        }
    }

    /// The system refused `token`: the message failed at the publish confirmation.
    pub fn refused(&self, token: u64) {
        if let (Some(tr), Some(_)) = (&self.shared.tracker, &self.shared.key) {
            tr.fail([self.keys[(token & self.mask) as usize].as_str()], now_ns());
        }
    }
}
