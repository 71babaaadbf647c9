//! One-time join codes: one copy-pasteable line (`rdk1-` and base32) carrying the address to
//! dial, the rig's certificate fingerprint, a 128-bit one-time secret and an expiry, sealed by a
//! checksum so that a typo is told apart from a wrong code.

use sha2::{Digest, Sha256};

use crate::fingerprint::Fingerprint;

/// What every join code starts with (the digit is the format's version).
pub const PREFIX: &str = "rdk1-";

/// Bytes of the one-time secret (128 bits).
pub const SECRET_BYTES: usize = 16;

const VERSION: u8 = 1;
const CHECKSUM_BYTES: usize = 4;
/// version, fingerprint, secret, expiry (seconds since the epoch), then the address.
const FIXED_BYTES: usize = 1 + 32 + SECRET_BYTES + 8;

/// A decoded join code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinCode {
    /// `HOST:PORT` the desk dials: the rig's fleet listener, a tunnel's local end, a VPN address.
    pub address: String,
    pub fingerprint: Fingerprint,
    pub secret: [u8; SECRET_BYTES],
    /// Whole seconds since the Unix epoch, in milliseconds.
    pub expires_at_ms: i64,
}

/// Why a text is not a usable join code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeError {
    #[error("this is not a Rigdeck join code (they start with '{PREFIX}'): copy the whole line `rigdeck fleet invite` printed on the rig")]
    NotACode,
    #[error("this join code was made by a newer Rigdeck ('{0}…'): update Rigdeck on this machine")]
    NewerFormat(String),
    #[error("the join code has a character that join codes never contain ('{0}'): a typo; copy the code again from the rig")]
    BadCharacter(char),
    #[error("the join code is cut short: copy the whole line from the rig")]
    TooShort,
    #[error(
        "the join code has a character too many or too few: copy the whole line from the rig again"
    )]
    Length,
    #[error("the join code's checksum does not match: a character was mistyped, swapped or lost; copy the code again from the rig")]
    Checksum,
    #[error("the join code's address is not readable text: make a new code on the rig")]
    BadAddress,
}

impl JoinCode {
    /// The one line to hand over.
    pub fn encode(&self) -> String {
        let mut bytes = Vec::with_capacity(FIXED_BYTES + self.address.len() + CHECKSUM_BYTES);
        bytes.push(VERSION);
        bytes.extend_from_slice(&self.fingerprint.0);
        bytes.extend_from_slice(&self.secret);
        let seconds = u64::try_from(self.expires_at_ms.div_euclid(1000)).unwrap_or(0);
        bytes.extend_from_slice(&seconds.to_be_bytes());
        bytes.extend_from_slice(self.address.as_bytes());
        let sum = checksum(&bytes);
        bytes.extend_from_slice(&sum);
        let body = data_encoding::BASE32_NOPAD
            .encode(&bytes)
            .to_ascii_lowercase();
        format!("{PREFIX}{body}")
    }

    /// Reads a code as pasted (blanks and line breaks inside it are ignored, case too).
    pub fn decode(text: &str) -> Result<Self, CodeError> {
        let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        let lower = compact.to_ascii_lowercase();
        let Some(body) = lower.strip_prefix(PREFIX) else {
            return Err(newer_or_not_a_code(&lower));
        };
        let upper = body.to_ascii_uppercase();
        if let Some(bad) = upper.chars().find(|c| !is_base32(*c)) {
            return Err(CodeError::BadCharacter(bad.to_ascii_lowercase()));
        }
        let bytes = data_encoding::BASE32_NOPAD
            .decode(upper.as_bytes())
            .map_err(|_| CodeError::Length)?;
        if bytes.len() < FIXED_BYTES + CHECKSUM_BYTES {
            return Err(CodeError::TooShort);
        }
        let (payload, sum) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
        if checksum(payload) != sum {
            return Err(CodeError::Checksum);
        }
        Self::from_payload(payload)
    }

    fn from_payload(payload: &[u8]) -> Result<Self, CodeError> {
        if payload[0] != VERSION {
            return Err(CodeError::NewerFormat(format!("rdk{}", payload[0])));
        }
        let mut fingerprint = [0u8; 32];
        fingerprint.copy_from_slice(&payload[1..33]);
        let mut secret = [0u8; SECRET_BYTES];
        secret.copy_from_slice(&payload[33..33 + SECRET_BYTES]);
        let mut seconds = [0u8; 8];
        seconds.copy_from_slice(&payload[33 + SECRET_BYTES..FIXED_BYTES]);
        let seconds = i64::try_from(u64::from_be_bytes(seconds)).unwrap_or(i64::MAX / 1000);
        let address = std::str::from_utf8(&payload[FIXED_BYTES..])
            .map_err(|_| CodeError::BadAddress)?
            .to_owned();
        if address.is_empty() {
            return Err(CodeError::BadAddress);
        }
        Ok(Self {
            address,
            fingerprint: Fingerprint(fingerprint),
            secret,
            expires_at_ms: seconds.saturating_mul(1000),
        })
    }

    /// Whether the code's time is over at `now_ms`.
    pub fn is_expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_at_ms
    }
}

fn is_base32(c: char) -> bool {
    c.is_ascii_uppercase() || ('2'..='7').contains(&c)
}

fn newer_or_not_a_code(text: &str) -> CodeError {
    let newer = text
        .strip_prefix("rdk")
        .and_then(|rest| rest.split_once('-'))
        .filter(|(version, _)| !version.is_empty() && version.chars().all(|c| c.is_ascii_digit()));
    match newer {
        Some((version, _)) => CodeError::NewerFormat(format!("rdk{version}")),
        None => CodeError::NotACode,
    }
}

fn checksum(payload: &[u8]) -> [u8; CHECKSUM_BYTES] {
    let digest = Sha256::new()
        .chain_update(b"rigdeck join code")
        .chain_update(payload)
        .finalize();
    let mut sum = [0u8; CHECKSUM_BYTES];
    sum.copy_from_slice(&digest[..CHECKSUM_BYTES]);
    sum
}
