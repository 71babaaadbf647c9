//! A certificate's SHA-256 fingerprint, written as upper-case hex pairs (`AB:CD:…`).

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 of a certificate's DER bytes: what a peer pins.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a certificate given as DER.
    pub fn of_der(der: &[u8]) -> Self {
        Self(Sha256::digest(der).into())
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pairs: Vec<String> = self.0.iter().map(|b| format!("{b:02X}")).collect();
        f.write_str(&pairs.join(":"))
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// Why a text is not a fingerprint.
#[derive(Debug, thiserror::Error)]
#[error(
    "'{0}' is not a SHA-256 fingerprint: expected 32 hex pairs such as AB:CD:… (colons optional)"
)]
pub struct NotAFingerprint(String);

impl FromStr for Fingerprint {
    type Err = NotAFingerprint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let hex: String = text.chars().filter(|c| *c != ':').collect();
        let fail = || NotAFingerprint(text.to_owned());
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(fail());
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| fail())?;
        }
        Ok(Self(bytes))
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_pairs_read_back() {
        let print = Fingerprint::of_der(b"a certificate");
        let text = print.to_string();
        assert_eq!(text.len(), 32 * 3 - 1);
        assert_eq!(text.parse::<Fingerprint>().unwrap(), print);
        assert_eq!(text.replace(':', "").parse::<Fingerprint>().unwrap(), print);
        assert!("AB:CD".parse::<Fingerprint>().is_err());
    }
}
