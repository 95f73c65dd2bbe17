//! Who may see the dashboard. Without a token it listens on loopback only, where anyone on
//! this machine may see it (as with any local tool); a non-loopback address is refused unless a
//! token is given (`--token`, `--dashboard-token`), and then every request (pages, assets, the
//! event stream, the API) must carry it as `?token=` or `Authorization: Bearer`. Anything else
//! gets 401.
//!
//! The token is compared in constant time ([`constant_time_eq`]) and never logged: the URLs
//! msgbench prints leave it out, and [`Access`]'s `Debug` hides it. It appears only in the pages
//! served to a request that carried it (their asset links carry it on).
//!
//! Without a token, requests must also name a loopback host (`127.0.0.1`, `[::1]`,
//! `localhost`) in their `Host` header: a web page elsewhere cannot make the browser read the
//! dashboard by pointing its own name at 127.0.0.1 (DNS rebinding). Those get 403.

use crate::DashboardError;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// The access rule of one server.
#[derive(Clone, PartialEq, Eq)]
pub struct Access {
    token: Option<Arc<str>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token itself.
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Characters a token may contain (it travels in URLs unescaped).
fn valid_token(t: &str) -> bool {
    t.len() >= 8
        && t.len() <= 256
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
}

impl Access {
    /// Open to every request (loopback without a token).
    pub fn open() -> Self {
        Access { token: None }
    }

    /// Requires `token`.
    ///
    /// # Errors
    /// [`DashboardError::Token`] when the token is shorter than 8 characters or holds
    /// characters other than letters, digits and `-_.~`.
    pub fn with_token(token: &str) -> Result<Self, DashboardError> {
        if !valid_token(token) {
            return Err(DashboardError::Token(
                "a token must be 8 to 256 letters, digits or -_.~".into(),
            ));
        }
        Ok(Access {
            token: Some(token.into()),
        })
    }

    /// The rule for a server on `addr`: `token` if given; none on loopback.
    ///
    /// # Errors
    /// [`DashboardError::NeedsToken`] for a non-loopback address without a token (the
    /// dashboard shows run names, targets and results: beyond this machine it is never open),
    /// [`DashboardError::Token`] for an unusable token.
    pub fn for_address(addr: &SocketAddr, token: Option<&str>) -> Result<Self, DashboardError> {
        match token {
            Some(t) => Self::with_token(t),
            None if addr.ip().is_loopback() => Ok(Self::open()),
            None => Err(DashboardError::NeedsToken { addr: *addr }),
        }
    }

    /// The token, if one is required.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// `?token=...` to append to URLs (empty when no token is required).
    pub fn query_suffix(&self) -> String {
        self.token
            .as_deref()
            .map_or_else(String::new, |t| format!("?token={t}"))
    }

    /// Whether a request without a token may pass with this `Host` header: only when no
    /// token is required and the host is a loopback name (see the module docs).
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        if self.token.is_some() {
            return true;
        }
        let Some(host) = host else {
            return false;
        };
        // Strip the port: `[::1]:8080`, `127.0.0.1:8080`, `localhost`.
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// Whether a request with this query string and `Authorization` header may pass.
    pub fn allows(&self, query: Option<&str>, authorization: Option<&str>) -> bool {
        let Some(want) = self.token.as_deref() else {
            return true;
        };
        let bearer = authorization
            .and_then(|h| h.strip_prefix("Bearer "))
            .map(str::trim);
        let from_query = query.and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("token=")));
        [bearer, from_query]
            .into_iter()
            .flatten()
            .any(|got| constant_time_eq(got.as_bytes(), want.as_bytes()))
    }
}

/// Compares in time that depends only on the length of `want` (the token), never on where or
/// whether `got` differs: the time taken tells nothing about how much of a guess was right, nor
/// its length.
pub fn constant_time_eq(got: &[u8], want: &[u8]) -> bool {
    // Lengths differ: still one pass over `want`, and the difference makes the result false.
    let mut diff = (got.len() ^ want.len()) as u64;
    for (i, w) in want.iter().enumerate() {
        let g = got.get(i).copied().unwrap_or(!w);
        diff |= u64::from(g ^ w);
    }
    std::hint::black_box(diff) == 0
}

/// Middleware: 401 for a request without the token.
pub async fn require(State(access): State<Access>, req: Request, next: Next) -> Response {
    let auth = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    if !access.host_allowed(host) {
        return (
            StatusCode::FORBIDDEN,
            "403: this dashboard answers only requests to a loopback host name\n",
        )
            .into_response();
    }
    if access.allows(req.uri().query(), auth) {
        next.run(req).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "401: this dashboard needs its token: add ?token=... to the URL printed when it started\n",
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_from_the_query_or_the_header() {
        let a = Access::with_token("s3cret-token").unwrap();
        assert!(a.allows(Some("token=s3cret-token"), None));
        assert!(a.allows(Some("q=x&token=s3cret-token"), None));
        assert!(a.allows(None, Some("Bearer s3cret-token")));
        assert!(!a.allows(None, None));
        assert!(!a.allows(Some("token=s3cret-tokeN"), None));
        assert!(!a.allows(Some("token=s3cret"), None));
        assert!(!a.allows(Some("xtoken=s3cret-token"), None));
        assert!(!a.allows(None, Some("Basic s3cret-token")));
        assert!(Access::open().allows(None, None));
    }

    #[test]
    fn loopback_needs_no_token_and_other_addresses_are_refused_without_one() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert!(Access::for_address(&lo, None).unwrap().token().is_none());
        let any: SocketAddr = "0.0.0.0:8642".parse().unwrap();
        let e = Access::for_address(&any, None).unwrap_err();
        assert!(matches!(e, DashboardError::NeedsToken { .. }));
        assert!(e.to_string().contains("--token"), "{e}");
        let v6: SocketAddr = "[::]:8642".parse().unwrap();
        assert!(Access::for_address(&v6, None).is_err());
        let a = Access::for_address(&any, Some("given-token")).unwrap();
        assert_eq!(a.token(), Some("given-token"));
        let c = Access::for_address(&lo, Some("given-token")).unwrap();
        assert_eq!(c.token(), Some("given-token"));
    }

    #[test]
    fn constant_time_comparison_is_exact() {
        assert!(constant_time_eq(b"abcdefgh", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefgH", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefg", b"abcdefgh"));
        assert!(!constant_time_eq(b"abcdefghi", b"abcdefgh"));
        assert!(!constant_time_eq(b"", b"abcdefgh"));
    }

    #[test]
    fn without_a_token_only_loopback_host_names_are_answered() {
        let open = Access::open();
        for h in [
            "127.0.0.1:8642",
            "localhost:1",
            "LOCALHOST",
            "[::1]:9",
            "127.1.2.3",
        ] {
            assert!(open.host_allowed(Some(h)), "{h}");
        }
        for h in [
            "evil.example:8642",
            "10.0.0.1:80",
            "[fe80::1]:80",
            "localhost.evil:1",
        ] {
            assert!(!open.host_allowed(Some(h)), "{h}");
        }
        assert!(!open.host_allowed(None));
        let with = Access::with_token("a-long-token").unwrap();
        assert!(with.host_allowed(Some("dashboard.example:8642")));
    }

    #[test]
    fn weak_or_unsafe_tokens_are_refused() {
        assert!(Access::with_token("short").is_err());
        assert!(Access::with_token("has space in it").is_err());
        assert!(Access::with_token("a&token=b-long").is_err());
        let shown = format!("{:?}", Access::with_token("never-printed").unwrap());
        assert!(
            shown.contains("<set>") && !shown.contains("never-printed"),
            "{shown}"
        );
    }
}
