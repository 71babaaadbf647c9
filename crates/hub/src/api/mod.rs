//! Talking to the hub: the client that follows redirects safely (`client`), its errors
//! (`error`), and the model endpoints (`models`).

pub mod client;
pub mod error;
pub mod models;

pub use client::HubClient;
pub use error::HubError;
pub use models::{Listing, ModelInfo, ModelSummary, SearchQuery, SortBy, WeightFormat};
