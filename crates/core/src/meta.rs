//! Message metadata beyond the payload: ids, correlation and application properties.
//!
//! Most benchmarks need none of it (the stamp travels in the payload), so it costs nothing unless
//! asked for: [`crate::driver::Outbound::meta`] is `None` and consumers only fill
//! [`crate::driver::Delivery::meta`] when their spec asks ([`crate::driver::ConsumerSpec::meta`]).
//! Multi-stage tracking reads correlation keys from it, and business-application APIs such as
//! ECP's need their properties set on every message. The names are protocol-neutral; each driver
//! maps them onto its protocol (AMQP 1.0: `properties` and `application-properties`).

/// A property value. The types every protocol with typed properties can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
}

impl Value {
    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Str(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
        }
    }
}

/// Metadata of one message, sent or received.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// The message id (AMQP 1.0 `message-id`).
    pub message_id: Option<String>,
    /// The correlation id (AMQP 1.0 `correlation-id`).
    pub correlation_id: Option<String>,
    /// Creation time, Unix milliseconds (AMQP 1.0 `creation-time`). The runner sets it on sent
    /// messages from the intended send time.
    pub creation_time_ms: Option<u64>,
    /// Application properties (AMQP 1.0 `application-properties`, headers elsewhere), in order.
    pub properties: Vec<(String, Value)>,
    /// Where a received message was published to: the AMQP 0-9-1 routing key (from
    /// basic.deliver), the NATS subject, the MQTT topic name. Filled by those consumers when
    /// [`crate::driver::ConsumerSpec::meta`] asks (what a gateway such as
    /// `msgbench serve ws-broadcast --gateway` routes by); ignored on sent messages.
    pub topic: Option<String>,
}

impl Meta {
    /// The application property `name`, if present.
    pub fn property(&self, name: &str) -> Option<&Value> {
        self.properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_properties_by_name() {
        let m = Meta {
            properties: vec![
                ("a".into(), Value::Int(1)),
                ("b".into(), Value::Str("x".into())),
            ],
            ..Meta::default()
        };
        assert_eq!(m.property("b").and_then(Value::as_str), Some("x"));
        assert_eq!(m.property("a").map(|v| v.to_string()), Some("1".into()));
        assert!(m.property("c").is_none());
    }
}
