//! The fleet's one error: what kind of failure (the API's status follows from it) and a message
//! that names the thing and the fix.

/// What went wrong, as the API and the channel tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetErrorKind {
    /// A malformed code or request.
    BadInput,
    /// The join code's time is over.
    Expired,
    /// The join code paired a desk already.
    Used,
    /// The rig did not issue the code's secret.
    WrongSecret,
    /// Another peer already goes by that name.
    Conflict,
    /// No peer of that name.
    NotFound,
    /// The peer's certificate is not the pinned one.
    CertificateChanged,
    /// The peer cannot be reached (or answered as something else than a fleet listener).
    Unreachable,
    /// The peer does not know this daemon (any more).
    UnknownPeer,
    /// What a peer may not do over the channel (fleet management, the hub token).
    Forbidden,
    /// The peer did not answer in time (connecting, or answering a relayed request).
    TimedOut,
    /// The fleet listener is off, or the database is.
    Unavailable,
    /// The database or a file failed.
    Internal,
}

impl FleetErrorKind {
    /// The API's `code` for it.
    pub fn code(self) -> &'static str {
        match self {
            Self::BadInput => "bad_input",
            Self::Expired => "expired",
            Self::Used => "used",
            Self::WrongSecret => "wrong_secret",
            Self::Conflict => "conflict",
            Self::NotFound => "not_found",
            Self::CertificateChanged => "certificate_changed",
            Self::Unreachable => "unreachable",
            Self::UnknownPeer => "unknown_peer",
            Self::TimedOut => "timed_out",
            Self::Forbidden => "forbidden",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(self) -> u16 {
        match self {
            Self::BadInput => 400,
            Self::Expired => 410,
            Self::Used | Self::Conflict => 409,
            Self::WrongSecret | Self::UnknownPeer | Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::CertificateChanged | Self::Unreachable => 502,
            Self::TimedOut => 504,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }

    /// The kind an API `code` names (a peer's answer read back).
    pub fn from_code(code: &str) -> Option<Self> {
        [
            Self::BadInput,
            Self::Expired,
            Self::Used,
            Self::WrongSecret,
            Self::Conflict,
            Self::NotFound,
            Self::CertificateChanged,
            Self::Unreachable,
            Self::UnknownPeer,
            Self::TimedOut,
            Self::Forbidden,
            Self::Unavailable,
            Self::Internal,
        ]
        .into_iter()
        .find(|kind| kind.code() == code)
    }
}

/// A failure with its message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct FleetError {
    pub kind: FleetErrorKind,
    pub message: String,
}

impl FleetError {
    pub fn new(kind: FleetErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }

    /// A database failure, said with what was being done.
    pub fn database(doing: &str, err: sqlx::Error) -> Self {
        Self::new(
            FleetErrorKind::Internal,
            format!("cannot {doing}: the database failed ({err})"),
        )
    }
}
