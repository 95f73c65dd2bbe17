//! NATS decentralised authentication: an nkey (an Ed25519 key in NATS's text encoding) signs
//! the nonce of the server's INFO, and CONNECT carries the signature with the user's public
//! key (`?nkey=FILE`, a user seed) or with the user's JWT (`?creds=FILE`, a `.creds` file as
//! `nsc` writes it: the JWT and the seed between `-----BEGIN ...-----` lines).
//!
//! The text encoding: base32 (RFC 4648 alphabet, no padding) of a prefix, the 32 key bytes
//! and a CRC-16 (XMODEM) of both, little-endian. A seed's prefix is two bytes: `S` (18 << 3)
//! merged with the key type (`U` for users, 20 << 3); a public key's is the type alone. The
//! signature goes into CONNECT as unpadded base64url. Secrets are read once, at driver build,
//! and never printed: errors name the file, not its content.

use base64::Engine as _;
use msgbench_core::driver::DriverError;
use ring::signature::{Ed25519KeyPair, KeyPair as _};

/// Prefix byte of seeds (`S`).
const SEED: u8 = 18 << 3;
/// Prefix byte of user keys (`U`).
const USER: u8 = 20 << 3;

/// Who this client says it is, and the key that proves it.
pub struct Identity {
    /// The user's public key (`U...`), sent as `nkey` when there is no JWT.
    pub public: String,
    /// The user's JWT (from a `.creds` file), sent as `jwt`.
    pub jwt: Option<String>,
    key: Ed25519KeyPair,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("public", &self.public)
            .field("jwt", &self.jwt.as_ref().map(|_| "<jwt>"))
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// From a user seed (`SU...`), as text.
    pub fn from_seed(seed: &str) -> Result<Identity, String> {
        let raw = decode(seed.trim())?;
        if raw.len() != 34 {
            return Err("not an nkey seed (wrong length)".into());
        }
        if raw[0] & 0xF8 != SEED {
            return Err("not an nkey seed (it does not start with S)".into());
        }
        let kind = ((raw[0] & 0x07) << 5) | ((raw[1] & 0xF8) >> 3);
        if kind != USER {
            return Err("not a user seed (it does not start with SU)".into());
        }
        let key = Ed25519KeyPair::from_seed_unchecked(&raw[2..34])
            .map_err(|_| "not a valid Ed25519 seed".to_string())?;
        let public = encode(USER, key.public_key().as_ref());
        Ok(Identity {
            public,
            jwt: None,
            key,
        })
    }

    /// From a `.creds` file's text: the first armoured block is the user JWT, the second the
    /// user seed.
    pub fn from_creds(text: &str) -> Result<Identity, String> {
        let mut blocks = Vec::new();
        let mut inside: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if line.starts_with("-----BEGIN") {
                inside = Some(String::new());
            } else if line.starts_with("-----END") || line.starts_with("------END") {
                if let Some(b) = inside.take() {
                    blocks.push(b);
                }
            } else if let Some(b) = inside.as_mut() {
                b.push_str(line);
            }
        }
        let [jwt, seed, ..] = &blocks[..] else {
            return Err("not a .creds file (expected a JWT block and a seed block)".into());
        };
        if jwt.split('.').count() != 3 {
            return Err("not a .creds file (its first block is not a JWT)".into());
        }
        let mut id = Identity::from_seed(seed)?;
        id.jwt = Some(jwt.clone());
        Ok(id)
    }

    /// Reads `path` as a seed file (`nkey`) or a `.creds` file (`creds`).
    pub fn load(path: &str, creds: bool) -> Result<Identity, DriverError> {
        let what = if creds { "creds" } else { "nkey" };
        let text = std::fs::read_to_string(path)
            .map_err(|e| DriverError::Config(format!("{what}={path}: {e}")))?;
        let id = if creds {
            Identity::from_creds(&text)
        } else {
            Identity::from_seed(&text)
        };
        id.map_err(|e| DriverError::Config(format!("{what}={path}: {e}")))
    }

    /// The signature of the server's nonce, as CONNECT's `sig` carries it.
    pub fn sign(&self, nonce: &str) -> String {
        let sig = self.key.sign(nonce.as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sig.as_ref())
    }
}

const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// CRC-16/XMODEM (polynomial 0x1021, initial 0), as nkeys checksum their bytes.
fn crc16(data: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The bytes of an encoded key, checksum verified and removed.
fn decode(text: &str) -> Result<Vec<u8>, String> {
    let (mut acc, mut bits, mut out) = (0u32, 0u32, Vec::with_capacity(text.len() * 5 / 8));
    for c in text.bytes() {
        let v = ALPHABET
            .iter()
            .position(|&a| a == c)
            .ok_or("not an nkey (a character outside base32)")? as u32;
        acc = (acc << 5) | v;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    if out.len() < 3 {
        return Err("not an nkey (too short)".into());
    }
    let n = out.len() - 2;
    let sum = u16::from_le_bytes([out[n], out[n + 1]]);
    if crc16(&out[..n]) != sum {
        return Err("not an nkey (its checksum is wrong)".into());
    }
    out.truncate(n);
    Ok(out)
}

/// A public key of type `prefix` in the text encoding.
fn encode(prefix: u8, key: &[u8]) -> String {
    let mut raw = Vec::with_capacity(key.len() + 3);
    raw.push(prefix);
    raw.extend_from_slice(key);
    raw.extend_from_slice(&crc16(&raw).to_le_bytes());
    let (mut acc, mut bits, mut out) = (0u32, 0u32, String::new());
    for b in raw {
        acc = (acc << 8) | b as u32;
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((acc >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (5 - bits)) & 31) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{ED25519, UnparsedPublicKey};

    /// The example pair printed by `nk -gen user -pubout` in NATS's own documentation.
    const SEED_TEXT: &str = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY";
    const PUBLIC: &str = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4";

    #[test]
    fn a_seed_gives_its_documented_public_key_and_signs() {
        let id = Identity::from_seed(SEED_TEXT).unwrap();
        assert_eq!(id.public, PUBLIC);
        let sig = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(id.sign("nonce-from-info"))
            .unwrap();
        let public = decode(PUBLIC).unwrap();
        UnparsedPublicKey::new(&ED25519, &public[1..])
            .verify(b"nonce-from-info", &sig)
            .unwrap();
    }

    #[test]
    fn bad_seeds_say_what_is_wrong() {
        let typo = SEED_TEXT.replace("SSL3", "SSL4");
        let e = Identity::from_seed(&typo).unwrap_err();
        assert!(e.contains("checksum"), "{e}");
        assert!(Identity::from_seed(PUBLIC).unwrap_err().contains("seed"));
        assert!(
            Identity::from_seed("hello!")
                .unwrap_err()
                .contains("base32")
        );
    }

    #[test]
    fn creds_files_give_the_jwt_and_the_seed() {
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi.eyJqdGki.c2ln\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\n\
             -----BEGIN USER NKEY SEED-----\n{SEED_TEXT}\n------END USER NKEY SEED------\n"
        );
        let id = Identity::from_creds(&creds).unwrap();
        assert_eq!(id.jwt.as_deref(), Some("eyJ0eXAi.eyJqdGki.c2ln"));
        assert_eq!(id.public, PUBLIC);
        assert!(Identity::from_creds(SEED_TEXT).is_err());
        assert!(!format!("{id:?}").contains("eyJ"));
    }
}
