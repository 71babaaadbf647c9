//! The API token: created once, stored with mode 0600, compared in constant time.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Context;
use rand::RngCore;

/// A secret that every API and WebSocket call must present.
#[derive(Clone)]
pub struct ApiToken(String);

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(…)")
    }
}

impl ApiToken {
    /// Reads the token file, creating it (mode 0600, 256 random bits) when it does not exist yet.
    /// A token file readable by others is tightened to 0600 rather than trusted as is.
    pub fn load_or_create(path: &Path) -> anyhow::Result<Self> {
        match fs::read_to_string(path) {
            Ok(text) => {
                let token = text.trim().to_owned();
                if token.len() < 32 {
                    anyhow::bail!(
                        "token file '{}' holds no valid token (too short): delete it and restart to create a new one",
                        path.display()
                    );
                }
                tighten_permissions(path)?;
                Ok(Self(token))
            }
            Err(err) if err.kind() == ErrorKind::NotFound => Self::create(path),
            Err(err) => {
                Err(err).with_context(|| format!("cannot read token file '{}'", path.display()))
            }
        }
    }

    fn create(path: &Path) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)
                .with_context(|| format!("cannot create config folder '{}'", dir.display()))?;
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).with_context(|| {
                format!(
                    "cannot restrict config folder '{}' to its owner",
                    dir.display()
                )
            })?;
        }
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot create token file '{}'", path.display()))?;
        writeln!(file, "{token}")
            .with_context(|| format!("cannot write token file '{}'", path.display()))?;
        Ok(Self(token))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Constant-time comparison, so the time a wrong guess takes says nothing about the token.
    pub fn matches(&self, candidate: &str) -> bool {
        let expected = self.0.as_bytes();
        let given = candidate.as_bytes();
        if expected.len() != given.len() {
            return false;
        }
        expected
            .iter()
            .zip(given)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }
}

fn tighten_permissions(path: &Path) -> anyhow::Result<()> {
    let mode = fs::metadata(path)
        .with_context(|| format!("cannot inspect token file '{}'", path.display()))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        tracing::warn!(
            "token file '{}' was readable by others; restricting it to mode 0600",
            path.display()
        );
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).with_context(|| {
            format!(
                "cannot restrict token file '{}' to mode 0600",
                path.display()
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_private_token_once_and_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cfg/token");
        let first = ApiToken::load_or_create(&path).unwrap();
        assert_eq!(first.as_str().len(), 64);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = ApiToken::load_or_create(&path).unwrap();
        assert_eq!(first.as_str(), second.as_str());
    }

    #[test]
    fn compares_tokens_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let token = ApiToken::load_or_create(&dir.path().join("token")).unwrap();
        assert!(token.matches(token.as_str()));
        assert!(!token.matches(""));
        let mut wrong = token.as_str().to_owned();
        wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
        assert!(!token.matches(&wrong));
    }

    #[test]
    fn tightens_a_world_readable_token_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        fs::write(&path, "a".repeat(64)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        ApiToken::load_or_create(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn rejects_a_truncated_token_file_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        fs::write(&path, "abc").unwrap();
        let err = ApiToken::load_or_create(&path).unwrap_err().to_string();
        assert!(err.contains("delete it"), "{err}");
    }
}
