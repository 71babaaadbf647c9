//! Test doubles for the hub crate's integration tests.
pub mod fake_hub;
pub mod raw_http;
