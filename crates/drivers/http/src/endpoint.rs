//! What every request of a run looks like, worked out once from the target URL and the options:
//! where to connect, TLS or not, HTTP/1.1 or HTTP/2, and the method, URI and headers each
//! request reuses. Every check happens here, at construction, so a wrong option is a
//! [`DriverError::Config`] before anything connects and the hot path never validates.

use bytes::BytesMut;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{HeaderMap, Method, Request, Uri};
use msgbench_core::driver::DriverError;
use msgbench_core::scenario::TlsPlan;
use msgbench_core::scenario::plan::redact_url;
use msgbench_net::{Target, Tls};

use crate::HttpOptions;
use crate::body::Payload;

/// Request bodies are copied into buffers of this size, which are reused once hyper has
/// dropped every request cut from them (one allocation per this many bytes, not per request).
const BODY_CHUNK: usize = 64 * 1024;

/// A resolved target: connection details plus the request template.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Host and port to connect to (also the TLS server name).
    pub target: Target,
    /// TLS connector for `https://`.
    pub tls: Option<Tls>,
    /// HTTP/2 with prior knowledge instead of HTTP/1.1.
    pub http2: bool,
    /// The URL with credentials removed, for messages.
    pub display: String,
    method: Method,
    /// Origin-form (`/path?query`) for HTTP/1.1, absolute-form for HTTP/2 (hyper derives the
    /// `:scheme` and `:authority` pseudo-headers from it).
    uri: Uri,
    /// Host (HTTP/1.1 only; HTTP/2 carries `:authority`), user headers, content type.
    headers: HeaderMap,
    /// Whether requests carry the runner's payload as their body.
    with_body: bool,
}

fn config(msg: String) -> DriverError {
    DriverError::Config(msg)
}

impl Endpoint {
    /// Parses `http://` / `https://` URLs and checks the options.
    pub fn parse(url: &str, opts: &HttpOptions, tls: &TlsPlan) -> Result<Endpoint, DriverError> {
        let display = redact_url(url);
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
        if secure && opts.http2 {
            return Err(config(format!(
                "{display}: HTTP/2 over TLS needs ALPN, which msgbench's TLS client does not \
                 negotiate yet; use HTTP/2 over cleartext (http://, prior knowledge) or \
                 HTTP/1.1 over https://"
            )));
        }
        let target = Target::parse(authority.as_str(), if secure { 443 } else { 80 })
            .map_err(|e| config(format!("{display}: {e}")))?;
        let tls = if secure {
            Some(Tls::new(tls).map_err(|e| config(format!("{display}: TLS: {e}")))?)
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
        let request_uri = if opts.http2 {
            format!("http://{}{path_and_query}", authority.as_str())
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
                .map_err(|_| config(format!("header `{name}`: `{value}` is not a valid value")))?;
            // A header given by the user replaces the default (Host); repeated names add up.
            if n == HOST {
                headers.insert(n, v);
            } else {
                headers.append(n, v);
            }
        }
        if with_body && !headers.contains_key(CONTENT_TYPE) {
            headers.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
        }
        Ok(Endpoint {
            target,
            tls,
            http2: opts.http2,
            display,
            method,
            uri,
            headers,
            with_body,
        })
    }

    /// One request carrying `payload` (dropped for GET and HEAD). `buf` is the caller's body
    /// buffer: the payload is copied into it and split off, so its memory is reused.
    pub fn request(&self, payload: &[u8], buf: &mut BytesMut) -> Request<Payload> {
        let body = if self.with_body && !payload.is_empty() {
            if buf.capacity() - buf.len() < payload.len() {
                buf.reserve(BODY_CHUNK.max(payload.len()));
            }
            buf.extend_from_slice(payload);
            Payload::new(buf.split().freeze())
        } else {
            Payload::empty()
        };
        let mut req = Request::new(body);
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = self.headers.clone();
        req
    }
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
        let mut buf = BytesMut::new();
        let req = ep.request(b"hello", &mut buf);
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri().to_string(), "/a/b?x=1");
        assert_eq!(req.headers()[HOST], "127.0.0.1:8080");
        assert_eq!(req.headers()["x-test"], "1");
        assert_eq!(req.headers()[CONTENT_TYPE], "application/octet-stream");
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
            ("https://h/", opts("POST", true)),
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
        o.headers.clear();
        o.path = Some("relative".into());
        assert!(Endpoint::parse("http://h/", &o, &t).is_err());
    }
}
