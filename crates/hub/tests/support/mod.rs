//! Test doubles for the hub crate's integration tests.
pub mod fake_hub;
