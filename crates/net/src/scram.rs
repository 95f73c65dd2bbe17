//! SASL SCRAM client (RFC 5802; SHA-256 per RFC 7677, SHA-512 as brokers name it).
//!
//! Why it is here: brokers that refuse to see a password in clear on a plain port offer only
//! SCRAM there (Qpid Broker-J's default password providers hide PLAIN without TLS and offer
//! `SCRAM-SHA-256 SCRAM-SHA-1 CRAM-MD5`), so a client that knows only PLAIN cannot log in at
//! all. Both AMQP drivers carry the same exchange in their own frames; the mechanism itself lives
//! here once.
//!
//! The exchange, as a state machine the driver walks through:
//! 1. [`Scram::client_first`] goes in the mechanism's initial response;
//! 2. the server's first challenge goes to [`Scram::client_final`], whose answer is sent back;
//! 3. the server's final message (a last challenge, or the outcome's additional data) goes to
//!    [`Scram::verify_server_final`], which proves the server knew the password too.
//!
//! Limits, stated rather than hidden: no channel binding (the `n,,` header: the mechanisms
//! without `-PLUS`), and user names and passwords are used as given (no SASLprep, which only
//! changes non-ASCII input). A server that asks for more than [`MAX_ITERATIONS`] rounds of
//! PBKDF2 is refused: each round is work the generator would do before its first message.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ring::{digest, hmac, pbkdf2};
use std::num::NonZeroU32;

/// The most PBKDF2 rounds a server may ask for (brokers default to 4,096; a million take about
/// half a second here, which a handshake time-out can still hold).
pub const MAX_ITERATIONS: u32 = 1_000_000;

/// The hash a SCRAM mechanism is named after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hash {
    /// `SCRAM-SHA-1` (RFC 5802's own; still what some brokers offer first).
    Sha1,
    /// `SCRAM-SHA-256` (RFC 7677).
    Sha256,
    /// `SCRAM-SHA-512` (Kafka's and Artemis's name for the same construction on SHA-512).
    Sha512,
}

impl Hash {
    /// The SASL mechanism name.
    pub fn mechanism(self) -> &'static str {
        match self {
            Hash::Sha1 => "SCRAM-SHA-1",
            Hash::Sha256 => "SCRAM-SHA-256",
            Hash::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// The strongest SCRAM mechanism among `offered` (names as the server lists them), if any.
    pub fn strongest<'a>(offered: impl IntoIterator<Item = &'a str>) -> Option<Hash> {
        let offered: Vec<&str> = offered.into_iter().collect();
        [Hash::Sha512, Hash::Sha256, Hash::Sha1]
            .into_iter()
            .find(|h| {
                offered
                    .iter()
                    .any(|o| o.eq_ignore_ascii_case(h.mechanism()))
            })
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            Hash::Sha1 => hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha512 => hmac::HMAC_SHA512,
        }
    }

    fn pbkdf2(self) -> pbkdf2::Algorithm {
        match self {
            Hash::Sha1 => pbkdf2::PBKDF2_HMAC_SHA1,
            Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
            Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
        }
    }

    fn digest(self) -> &'static digest::Algorithm {
        match self {
            Hash::Sha1 => &digest::SHA1_FOR_LEGACY_USE_ONLY,
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha512 => &digest::SHA512,
        }
    }

    fn len(self) -> usize {
        self.digest().output_len()
    }
}

/// Why a SCRAM exchange failed, in words a user can act on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScramError {
    /// The server's message is not SCRAM as RFC 5802 writes it.
    #[error("the server's SCRAM message is malformed ({0})")]
    Malformed(String),
    /// The server's nonce does not extend ours (a replayed or foreign exchange).
    #[error("the server's SCRAM nonce does not start with the client's")]
    Nonce,
    /// More PBKDF2 rounds than [`MAX_ITERATIONS`].
    #[error("the server asks for {0} SCRAM iterations (msgbench allows at most {MAX_ITERATIONS})")]
    Iterations(u64),
    /// The server said `e=...`: usually an unknown user or a wrong password.
    #[error("the server refused the SCRAM login: {0}")]
    Refused(String),
    /// The server's signature is wrong: it does not know the password (or is not the server).
    #[error("the server's SCRAM signature does not match: it does not hold this user's password")]
    ServerSignature,
    /// [`Scram::verify_server_final`] before [`Scram::client_final`].
    #[error("the SCRAM exchange is out of order")]
    OutOfOrder,
}

/// One client's side of one SCRAM exchange.
pub struct Scram {
    hash: Hash,
    password: String,
    /// `n=USER,r=NONCE`: the part of the first message the proofs cover.
    first_bare: String,
    nonce: String,
    /// The signature the server must send back, known once the proof is computed.
    server_signature: Option<Vec<u8>>,
}

impl Scram {
    /// A new exchange for `user` with a random client nonce.
    pub fn new(hash: Hash, user: &str, password: &str) -> Scram {
        let mut raw = [0u8; 18];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut raw)
            .expect("the system's random source failed");
        Scram::with_nonce(hash, user, password, &B64.encode(raw))
    }

    /// An exchange with a given client nonce (the RFCs' examples fix it).
    pub fn with_nonce(hash: Hash, user: &str, password: &str, nonce: &str) -> Scram {
        // RFC 5802 5.1: ',' and '=' in a user name are escaped as =2C and =3D.
        let user = user.replace('=', "=3D").replace(',', "=2C");
        Scram {
            hash,
            password: password.to_string(),
            first_bare: format!("n={user},r={nonce}"),
            nonce: nonce.to_string(),
            server_signature: None,
        }
    }

    /// The mechanism's name (what the client chooses).
    pub fn mechanism(&self) -> &'static str {
        self.hash.mechanism()
    }

    /// The client's first message: no channel binding, no authorisation identity.
    pub fn client_first(&self) -> String {
        format!("n,,{}", self.first_bare)
    }

    /// The client's final message (with its proof) for the server's first message.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<String, ScramError> {
        let text = std::str::from_utf8(server_first)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        if let Some(e) = text.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_string()));
        }
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attr in text.split(',') {
            match attr.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = Some(v),
                Some(("i=", v)) => iterations = Some(v),
                Some(("m=", _)) => {
                    return Err(ScramError::Malformed(
                        "it asks for a mandatory extension".into(),
                    ));
                }
                _ => {}
            }
        }
        let missing = |what: &str| ScramError::Malformed(format!("no {what} in {text:?}"));
        let nonce = nonce.ok_or_else(|| missing("nonce (r=)"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = B64
            .decode(salt.ok_or_else(|| missing("salt (s=)"))?)
            .map_err(|_| ScramError::Malformed("the salt is not base64".into()))?;
        let iterations = iterations.ok_or_else(|| missing("iteration count (i=)"))?;
        let iterations: u64 = iterations
            .parse()
            .map_err(|_| ScramError::Malformed(format!("iteration count {iterations:?}")))?;
        if iterations > MAX_ITERATIONS as u64 {
            return Err(ScramError::Iterations(iterations));
        }
        let rounds = NonZeroU32::new(iterations as u32)
            .ok_or_else(|| ScramError::Malformed("an iteration count of 0".into()))?;

        let h = self.hash;
        let mut salted = vec![0u8; h.len()];
        pbkdf2::derive(
            h.pbkdf2(),
            rounds,
            &salt,
            self.password.as_bytes(),
            &mut salted,
        );
        let salted = hmac::Key::new(h.hmac(), &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(h.digest(), client_key.as_ref());
        // c=biws is base64 of the header "n,,".
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{text},{without_proof}", self.first_bare);
        let signature = hmac::sign(
            &hmac::Key::new(h.hmac(), stored_key.as_ref()),
            auth.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature = hmac::sign(
            &hmac::Key::new(h.hmac(), server_key.as_ref()),
            auth.as_bytes(),
        );
        self.server_signature = Some(server_signature.as_ref().to_vec());
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server's final message (`v=SIGNATURE`, or `e=ERROR`).
    pub fn verify_server_final(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let expected = self
            .server_signature
            .as_ref()
            .ok_or(ScramError::OutOfOrder)?;
        let text = std::str::from_utf8(server_final)
            .map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let first = text.split(',').next().unwrap_or_default();
        if let Some(e) = first.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_string()));
        }
        let v = first
            .strip_prefix("v=")
            .ok_or_else(|| ScramError::Malformed(format!("no verifier (v=) in {text:?}")))?;
        match B64.decode(v) {
            Ok(sig) if &sig == expected => Ok(()),
            _ => Err(ScramError::ServerSignature),
        }
    }

    /// Whether [`client_final`](Self::client_final) has run (the server's final message is the
    /// next thing to expect).
    pub fn awaits_server_final(&self) -> bool {
        self.server_signature.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3's example, byte for byte.
    #[test]
    fn rfc_7677_sha256_example() {
        let mut s = Scram::with_nonce(Hash::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(s.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        assert_eq!(
            s.client_final(server_first.as_bytes()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        s.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert_eq!(
            s.verify_server_final(b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="),
            Err(ScramError::ServerSignature)
        );
    }

    /// RFC 5802 section 5's example (SHA-1).
    #[test]
    fn rfc_5802_sha1_example() {
        let mut s = Scram::with_nonce(Hash::Sha1, "user", "pencil", "fyko+d2lbbFgONRv9qkxdawL");
        let server_first = "r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096";
        assert_eq!(
            s.client_final(server_first.as_bytes()).unwrap(),
            "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
        );
        s.verify_server_final(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=")
            .unwrap();
    }

    #[test]
    fn bad_server_messages_are_refused_with_a_reason() {
        let mut s = Scram::with_nonce(Hash::Sha256, "a=b,c", "pw", "abc");
        assert_eq!(s.client_first(), "n,,n=a=3Db=2Cc,r=abc");
        assert_eq!(s.verify_server_final(b"v=x"), Err(ScramError::OutOfOrder));
        assert_eq!(
            s.client_final(b"r=xyz123,s=AAAA,i=4096"),
            Err(ScramError::Nonce)
        );
        assert_eq!(
            s.client_final(b"r=abc,s=AAAA,i=4096"),
            Err(ScramError::Nonce)
        );
        assert_eq!(
            s.client_final(b"r=abcdef,s=AAAA,i=99999999"),
            Err(ScramError::Iterations(99_999_999))
        );
        assert!(matches!(
            s.client_final(b"r=abcdef,i=4096"),
            Err(ScramError::Malformed(m)) if m.contains("salt")
        ));
        assert_eq!(
            s.client_final(b"e=unknown-user"),
            Err(ScramError::Refused("unknown-user".into()))
        );
        s.client_final(b"r=abcdef,s=AAAA,i=1").unwrap();
        assert_eq!(
            s.verify_server_final(b"e=invalid-proof"),
            Err(ScramError::Refused("invalid-proof".into()))
        );
    }

    #[test]
    fn the_strongest_offered_mechanism_is_chosen() {
        let offered = ["CRAM-MD5", "SCRAM-SHA-1", "SCRAM-SHA-256"];
        assert_eq!(Hash::strongest(offered), Some(Hash::Sha256));
        assert_eq!(
            Hash::strongest(["PLAIN", "scram-sha-512"]),
            Some(Hash::Sha512)
        );
        assert_eq!(Hash::strongest(["PLAIN", "ANONYMOUS"]), None);
        let a = Scram::new(Hash::Sha1, "u", "p").client_first();
        let b = Scram::new(Hash::Sha1, "u", "p").client_first();
        assert_ne!(a, b, "every exchange has its own nonce");
    }
}
