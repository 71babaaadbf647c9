//! A model's headers written again over sparse zero data: the same metadata, tensor names,
//! shapes and types, every part of a split model, and files of the same sizes that take almost
//! no disk. Tools that read only headers (llama.cpp's `llama-fit-params`) then see a model
//! that was read over HTTP as if it were on disk.

use std::path::{Path, PathBuf};

use crate::error::GgufError;
use crate::split::{split_file_name, GgufModel};
use crate::value::Value;
use crate::write::{GgufWriter, TensorData};

/// Keys every part of a split model carries (llama.cpp checks them part by part).
const PART_KEYS: [&str; 3] = ["split.count", "split.tensors.count", "general.alignment"];

/// Writes the mirror into `dir` as `<stem>.gguf` (or `<stem>-0000N-of-0000M.gguf` for a split
/// model) and returns the first part's path.
pub fn write_sparse_mirror(
    model: &GgufModel,
    dir: &Path,
    stem: &str,
) -> Result<PathBuf, GgufError> {
    let count = model.shards.len();
    let mut first = None;
    for (index, shard) in model.shards.iter().enumerate() {
        let mut writer = GgufWriter::new();
        writer.set_version(shard.version);
        if index == 0 {
            for (key, value) in model.metadata.iter() {
                writer.set(key, value.clone());
            }
        } else {
            for key in PART_KEYS {
                if let Some(value) = model.metadata.get(key) {
                    writer.set(key, value.clone());
                }
            }
            writer.set(
                "split.no",
                Value::U16(u16::try_from(index).unwrap_or(u16::MAX)),
            );
        }
        for tensor in model.tensors.iter().filter(|t| t.shard == index) {
            writer.add_tensor(
                &tensor.info.name,
                &tensor.info.dims,
                tensor.info.ggml_type,
                TensorData::Zeros,
            );
        }
        let name = if count > 1 {
            split_file_name(stem, index as u32 + 1, count as u32)
        } else {
            format!("{stem}.gguf")
        };
        let path = dir.join(name);
        writer.write_to_path(&path)?;
        first.get_or_insert(path);
    }
    Ok(first.unwrap_or_else(|| dir.join(format!("{stem}.gguf"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::MoeShape;

    #[test]
    fn a_split_model_is_mirrored_part_by_part_with_the_same_tables() {
        let source = tempfile::tempdir().unwrap();
        let parts = MoeShape::small()
            .writer()
            .write_split(source.path(), "moe", 3)
            .unwrap();
        let original = GgufModel::open(&parts[0]).unwrap();
        let mirror_dir = tempfile::tempdir().unwrap();
        let first = write_sparse_mirror(&original, mirror_dir.path(), "mirror").unwrap();
        assert!(first.ends_with("mirror-00001-of-00003.gguf"));
        let mirrored = GgufModel::open(&first).unwrap();
        assert_eq!(mirrored.shards.len(), 3);
        assert_eq!(mirrored.metadata, original.metadata);
        let names = |m: &GgufModel| -> Vec<(String, Vec<u64>, usize)> {
            m.tensors
                .iter()
                .map(|t| (t.info.name.clone(), t.info.dims.clone(), t.shard))
                .collect()
        };
        assert_eq!(names(&mirrored), names(&original));
        for (a, b) in mirrored.shards.iter().zip(&original.shards) {
            assert_eq!(a.file_size, b.file_size, "same sizes");
        }
    }
}
