//! The model hub: find models on the Hugging Face hub (or a mirror named by `HF_ENDPOINT`), group
//! a repository's files the way users choose them (by quantization, a split model as one entry),
//! and download them resumably, verified against the hub's own hashes, into the cache layout that
//! `hf`, llama.cpp's `-hf` and other tools share.
//!
//! Everything that arrives from the network is data, never a path or an instruction: repository
//! names and file paths are validated before they touch the disk (`repo`), redirects are followed
//! by hand so the token never leaves the hub's own host (`api::client`), and a file only enters
//! the cache once its size and SHA-256 match (`download`).

pub mod api;
pub mod cache;
pub mod config;
pub mod download;
pub mod quants;
pub mod repo;
