//! Split models: `<name>-00001-of-00006.gguf` … as one logical model.
//!
//! llama.cpp's `gguf-split` names parts `%s-%05d-of-%05d.gguf` (1-based in the name) and
//! writes into every part `split.no` (u16, 0-based), `split.count` (u16) and
//! `split.tensors.count` (i32, the total over all parts); all other metadata is in the first
//! part only. Given any part, [`GgufModel::open`] finds the others in the same folder, reads
//! each header, checks that the parts agree, and merges them: metadata from the first part,
//! tensors from all, each tensor knowing its part.

use crate::error::{ErrorKind, GgufError};
use crate::read::{first_repeated, GgufFile, TensorInfo, TokenizerArrays};
use crate::value::Metadata;
use serde::Serialize;
use std::path::Path;

pub use crate::parts::{split_file_name, MissingParts, MAX_SPLIT_PARTS};

/// The parts of a split file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitName {
    /// Everything before `-00001-of-00006.gguf`.
    pub prefix: String,
    /// This part's number, 1-based as in the name.
    pub number: u32,
    /// The number of parts.
    pub count: u32,
}

impl SplitName {
    /// Recognises `<prefix>-<number>-of-<count>.gguf` (numbers of at least five digits,
    /// `1 ≤ number ≤ count ≤` [`MAX_SPLIT_PARTS`]); `None` for any other name.
    pub fn parse(file_name: &str) -> Option<SplitName> {
        let stem = file_name.strip_suffix(".gguf")?;
        let (rest, count) = stem.rsplit_once("-of-")?;
        let (prefix, number) = rest.rsplit_once('-')?;
        let number = parse_part_number(number)?;
        let count = parse_part_number(count)?;
        if prefix.is_empty() || number == 0 || number > count || count > MAX_SPLIT_PARTS {
            return None;
        }
        Some(SplitName {
            prefix: prefix.to_owned(),
            number,
            count,
        })
    }

    /// The file name of part `number` (1-based) of the same model.
    pub fn file_name(&self, number: u32) -> String {
        split_file_name(&self.prefix, number, self.count)
    }

    /// The parts for which `is_present` says no, as ranges.
    pub fn missing_parts(&self, is_present: impl FnMut(u32) -> bool) -> MissingParts {
        MissingParts::find(&self.prefix, self.count, is_present)
    }
}

fn parse_part_number(digits: &str) -> Option<u32> {
    if digits.len() < 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// One part of a model as read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ShardInfo {
    /// File name or URL.
    pub name: String,
    /// GGUF version.
    pub version: u32,
    /// Data alignment.
    pub alignment: u64,
    /// Bytes of header.
    pub header_bytes: u64,
    /// Where the data section starts.
    pub data_offset: u64,
    /// Size of the part, when known.
    pub file_size: Option<u64>,
    /// Tensors in this part.
    pub tensor_count: usize,
}

/// A tensor of a (possibly split) model and the part that holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelTensor {
    /// Index into [`GgufModel::shards`] (0-based).
    pub shard: usize,
    /// The tensor info; its offsets are within that part.
    #[serde(flatten)]
    pub info: TensorInfo,
}

/// A model: one GGUF file, or all parts of a split one merged.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GgufModel {
    /// The parts in order (one for an unsplit file).
    pub shards: Vec<ShardInfo>,
    /// Metadata of the first part (where all of it lives).
    pub metadata: Metadata,
    /// The tensors of all parts, in part order.
    pub tensors: Vec<ModelTensor>,
}

impl GgufModel {
    /// Opens a model from any of its parts (or its only file).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufModel, GgufError> {
        GgufModel::open_with(path, TokenizerArrays::Kept)
    }

    /// The same, keeping or only counting the tokenizer's arrays.
    pub fn open_with(
        path: impl AsRef<Path>,
        tokenizer_arrays: TokenizerArrays,
    ) -> Result<GgufModel, GgufError> {
        let path = path.as_ref();
        let split = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(SplitName::parse);
        let Some(split) = split else {
            return GgufModel::from_shards(vec![GgufFile::open_with(path, tokenizer_arrays)?]);
        };
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // Missing parts are found before any list of paths is built, so a name promising
        // thousands of parts costs ranges, not names.
        let missing = split.missing_parts(|n| dir.join(split.file_name(n)).is_file());
        if !missing.is_empty() {
            let kind = ErrorKind::MissingShards {
                dir: dir.display().to_string(),
                missing,
            };
            return Err(GgufError::new(kind).in_file(&path.display().to_string()));
        }
        let files = (1..=split.count)
            .map(|n| GgufFile::open_with(dir.join(split.file_name(n)), tokenizer_arrays))
            .collect::<Result<Vec<_>, _>>()?;
        GgufModel::from_shards(files)
    }

    /// Merges parts read elsewhere (e.g. over HTTP), checking that they belong together.
    /// `files` must be in part order; a single unsplit file is fine.
    pub fn from_shards(files: Vec<GgufFile>) -> Result<GgufModel, GgufError> {
        let count = files.len();
        if count == 0 {
            let detail = "no parts were given".to_owned();
            return Err(GgufError::new(ErrorKind::SplitMismatch { detail }));
        }
        let total_tensors: usize = files.iter().map(|f| f.tensors.len()).sum();
        for (index, file) in files.iter().enumerate() {
            check_split_keys(file, index, count, total_tensors)?;
        }
        let in_files = (files.iter().enumerate())
            .flat_map(|(index, file)| file.tensors.iter().map(move |t| ((index, file), t)));
        if let Some(((index, file), info)) = first_repeated(in_files) {
            let kind = ErrorKind::DuplicateTensor {
                tensor: info.name.clone(),
            };
            return Err(GgufError::new(kind).in_file(&shard_name(file, index)));
        }
        let mut shards = Vec::with_capacity(count);
        let mut tensors = Vec::with_capacity(total_tensors);
        let mut metadata = None;
        for (index, file) in files.into_iter().enumerate() {
            let name = shard_name(&file, index);
            shards.push(ShardInfo {
                name,
                version: file.version,
                alignment: file.alignment,
                header_bytes: file.header_bytes,
                data_offset: file.data_offset,
                file_size: file.file_size,
                tensor_count: file.tensors.len(),
            });
            tensors.extend(
                file.tensors
                    .into_iter()
                    .map(|info| ModelTensor { shard: index, info }),
            );
            if metadata.is_none() {
                metadata = Some(file.metadata);
            }
        }
        Ok(GgufModel {
            shards,
            metadata: metadata.unwrap_or_default(),
            tensors,
        })
    }

    /// Total size of all parts; `None` if any size is unknown.
    pub fn file_size(&self) -> Option<u64> {
        self.shards
            .iter()
            .try_fold(0u64, |acc, s| acc.checked_add(s.file_size?))
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&ModelTensor> {
        self.tensors.iter().find(|t| t.info.name == name)
    }

    /// Sum of all tensors' elements.
    pub fn parameter_count(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |acc, t| acc.saturating_add(t.info.element_count()))
    }
}

impl From<GgufFile> for GgufModel {
    /// One file as a model, without the split checks (see [`GgufModel::from_shards`]).
    fn from(file: GgufFile) -> Self {
        let name = shard_name(&file, 0);
        GgufModel {
            shards: vec![ShardInfo {
                name,
                version: file.version,
                alignment: file.alignment,
                header_bytes: file.header_bytes,
                data_offset: file.data_offset,
                file_size: file.file_size,
                tensor_count: file.tensors.len(),
            }],
            tensors: file
                .tensors
                .into_iter()
                .map(|info| ModelTensor { shard: 0, info })
                .collect(),
            metadata: file.metadata,
        }
    }
}

fn shard_name(file: &GgufFile, index: usize) -> String {
    file.file_name
        .clone()
        .unwrap_or_else(|| format!("part {}", index.saturating_add(1)))
}

/// Checks one part's `split.*` keys against its position and the other parts.
fn check_split_keys(
    file: &GgufFile,
    index: usize,
    count: usize,
    total_tensors: usize,
) -> Result<(), GgufError> {
    let name = shard_name(file, index);
    let mismatch =
        |detail: String| Err(GgufError::new(ErrorKind::SplitMismatch { detail }).in_file(&name));
    let split_count = file.metadata.get_u64("split.count");
    if count == 1 {
        // An unsplit file; a part of a split model whose other parts were not looked for
        // (its name does not follow the pattern) says so here.
        return match split_count {
            Some(n) if n > 1 => mismatch(format!(
                "says it is part of a {n}-part split model (split.count), but its name does not \
                 follow llama.cpp's '<name>-00001-of-{n:05}.gguf' pattern, so the other parts \
                 cannot be found: rename the parts to that pattern"
            )),
            _ => Ok(()),
        };
    }
    let number = index.saturating_add(1);
    match split_count {
        Some(n) if n == count as u64 => {}
        Some(n) => {
            return mismatch(format!(
                "says split.count {n}, but {count} parts were found"
            ))
        }
        None => {
            return mismatch(format!(
                "is part {number} of {count} but has no split.count key"
            ))
        }
    }
    match file.metadata.get_u64("split.no") {
        Some(no) if no == index as u64 => {}
        Some(no) => {
            return mismatch(format!(
                "says it is part {} (split.no {no}), but its file name makes it part {number}",
                no.saturating_add(1)
            ))
        }
        None => {
            return mismatch(format!(
                "is part {number} of {count} but has no split.no key"
            ))
        }
    }
    match file.metadata.get_u64("split.tensors.count") {
        Some(n) if n == total_tensors as u64 => Ok(()),
        Some(n) => mismatch(format!(
            "says the model has {n} tensors (split.tensors.count), but its {count} parts hold \
             {total_tensors}"
        )),
        // llama.cpp does not need the key; parts written by older tools lack it.
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_split_names() {
        let s = SplitName::parse("GLM-5.2-IQ2_XXS-00002-of-00006.gguf").unwrap();
        assert_eq!(s.prefix, "GLM-5.2-IQ2_XXS");
        assert_eq!((s.number, s.count), (2, 6));
        assert_eq!(s.file_name(6), "GLM-5.2-IQ2_XXS-00006-of-00006.gguf");
        assert_eq!(split_file_name("m", 1, 123456), "m-00001-of-123456.gguf");
        // Wider numbers parse; more parts than llama.cpp's u16 split.count can say do not.
        assert!(SplitName::parse("m-000001-of-065535.gguf").is_some());
        assert!(SplitName::parse("m-00001-of-123456.gguf").is_none());
    }

    #[test]
    fn rejects_other_names() {
        for name in [
            "model.gguf",
            "model-00001-of-00006.bin",
            "model-1-of-6.gguf",
            "-00001-of-00002.gguf",
            "model-00000-of-00002.gguf",
            "model-00003-of-00002.gguf",
            "model-0000a-of-00002.gguf",
            "model-00001-of-00002.gguf.part",
        ] {
            assert_eq!(SplitName::parse(name), None, "{name}");
        }
    }
}
