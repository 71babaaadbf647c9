//! Which rig the window shows: the server this process starts, or another machine's `rigdeck serve`.

use anyhow::Context;
use tauri::Url;

/// The rig behind the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Start the server in this process, on a free loopback port.
    Local,
    /// Show another machine's server; `login_url` signs the window in with its token.
    Remote { base: Url, login_url: Url },
}

impl Target {
    /// `--remote URL` with its token, or the local server when there is no URL.
    pub fn from_args(remote: Option<&str>, token: Option<&str>) -> anyhow::Result<Self> {
        let Some(remote) = remote else {
            return Ok(Self::Local);
        };
        let base = parse_remote_url(remote)?;
        let token = token.map(str::trim).filter(|t| !t.is_empty()).with_context(|| {
            format!(
                "--remote {base} needs that rig's token: set RIGDECK_REMOTE_TOKEN (or pass --token) to the \
                 contents of ~/.config/rigdeck/token on that machine"
            )
        })?;
        let login_url = login_url(&base, token)?;
        Ok(Self::Remote { base, login_url })
    }
}

/// Accepts `http://host:port` or `https://host/prefix`; anything else gets an error that says what is expected.
fn parse_remote_url(raw: &str) -> anyhow::Result<Url> {
    let raw = raw.trim();
    let url = Url::parse(raw).map_err(|err| {
        let hint = if raw.contains("://") {
            ""
        } else {
            " (it needs the scheme, e.g. http://gpubox:7878)"
        };
        anyhow::anyhow!("--remote {raw:?} is not a valid URL: {err}{hint}")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        anyhow::bail!(
            "--remote {raw:?} must be an http:// or https:// URL, e.g. http://gpubox:7878"
        );
    }
    if url.host_str().is_none_or(str::is_empty) {
        anyhow::bail!("--remote {raw:?} has no host name, e.g. http://gpubox:7878");
    }
    if !url.username().is_empty() || url.password().is_some() {
        anyhow::bail!("--remote {raw:?} must not contain a user name or password: pass the token with RIGDECK_REMOTE_TOKEN");
    }
    if url.query().is_some() || url.fragment().is_some() {
        anyhow::bail!(
            "--remote {raw:?} must be the server's address only, without ?query or #fragment"
        );
    }
    Ok(url)
}

/// `<base>/login?token=<token>`, keeping a path prefix (a reverse proxy under /rigdeck/) and
/// percent-encoding the token.
fn login_url(base: &Url, token: &str) -> anyhow::Result<Url> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| anyhow::anyhow!("--remote {base} cannot have paths added to it"))?
        .pop_if_empty()
        .push("login");
    url.query_pairs_mut().append_pair("token", token);
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(url: &str, token: Option<&str>) -> anyhow::Result<Target> {
        Target::from_args(Some(url), token)
    }

    #[test]
    fn no_url_means_the_local_server() {
        assert_eq!(
            Target::from_args(None, Some("ignored")).expect("local"),
            Target::Local
        );
    }

    #[test]
    fn login_url_is_built_under_the_base() {
        let Target::Remote { login_url, .. } =
            remote("http://gpubox:7878", Some("abc")).expect("remote")
        else {
            panic!("expected a remote target");
        };
        assert_eq!(login_url.as_str(), "http://gpubox:7878/login?token=abc");
        let Target::Remote { login_url, .. } =
            remote("https://example.org/rigdeck/", Some("a b+c")).expect("remote")
        else {
            panic!("expected a remote target");
        };
        assert_eq!(
            login_url.as_str(),
            "https://example.org/rigdeck/login?token=a+b%2Bc"
        );
    }

    #[test]
    fn bad_urls_and_missing_tokens_are_explained() {
        let message =
            |url: &str, token: Option<&str>| format!("{:#}", remote(url, token).expect_err(url));
        assert!(message("gpubox:7878", Some("t")).contains("http://"));
        assert!(message("gpubox", Some("t")).contains("scheme"));
        assert!(message("ftp://gpubox", Some("t")).contains("http:// or https://"));
        assert!(message("http://u:p@gpubox", Some("t")).contains("user name"));
        assert!(message("http://gpubox/?x=1", Some("t")).contains("query"));
        assert!(message("http://gpubox:7878", None).contains("RIGDECK_REMOTE_TOKEN"));
        assert!(message("http://gpubox:7878", Some("  ")).contains("RIGDECK_REMOTE_TOKEN"));
    }
}
