//! Talking to the hub: the client that follows redirects safely (`client`), its errors
//! (`error`), the model endpoints (`models`), and addresses made safe to show (`redact`).

pub mod client;
pub mod error;
pub mod models;
pub mod redact;

pub use client::{ClientOptions, HubClient};
pub use error::HubError;
pub use models::{Listing, ModelInfo, ModelSummary, SearchQuery, SortBy, WeightFormat};
