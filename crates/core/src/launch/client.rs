//! The command line's client of a running daemon's JSON API (`rigdeck run`, `ps`, `stop`,
//! `logs`, `profiles`): the daemon owns the engines, so these commands ask it rather than
//! start anything themselves.

use serde_json::Value;

/// Where the daemon is unless `RIGDECK_URL` says otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7878";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no Rigdeck daemon answers at {url}: start `rigdeck serve` first (or set RIGDECK_URL to where it runs)")]
    NoDaemon { url: String },
    /// The daemon's own `{"code","message"}` error.
    #[error("{message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("the daemon at {url} answered something unexpected: {detail}")]
    Unexpected { url: String, detail: String },
}

/// A daemon at `base_url`, authenticated with its token.
pub struct DaemonClient {
    base_url: String,
    token: String,
    http: reqwest::Client,
}

/// A daemon that accepts the connection but never answers must not hang the command: the
/// connection gets 10 s, and a reply may pause no longer than the daemon's own wait for an
/// engine to load (`rigdeck run` waits for ready) plus a minute.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .read_timeout(super::instances::READY_TIMEOUT + std::time::Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}

impl DaemonClient {
    pub fn new(base_url: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            token: token.into(),
            http: client(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.send(reqwest::Method::DELETE, path, None).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(reqwest::Method::PATCH, path, Some(body)).await
    }

    /// GET of a stream (server-sent events, a long text): the response once its headers are
    /// in, or the API's error.
    pub async fn open_stream(&self, path: &str) -> Result<reqwest::Response, ClientError> {
        let response = self
            .http
            .get(format!("{}{path}", self.base_url))
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|_| self.no_daemon())?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.map_err(|e| self.unexpected(e))?;
            return Err(api_error(status.as_u16(), &text));
        }
        Ok(response)
    }

    /// GET returning the body as text (exports).
    pub async fn get_text(&self, path: &str) -> Result<String, ClientError> {
        let response = self.open_stream(path).await?;
        response.text().await.map_err(|e| self.unexpected(e))
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base_url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.map_err(|_| self.no_daemon())?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.unexpected(e))?;
        if !status.is_success() {
            return Err(api_error(status.as_u16(), &text));
        }
        if text.is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| self.unexpected(e))
    }

    fn no_daemon(&self) -> ClientError {
        ClientError::NoDaemon {
            url: self.base_url.clone(),
        }
    }

    fn unexpected(&self, detail: impl std::fmt::Display) -> ClientError {
        ClientError::Unexpected {
            url: self.base_url.clone(),
            detail: detail.to_string(),
        }
    }
}

fn api_error(status: u16, text: &str) -> ClientError {
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    ClientError::Api {
        status,
        code: body["code"].as_str().unwrap_or("error").to_owned(),
        message: body["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {status}: {text}"), str::to_owned),
    }
}
