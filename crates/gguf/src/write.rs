//! `GgufWriter`: builds GGUF files for tests, fixtures and tiny models.
//!
//! Metadata of every type, tensors with zero, supplied or pseudo-random data, any alignment,
//! and split output in llama.cpp's `gguf-split` layout. Tensors are laid out as llama.cpp
//! writes them: in order, each padded to the alignment.
//!
//! Zero data written to a path is not written at all: the file is extended with `set_len`, so
//! a 300 GB model whose weights are zero takes a few megabytes of disk (a sparse file). That is
//! how the benchmark builds a full-size split model from headers alone.
//!
//! The writer writes what it is given, even what the reader will reject (an alignment that is
//! not a power of two, a duplicate key, a raw tensor with a bad type or offset), so tests can
//! make malformed files; the data layout then falls back to the default alignment.

use crate::error::{ErrorKind, GgufError};
use crate::read::{pad, DEFAULT_ALIGNMENT};
use crate::rng::SplitMix64;
use crate::split::split_file_name;
use crate::types::{tensor_bytes, GgmlType};
use crate::value::{Array, Metadata, Value};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A tensor's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorData {
    /// All zero (sparse when written to a path).
    Zeros,
    /// Exactly these bytes; the length must equal the tensor's size.
    Bytes(Vec<u8>),
    /// Pseudo-random bytes from this seed (SplitMix64).
    Random {
        /// The generator seed.
        seed: u64,
    },
}

/// A tensor info written exactly as given, for malformed fixtures: any type id, any offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawTensor {
    /// The name.
    pub name: String,
    /// The shape, row length first.
    pub dims: Vec<u64>,
    /// The ggml type id, known or not.
    pub type_id: u32,
    /// The data offset to write; `None` places it after the previous tensor as usual.
    pub offset: Option<u64>,
    /// Bytes of (zero) data to reserve for it.
    pub size_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pending {
    Typed {
        name: String,
        dims: Vec<u64>,
        ty: GgmlType,
        data: TensorData,
    },
    Raw(RawTensor),
}

impl Pending {
    fn name(&self) -> &str {
        match self {
            Pending::Typed { name, .. } => name,
            Pending::Raw(r) => &r.name,
        }
    }
}

/// Where each tensor goes; computed before anything is written.
struct Layout {
    alignment: u64,
    /// (type id, size in bytes, offset in the data section) per tensor.
    tensors: Vec<(u32, u64, u64)>,
    /// Sum of padded tensor sizes.
    data_bytes: u64,
}

/// Builds a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<Pending>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty GGUF version 3 file.
    pub fn new() -> Self {
        GgufWriter {
            version: 3,
            metadata: Metadata::default(),
            tensors: Vec::new(),
        }
    }

    /// Sets the version field (2 and 3 are valid; others make fixtures for the reader).
    pub fn set_version(&mut self, version: u32) -> &mut Self {
        self.version = version;
        self
    }

    /// Sets a metadata key (replacing an existing value in place).
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.metadata.set(key, value.into());
        self
    }

    /// Appends a key even if it exists, to make files with duplicate keys.
    pub fn push_duplicate_key(&mut self, key: &str, value: impl Into<Value>) -> &mut Self {
        self.metadata.push_unchecked(key.to_owned(), value.into());
        self
    }

    /// Sets `general.alignment`.
    pub fn set_alignment(&mut self, alignment: u32) -> &mut Self {
        self.set("general.alignment", Value::U32(alignment))
    }

    /// Adds a tensor.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dims: &[u64],
        ty: GgmlType,
        data: TensorData,
    ) -> &mut Self {
        self.tensors.push(Pending::Typed {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ty,
            data,
        });
        self
    }

    /// Adds a tensor info written exactly as given (see [`RawTensor`]).
    pub fn add_raw_tensor(&mut self, raw: RawTensor) -> &mut Self {
        self.tensors.push(Pending::Raw(raw));
        self
    }

    /// The metadata so far.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Number of tensors so far.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The header: magic, counts, metadata, tensor infos and the padding up to the data.
    pub fn header_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let layout = self.layout()?;
        Ok(self.encode_header(&layout))
    }

    /// The whole file in memory, zeros written out.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let layout = self.layout()?;
        let mut out = self.encode_header(&layout);
        let data_start = out.len();
        let total = to_usize(layout.data_bytes)?.saturating_add(data_start);
        out.resize(total, 0);
        for (pending, &(_, size, offset)) in self.tensors.iter().zip(&layout.tensors) {
            let Some(bytes) = tensor_payload(pending, size)? else {
                continue;
            };
            let start = data_start.saturating_add(to_usize(offset)?);
            let end = start.saturating_add(bytes.len());
            if let Some(dst) = out.get_mut(start..end) {
                dst.copy_from_slice(&bytes);
            }
        }
        Ok(out)
    }

    /// Writes the file; zero data becomes a hole (sparse file). Returns the file size.
    pub fn write_to_path(&self, path: impl AsRef<Path>) -> Result<u64, GgufError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io = |e: std::io::Error| GgufError::new(ErrorKind::Io(e)).in_file(&name);
        let layout = self.layout().map_err(|e| e.in_file(&name))?;
        let header = self.encode_header(&layout);
        let data_start = header.len() as u64;
        let mut file = std::fs::File::create(path).map_err(io)?;
        file.write_all(&header).map_err(io)?;
        for (pending, &(_, size, offset)) in self.tensors.iter().zip(&layout.tensors) {
            let Some(bytes) = tensor_payload(pending, size).map_err(|e| e.in_file(&name))? else {
                continue;
            };
            file.seek(SeekFrom::Start(data_start.saturating_add(offset)))
                .map_err(io)?;
            file.write_all(&bytes).map_err(io)?;
        }
        let file_size = data_start.saturating_add(layout.data_bytes);
        file.set_len(file_size).map_err(io)?;
        Ok(file_size)
    }

    /// The shards of this model split in `n_shards` parts as `gguf-split` makes them: tensors
    /// in order, as evenly as possible; all metadata in the first shard; `split.no`,
    /// `split.count` (u16) and `split.tensors.count` (i32) in every shard.
    pub fn split(&self, n_shards: u16) -> Result<Vec<GgufWriter>, GgufError> {
        let invalid = |detail: String| GgufError::new(ErrorKind::InvalidWrite { detail });
        if n_shards == 0 {
            return Err(invalid("a split model needs at least one shard".to_owned()));
        }
        let total = i32::try_from(self.tensors.len())
            .map_err(|_| invalid("split.tensors.count must fit an i32".to_owned()))?;
        let per_shard = self.tensors.len().div_ceil(usize::from(n_shards)).max(1);
        let mut chunks = self.tensors.chunks(per_shard);
        let mut shards = Vec::with_capacity(usize::from(n_shards));
        for no in 0..n_shards {
            let mut shard = GgufWriter::new();
            shard.version = self.version;
            if no == 0 {
                shard.metadata = self.metadata.clone();
            } else if let Some(a) = self.metadata.get("general.alignment") {
                shard.set("general.alignment", a.clone());
            }
            shard
                .set("split.no", Value::U16(no))
                .set("split.count", Value::U16(n_shards))
                .set("split.tensors.count", Value::I32(total));
            shard.tensors = chunks.next().map(<[Pending]>::to_vec).unwrap_or_default();
            shards.push(shard);
        }
        Ok(shards)
    }

    /// Writes the shards as `<dir>/<prefix>-0000i-of-0000n.gguf`; returns their paths.
    pub fn write_split(
        &self,
        dir: impl AsRef<Path>,
        prefix: &str,
        n_shards: u16,
    ) -> Result<Vec<PathBuf>, GgufError> {
        let dir = dir.as_ref();
        let mut paths = Vec::with_capacity(usize::from(n_shards));
        for (i, shard) in self.split(n_shards)?.iter().enumerate() {
            let number = u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1);
            let path = dir.join(split_file_name(prefix, number, u32::from(n_shards)));
            shard.write_to_path(&path)?;
            paths.push(path);
        }
        Ok(paths)
    }

    fn layout(&self) -> Result<Layout, GgufError> {
        let counted = self
            .metadata
            .iter()
            .find(|(_, value)| value.as_array().is_some_and(Array::has_counted));
        if let Some((key, _)) = counted {
            return Err(invalid_write(format!(
                "the array of key '{key}' was only counted when its file was read \
                 (TokenizerArrays::Counted): read the file with its arrays kept to write it"
            )));
        }
        let alignment = match self.metadata.get("general.alignment") {
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        };
        let overflow = || invalid_write("the tensor data exceeds 64 bits".to_owned());
        let mut next = 0u64;
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for pending in &self.tensors {
            let (type_id, size, offset) = match pending {
                Pending::Typed { name, dims, ty, .. } => {
                    let size = tensor_bytes(*ty, dims).map_err(|reason| {
                        invalid_write(format!("tensor '{name}' of type {ty}: {reason}"))
                    })?;
                    (ty.id(), size, next)
                }
                Pending::Raw(r) => (r.type_id, r.size_bytes, r.offset.unwrap_or(next)),
            };
            let padded = pad(size, alignment).ok_or_else(overflow)?;
            next = offset.checked_add(padded).ok_or_else(overflow)?.max(next);
            tensors.push((type_id, size, offset));
        }
        Ok(Layout {
            alignment,
            tensors,
            data_bytes: next,
        })
    }

    fn encode_header(&self, layout: &Layout) -> Vec<u8> {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(b"GGUF");
        put_u32(&mut out, self.version);
        put_u64(&mut out, self.tensors.len() as u64);
        put_u64(&mut out, self.metadata.len() as u64);
        for (key, value) in self.metadata.iter() {
            put_str(&mut out, key);
            put_u32(&mut out, value.value_type().id());
            put_value(&mut out, value);
        }
        for (pending, &(type_id, _, offset)) in self.tensors.iter().zip(&layout.tensors) {
            put_str(&mut out, pending.name());
            let dims = match pending {
                Pending::Typed { dims, .. } => dims,
                Pending::Raw(r) => &r.dims,
            };
            put_u32(&mut out, u32::try_from(dims.len()).unwrap_or(u32::MAX));
            for &d in dims {
                put_u64(&mut out, d);
            }
            put_u32(&mut out, type_id);
            put_u64(&mut out, offset);
        }
        if !self.tensors.is_empty() {
            let padded = pad(out.len() as u64, layout.alignment).unwrap_or(out.len() as u64);
            out.resize(usize::try_from(padded).unwrap_or(out.len()), 0);
        }
        out
    }
}

fn invalid_write(detail: String) -> GgufError {
    GgufError::new(ErrorKind::InvalidWrite { detail })
}

fn to_usize(n: u64) -> Result<usize, GgufError> {
    usize::try_from(n).map_err(|_| invalid_write(format!("{n} bytes do not fit in memory")))
}

/// The bytes to write for a tensor, or `None` where it is all zero.
fn tensor_payload(pending: &Pending, size: u64) -> Result<Option<Vec<u8>>, GgufError> {
    let Pending::Typed { name, data, .. } = pending else {
        return Ok(None);
    };
    match data {
        TensorData::Zeros => Ok(None),
        TensorData::Bytes(b) if b.len() as u64 == size => Ok(Some(b.clone())),
        TensorData::Bytes(b) => Err(invalid_write(format!(
            "tensor '{name}' needs {size} bytes of data but was given {}",
            b.len()
        ))),
        TensorData::Random { seed } => {
            let mut buf = vec![0u8; to_usize(size)?];
            SplitMix64::new(*seed).fill_bytes(&mut buf);
            Ok(Some(buf))
        }
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => put_u32(out, *v),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(v) => put_u64(out, *v),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// An array: element type, count, elements. Inner arrays carry their own type and count.
fn put_array(out: &mut Vec<u8>, array: &Array) {
    put_u32(out, array.elem_type().id());
    put_u64(out, array.len() as u64);
    fn each<T: Copy, const N: usize>(out: &mut Vec<u8>, v: &[T], f: fn(T) -> [u8; N]) {
        out.reserve(v.len().saturating_mul(N));
        for &x in v {
            out.extend_from_slice(&f(x));
        }
    }
    match array {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each(out, v, i8::to_le_bytes),
        Array::U16(v) => each(out, v, u16::to_le_bytes),
        Array::I16(v) => each(out, v, i16::to_le_bytes),
        Array::U32(v) => each(out, v, u32::to_le_bytes),
        Array::I32(v) => each(out, v, i32::to_le_bytes),
        Array::F32(v) => each(out, v, f32::to_le_bytes),
        Array::Bool(v) => out.extend(v.iter().map(|&b| u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|a| put_array(out, a)),
        Array::U64(v) => each(out, v, u64::to_le_bytes),
        Array::I64(v) => each(out, v, i64::to_le_bytes),
        Array::F64(v) => each(out, v, f64::to_le_bytes),
        // Refused by `layout` before anything is encoded.
        Array::Counted { .. } => {}
    }
}
