//! Rigdeck's own GGUF reader and writer.
//!
//! - [`GgufFile`]: one file's header (metadata, tensor infos, data layout), read from a path,
//!   bytes or any reader, panic-free on any input: every problem is a [`GgufError`] naming the
//!   file, the byte offset and the fix.
//! - [`GgufModel`]: a model as llama.cpp loads it, merging the parts of a split model.
//! - [`remote`]: the same from a URL with a few HTTP Range requests.
//! - [`GgufWriter`]: files for tests, fixtures and tiny models, sparse where data is zero
//!   ([`tiny`]: dense, MoE, sliding-window and MLA models; [`tiny_recurrent`]: Mamba and a
//!   Qwen3-Next hybrid).
//! - [`ModelSummary`]: architecture, size, quantization and shape, serialisable.
//! - [`GgmlType`] and [`tensor_bytes`]: ggml's type table.
//!
//! ```
//! use rigdeck_gguf::{GgmlType, GgufFile, GgufWriter, ModelSummary, TensorData};
//!
//! let mut w = GgufWriter::new();
//! w.set("general.architecture", "llama")
//!     .set("llama.block_count", 2u32)
//!     .add_tensor("token_embd.weight", &[256, 10], GgmlType::Q4_K, TensorData::Zeros);
//! let file = GgufFile::from_bytes(&w.to_bytes()?, Some("tiny.gguf"))?;
//! assert_eq!(file.tensors[0].size_bytes, 1440);
//! let summary = ModelSummary::from_file(&file);
//! assert_eq!(summary.layers, Some(2));
//! # Ok::<(), rigdeck_gguf::GgufError>(())
//! ```

#![forbid(unsafe_code)]
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unreachable,
    clippy::todo
)]
#![cfg_attr(
    test,
    allow(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing
    )
)]

pub mod error;
pub mod fixtures;
pub mod mirror;
pub mod mutate;
pub mod parts;
pub mod read;
pub mod remote;
pub mod rng;
pub mod split;
pub mod summary;
pub mod tiny;
pub mod tiny_recurrent;
pub mod types;
pub mod value;
pub mod write;

pub use error::{ErrorKind, GgufError};
pub use read::{GgufFile, ReadOptions, TensorInfo, TokenizerArrays};
pub use split::{split_file_name, GgufModel, MissingParts, ModelTensor, ShardInfo, SplitName};
pub use summary::ModelSummary;
pub use types::{element_count, tensor_bytes, GgmlType, SizeError};
pub use value::{Array, Metadata, StringArray, Value, ValueType};
pub use write::{GgufWriter, RawTensor, TensorData};
