//! What every request of a run looks like, worked out once from the target URL and the options:
//! where to connect, TLS or not, HTTP/1.1 or HTTP/2, and the method, URI and headers each
//! request reuses (for HTTP/1.1, the request head already serialized). Every check happens
//! here, at construction, so a wrong option is a [`DriverError::Config`] before anything
//! connects and the hot path never validates.

use bytes::{Bytes, BytesMut};
use hyper::header::{
    CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName, HeaderValue, PROXY_AUTHORIZATION,
    TRANSFER_ENCODING,
};
use hyper::{HeaderMap, Method, Request, Uri};
use msgbench_core::driver::DriverError;
use msgbench_core::redact;
use msgbench_core::scenario::TlsPlan;
use msgbench_net::{Target, Tls};
use std::sync::Arc;

use crate::HttpOptions;
use crate::body::Payload;
use crate::h1::Template;

/// HTTP/2 request bodies are copied into buffers of this size, which are reused once hyper has
/// dropped every request cut from them (one allocation per this many bytes, not per request).
const BODY_CHUNK: usize = 64 * 1024;

/// A resolved target: connection details plus the request template.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// The server's host and port (also the TLS server name).
    pub target: Target,
    /// The forward proxy every connection goes to instead, if any: plain HTTP requests go to
    /// it in absolute form; TLS goes through a CONNECT tunnel to `target` ([`Endpoint::tunnel`]).
    pub proxy: Option<Target>,
    /// The CONNECT request that opens a tunnel to `target` (with a proxy and TLS).
    pub tunnel: Option<Bytes>,
    /// TLS connector for `https://`.
    pub tls: Option<Tls>,
    /// HTTP/2 with prior knowledge instead of HTTP/1.1.
    pub http2: bool,
    /// The URL with credentials removed, for messages.
    pub display: String,
    /// HTTP/1.1 requests: method, origin-form target (`/path?query`) and headers (Host, the
    /// user's, content type), serialized. Built for HTTP/2 endpoints too, and unused there.
    pub h1: Template,
    /// HTTP/2 requests (hyper's): method, absolute-form URI (hyper derives the `:scheme` and
    /// `:authority` pseudo-headers from it), and headers (the user's, content type).
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    /// Whether requests carry the runner's payload as their body.
    pub with_body: bool,
    /// The method, for messages.
    pub method_name: Arc<str>,
    /// Whether a request may be sent again when the keep-alive race closed its connection
    /// under it (RFC 9112 §9.3.1.1): its method is idempotent (GET, HEAD, PUT, DELETE,
    /// OPTIONS, TRACE), or it carries an `Idempotency-Key` header.
    pub replayable: bool,
}

fn config(msg: String) -> DriverError {
    DriverError::Config(msg)
}

impl Endpoint {
    /// Parses `http://` / `https://` URLs and checks the options.
    pub fn parse(url: &str, opts: &HttpOptions, tls: &TlsPlan) -> Result<Endpoint, DriverError> {
        let display = redact::url(url);
        let uri: Uri = url
            .parse()
            .map_err(|e| config(format!("`{display}` is not a valid URL: {e}")))?;
        let secure = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(config(format!(
                    "`{display}`: the HTTP driver takes http:// or https:// URLs"
                )));
            }
        };
        let authority = uri
            .authority()
            .ok_or_else(|| config(format!("`{display}` has no host")))?;
        if authority.as_str().contains('@') {
            return Err(config(format!(
                "{display}: credentials in the URL are not sent; give an Authorization header instead"
            )));
        }
        let target = Target::parse(authority.as_str(), if secure { 443 } else { 80 })
            .map_err(|e| config(format!("{display}: {e}")))?;
        let tls = if secure {
            // The protocol is agreed in the handshake (ALPN): `h2` for HTTP/2; `http/1.1`
            // otherwise, so that a server speaking only HTTP/2 can say so (an alert, or no
            // protocol agreed), which the errors turn into a hint to run with --http2.
            let alpn: &[&[u8]] = if opts.http2 { &[b"h2"] } else { &[b"http/1.1"] };
            Some(Tls::with_alpn(tls, alpn).map_err(|e| config(format!("{display}: TLS: {e}")))?)
        } else {
            None
        };

        let method_name = if opts.method.is_empty() {
            "POST".to_string()
        } else {
            opts.method.to_ascii_uppercase()
        };
        let method = Method::from_bytes(method_name.as_bytes())
            .map_err(|_| config(format!("`{}` is not an HTTP method", opts.method)))?;
        if method == Method::CONNECT {
            return Err(config(
                "CONNECT opens a tunnel, it is not a request to measure".into(),
            ));
        }
        let with_body = !matches!(method, Method::GET | Method::HEAD);

        let path_and_query = match &opts.path {
            Some(p) if !p.starts_with('/') => {
                return Err(config(format!("path `{p}` must start with `/`")));
            }
            Some(p) => p.clone(),
            None => uri
                .path_and_query()
                .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string()),
        };
        // `Proxy-Authorization` for a proxy given with credentials (Basic, RFC 9110 §11.7.1).
        let mut proxy_auth: Option<String> = None;
        let proxy = match &opts.proxy {
            None => None,
            Some(p) => {
                let shown = redact::url(p);
                let rest = p.strip_prefix("http://").ok_or_else(|| {
                    config(format!(
                        "proxy `{shown}`: give it as http://HOST:PORT (the connection to a forward \
                         proxy is plain HTTP; https:// targets go through it in a CONNECT tunnel)"
                    ))
                })?;
                let authority = rest.trim_end_matches('/');
                let (user_info, authority) = match authority.rsplit_once('@') {
                    Some((ui, a)) => (Some(ui), a),
                    None => (None, authority),
                };
                if authority.contains('/') {
                    return Err(config(format!(
                        "proxy `{shown}`: only http://[USER:PASSWORD@]HOST:PORT (no path)"
                    )));
                }
                proxy_auth = user_info.map(basic_credentials);
                if opts.http2 && !secure {
                    return Err(config(format!(
                        "{display}: HTTP/2 with prior knowledge (h2c) does not go through a \
                         forward proxy; use https:// (tunnelled, h2 by ALPN) or HTTP/1.1"
                    )));
                }
                Some(
                    Target::parse(authority, 3128)
                        .map_err(|e| config(format!("proxy `{shown}`: {e}")))?,
                )
            }
        };
        let tunnel = (proxy.is_some() && secure).then(|| {
            let a = authority.as_str();
            let a = if authority.port().is_some() {
                a.to_string()
            } else {
                format!("{a}:443")
            };
            let auth = proxy_auth
                .as_ref()
                .map_or(String::new(), |v| format!("Proxy-Authorization: {v}\r\n"));
            Bytes::from(format!("CONNECT {a} HTTP/1.1\r\nHost: {a}\r\n{auth}\r\n"))
        });
        // Through a proxy, plain requests name the whole URL (absolute form, RFC 9112 §3.2.2).
        let h1_target = if proxy.is_some() && !secure {
            format!("http://{}{path_and_query}", authority.as_str())
        } else {
            path_and_query.clone()
        };
        let request_uri = if opts.http2 {
            let scheme = if secure { "https" } else { "http" };
            format!("{scheme}://{}{path_and_query}", authority.as_str())
        } else {
            path_and_query.clone()
        };
        let uri: Uri = request_uri
            .parse()
            .map_err(|e| config(format!("path `{path_and_query}`: {e}")))?;

        let mut headers = HeaderMap::new();
        if !opts.http2 {
            headers.insert(
                HOST,
                HeaderValue::from_str(authority.as_str())
                    .map_err(|e| config(format!("{display}: host: {e}")))?,
            );
        }
        for (name, value) in &opts.headers {
            let n = HeaderName::from_bytes(name.trim().as_bytes())
                .map_err(|_| config(format!("`{name}` is not a valid header name")))?;
            let v = HeaderValue::from_str(value.trim())
                // The value is not quoted: it may be a credential.
                .map_err(|_| config(format!("header `{name}`: the value is not a valid header value (control characters or non-ASCII?)")))?;
            if !opts.http2 && (n == CONTENT_LENGTH || n == TRANSFER_ENCODING) {
                return Err(config(format!(
                    "header `{name}`: the HTTP/1.1 body framing is the driver's (each request \
                     carries its payload with a Content-Length)"
                )));
            }
            // A header given by the user replaces the default (Host); repeated names add up.
            if n == HOST {
                headers.insert(n, v);
            } else {
                headers.append(n, v);
            }
        }
        // A plain request to a proxy carries its credentials itself (a tunnel's are in CONNECT).
        if let Some(v) = proxy_auth.as_ref().filter(|_| !secure)
            && !headers.contains_key(PROXY_AUTHORIZATION)
        {
            headers.insert(
                PROXY_AUTHORIZATION,
                HeaderValue::from_str(v).map_err(|_| {
                    config("the proxy's credentials are not a valid header value".into())
                })?,
            );
        }
        if with_body && !headers.contains_key(CONTENT_TYPE) {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
        }
        // hyper wrote headers in this order and with these (lower-case) names: so do we.
        let h1 = Template::new(
            method.as_str(),
            &h1_target,
            headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes())),
            with_body,
        );
        let replayable = method.is_idempotent() || headers.contains_key("idempotency-key");
        Ok(Endpoint {
            target,
            proxy,
            tunnel,
            tls,
            http2: opts.http2,
            display,
            h1,
            method_name: method.as_str().into(),
            method,
            uri,
            headers,
            with_body,
            replayable,
        })
    }

    /// One HTTP/2 request carrying `payload` (dropped for GET and HEAD). `buf` is the caller's
    /// body buffer: the payload is copied into it and split off, so its memory is reused.
    pub fn request(&self, payload: &[u8], buf: &mut BytesMut) -> Request<Payload> {
        self.request_with(self.body(payload, buf))
    }

    /// The body of a request carrying `payload`, cut from `buf` (empty for GET and HEAD).
    pub fn body(&self, payload: &[u8], buf: &mut BytesMut) -> Bytes {
        if !self.with_body || payload.is_empty() {
            return Bytes::new();
        }
        if buf.capacity() - buf.len() < payload.len() {
            buf.reserve(BODY_CHUNK.max(payload.len()));
        }
        buf.extend_from_slice(payload);
        buf.split().freeze()
    }

    /// One HTTP/2 request with `body` (from [`Endpoint::body`]).
    pub fn request_with(&self, body: Bytes) -> Request<Payload> {
        let body = if body.is_empty() {
            Payload::empty()
        } else {
            Payload::new(body)
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
}

/// The `Proxy-Authorization` value for a proxy URL's `user:password` (percent-escapes decoded).
fn basic_credentials(user_info: &str) -> String {
    use base64::Engine as _;
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let pair = format!("{}:{}", redact::unescape(user), redact::unescape(password));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(method: &str, http2: bool) -> HttpOptions {
        HttpOptions {
            method: method.into(),
            headers: vec![("X-Test".into(), "1".into())],
            http2,
            path: None,
            proxy: None,
        }
    }

    #[test]
    fn http1_requests_are_origin_form_with_host() {
        let ep = Endpoint::parse(
            "http://127.0.0.1:8080/a/b?x=1",
            &opts("post", false),
            &TlsPlan::default(),
        )
        .unwrap();
        assert_eq!(
            (ep.target.host.as_str(), ep.target.port),
            ("127.0.0.1", 8080)
        );
        let mut out = Vec::new();
        ep.h1.encode(b"hello", &mut out);
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "POST /a/b?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nx-test: 1\r\n\
             content-type: application/octet-stream\r\ncontent-length: 5\r\n\r\nhello"
        );
        // The buffer is rewritten, not appended to.
        let head = out.len() - "content-length: 5\r\n\r\nhello".len();
        ep.h1.encode(&[7; 1234], &mut out);
        let tail = "content-length: 1234\r\n\r\n".len();
        assert_eq!(out.len(), head + tail + 1234);
        assert_eq!(&out[head..head + tail], b"content-length: 1234\r\n\r\n");
        assert!(out[head + tail..].iter().all(|&b| b == 7));
    }

    #[test]
    fn http1_user_headers_replace_host_and_content_type_and_get_has_no_body() {
        let mut o = opts("get", false);
        o.headers = vec![
            ("Host".into(), " example.org ".into()),
            ("Content-Type".into(), "text/plain".into()),
            ("X-A".into(), "1".into()),
            ("x-a".into(), "2".into()),
        ];
        o.path = Some("/p".into());
        let ep = Endpoint::parse("http://127.0.0.1:8080/ignored", &o, &TlsPlan::default()).unwrap();
        let mut out = Vec::new();
        ep.h1.encode(b"stamp", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /p HTTP/1.1\r\nhost: example.org\r\ncontent-type: text/plain\r\n\
             x-a: 1\r\nx-a: 2\r\n\r\n"
        );
        // POST: the user's content type, not the default; an empty payload sends no body.
        o.method = "POST".into();
        let ep = Endpoint::parse("http://h/", &o, &TlsPlan::default()).unwrap();
        let mut out = Vec::new();
        ep.h1.encode(b"", &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("content-type").count(), 1, "{text}");
        assert!(text.ends_with("x-a: 2\r\n\r\n"), "{text}");
    }

    #[test]
    fn http2_requests_are_absolute_and_get_has_no_body() {
        let mut o = opts("GET", true);
        o.path = Some("/p".into());
        let ep = Endpoint::parse("http://localhost/ignored", &o, &TlsPlan::default()).unwrap();
        assert_eq!(ep.target.port, 80);
        assert!(!ep.with_body);
        let mut buf = BytesMut::new();
        let req = ep.request(b"stamp", &mut buf);
        assert_eq!(req.uri().to_string(), "http://localhost/p");
        assert!(!req.headers().contains_key(HOST));
        assert!(!req.headers().contains_key(CONTENT_TYPE));
        assert!(hyper::body::Body::is_end_stream(req.body()));
    }

    #[test]
    fn bad_options_are_config_errors() {
        let t = TlsPlan::default();
        for (url, o) in [
            ("nats://h:1", opts("POST", false)),
            ("http://u:secret@h/", opts("POST", false)),
            ("http://h/", opts("BAD METHOD", false)),
            ("http://h/", opts("CONNECT", false)),
        ] {
            let e = Endpoint::parse(url, &o, &t).unwrap_err();
            assert!(matches!(e, DriverError::Config(_)), "{url}: {e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        let mut o = opts("POST", false);
        o.headers = vec![("bad name".into(), "v".into())];
        assert!(Endpoint::parse("http://h/", &o, &t).is_err());
        for framing in ["Content-Length", "transfer-encoding"] {
            o.headers = vec![(framing.into(), "5".into())];
            let e = Endpoint::parse("http://h/", &o, &t).unwrap_err();
            assert!(e.to_string().contains("framing"), "{e}");
        }
        o.headers.clear();
        o.path = Some("relative".into());
        assert!(Endpoint::parse("http://h/", &o, &t).is_err());
    }

    /// A proxy given with credentials: plain requests carry them (absolute form), a tunnel's
    /// CONNECT carries them and the requests inside it do not; escapes are decoded.
    #[test]
    fn proxy_credentials_go_to_the_proxy_only() {
        let t = TlsPlan::default();
        let mut o = opts("GET", false);
        o.proxy = Some("http://al%40ice:p%3Ass@127.0.0.1:3128".into());
        let ep = Endpoint::parse("http://example.org/x", &o, &t).unwrap();
        assert_eq!(ep.proxy.as_ref().unwrap().port, 3128);
        let mut out = Vec::new();
        ep.h1.encode(b"", &mut out);
        let head = String::from_utf8(out).unwrap();
        // base64("al@ice:p:ss")
        assert!(
            head.starts_with("GET http://example.org/x HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("proxy-authorization: Basic YWxAaWNlOnA6c3M=\r\n"),
            "{head}"
        );
        let ep = Endpoint::parse("https://example.org/x", &o, &t).unwrap();
        let connect = String::from_utf8(ep.tunnel.clone().unwrap().to_vec()).unwrap();
        assert_eq!(
            connect,
            "CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\
             Proxy-Authorization: Basic YWxAaWNlOnA6c3M=\r\n\r\n"
        );
        let mut out = Vec::new();
        ep.h1.encode(b"", &mut out);
        assert!(!String::from_utf8(out).unwrap().contains("roxy"));
        // Without credentials, nothing of the kind.
        o.proxy = Some("http://127.0.0.1:3128/".into());
        let ep = Endpoint::parse("http://example.org/x", &o, &t).unwrap();
        let mut out = Vec::new();
        ep.h1.encode(b"", &mut out);
        assert!(!String::from_utf8(out).unwrap().contains("roxy"));
        o.proxy = Some("http://u:p@127.0.0.1:3128/path".into());
        let e = Endpoint::parse("http://example.org/x", &o, &t).unwrap_err();
        assert!(e.to_string().contains("no path"), "{e}");
    }
}
