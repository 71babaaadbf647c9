//! The one error type of this crate: what went wrong, in which file, at which byte.
//!
//! Callers branch on [`ErrorKind`]; people read the `Display`, which always names the file
//! (or URL), the byte offset where one applies, and what to do about it, e.g.
//! `model file 'x.gguf' is truncated at byte 1048576 (the header says tensor data runs to
//! 4194304): re-download it`.

use crate::types::{GgmlType, SizeError};
use std::fmt;

/// Why reading (or writing) a GGUF file failed.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.render())]
pub struct GgufError {
    /// The file name or URL, when known.
    pub file: Option<String>,
    /// The byte offset in the file the problem was found at; `None` for problems that are not
    /// about a position (a shard file missing, an HTTP status).
    pub offset: Option<u64>,
    /// What went wrong.
    pub kind: ErrorKind,
}

/// What went wrong.
#[derive(Debug)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The operating system failed to read or write (not an early end of file).
    Io(std::io::Error),
    /// The input ended inside the header.
    Truncated {
        /// What was being read, e.g. "the value of key 'tokenizer.ggml.tokens'".
        what: String,
        /// Where the item being read would have ended.
        needed_end: u64,
        /// A guess of where the header ends (at least `needed_end`): a remote reader fetches
        /// that much next time instead of growing blindly.
        estimated_header_end: u64,
    },
    /// The header is complete but the file ends before the tensor data the header describes.
    DataTruncated {
        /// The size of the file.
        file_size: u64,
        /// The end of the last tensor's data, per the header.
        data_end: u64,
    },
    /// The first four bytes are not `GGUF`.
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A big-endian (byte-swapped) GGUF file; llama.cpp on a little-endian machine refuses it.
    ByteSwapped {
        /// The version field as read little-endian.
        raw_version: u32,
    },
    /// A GGUF version other than 2 or 3.
    UnsupportedVersion {
        /// The version in the file.
        version: u32,
    },
    /// The tensor or metadata count is more than the rest of the file could hold.
    CountTooLarge {
        /// "tensors" or "metadata entries".
        what: &'static str,
        /// The count in the file.
        count: u64,
        /// Bytes left in the file after the count, if the file size is known.
        remaining: Option<u64>,
    },
    /// A string's length is beyond the 64 MiB limit or beyond the end of the file.
    StringTooLong {
        /// What the string is, e.g. "the name of tensor 3".
        what: String,
        /// The length in the file.
        len: u64,
        /// The largest length that was possible there.
        limit: u64,
    },
    /// An array's element count is more than the rest of the file could hold.
    ArrayTooLong {
        /// The metadata key.
        key: String,
        /// The count in the file.
        count: u64,
        /// The largest count that was possible there.
        limit: u64,
    },
    /// Arrays nested deeper than any real file does.
    ArrayTooDeep {
        /// The metadata key.
        key: String,
        /// The deepest nesting the reader accepts.
        limit: u32,
    },
    /// A string that must be UTF-8 is not.
    NotUtf8 {
        /// What the string is.
        what: String,
    },
    /// A metadata key is empty (llama.cpp refuses those).
    EmptyKey {
        /// The entry's index.
        index: u64,
    },
    /// The same metadata key twice.
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A metadata value type id GGUF does not define.
    UnknownValueType {
        /// The metadata key.
        key: String,
        /// The type id in the file.
        type_id: u32,
    },
    /// The header goes on past the configured limit.
    HeaderTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// `general.alignment` is not a u32 power of two.
    BadAlignment {
        /// What was found, e.g. "3" or "a value of type str".
        found: String,
    },
    /// More than 4 dimensions.
    TooManyDims {
        /// The tensor name.
        tensor: String,
        /// The dimension count in the file.
        n_dims: u32,
    },
    /// A dimension beyond i64, or an element count that overflows.
    ShapeOverflow {
        /// The tensor name.
        tensor: String,
        /// The dimensions in the file.
        dims: Vec<u64>,
    },
    /// A ggml type id this crate does not know.
    UnknownTensorType {
        /// The tensor name.
        tensor: String,
        /// The type id in the file.
        type_id: u32,
    },
    /// A shape whose size cannot be computed for its type (partial block, overflow).
    BadTensorShape {
        /// The tensor name.
        tensor: String,
        /// The tensor type.
        ggml_type: GgmlType,
        /// Why.
        reason: SizeError,
    },
    /// The same tensor name twice (in one file or across shards).
    DuplicateTensor {
        /// The tensor name.
        tensor: String,
    },
    /// A tensor's data offset is not a multiple of the alignment.
    MisalignedTensor {
        /// The tensor name.
        tensor: String,
        /// Its offset from the start of the data section.
        data_offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's data offset plus size does not fit 64 bits.
    TensorOffsetOverflow {
        /// The tensor name.
        tensor: String,
    },
    /// Two tensors' data overlap.
    OverlappingTensors {
        /// The tensor that starts first.
        first: String,
        /// The tensor that starts inside it.
        second: String,
    },
    /// Shard files of a split model are missing.
    MissingShards {
        /// The folder searched.
        dir: String,
        /// The missing parts, as ranges.
        missing: crate::parts::MissingParts,
    },
    /// Shards disagree with each other or with their file names.
    SplitMismatch {
        /// What disagrees.
        detail: String,
    },
    /// The HTTP server ignored the Range header and would send the whole file.
    RangeIgnored {
        /// The status it answered.
        status: u16,
        /// The requested range start.
        start: u64,
        /// The requested range length.
        len: u64,
        /// The body length it announced, if any.
        body_len: Option<u64>,
    },
    /// A remote split model whose name promises more parts than a header read will fetch.
    TooManyParts {
        /// The parts the name promises.
        count: u32,
        /// The most parts read remotely.
        limit: u32,
    },
    /// A remote read would pass its byte budget (a header that never ends, a server that keeps
    /// sending).
    ByteBudgetExceeded {
        /// The budget, in bytes.
        budget: u64,
    },
    /// The HTTP server answered with an error status.
    HttpStatus {
        /// The status.
        status: u16,
    },
    /// The HTTP request failed (connection, TLS, timeout …).
    Network {
        /// The client's description.
        message: String,
    },
    /// The writer was asked for something GGUF cannot hold.
    InvalidWrite {
        /// What and why.
        detail: String,
    },
}

impl GgufError {
    /// An error of this kind at this byte offset, file unknown yet.
    pub fn at(kind: ErrorKind, offset: u64) -> Self {
        GgufError {
            file: None,
            offset: Some(offset),
            kind,
        }
    }

    /// An error of this kind not tied to a byte offset.
    pub fn new(kind: ErrorKind) -> Self {
        GgufError {
            file: None,
            offset: None,
            kind,
        }
    }

    /// Names the file (or URL) unless one is named already.
    pub fn in_file(mut self, name: &str) -> Self {
        if self.file.is_none() {
            self.file = Some(name.to_owned());
        }
        self
    }

    /// Whether the input simply ended inside the header: a remote reader then fetches more.
    pub fn is_truncated_header(&self) -> bool {
        matches!(self.kind, ErrorKind::Truncated { .. })
    }

    fn subject(&self) -> String {
        match self.file.as_deref() {
            Some(f) if f.starts_with("http://") || f.starts_with("https://") => {
                format!("model at '{f}'")
            }
            Some(f) => format!("model file '{f}'"),
            None => "GGUF data".to_owned(),
        }
    }

    fn render(&self) -> String {
        format!("{} {}", self.subject(), describe(&self.kind, self.offset))
    }
}

/// The predicate of the message: what is wrong and the fix. `offset` becomes " at byte N".
fn describe(kind: &ErrorKind, offset: Option<u64>) -> String {
    let at = offset.map(|o| format!(" at byte {o}")).unwrap_or_default();
    const CORRUPT: &str = "the file is corrupt: re-download it";
    match kind {
        ErrorKind::Io(e) => format!(
            "could not be read or written{at}: {e}: check that the disk is readable and the \
                 path is right"
        ),
        ErrorKind::Truncated {
            what, needed_end, ..
        } => format!(
            "is truncated{at} (the header needs {what} to run to byte {needed_end}): \
                 re-download it"
        ),
        ErrorKind::DataTruncated {
            file_size,
            data_end,
        } => format!(
            "is truncated at byte {file_size} (the header says tensor data runs to \
                 {data_end}): re-download it"
        ),
        ErrorKind::BadMagic { found } => format!(
            "is not a GGUF file: it starts with {}{at} instead of 'GGUF': pick the .gguf \
                 file, or convert the model with llama.cpp's convert_hf_to_gguf.py",
            show_magic(found)
        ),
        ErrorKind::ByteSwapped { raw_version } => format!(
            "is a big-endian (byte-swapped) GGUF file (its version field reads \
                 0x{raw_version:08x}{at}), which llama.cpp on this machine cannot load: get the \
                 little-endian file, or convert it with gguf-py's gguf_convert_endian.py"
        ),
        ErrorKind::UnsupportedVersion { version: 1 } => format!(
            "is GGUF version 1{at}, which llama.cpp no longer loads: download a current \
                 conversion of the model"
        ),
        ErrorKind::UnsupportedVersion { version } => format!(
            "has GGUF version {version}{at}; Rigdeck reads versions 2 and 3: update Rigdeck \
                 if the file is new, or re-download it if it is corrupt"
        ),
        ErrorKind::CountTooLarge {
            what,
            count,
            remaining,
        } => match remaining {
            Some(r) => format!(
                "declares {count} {what}{at}, more than the {r} bytes left in the file can \
                     hold: {CORRUPT}"
            ),
            None => format!("declares {count} {what}{at}, more than GGUF allows: {CORRUPT}"),
        },
        ErrorKind::StringTooLong { what, len, limit } => format!(
            "declares a {len}-byte string for {what}{at}, but at most {limit} bytes are \
                 possible there: {CORRUPT}"
        ),
        ErrorKind::ArrayTooLong { key, count, limit } => format!(
            "declares {count} array elements for key '{key}'{at}, but at most {limit} are \
                 possible there: {CORRUPT}"
        ),
        ErrorKind::ArrayTooDeep { key, limit } => format!(
            "nests arrays too deeply in key '{key}'{at} (more than {limit} levels): {CORRUPT}"
        ),
        ErrorKind::NotUtf8 { what } => format!(
            "has {what}{at} that is not valid UTF-8: the file is corrupt or was written by a \
                 broken converter: re-download or re-convert it"
        ),
        ErrorKind::EmptyKey { index } => {
            format!("has an empty name for metadata entry {index}{at}: {CORRUPT}")
        }
        ErrorKind::DuplicateKey { key } => format!(
            "has metadata key '{key}' twice{at}; llama.cpp refuses such files: re-convert or \
                 re-download it"
        ),
        ErrorKind::UnknownValueType { key, type_id } => format!(
            "gives metadata key '{key}' the unknown value type {type_id}{at}: the file is \
                 corrupt or newer than Rigdeck: re-download it or update Rigdeck"
        ),
        ErrorKind::HeaderTooLarge { limit } => format!(
            "has a header that runs past {limit} bytes{at}, far beyond any real model: \
                 {CORRUPT}"
        ),
        ErrorKind::BadAlignment { found } => format!(
            "sets general.alignment to {found}{at}; it must be a u32 power of two: {CORRUPT}"
        ),
        ErrorKind::TooManyDims { tensor, n_dims } => format!(
            "gives tensor '{tensor}' {n_dims} dimensions{at}; GGUF allows at most 4: \
                 {CORRUPT}"
        ),
        ErrorKind::ShapeOverflow { tensor, dims } => format!(
            "gives tensor '{tensor}' the shape {dims:?}{at}, whose element count does not \
                 fit 63 bits: {CORRUPT}"
        ),
        ErrorKind::UnknownTensorType { tensor, type_id } => format!(
            "stores tensor '{tensor}' as ggml type {type_id}{at}, which this Rigdeck does not \
                 know: the file needs a newer llama.cpp and Rigdeck, or was made by a llama.cpp \
                 fork: update Rigdeck or pick another quantization of the model"
        ),
        ErrorKind::BadTensorShape {
            tensor,
            ggml_type,
            reason,
        } => format!("stores tensor '{tensor}' as {ggml_type}{at}, but {reason}: {CORRUPT}"),
        ErrorKind::DuplicateTensor { tensor } => {
            format!("has tensor '{tensor}' twice{at}; llama.cpp refuses such files: re-download it")
        }
        ErrorKind::MisalignedTensor {
            tensor,
            data_offset,
            alignment,
        } => format!(
            "places tensor '{tensor}' at data offset {data_offset}{at}, not a multiple of the \
                 alignment {alignment}: {CORRUPT}"
        ),
        ErrorKind::TensorOffsetOverflow { tensor } => {
            format!("places tensor '{tensor}'{at} beyond the 64-bit range: {CORRUPT}")
        }
        ErrorKind::OverlappingTensors { first, second } => {
            format!("places tensor '{second}' inside the data of tensor '{first}'{at}: {CORRUPT}")
        }
        ErrorKind::MissingShards { dir, missing } => format!(
            "is one part of a split model, but {missing} not in '{dir}': download every part of \
                 the model into the same folder"
        ),
        ErrorKind::SplitMismatch { detail } => format!(
            "{detail}: the parts come from different downloads or conversions: re-download \
                 the model's parts"
        ),
        ErrorKind::RangeIgnored {
            status,
            start,
            len,
            body_len,
        } => format!(
            "answered HTTP {status} with the whole file{} to a request for {len} bytes from \
                 byte {start}: the server ignores Range requests, so Rigdeck stopped instead of \
                 downloading it all: use a server or mirror that supports Range requests",
            body_len
                .map(|b| format!(" ({b} bytes)"))
                .unwrap_or_default()
        ),
        ErrorKind::HttpStatus { status: 404 } => {
            "was not found (HTTP 404): check the URL and the repository's file list".to_owned()
        }
        ErrorKind::HttpStatus {
            status: status @ (401 | 403),
        } => format!(
            "refused access (HTTP {status}): the model may be gated: accept its licence and \
                 set an access token"
        ),
        ErrorKind::HttpStatus { status } => {
            format!("answered HTTP {status}{at}: try again later, or check the URL")
        }
        ErrorKind::TooManyParts { count, limit } => format!(
            "names a split model of {count} parts; reading headers remotely stops at {limit} \
             parts (no published model has more): check the URL, or download the model and \
             plan the local files"
        ),
        ErrorKind::ByteBudgetExceeded { budget } => format!(
            "needs more than {} MiB for its headers, the most a remote read fetches: check that \
             the URL names a GGUF model, or download it and plan the local file",
            budget >> 20
        ),
        ErrorKind::Network { message } => {
            format!("could not be fetched: {message}: check the network connection and the URL")
        }
        ErrorKind::InvalidWrite { detail } => format!("cannot be written: {detail}"),
    }
}

/// The magic as text when printable, else as hex, so a user can tell a zip from a safetensors.
fn show_magic(found: &[u8; 4]) -> String {
    if found.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        format!("'{}'", String::from_utf8_lossy(found))
    } else {
        let hex: Vec<String> = found.iter().map(|b| format!("{b:02x}")).collect();
        format!("bytes {}", hex.join(" "))
    }
}

impl From<std::io::Error> for ErrorKind {
    fn from(e: std::io::Error) -> Self {
        ErrorKind::Io(e)
    }
}

impl fmt::Display for ErrorKind {
    /// The kind alone, without file and offset (for logs that add their own context).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(self, None))
    }
}
