//! The one redaction rule: what of a run's configuration is a secret, and how it is hidden
//! before anything is printed, written to the results file, rendered in a report, served by the
//! dashboard or stored in the run history.
//!
//! msgbench talks to production systems with real credentials, and everything downstream of
//! the results file (reports, Prometheus output, the dashboard, the history database) is shared
//! freely. So the rule is applied once, where the plan leaves the process's memory
//! ([`crate::scenario::RunPlan::redacted`] for the plan, [`Secrets::scrub`] for any free text such
//! as an error message), and nothing downstream needs to know about secrets.
//!
//! # The contract
//!
//! - **URLs** ([`url()`]): the user info of every URL is hidden: `scheme://user:***@host` (the user
//!   name stays, it tells which account was used) or `scheme://***@host` for a bare token
//!   (`nats://TOKEN@host`). Query parameters whose name looks like a credential (contains
//!   `pass`, `pwd`, `token`, `secret`, `key`, `auth`, `jwt`, `sig`, `credential` or `session`)
//!   keep their name and lose their value. A comma-separated broker list
//!   (`nats://u:p@a:4222,nats://u:p@b:4222`) is redacted URL by URL. The user info ends at the
//!   *last* `@` of a URL, wherever it is: a password holding `/`, `?` or `@` unescaped is hidden
//!   whole, at the price of over-redacting a URL whose path or query holds an `@` (shown as
//!   `scheme://***@rest`). Over-redaction only costs display; a leak cannot be taken back.
//! - **Headers** ([`HeaderRule`]): the values of `Authorization`, `Proxy-Authorization`,
//!   `Cookie`, `Set-Cookie` and every header whose name contains `api-key`, `apikey`,
//!   `api_key`, `token`, `secret`, `password`, `passwd`, `auth`, `session`, `signature` or
//!   `credential` (case-insensitive), plus those matching the user's patterns (`--redact-header`,
//!   `MSGBENCH_REDACT_HEADER`, scenario `[output] redact_headers`: case-insensitive globs where
//!   `*` is any run of characters and `?` one), become `***`.
//! - **Free text** ([`Secrets`]): every secret value the rules above hide is also collected, and
//!   any text bound for the results file or the terminal (error messages, warnings, events) has
//!   each occurrence replaced by `***`, in its literal and percent-decoded forms. Values shorter
//!   than [`MIN_SCRUBBED_LEN`] characters are hidden where they are structured (URL, header) but
//!   not searched for in free text, where replacing every `ab` would garble messages.
//!
//! Every function here runs when a plan is printed or a record is written (once per run, per
//! event, per interval), never per message.

use std::borrow::Cow;

/// What a hidden value is replaced with.
pub const MASK: &str = "***";

/// Secrets shorter than this are not searched for in free text (see the module docs).
pub const MIN_SCRUBBED_LEN: usize = 3;

/// A header-name pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    /// The pattern is empty or holds characters no header name has.
    #[error(
        "`{0}` is not a header-name pattern: use letters, digits, `-_.` and the wildcards `*` (any run) and `?` (one character), e.g. `x-tenant-*`"
    )]
    BadPattern(String),
}

/// Substrings of query-parameter names that mark the value as a credential.
const SECRET_QUERY_KEYS: &[&str] = &[
    "pass",
    "pwd",
    "token",
    "secret",
    "key",
    "auth",
    "jwt",
    "sig",
    "credential",
    "session",
];

/// Header names whose values are always credentials.
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
];

/// Substrings of header names that mark the value as a credential.
const SECRET_HEADER_PARTS: &[&str] = &[
    "api-key",
    "apikey",
    "api_key",
    "token",
    "secret",
    "password",
    "passwd",
    "auth",
    "session",
    "signature",
    "credential",
];

/// One URL of a (possibly comma-separated) URL list, split where redaction needs it.
struct UrlParts<'a> {
    /// `scheme://`.
    head: &'a str,
    /// Everything before the last `@`, if there is one.
    userinfo: Option<&'a str>,
    /// Host, path, query and fragment.
    rest: &'a str,
}

impl<'a> UrlParts<'a> {
    fn split(piece: &'a str) -> Option<Self> {
        let i = piece.find("://")? + 3;
        let (head, after) = piece.split_at(i);
        Some(match after.rfind('@') {
            Some(at) => UrlParts {
                head,
                userinfo: Some(&after[..at]),
                rest: &after[at + 1..],
            },
            None => UrlParts {
                head,
                userinfo: None,
                rest: after,
            },
        })
    }

    /// The query's `name=value` pairs.
    fn query(&self) -> impl Iterator<Item = &'a str> {
        let rest = self.rest;
        let q = rest.split_once('?').map_or("", |(_, q)| q);
        let q = q.split_once('#').map_or(q, |(q, _)| q);
        q.split('&').filter(|kv| !kv.is_empty())
    }

    /// The secret part of the user info: the password, or the whole of a bare token.
    fn secret(&self) -> Option<&'a str> {
        let ui = self.userinfo?;
        match ui.split_once(':') {
            Some((user, pass)) if plain_user(user) => Some(pass),
            _ => Some(ui),
        }
    }
}

/// A user name that can be shown: nothing that hints the user info was mis-split.
fn plain_user(user: &str) -> bool {
    !user.contains(['/', '?', '#', '@', ','])
}

fn secret_query_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_QUERY_KEYS.iter().any(|s| k.contains(s))
}

/// Splits a URL list into its URLs: a new URL starts after a `,` followed by `scheme://`.
fn pieces(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in list.match_indices(',') {
        let next = &list[i + 1..];
        let scheme_len = next
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'.' | b'-'))
            .count();
        if scheme_len > 0
            && next.as_bytes()[0].is_ascii_alphabetic()
            && next[scheme_len..].starts_with("://")
        {
            out.push(&list[start..i]);
            start = i + 1;
        }
    }
    out.push(&list[start..]);
    out
}

/// `url` (or a comma-separated list of URLs) with its credentials replaced by [`MASK`]; see
/// the module docs for exactly what is hidden. Text without `://` loses what comes before its
/// last `@` (a target typed without its scheme) and is otherwise returned unchanged.
pub fn url(url: &str) -> String {
    pieces(url)
        .into_iter()
        .map(one_url)
        .collect::<Vec<_>>()
        .join(",")
}

fn one_url(piece: &str) -> String {
    let Some(p) = UrlParts::split(piece) else {
        // Not a URL (a mistyped target such as `user:pass@host`): only its user info goes.
        return match piece.rfind('@') {
            Some(at) => format!("{MASK}{}", &piece[at..]),
            None => piece.to_string(),
        };
    };
    let mut out = String::with_capacity(piece.len());
    out.push_str(p.head);
    if let Some(ui) = p.userinfo {
        match ui.split_once(':') {
            Some((user, _)) if plain_user(user) => {
                out.push_str(user);
                out.push(':');
                out.push_str(MASK);
            }
            _ => out.push_str(MASK),
        }
        out.push('@');
    }
    let (before_query, query) = match p.rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (p.rest, None),
    };
    out.push_str(before_query);
    if let Some(q) = query {
        let (q, fragment) = match q.split_once('#') {
            Some((q, f)) => (q, Some(f)),
            None => (q, None),
        };
        out.push('?');
        let params: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if secret_query_key(k) => format!("{k}={MASK}"),
                _ => kv.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
        if let Some(f) = fragment {
            out.push('#');
            out.push_str(f);
        }
    }
    out
}

/// Which headers carry credentials: the built-in names (module docs) and the user's patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRule {
    /// Lower-cased globs.
    patterns: Vec<String>,
}

impl HeaderRule {
    /// The built-in names plus `patterns` (case-insensitive globs).
    ///
    /// # Errors
    /// [`RedactError::BadPattern`] for an empty pattern or one with characters no header name
    /// holds (so a typo is refused rather than silently matching nothing).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, RedactError> {
        let patterns = patterns
            .iter()
            .map(|p| {
                let p = p.as_ref().trim();
                let ok = !p.is_empty()
                    && p.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'*' | b'?')
                    });
                if ok {
                    Ok(p.to_ascii_lowercase())
                } else {
                    Err(RedactError::BadPattern(p.to_string()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(HeaderRule { patterns })
    }

    /// Whether the value of header `name` is a credential.
    pub fn is_secret(&self, name: &str) -> bool {
        let n = name.trim().to_ascii_lowercase();
        SECRET_HEADERS.contains(&n.as_str())
            || SECRET_HEADER_PARTS.iter().any(|p| n.contains(p))
            || self
                .patterns
                .iter()
                .any(|p| glob(p.as_bytes(), n.as_bytes()))
    }

    /// The value to show for header `name`: [`MASK`] for a credential, else `value`.
    pub fn value<'a>(&self, name: &str, value: &'a str) -> &'a str {
        if self.is_secret(name) { MASK } else { value }
    }
}

/// Glob match: `*` any run (also empty), `?` one byte, anything else itself.
fn glob(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, si));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == s[si] => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The secret values of one run, to scrub from free text (see the module docs). Its `Debug`
/// never shows them.
#[derive(Clone, Default)]
pub struct Secrets {
    /// Longest first, so a secret containing another is replaced whole.
    literals: Vec<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} values)", self.literals.len())
    }
}

impl Secrets {
    /// No secrets: [`Secrets::scrub`] returns its input.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether nothing would be scrubbed.
    pub fn is_empty(&self) -> bool {
        self.literals.is_empty()
    }

    /// Adds every secret of `other` (the groups of a run each have theirs).
    pub fn extend(&mut self, other: &Secrets) {
        for v in &other.literals {
            self.add(v);
        }
    }

    /// Adds one secret value, and its percent-decoded form when that differs.
    pub fn add(&mut self, value: &str) {
        let decoded = percent_decode(value);
        for v in [Some(value.to_string()), decoded].into_iter().flatten() {
            if v.chars().count() >= MIN_SCRUBBED_LEN && !self.literals.contains(&v) {
                self.literals.push(v);
            }
        }
        self.literals
            .sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    }

    /// Adds the secrets of `url` (a URL or URL list): user-info passwords and tokens, and the
    /// values of credential query parameters.
    pub fn add_url(&mut self, url: &str) {
        for piece in pieces(url) {
            let Some(p) = UrlParts::split(piece) else {
                continue;
            };
            // A password that is the user name (RabbitMQ's guest:guest) hides nothing the
            // shown user name does not tell: scrubbing it would hide the user name everywhere.
            let user = p.userinfo.and_then(|ui| ui.split_once(':')).map(|(u, _)| u);
            if let Some(s) = p.secret()
                && Some(s) != user
            {
                self.add(s);
            }
            for kv in p.query() {
                if let Some((k, v)) = kv.split_once('=')
                    && secret_query_key(k)
                {
                    self.add(v);
                }
            }
        }
    }

    /// Adds the value of a credential header: whole, without its scheme word
    /// (`Bearer TOKEN` → `TOKEN`), and each cookie's value (`a=x; b=y` → `x`, `y`).
    pub fn add_header_value(&mut self, value: &str) {
        let value = value.trim();
        self.add(value);
        if let Some((scheme, cred)) = value.split_once(' ')
            && scheme.bytes().all(|b| b.is_ascii_alphabetic())
        {
            self.add(cred.trim());
        }
        for cookie in value.split(';') {
            if let Some((_, v)) = cookie.split_once('=') {
                self.add(v.trim());
            }
        }
    }

    /// `text` with every secret replaced by [`MASK`] (borrowed when none occurs).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for s in &self.literals {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), MASK));
            }
        }
        out
    }
}

/// `s` with its `%XX` escapes decoded (a URL's user or password), or as it is when it has
/// none or does not decode to UTF-8.
pub fn unescape(s: &str) -> String {
    percent_decode(s).unwrap_or_else(|| s.to_string())
}

/// `%XX` decoded, when the text has any escape and decodes to UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().filter(|d| d != s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// URL parts decoded for the drivers (credentials, vhosts): escapes decoded, anything
    /// malformed kept as written, never a panic on a multi-byte character after a `%`.
    #[test]
    fn unescape_decodes_escapes_and_keeps_the_rest() {
        assert_eq!(unescape("us%40er:p%2Fw"), "us@er:p/w");
        assert_eq!(unescape("%2f"), "/");
        for kept in ["a%2", "%", "%+f", "%aé", "é%", "plain"] {
            assert_eq!(unescape(kept), kept);
        }
        assert_eq!(unescape("%zz%41"), "%zzA");
    }

    #[test]
    fn urls_lose_user_info_and_credential_parameters() {
        let cases = [
            ("nats://bob:secret@host:4222", "nats://bob:***@host:4222"),
            ("nats://tok@host", "nats://***@host"),
            ("amqp://h/vh?token=abc&x=1", "amqp://h/vh?token=***&x=1"),
            (
                "http://h/p?api_key=k1&Access_Token=t&page=2#frag",
                "http://h/p?api_key=***&Access_Token=***&page=2#frag",
            ),
            ("mem://", "mem://"),
            ("not a url", "not a url"),
            ("user:pw@host:1883", "***@host:1883"),
            // Unescaped `/`, `?` and `@` in a password are hidden whole.
            ("amqp://u:pa/ss?w@rd@h:5672/v", "amqp://u:***@h:5672/v"),
            ("mqtt://u:p@ss@h", "mqtt://u:***@h"),
            // A broker list, URL by URL.
            (
                "nats://u:p1@a:4222,nats://v:p2@b:4222",
                "nats://u:***@a:4222,nats://v:***@b:4222",
            ),
            ("mqtt://u:p@a,b:1884", "mqtt://u:***@a,b:1884"),
            // An `@` in a path over-redacts rather than guessing.
            ("http://h/x@y", "http://***@y"),
        ];
        for (raw, shown) in cases {
            assert_eq!(url(raw), shown, "{raw}");
        }
    }

    #[test]
    fn credential_headers_by_name_and_pattern() {
        let r = HeaderRule::new(&["x-tenant-*", "X-Sig?"]).unwrap();
        for n in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "X-Api-Key",
            "x-apikey",
            "X-Auth-Token",
            "X-Amz-Security-Token",
            "X-Tenant-Id",
            "x-sig1",
        ] {
            assert!(r.is_secret(n), "{n}");
        }
        for n in [
            "Content-Type",
            "X-Request-Id",
            "Accept",
            "X-Tenant",
            "x-sig12",
        ] {
            assert!(!r.is_secret(n), "{n}");
        }
        assert_eq!(r.value("Authorization", "Bearer x"), MASK);
        assert_eq!(r.value("Accept", "*/*"), "*/*");
        assert!(HeaderRule::new(&[""]).is_err());
        assert!(HeaderRule::new(&["x-(a|b)"]).is_err());
        assert!(glob(b"*", b""));
        assert!(glob(b"a*b*c", b"aXXbYc"));
        assert!(!glob(b"a*b", b"aXXc"));
    }

    #[test]
    fn free_text_loses_every_collected_secret() {
        let mut s = Secrets::new();
        s.add_url("amqp10://user:p%40ss-word@h:5672,amqp10://x:other-pw@h2?jwt=eyJ.abc");
        s.add_url("nats://tok-123@h");
        s.add_header_value("Bearer tok-abc-def");
        s.add_header_value("session=cookie-1; theme=dark-mode");
        s.add("ab"); // too short for free text
        let text = "connect amqp10://user:p%40ss-word@h failed (p@ss-word); other-pw, eyJ.abc, \
                    tok-123, token tok-abc-def, cookie-1, dark-mode, ab";
        let clean = s.scrub(text);
        for secret in [
            "p%40ss-word",
            "p@ss-word",
            "other-pw",
            "eyJ.abc",
            "tok-123",
            "tok-abc-def",
            "cookie-1",
            "dark-mode",
        ] {
            assert!(!clean.contains(secret), "{secret} in {clean}");
        }
        assert!(clean.contains("user") && clean.ends_with(", ab"), "{clean}");
        assert!(matches!(Secrets::new().scrub("x"), Cow::Borrowed(_)));
        assert!(!format!("{s:?}").contains("tok"));
    }

    /// guest:guest: the password is the user name the report shows anyway, so the user name
    /// stays readable in free text (and in the redacted URL) instead of turning into `***`.
    #[test]
    fn a_password_that_is_the_user_name_leaves_the_user_name_shown() {
        let mut s = Secrets::new();
        s.add_url("amqp://guest:guest@h:5672/");
        let shown = url("amqp://guest:guest@h:5672/");
        assert_eq!(shown, "amqp://guest:***@h:5672/");
        assert_eq!(s.scrub(&shown), shown);
    }
}
