//! The GGUF header reader: parses magic, version, metadata and tensor infos from any
//! `std::io::Read`, tracking the byte offset so that every error says where it happened.
//!
//! Only the header is read; tensor data is located (offset and size of each tensor) but never
//! loaded. The format is llama.cpp's (`ggml/src/gguf.cpp`, `gguf_init_from_reader`), and so are
//! the checks, plus the ones a reader of untrusted downloads needs:
//!
//! - every count is checked against the bytes left in the file (when its size is known)
//!   before anything is allocated for it, and no allocation is made up front for more than a
//!   few thousand elements, so a forged count costs nothing;
//! - strings are limited to 64 MiB, arrays to 2^30 elements and 8 levels of nesting, the whole
//!   header to [`DEFAULT_MAX_HEADER_BYTES`];
//! - all arithmetic on values from the file is checked.
//!
//! **Strings that are not UTF-8** are an error naming the key (or tensor) and the offset, with
//! one exception: values of `tokenizer.*` keys are read lossily (invalid bytes become U+FFFD).
//! Some real vocabularies carry raw byte tokens, and Rigdeck only counts and displays them, so
//! refusing such a model would be worse than a replaced character in a token list nobody reads.

use crate::error::{ErrorKind, GgufError};
use crate::types::{element_count, tensor_bytes, GgmlType};
use crate::value::{Array, Metadata, StringArray, Value, ValueType};
use serde::Serialize;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// Data starts at a multiple of this unless `general.alignment` says otherwise.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Longest string accepted (llama.cpp allows 1 GiB; no real key or token comes near 64 MiB).
pub const MAX_STRING_LEN: u64 = 64 << 20;
/// Most elements in one array (llama.cpp's `GGUF_MAX_ARRAY_ELEMENTS`).
pub const MAX_ARRAY_LEN: u64 = 1 << 30;
/// Deepest array nesting accepted (llama.cpp accepts none; gguf-py writes nested lists).
pub const MAX_ARRAY_DEPTH: u32 = 8;
/// Most tensor dimensions (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Default limit on the header size. Real headers stay below 20 MiB (a 250k-token vocabulary
/// with merges); the limit stops a forged file from making the reader consume gigabytes.
pub const DEFAULT_MAX_HEADER_BYTES: u64 = 512 << 20;

/// Smallest possible metadata entry: key length, a one-byte key, value type, a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest possible tensor info: name length, dimension count, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;
/// Upper bound of any up-front allocation, in elements: beyond it vectors grow as data arrives.
const MAX_PREALLOC: u64 = 4096;
/// Elements of a fixed-size array decoded per read call.
const POD_CHUNK: u64 = 8192;
/// Bytes read from the source at a time.
const READ_CHUNK: usize = 256 << 10;
/// Most bytes the input buffer grows by before data arrives (a forged string length in a
/// stream of unknown size must not allocate 64 MiB up front).
const MAX_READ_STEP: usize = 1 << 20;

/// How to read a header.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// The file name or URL, used in error messages.
    pub file_name: Option<String>,
    /// The total size of the file, when known: counts and lengths are checked against it and
    /// the tensor data must fit in it. Without it only the absolute limits apply.
    pub file_size: Option<u64>,
    /// Header size limit; `None` means [`DEFAULT_MAX_HEADER_BYTES`].
    pub max_header_bytes: Option<u64>,
    /// Whether the arrays of `tokenizer.*` keys are kept or only counted.
    pub tokenizer_arrays: TokenizerArrays,
}

/// What a read keeps of the arrays of `tokenizer.*` keys (the vocabulary, its merges, scores
/// and token types): most of a large header, and of the time spent reading it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenizerArrays {
    /// Every element, as in the file.
    #[default]
    Kept,
    /// Each top-level array is read and checked as when kept (lengths, limits, the file's
    /// size; their strings are read lossily either way, so no content can fail a read), then
    /// stored as [`Array::Counted`]: its type and length without its elements. For readers
    /// that need the vocabulary's size, not its tokens, such as the planner.
    Counted,
}

/// One tensor's info.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorInfo {
    /// The tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// The shape, row length first (GGUF/ggml order), at most 4 dimensions.
    pub dims: Vec<u64>,
    /// The storage type.
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section (a multiple of the alignment).
    pub offset: u64,
    /// Offset of the data from the start of the file.
    pub absolute_offset: u64,
    /// Bytes of data.
    pub size_bytes: u64,
}

impl TensorInfo {
    /// Number of elements (checked when read, so this cannot overflow for a parsed tensor).
    pub fn element_count(&self) -> u64 {
        element_count(&self.dims).unwrap_or(u64::MAX)
    }
}

/// A parsed GGUF header.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GgufFile {
    /// The file name or URL it was read from, if given.
    pub file_name: Option<String>,
    /// GGUF version (2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Metadata,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment (`general.alignment`, default 32).
    pub alignment: u64,
    /// Bytes of header: magic, counts, metadata and tensor infos, without the padding.
    pub header_bytes: u64,
    /// Where the data section starts: the header size padded to the alignment.
    pub data_offset: u64,
    /// Size of the file, when known.
    pub file_size: Option<u64>,
}

impl GgufFile {
    /// Reads the header of a file on disk.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        GgufFile::open_with(path, TokenizerArrays::Kept)
    }

    /// Reads the header of a file on disk, keeping or counting the tokenizer's arrays.
    pub fn open_with(
        path: impl AsRef<Path>,
        tokenizer_arrays: TokenizerArrays,
    ) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let io_err = |e: std::io::Error| GgufError::new(ErrorKind::Io(e)).in_file(&name);
        let file = std::fs::File::open(path).map_err(io_err)?;
        let size = file.metadata().map_err(io_err)?.len();
        let options = ReadOptions {
            file_name: Some(name.clone()),
            file_size: Some(size),
            max_header_bytes: None,
            tokenizer_arrays,
        };
        GgufFile::read(file, &options)
    }

    /// Reads a header from bytes in memory; `bytes` is taken to be the whole file.
    pub fn from_bytes(bytes: &[u8], file_name: Option<&str>) -> Result<GgufFile, GgufError> {
        let options = ReadOptions {
            file_name: file_name.map(str::to_owned),
            file_size: Some(bytes.len() as u64),
            ..ReadOptions::default()
        };
        GgufFile::read(bytes, &options)
    }

    /// Reads a header from any reader (buffered internally: no need for a `BufReader`).
    pub fn read<R: Read>(reader: R, options: &ReadOptions) -> Result<GgufFile, GgufError> {
        let parser = Parser {
            input: Input::new(reader),
            pos: 0,
            file_size: options.file_size,
            max_header: options.max_header_bytes.unwrap_or(DEFAULT_MAX_HEADER_BYTES),
            tokenizer_arrays: options.tokenizer_arrays,
            progress: None,
        };
        match parser.parse() {
            Ok(mut file) => {
                file.file_name.clone_from(&options.file_name);
                Ok(file)
            }
            Err(e) => Err(match &options.file_name {
                Some(name) => e.in_file(name),
                None => e,
            }),
        }
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Where the last tensor's data ends (the data offset when there are no tensors).
    pub fn data_end(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.absolute_offset.saturating_add(t.size_bytes))
            .max()
            .unwrap_or(self.data_offset)
    }

    /// Sum of all tensors' elements.
    pub fn parameter_count(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |acc, t| acc.saturating_add(t.element_count()))
    }

    /// The value of a metadata key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }
}

/// What is being read, for messages; formatted only when an error occurs.
enum Ctx<'a> {
    Header,
    KeyName(u64),
    ValueOf(&'a str),
    TensorName(u64),
    Tensor(&'a str),
}

impl fmt::Display for Ctx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ctx::Header => f.write_str("the file header"),
            Ctx::KeyName(i) => write!(f, "the name of metadata entry {i}"),
            Ctx::ValueOf(k) => write!(f, "the value of key '{k}'"),
            Ctx::TensorName(i) => write!(f, "the name of tensor {i}"),
            Ctx::Tensor(t) => write!(f, "the info of tensor '{t}'"),
        }
    }
}

/// The top-level array being read, to guess how much header is left when the input ends
/// inside it (a remote reader then fetches that much in one request).
#[derive(Clone, Copy)]
struct ArrayProgress {
    start: u64,
    count: u64,
    done: u64,
    min_elem: u64,
}

/// The source and its buffer. Parsing takes slices straight out of the buffer, so a
/// 150 000-token vocabulary costs no per-token read calls or copies; the buffer is kept and
/// refilled in place, one read call at a time.
struct Input<R> {
    src: R,
    /// `buf[..filled]` holds bytes read; the rest is room for the next read.
    buf: Vec<u8>,
    filled: usize,
    /// Next unread byte in `buf`.
    head: usize,
    eof: bool,
}

impl<R: Read> Input<R> {
    fn new(src: R) -> Input<R> {
        Input {
            src,
            buf: Vec::new(),
            filled: 0,
            head: 0,
            eof: false,
        }
    }

    /// Makes `n` bytes available from `head`, reading as needed; returns how many are
    /// available (fewer than `n` only at the end of the input). Bytes read before an error
    /// are kept.
    fn ensure(&mut self, n: usize) -> std::io::Result<usize> {
        let available = self.available();
        if available >= n || self.eof {
            return Ok(available);
        }
        self.buf.copy_within(self.head..self.filled, 0);
        (self.filled, self.head) = (available, 0);
        while self.filled < n && !self.eof {
            if self.filled == self.buf.len() {
                // Full: grow toward `n`, by at most MAX_READ_STEP before data arrives (a
                // forged string length in a stream of unknown size must not allocate 64 MiB).
                let grow = n
                    .saturating_sub(self.filled)
                    .clamp(READ_CHUNK, MAX_READ_STEP);
                self.buf.resize(self.filled.saturating_add(grow), 0);
            }
            let room = self.buf.get_mut(self.filled..).unwrap_or_default();
            match self.src.read(room) {
                Ok(0) => self.eof = true,
                Ok(got) => self.filled = self.filled.saturating_add(got),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.filled)
    }

    /// Bytes buffered and not yet consumed.
    #[inline]
    fn available(&self) -> usize {
        self.filled.saturating_sub(self.head)
    }

    /// The bytes buffered and not yet consumed.
    #[inline]
    fn unread(&self) -> &[u8] {
        self.buf.get(self.head..self.filled).unwrap_or_default()
    }

    /// The next `n` bytes (which `ensure` made available).
    #[inline]
    fn consume(&mut self, n: usize) -> &[u8] {
        let start = self.head;
        self.head = start.saturating_add(n).min(self.filled);
        self.buf.get(start..self.head).unwrap_or_default()
    }
}

struct Parser<R> {
    input: Input<R>,
    /// Byte offset of the next unread byte.
    pos: u64,
    file_size: Option<u64>,
    max_header: u64,
    tokenizer_arrays: TokenizerArrays,
    progress: Option<ArrayProgress>,
}

/// The first of `tensors` whose name an earlier one has, with what it came with (names are
/// compared borrowed, not copied).
pub(crate) fn first_repeated<'a, T>(
    mut tensors: impl Iterator<Item = (T, &'a TensorInfo)>,
) -> Option<(T, &'a TensorInfo)> {
    let mut names: HashSet<&str> = HashSet::with_capacity(tensors.size_hint().0);
    tensors.find(|(_, info)| !names.insert(info.name.as_str()))
}

/// Up-front capacity for `count` elements: never more than [`MAX_PREALLOC`].
fn prealloc(count: u64) -> usize {
    usize::try_from(count.min(MAX_PREALLOC)).unwrap_or(0)
}

impl<R: Read> Parser<R> {
    fn parse(mut self) -> Result<GgufFile, GgufError> {
        let version = self.read_magic_and_version()?;
        let n_tensors = self.u64(&Ctx::Header)?;
        let n_kv = self.u64(&Ctx::Header)?;
        self.check_counts(n_tensors, n_kv)?;

        let (metadata, alignment_at) = self.read_metadata(n_kv)?;
        let alignment = alignment_of(&metadata).map_err(|k| GgufError::at(k, alignment_at))?;
        let (mut tensors, info_offsets) = self.read_tensor_infos(n_tensors, alignment)?;

        let header_bytes = self.pos;
        let data_offset = if tensors.is_empty() {
            header_bytes
        } else {
            pad(header_bytes, alignment).ok_or_else(|| {
                GgufError::at(
                    ErrorKind::HeaderTooLarge {
                        limit: self.max_header,
                    },
                    header_bytes,
                )
            })?
        };
        let data_end = place_tensors(&mut tensors, &info_offsets, data_offset)?;
        check_overlaps(&tensors, &info_offsets)?;
        if let Some(size) = self.file_size {
            if data_end > size {
                return Err(GgufError::at(
                    ErrorKind::DataTruncated {
                        file_size: size,
                        data_end,
                    },
                    size,
                ));
            }
        }
        Ok(GgufFile {
            file_name: None,
            version,
            metadata,
            tensors,
            alignment,
            header_bytes,
            data_offset,
            file_size: self.file_size,
        })
    }

    fn read_magic_and_version(&mut self) -> Result<u32, GgufError> {
        let magic: [u8; 4] = self.bytes(&Ctx::Header)?;
        let version = u32::from_le_bytes(self.bytes(&Ctx::Header)?);
        // gguf-py writes the magic little-endian even in big-endian files and llama.cpp then
        // sees a version like 0x03000000; a writer that swapped the magic too gives "FUGG".
        let swapped = magic == *b"FUGG" || (version != 0 && version & 0xFFFF == 0);
        if magic != *b"GGUF" && magic != *b"FUGG" {
            return Err(GgufError::at(ErrorKind::BadMagic { found: magic }, 0));
        }
        if swapped {
            return Err(GgufError::at(
                ErrorKind::ByteSwapped {
                    raw_version: version,
                },
                4,
            ));
        }
        match version {
            2 | 3 => Ok(version),
            _ => Err(GgufError::at(ErrorKind::UnsupportedVersion { version }, 4)),
        }
    }

    /// Rejects counts the file cannot hold before anything is allocated for them.
    fn check_counts(&self, n_tensors: u64, n_kv: u64) -> Result<(), GgufError> {
        let remaining = self.remaining();
        let too_many = |what, count, at| {
            Err(GgufError::at(
                ErrorKind::CountTooLarge {
                    what,
                    count,
                    remaining,
                },
                at,
            ))
        };
        // The counts are i64 in llama.cpp: "negative" ones are forged.
        let signed_max = i64::MAX.unsigned_abs();
        if n_tensors > signed_max {
            return too_many("tensors", n_tensors, 8);
        }
        if n_kv > signed_max {
            return too_many("metadata entries", n_kv, 16);
        }
        let Some(left) = remaining else { return Ok(()) };
        let kv_bytes = n_kv.checked_mul(MIN_KV_BYTES).filter(|&b| b <= left);
        let Some(kv_bytes) = kv_bytes else {
            return too_many("metadata entries", n_kv, 16);
        };
        let info_bytes = n_tensors.checked_mul(MIN_TENSOR_INFO_BYTES);
        if info_bytes
            .and_then(|b| b.checked_add(kv_bytes))
            .is_none_or(|b| b > left)
        {
            return too_many("tensors", n_tensors, 8);
        }
        Ok(())
    }

    /// Reads the metadata; also returns where `general.alignment` was (for its error offset).
    fn read_metadata(&mut self, n_kv: u64) -> Result<(Metadata, u64), GgufError> {
        let mut metadata = Metadata::default();
        let mut seen: HashSet<String> = HashSet::with_capacity(prealloc(n_kv));
        let mut alignment_at = 0;
        for index in 0..n_kv {
            let key_at = self.pos;
            let key = self.read_string(&Ctx::KeyName(index), false)?;
            if key.is_empty() {
                return Err(GgufError::at(ErrorKind::EmptyKey { index }, key_at));
            }
            if !seen.insert(key.clone()) {
                return Err(GgufError::at(ErrorKind::DuplicateKey { key }, key_at));
            }
            if key == "general.alignment" {
                alignment_at = key_at;
            }
            let value = self.read_value(&key)?;
            metadata.push_unchecked(key, value);
        }
        Ok((metadata, alignment_at))
    }

    fn read_value(&mut self, key: &str) -> Result<Value, GgufError> {
        let ctx = Ctx::ValueOf(key);
        let ty = self.value_type(key)?;
        Ok(match ty {
            ValueType::U8 => Value::U8(u8::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.bytes(&ctx)?)),
            // llama.cpp reads a bool as one byte, non-zero meaning true.
            ValueType::Bool => Value::Bool(self.bytes::<1>(&ctx)? != [0]),
            ValueType::String => Value::String(self.read_string(&ctx, is_lossy_key(key))?),
            ValueType::Array => Value::Array(self.read_array(key, 0)?),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.bytes(&ctx)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.bytes(&ctx)?)),
        })
    }

    /// Reads a u32 value type id.
    fn value_type(&mut self, key: &str) -> Result<ValueType, GgufError> {
        let at = self.pos;
        let type_id = self.u32(&Ctx::ValueOf(key))?;
        ValueType::from_id(type_id).ok_or_else(|| {
            GgufError::at(
                ErrorKind::UnknownValueType {
                    key: key.to_owned(),
                    type_id,
                },
                at,
            )
        })
    }

    fn read_array(&mut self, key: &str, depth: u32) -> Result<Array, GgufError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(GgufError::at(
                ErrorKind::ArrayTooDeep {
                    key: key.to_owned(),
                    limit: MAX_ARRAY_DEPTH,
                },
                self.pos,
            ));
        }
        let ctx = Ctx::ValueOf(key);
        let elem = self.value_type(key)?;
        let count_at = self.pos;
        let count = self.u64(&ctx)?;
        let limit = match self.remaining() {
            Some(left) => (left / elem.min_encoded_size()).min(MAX_ARRAY_LEN),
            None => MAX_ARRAY_LEN,
        };
        if count > limit {
            let kind = ErrorKind::ArrayTooLong {
                key: key.to_owned(),
                count,
                limit,
            };
            return Err(GgufError::at(kind, count_at));
        }
        let outer = depth == 0;
        if outer {
            self.progress = Some(ArrayProgress {
                start: self.pos,
                count,
                done: 0,
                min_elem: elem.min_encoded_size(),
            });
        }
        let counted = outer
            && elem != ValueType::Array
            && self.tokenizer_arrays == TokenizerArrays::Counted
            && is_lossy_key(key);
        let array = if counted {
            self.count_elements(elem, count, key)?
        } else {
            self.read_elements(elem, count, key, depth, outer)?
        };
        if outer {
            self.progress = None;
        }
        Ok(array)
    }

    fn read_elements(
        &mut self,
        elem: ValueType,
        count: u64,
        key: &str,
        depth: u32,
        outer: bool,
    ) -> Result<Array, GgufError> {
        let ctx = Ctx::ValueOf(key);
        Ok(match elem {
            ValueType::U8 => Array::U8(self.pod(count, &ctx, outer, u8::from_le_bytes)?),
            ValueType::I8 => Array::I8(self.pod(count, &ctx, outer, i8::from_le_bytes)?),
            ValueType::U16 => Array::U16(self.pod(count, &ctx, outer, u16::from_le_bytes)?),
            ValueType::I16 => Array::I16(self.pod(count, &ctx, outer, i16::from_le_bytes)?),
            ValueType::U32 => Array::U32(self.pod(count, &ctx, outer, u32::from_le_bytes)?),
            ValueType::I32 => Array::I32(self.pod(count, &ctx, outer, i32::from_le_bytes)?),
            ValueType::F32 => Array::F32(self.pod(count, &ctx, outer, f32::from_le_bytes)?),
            ValueType::Bool => Array::Bool(self.pod(count, &ctx, outer, |b: [u8; 1]| b != [0])?),
            ValueType::U64 => Array::U64(self.pod(count, &ctx, outer, u64::from_le_bytes)?),
            ValueType::I64 => Array::I64(self.pod(count, &ctx, outer, i64::from_le_bytes)?),
            ValueType::F64 => Array::F64(self.pod(count, &ctx, outer, f64::from_le_bytes)?),
            ValueType::String => Array::String(self.string_array(count, key, outer)?),
            ValueType::Array => {
                let mut inner = Vec::with_capacity(prealloc(count));
                for _ in 0..count {
                    inner.push(self.read_array(key, depth.saturating_add(1))?);
                }
                Array::Array(inner)
            }
        })
    }

    /// Reads a top-level array of strings or fixed-size elements as `read_elements` does,
    /// keeping only its type and length.
    fn count_elements(
        &mut self,
        elem: ValueType,
        count: u64,
        key: &str,
    ) -> Result<Array, GgufError> {
        if elem == ValueType::String {
            self.each_string(count, key, true, |_, _| {})?;
        } else {
            // Fixed-size elements: their encoded size is their size.
            let size = usize::try_from(elem.min_encoded_size()).unwrap_or(8);
            self.pod_chunks(count, size, &Ctx::ValueOf(key), true, |_| {})?;
        }
        // count ≤ MAX_ARRAY_LEN, which fits a usize.
        let len = usize::try_from(count).unwrap_or(usize::MAX);
        Ok(Array::Counted { elem, len })
    }

    /// Reads `count` fixed-size elements in chunks, decoding each with `conv`.
    fn pod<const N: usize, T>(
        &mut self,
        count: u64,
        ctx: &Ctx,
        outer: bool,
        conv: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, GgufError> {
        let mut out = Vec::with_capacity(prealloc(count));
        self.pod_chunks(count, N, ctx, outer, |chunk| {
            out.extend(
                chunk
                    .chunks_exact(N)
                    .filter_map(|c| <[u8; N]>::try_from(c).ok())
                    .map(conv),
            );
        })?;
        Ok(out)
    }

    /// Reads `count` elements of `size` bytes (1 to 8), handing them to `each` in chunks of up
    /// to [`POD_CHUNK`] elements.
    fn pod_chunks(
        &mut self,
        count: u64,
        size: usize,
        ctx: &Ctx,
        outer: bool,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), GgufError> {
        let mut left = count;
        while left > 0 {
            let n = left.min(POD_CHUNK);
            // n ≤ POD_CHUNK and size ≤ 8: the product is small.
            let bytes = usize::try_from(n).unwrap_or(0).saturating_mul(size);
            each(self.take(bytes, ctx)?);
            left -= n;
            if outer {
                self.advance_progress(n);
            }
        }
        Ok(())
    }

    /// Reads `count` strings into one buffer, validating UTF-8 once for the whole array (one
    /// call per token is most of the cost of a large vocabulary); only if that fails are the
    /// strings checked one by one, to name the bad one or replace its bytes.
    fn string_array(
        &mut self,
        count: u64,
        key: &str,
        outer: bool,
    ) -> Result<StringArray, GgufError> {
        let first_at = self.pos;
        let mut text: Vec<u8> = Vec::new();
        let mut ends = Vec::with_capacity(prealloc(count));
        self.each_string(count, key, outer, |bytes, window| {
            append_short(&mut text, bytes, window);
            ends.push(text.len());
        })?;
        StringArray::from_utf8_parts(text, ends)
            .or_else(|(text, ends)| strings_one_by_one(&text, &ends, key, first_at))
    }

    /// Reads `count` strings, handing each one's bytes to `each` (with the 16 bytes from where
    /// it starts, when they are buffered: see [`append_short`]).
    fn each_string(
        &mut self,
        count: u64,
        key: &str,
        outer: bool,
        mut each: impl FnMut(&[u8], Option<&[u8; 16]>),
    ) -> Result<(), GgufError> {
        let ctx = Ctx::ValueOf(key);
        let mut left = count;
        while left > 0 {
            let buffered = self.buffered_strings(left, &mut each);
            left -= buffered;
            if outer {
                self.advance_progress(buffered);
            }
            if left == 0 {
                break;
            }
            // The next string runs past the buffer or fails a check: the checked path refills
            // the buffer or says what is wrong.
            let (_, bytes) = self.string_bytes(&ctx)?;
            each(bytes, None);
            left -= 1;
            if outer {
                self.advance_progress(1);
            }
        }
        Ok(())
    }

    /// Hands up to `most` strings that lie wholly in the input buffer and pass every check of
    /// `string_bytes` (length limit, file size, header limit) to `each`; returns how many. It
    /// stops at the first string that does not, leaving it to `string_bytes`: a tight loop over
    /// the buffer instead of three checked reads per token.
    fn buffered_strings(
        &mut self,
        most: u64,
        each: &mut impl FnMut(&[u8], Option<&[u8; 16]>),
    ) -> u64 {
        let limit = self
            .file_size
            .map_or(self.max_header, |size| size.min(self.max_header));
        let buffered = self.input.unread();
        // A string must end within the header limit (and the file): no further than `room`.
        let room = usize::try_from(limit.saturating_sub(self.pos))
            .unwrap_or(usize::MAX)
            .min(buffered.len());
        let mut rest = buffered.get(..room).unwrap_or_default();
        let mut done = 0u64;
        while done < most {
            let Some((length, tail)) = rest.split_first_chunk::<8>() else {
                break;
            };
            let len = u64::from_le_bytes(*length);
            // len ≤ MAX_STRING_LEN fits a usize.
            let Some(bytes) = (len <= MAX_STRING_LEN)
                .then(|| tail.get(..len as usize))
                .flatten()
            else {
                break;
            };
            // The window may run past the string (and the room): it is read ahead, not used.
            let start = buffered.len() - tail.len();
            let window = buffered
                .get(start..start.saturating_add(16))
                .and_then(|w| <&[u8; 16]>::try_from(w).ok());
            each(bytes, window);
            rest = tail.get(bytes.len()..).unwrap_or_default();
            done += 1;
        }
        let used = room - rest.len();
        self.input.consume(used);
        self.pos = self.pos.saturating_add(used as u64);
        done
    }

    fn advance_progress(&mut self, n: u64) {
        if let Some(p) = &mut self.progress {
            p.done = p.done.saturating_add(n);
        }
    }

    fn read_tensor_infos(
        &mut self,
        n_tensors: u64,
        alignment: u64,
    ) -> Result<(Vec<TensorInfo>, Vec<u64>), GgufError> {
        let mut tensors = Vec::with_capacity(prealloc(n_tensors));
        let mut info_offsets = Vec::with_capacity(prealloc(n_tensors));
        for index in 0..n_tensors {
            let info_at = self.pos;
            let name = self.read_string(&Ctx::TensorName(index), false)?;
            let info = self.read_tensor_info(name, info_at, alignment)?;
            tensors.push(info);
            info_offsets.push(info_at);
        }
        // Names are compared once all are read; the first repeated one is reported where its
        // info begins.
        if let Some((&info_at, info)) = first_repeated(info_offsets.iter().zip(&tensors)) {
            let tensor = info.name.clone();
            return Err(GgufError::at(
                ErrorKind::DuplicateTensor { tensor },
                info_at,
            ));
        }
        Ok((tensors, info_offsets))
    }

    /// Reads the rest of one tensor info after its name.
    fn read_tensor_info(
        &mut self,
        name: String,
        info_at: u64,
        alignment: u64,
    ) -> Result<TensorInfo, GgufError> {
        let ctx = Ctx::Tensor(&name);
        let n_dims = self.u32(&ctx)?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::at(
                ErrorKind::TooManyDims {
                    tensor: name,
                    n_dims,
                },
                info_at,
            ));
        }
        let mut dims = Vec::with_capacity(4);
        for _ in 0..n_dims {
            dims.push(self.u64(&ctx)?);
        }
        // llama.cpp keeps dimensions and the element count in int64.
        let signed_max = i64::MAX.unsigned_abs();
        if dims.iter().any(|&d| d > signed_max)
            || element_count(&dims).is_none_or(|n| n > signed_max)
        {
            return Err(GgufError::at(
                ErrorKind::ShapeOverflow { tensor: name, dims },
                info_at,
            ));
        }
        let type_at = self.pos;
        let type_id = self.u32(&ctx)?;
        let offset = self.u64(&ctx)?;
        let Some(ggml_type) = GgmlType::from_id(type_id) else {
            let kind = ErrorKind::UnknownTensorType {
                tensor: name,
                type_id,
            };
            return Err(GgufError::at(kind, type_at));
        };
        let size_bytes = match tensor_bytes(ggml_type, &dims) {
            Ok(size) => size,
            Err(reason) => {
                let kind = ErrorKind::BadTensorShape {
                    tensor: name,
                    ggml_type,
                    reason,
                };
                return Err(GgufError::at(kind, info_at));
            }
        };
        if offset % alignment != 0 {
            let kind = ErrorKind::MisalignedTensor {
                tensor: name,
                data_offset: offset,
                alignment,
            };
            return Err(GgufError::at(kind, info_at));
        }
        Ok(TensorInfo {
            name,
            dims,
            ggml_type,
            offset,
            absolute_offset: 0,
            size_bytes,
        })
    }

    /// Reads a length-prefixed string as UTF-8 (lossily if `lossy`).
    fn read_string(&mut self, ctx: &Ctx, lossy: bool) -> Result<String, GgufError> {
        let (at, bytes) = self.string_bytes(ctx)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) if lossy => Ok(String::from_utf8_lossy(bytes).into_owned()),
            Err(_) => Err(GgufError::at(
                ErrorKind::NotUtf8 {
                    what: ctx.to_string(),
                },
                at,
            )),
        }
    }

    /// Reads a length-prefixed string's bytes; also returns where the string began.
    fn string_bytes(&mut self, ctx: &Ctx) -> Result<(u64, &[u8]), GgufError> {
        let at = self.pos;
        let len = self.u64(ctx)?;
        let too_long = || {
            let kind = ErrorKind::StringTooLong {
                what: ctx.to_string(),
                len,
                limit: MAX_STRING_LEN,
            };
            GgufError::at(kind, at)
        };
        if len > MAX_STRING_LEN {
            return Err(too_long());
        }
        // A plausible length that runs past the end of the file: the file is cut short.
        if let (Some(size), Some(left)) = (self.file_size, self.remaining()) {
            if len > left {
                return Err(self.truncated(size, self.pos.saturating_add(len), ctx));
            }
        }
        let n = usize::try_from(len).map_err(|_| too_long())?;
        Ok((at, self.take(n, ctx)?))
    }

    fn u32(&mut self, ctx: &Ctx) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.bytes(ctx)?))
    }

    fn u64(&mut self, ctx: &Ctx) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.bytes(ctx)?))
    }

    fn bytes<const N: usize>(&mut self, ctx: &Ctx) -> Result<[u8; N], GgufError> {
        let slice = self.take(N, ctx)?;
        Ok(<[u8; N]>::try_from(slice).unwrap_or([0; N]))
    }

    /// Bytes left in the file after the current position, when the file size is known.
    fn remaining(&self) -> Option<u64> {
        self.file_size.map(|s| s.saturating_sub(self.pos))
    }

    /// The next `n` bytes of input, or an error saying where the input ended.
    #[inline]
    fn take(&mut self, n: usize, ctx: &Ctx) -> Result<&[u8], GgufError> {
        let end = self.pos.saturating_add(n as u64);
        if end <= self.max_header && self.input.available() >= n {
            self.pos = end;
            return Ok(self.input.consume(n));
        }
        self.take_slow(n, ctx)
    }

    /// `take` when the buffer must be refilled first, or the input ends, or the limit is hit.
    #[cold]
    fn take_slow(&mut self, n: usize, ctx: &Ctx) -> Result<&[u8], GgufError> {
        let start = self.pos;
        let end = start.saturating_add(n as u64);
        if end > self.max_header {
            return Err(GgufError::at(
                ErrorKind::HeaderTooLarge {
                    limit: self.max_header,
                },
                start,
            ));
        }
        let available = match self.input.ensure(n) {
            Ok(available) => available,
            Err(e) => {
                let buffered = self.input.available() as u64;
                return Err(GgufError::at(
                    ErrorKind::Io(e),
                    start.saturating_add(buffered),
                ));
            }
        };
        if available < n {
            return Err(self.truncated(start.saturating_add(available as u64), end, ctx));
        }
        self.pos = end;
        Ok(self.input.consume(n))
    }

    fn truncated(&self, eof: u64, needed_end: u64, ctx: &Ctx) -> GgufError {
        let kind = ErrorKind::Truncated {
            what: ctx.to_string(),
            needed_end,
            estimated_header_end: self.estimate_header_end(needed_end),
        };
        GgufError::at(kind, eof)
    }

    /// A guess of where the header ends when the input stops inside a top-level array: the
    /// average element size so far times the elements left. Only a hint for remote reads.
    fn estimate_header_end(&self, needed_end: u64) -> u64 {
        let Some(p) = self.progress else {
            return needed_end;
        };
        let consumed = self.pos.saturating_sub(p.start);
        let average = consumed.checked_div(p.done).unwrap_or(p.min_elem).max(1);
        let rest = p.count.saturating_sub(p.done).saturating_mul(average);
        needed_end.max(self.pos.saturating_add(rest))
    }
}

/// Appends `bytes` to `text`. Most tokens are under 16 bytes: when `window`, the 16 bytes
/// from where `bytes` starts, is given, those are copied whole (a fixed-size copy the compiler
/// inlines, not a call per token) and the extra ones cut off again.
#[inline]
fn append_short(text: &mut Vec<u8>, bytes: &[u8], window: Option<&[u8; 16]>) {
    match window {
        Some(window) if bytes.len() <= 16 => {
            let keep = text.len().saturating_add(bytes.len());
            text.extend_from_slice(window);
            text.truncate(keep);
        }
        _ => text.extend_from_slice(bytes),
    }
}

/// The slow path of `string_array`: checks each string, replacing invalid bytes for
/// `tokenizer.*` keys and naming the first invalid string otherwise.
fn strings_one_by_one(
    text: &[u8],
    ends: &[usize],
    key: &str,
    first_at: u64,
) -> Result<StringArray, GgufError> {
    let lossy = is_lossy_key(key);
    let mut out = StringArray::with_capacity(ends.len());
    let (mut start, mut at) = (0usize, first_at);
    for (index, &end) in ends.iter().enumerate() {
        let bytes = text.get(start..end).unwrap_or_default();
        match std::str::from_utf8(bytes) {
            Ok(s) => out.push(s),
            Err(_) if lossy => out.push(&String::from_utf8_lossy(bytes)),
            Err(_) => {
                let what = format!("element {index} of key '{key}'");
                return Err(GgufError::at(ErrorKind::NotUtf8 { what }, at));
            }
        }
        // Each string is its 8-byte length and its bytes.
        at = at.saturating_add(8).saturating_add(bytes.len() as u64);
        start = end;
    }
    Ok(out)
}

/// Whether a key's strings may be read lossily (see the module docs).
fn is_lossy_key(key: &str) -> bool {
    key.starts_with("tokenizer.")
}

/// `general.alignment`, which llama.cpp requires to be a u32 power of two.
fn alignment_of(metadata: &Metadata) -> Result<u64, ErrorKind> {
    match metadata.get("general.alignment") {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some(Value::U32(a)) => Err(ErrorKind::BadAlignment {
            found: a.to_string(),
        }),
        Some(other) => Err(ErrorKind::BadAlignment {
            found: format!("a value of type {}", other.value_type().name()),
        }),
    }
}

/// `x` rounded up to a multiple of `align` (a power of two), `None` on overflow.
pub(crate) fn pad(x: u64, align: u64) -> Option<u64> {
    let mask = align.checked_sub(1)?;
    x.checked_add(mask).map(|v| v & !mask)
}

/// Sets each tensor's absolute offset; returns where the data section ends.
fn place_tensors(
    tensors: &mut [TensorInfo],
    info_offsets: &[u64],
    data_offset: u64,
) -> Result<u64, GgufError> {
    let mut data_end = data_offset;
    for (t, &info_at) in tensors.iter_mut().zip(info_offsets) {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|abs| Some((abs, abs.checked_add(t.size_bytes)?)));
        let Some((abs, end)) = end else {
            let kind = ErrorKind::TensorOffsetOverflow {
                tensor: t.name.clone(),
            };
            return Err(GgufError::at(kind, info_at));
        };
        t.absolute_offset = abs;
        data_end = data_end.max(end);
    }
    Ok(data_end)
}

/// Rejects tensors whose data overlap (llama.cpp requires them packed in order; a forged or
/// damaged offset shows up here).
fn check_overlaps(tensors: &[TensorInfo], info_offsets: &[u64]) -> Result<(), GgufError> {
    let mut order: Vec<(&TensorInfo, u64)> = tensors
        .iter()
        .zip(info_offsets.iter().copied())
        .filter(|(t, _)| t.size_bytes > 0)
        .collect();
    order.sort_by_key(|(t, _)| t.absolute_offset);
    for pair in order.windows(2) {
        let [(first, _), (second, second_at)] = pair else {
            continue;
        };
        if first.absolute_offset.saturating_add(first.size_bytes) > second.absolute_offset {
            let kind = ErrorKind::OverlappingTensors {
                first: first.name.clone(),
                second: second.name.clone(),
            };
            return Err(GgufError::at(kind, *second_at));
        }
    }
    Ok(())
}
