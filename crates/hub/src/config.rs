//! Where the hub is and who we are to it: `HF_ENDPOINT`, `HF_HOME`, `HF_HUB_CACHE` and
//! `HF_TOKEN` as `huggingface_hub` reads them, and the access token kept out of every log.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use thiserror::Error;
use url::Url;

pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("HF_ENDPOINT={value:?} is not an http(s) address: set it to the hub or mirror's base address, e.g. https://huggingface.co")]
    Endpoint { value: String },
    #[error("no cache folder: set HF_HUB_CACHE or HF_HOME (no home folder was found)")]
    NoCache,
    #[error("the token in {path} is not usable ({why}): write the token alone on one line, or set HF_TOKEN")]
    TokenFile { path: PathBuf, why: String },
    #[error("could not save the token to {path}: {source}")]
    SaveToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A Hugging Face access token. It has no `Display`, and its `Debug` hides the value, so it
/// cannot reach a log line or an error message by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct HubToken(String);

impl HubToken {
    /// A token from text; surrounding whitespace is dropped. Refused when empty or when it
    /// holds characters no HTTP header may carry.
    pub fn parse(text: &str) -> Result<HubToken, String> {
        let token = text.trim();
        if token.is_empty() {
            return Err("it is empty".into());
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("it holds spaces or characters a header cannot carry".into());
        }
        Ok(HubToken(token.to_owned()))
    }

    /// The `Authorization` header's value.
    pub fn bearer(&self) -> String {
        format!("Bearer {}", self.0)
    }

    /// Reads a token file (`$HF_HOME/token` or Rigdeck's own); `None` when it does not exist.
    pub fn read(path: &Path) -> Result<Option<HubToken>, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => HubToken::parse(&text)
                .map(Some)
                .map_err(|why| ConfigError::TokenFile {
                    path: path.to_owned(),
                    why,
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ConfigError::TokenFile {
                path: path.to_owned(),
                why: e.to_string(),
            }),
        }
    }

    /// Writes the token readable by its owner only (0600), replacing the file atomically.
    pub fn save(&self, path: &Path) -> Result<(), ConfigError> {
        let fail = |source| ConfigError::SaveToken {
            path: path.to_owned(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        let temporary = path.with_extension("new");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(fail)?;
        file.write_all(self.0.as_bytes()).map_err(fail)?;
        file.sync_all().map_err(fail)?;
        std::fs::rename(&temporary, path).map_err(fail)
    }
}

impl std::fmt::Debug for HubToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HubToken(hidden)")
    }
}

/// The hub's address, the cache folder and the token, resolved once.
#[derive(Clone, Debug)]
pub struct HubConfig {
    /// Base address without a trailing slash, e.g. `https://huggingface.co`.
    pub endpoint: Url,
    /// The Hugging Face cache (`…/hub`, holding `models--owner--name` folders).
    pub cache_dir: PathBuf,
    pub token: Option<HubToken>,
}

/// Reads one environment variable, treating an empty value as unset.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl HubConfig {
    /// The configuration `huggingface_hub` would use in this environment. The token comes from
    /// `HF_TOKEN`, else from `saved_token` (Rigdeck's own token file), else `$HF_HOME/token`.
    pub fn from_env(saved_token: Option<&Path>) -> Result<HubConfig, ConfigError> {
        let endpoint = parse_endpoint(env_var("HF_ENDPOINT").as_deref())?;
        let hf_home = env_var("HF_HOME")
            .map(PathBuf::from)
            .or_else(|| dirs::cache_dir().map(|c| c.join("huggingface")));
        let cache_dir = env_var("HF_HUB_CACHE")
            .map(PathBuf::from)
            .or_else(|| hf_home.as_ref().map(|h| h.join("hub")))
            .ok_or(ConfigError::NoCache)?;
        let token = match env_var("HF_TOKEN") {
            Some(text) => Some(
                HubToken::parse(&text).map_err(|why| ConfigError::TokenFile {
                    path: PathBuf::from("$HF_TOKEN"),
                    why,
                })?,
            ),
            None => {
                let mut found = None;
                let files = [
                    saved_token.map(Path::to_path_buf),
                    hf_home.map(|h| h.join("token")),
                ];
                for file in files.iter().flatten() {
                    found = HubToken::read(file)?;
                    if found.is_some() {
                        break;
                    }
                }
                found
            }
        };
        Ok(HubConfig {
            endpoint,
            cache_dir,
            token,
        })
    }
}

/// `HF_ENDPOINT` or the public hub, checked to be an http(s) base address.
pub fn parse_endpoint(value: Option<&str>) -> Result<Url, ConfigError> {
    let text = value.unwrap_or(DEFAULT_ENDPOINT).trim_end_matches('/');
    let refuse = || ConfigError::Endpoint {
        value: text.to_owned(),
    };
    let url = Url::parse(text).map_err(|_| refuse())?;
    let usable = matches!(url.scheme(), "http" | "https")
        && url.host().is_some()
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if usable {
        Ok(url)
    } else {
        Err(refuse())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_token_never_prints() {
        let token = HubToken::parse(" hf_secret\n").expect("token");
        assert_eq!(format!("{token:?}"), "HubToken(hidden)");
        assert_eq!(token.bearer(), "Bearer hf_secret");
        assert!(HubToken::parse("hf bad").is_err());
        assert!(HubToken::parse("  ").is_err());
    }

    #[test]
    fn a_saved_token_is_readable_by_its_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sub/hf_token");
        HubToken::parse("hf_abc")
            .expect("token")
            .save(&path)
            .expect("saved");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            HubToken::read(&path).expect("read"),
            Some(HubToken::parse("hf_abc").expect("token"))
        );
        assert_eq!(
            HubToken::read(&dir.path().join("none")).expect("read"),
            None
        );
    }

    #[test]
    fn endpoints_are_http_base_addresses() {
        assert_eq!(
            parse_endpoint(None).expect("default").as_str(),
            "https://huggingface.co/"
        );
        assert_eq!(
            parse_endpoint(Some("http://127.0.0.1:9/"))
                .expect("local")
                .as_str(),
            "http://127.0.0.1:9/"
        );
        for bad in [
            "ftp://x",
            "huggingface.co",
            "http://u:p@h",
            "http://h/?a=1",
            "",
        ] {
            assert!(parse_endpoint(Some(bad)).is_err(), "{bad}");
        }
    }
}
