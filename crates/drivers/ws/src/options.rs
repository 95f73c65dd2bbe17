//! `[ws]`: what the WebSocket upgrade request carries beyond the handshake itself, and whether
//! the target is an echo server, as written ([`WsSection`]) and resolved ([`WsPlan`]). On the
//! command line they are `--header`, which the HTTP driver's requests share (a gateway that
//! wants a token, an `Origin` or a subprotocol — `Sec-WebSocket-Protocol: mqtt`,
//! `graphql-transport-ws`, `v12.stomp` — refuses the upgrade without it), and `--echo`.

use msgbench_core::scenario::{DriverSection, PlanError};
use serde::{Deserialize, Serialize};

/// `[ws]`: extra headers of the upgrade request, and the echo mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsSection {
    /// Extra headers, each `"Name: value"`; `Host` and `User-Agent` replace msgbench's own.
    pub headers: Option<Vec<String>>,
    /// The target sends every message back on the connection it came on (an echo server):
    /// producers take each echo as the response to their message, and the run needs no
    /// consumers.
    pub echo: Option<bool>,
}

/// The upgrade request's extra headers and the echo mode, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WsPlan {
    /// `(name, value)` pairs, in the order given. The plan's `headers` list is what redaction
    /// hides credentials in (`Authorization`, tokens).
    pub headers: Vec<(String, String)>,
    /// Echo mode ([`WsSection::echo`]). Left out of results files when off, so those written
    /// before it existed read the same.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub echo: bool,
}

impl WsPlan {
    /// Refuses headers the upgrade cannot carry: those the handshake itself owns (a second
    /// copy would make the request invalid) and extensions (msgbench speaks none). Checked
    /// when a WebSocket driver is built, not when the plan resolves: `--header` is also the
    /// HTTP driver's, for which `Connection: close` is a fine header.
    pub fn check(&self) -> Result<(), String> {
        for (n, _) in &self.headers {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(format!("`{n}` is not a header name"));
            }
            if OWN.iter().any(|o| o.eq_ignore_ascii_case(n)) {
                return Err(format!(
                    "header `{n}` is part of the WebSocket handshake msgbench makes; it cannot be replaced"
                ));
            }
            if n.eq_ignore_ascii_case("sec-websocket-extensions") {
                return Err(
                    "msgbench's WebSocket client speaks no extension (permessage-deflate \
                     included), so it cannot offer one"
                        .to_string(),
                );
            }
        }
        Ok(())
    }

    /// The subprotocols the request offers (`Sec-WebSocket-Protocol`, comma-separated, any
    /// number of such headers): the only ones a server may pick (RFC 6455 §4.1).
    pub fn subprotocols(&self) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
            .flat_map(|(_, v)| v.split(','))
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect()
    }
}

/// Headers the handshake itself owns: a second copy would make the request invalid.
const OWN: [&str; 4] = [
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
];

impl DriverSection for WsSection {
    const NAME: &'static str = "ws";
    type Plan = WsPlan;

    fn resolve(&self) -> Result<WsPlan, PlanError> {
        let mut headers = Vec::new();
        for line in self.headers.iter().flatten() {
            let Some((n, v)) = line.split_once(':') else {
                return Err(err(format!("`{line}` is not `Name: value`")));
            };
            let (n, v) = (n.trim(), v.trim());
            headers.push((n.to_string(), v.to_string()));
        }
        Ok(WsPlan {
            headers,
            echo: self.echo.unwrap_or(false),
        })
    }
}

fn err(message: String) -> PlanError {
    PlanError {
        setting: "ws.headers",
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(lines: &[&str]) -> Result<WsPlan, PlanError> {
        WsSection {
            headers: Some(lines.iter().map(|s| s.to_string()).collect()),
            echo: None,
        }
        .resolve()
    }

    #[test]
    fn headers_resolve_and_offer_their_subprotocols() {
        let p = plan(&[
            "Authorization: Bearer x",
            "Sec-WebSocket-Protocol: graphql-transport-ws, graphql-ws",
            "sec-websocket-protocol: mqtt",
        ])
        .unwrap();
        assert_eq!(p.headers[0], ("Authorization".into(), "Bearer x".into()));
        assert_eq!(
            p.subprotocols(),
            ["graphql-transport-ws", "graphql-ws", "mqtt"]
        );
        assert!(WsSection::default().resolve().unwrap().headers.is_empty());
    }

    #[test]
    fn handshake_headers_and_extensions_are_refused() {
        assert_eq!(plan(&["no colon"]).unwrap_err().setting, "ws.headers");
        for owned in [
            "Bad Name: x",
            "Upgrade: h2c",
            "sec-websocket-key: x",
            "Sec-WebSocket-Extensions: permessage-deflate",
        ] {
            assert!(plan(&[owned]).unwrap().check().is_err(), "{owned}");
        }
        assert!(plan(&["Origin: x"]).unwrap().check().is_ok());
    }
}
