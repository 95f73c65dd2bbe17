//! `[http]` and the HTTP flags of `msgbench run`: the requests producers send, as written
//! ([`HttpSection`]), resolved ([`HttpPlan`]) and given on the command line ([`HttpArgs`]).

use clap::Args;
use msgbench_core::scenario::{DriverSection, PlanError};
use serde::{Deserialize, Serialize};

/// `[http]`: the requests HTTP producers send.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Method (default POST; GET and HEAD send no body).
    pub method: Option<String>,
    /// Extra headers, each `"Name: value"`.
    pub headers: Option<Vec<String>>,
    /// HTTP/2 (cleartext, prior knowledge) instead of HTTP/1.1.
    pub http2: Option<bool>,
    /// A forward proxy (`http://[user:password@]host:port`) every connection goes through.
    pub proxy: Option<String>,
}

/// HTTP request settings (used by the `http://` driver only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpPlan {
    /// Method (`POST` by default).
    pub method: String,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
    /// HTTP/2 with prior knowledge instead of HTTP/1.1.
    pub http2: bool,
    /// Forward proxy URL, if any.
    pub proxy: Option<String>,
}

fn err(setting: &'static str, message: impl Into<String>) -> PlanError {
    PlanError {
        setting,
        message: message.into(),
    }
}

impl DriverSection for HttpSection {
    const NAME: &'static str = "http";
    type Plan = HttpPlan;

    fn resolve(&self) -> Result<HttpPlan, PlanError> {
        let h = self;
        let method = h
            .method
            .clone()
            .unwrap_or_else(|| "POST".into())
            .to_uppercase();
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return Err(err(
                "http.method",
                format!("`{method}` is not an HTTP method (GET, POST, PUT...)"),
            ));
        }
        let mut headers = Vec::new();
        for line in h.headers.iter().flatten() {
            let Some((n, v)) = line.split_once(':') else {
                return Err(err(
                    "http.headers",
                    format!("`{line}` is not `Name: value`"),
                ));
            };
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
        Ok(HttpPlan {
            method,
            headers,
            http2: h.http2.unwrap_or(false),
            proxy: h.proxy.clone(),
        })
    }
}

/// The HTTP flags.
#[derive(Debug, Args, Default, Clone, PartialEq, Eq)]
#[command(next_help_heading = "HTTP")]
pub struct HttpArgs {
    /// HTTP method (default POST, the payload as body; GET and HEAD send none).
    #[arg(long)]
    pub method: Option<String>,
    /// Extra request header, repeatable: --header 'Authorization: Bearer x'. Also sent with
    /// every WebSocket upgrade (ws://, wss://): a token, an Origin, or a subprotocol
    /// (--header 'Sec-WebSocket-Protocol: mqtt').
    #[arg(long, value_name = "'NAME: VALUE'")]
    pub header: Vec<String>,
    /// HTTP/2: many requests in flight per connection (h2c with prior knowledge on http://,
    /// ALPN h2 on https://).
    #[arg(long)]
    pub http2: bool,
    /// Send every request through this forward proxy (http://HOST:PORT or
    /// http://USER:PASSWORD@HOST:PORT; squid, tinyproxy, Traffic Server): http:// targets as
    /// absolute-form requests to it, https:// ones through a CONNECT tunnel with TLS end to
    /// end. Credentials go to the proxy as Proxy-Authorization (Basic), never to the server.
    /// The http_proxy and HTTPS_PROXY variables are not read: a benchmark goes where it is
    /// told.
    #[arg(long, value_name = "URL")]
    pub proxy: Option<String>,
}

impl HttpArgs {
    /// The `[http]` section these flags stand for (unset flags leave the file's values).
    pub fn section(&self) -> HttpSection {
        HttpSection {
            method: self.method.clone(),
            headers: (!self.header.is_empty()).then(|| self.header.clone()),
            http2: self.http2.then_some(true),
            proxy: self.proxy.clone(),
        }
    }
}
