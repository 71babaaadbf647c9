//! Every kind of bad input gives a `GgufError` naming the file, the offset and the fix.

mod common;

use rigdeck_gguf::{
    Array, ErrorKind, GgmlType, GgufError, GgufFile, GgufWriter, RawTensor, ReadOptions,
    TensorData, Value,
};

const NAME: &str = "x.gguf";

fn small_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama")
        .set("general.name", "ZZZZ")
        .set("llama.block_count", 1u32)
        .set("tokenizer.ggml.tokens", vec!["ab", "YYYY"]);
    w.add_tensor(
        "blk.0.attn_q.weight",
        &[32, 2],
        GgmlType::Q8_0,
        TensorData::Random { seed: 3 },
    )
    .add_tensor(
        "blk.0.ffn_up.weight",
        &[8],
        GgmlType::F32,
        TensorData::Zeros,
    );
    w
}

fn read(bytes: &[u8]) -> Result<GgufFile, GgufError> {
    GgufFile::from_bytes(bytes, Some(NAME))
}

fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

fn err(bytes: &[u8]) -> GgufError {
    let e = read(bytes).unwrap_err();
    assert_eq!(e.file.as_deref(), Some(NAME));
    let msg = e.to_string();
    assert!(msg.starts_with("model file 'x.gguf' "), "{msg}");
    e
}

fn patch_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn patch_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn truncated_headers_say_where_the_input_ended() {
    let bytes = small_writer().to_bytes().unwrap();
    let header_end = GgufFile::from_bytes(&bytes, None).unwrap().header_bytes as usize;
    let name_at = find(&bytes, b"ZZZZ");
    let tensor_at = find(&bytes, b"blk.0.attn_q");
    for cut in [
        0,
        3,
        4,
        6,
        8,
        17,
        24,
        30,
        name_at + 2,
        tensor_at + 5,
        header_end - 1,
    ] {
        // As a stream of unknown length only the truncation itself can be noticed.
        let options = ReadOptions {
            file_name: Some(NAME.into()),
            ..ReadOptions::default()
        };
        let e = GgufFile::read(&bytes[..cut], &options).unwrap_err();
        assert!(
            matches!(e.kind, ErrorKind::Truncated { .. }),
            "cut {cut}: {e}"
        );
        assert_eq!(e.offset, Some(cut as u64), "cut {cut}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("model file 'x.gguf' is truncated at byte {cut} ")),
            "{msg}"
        );
        assert!(msg.ends_with("re-download it"), "{msg}");

        // With the size known, the count checks may notice first; either way it is an error
        // with an offset no further than the cut.
        let e = err(&bytes[..cut]);
        assert!(e.offset.unwrap() <= cut as u64, "cut {cut}: {e}");
    }
}

#[test]
fn truncated_tensor_data_names_both_sizes() {
    let bytes = small_writer().to_bytes().unwrap();
    let file = GgufFile::from_bytes(&bytes, None).unwrap();
    let cut = bytes.len() - 20;
    let e = err(&bytes[..cut]);
    assert!(matches!(e.kind, ErrorKind::DataTruncated { .. }));
    assert_eq!(e.offset, Some(cut as u64));
    assert_eq!(
        e.to_string(),
        format!(
            "model file 'x.gguf' is truncated at byte {cut} (the header says tensor data runs to \
             {}): re-download it",
            file.data_end()
        )
    );
}

#[test]
fn wrong_magic_is_named() {
    let mut bytes = small_writer().to_bytes().unwrap();
    bytes[..4].copy_from_slice(b"PK\x03\x04");
    let e = err(&bytes);
    assert!(matches!(e.kind, ErrorKind::BadMagic { .. }));
    assert_eq!(e.offset, Some(0));
    assert!(
        e.to_string()
            .contains("is not a GGUF file: it starts with bytes 50 4b 03 04"),
        "{e}"
    );
    bytes[..4].copy_from_slice(b"ggjt");
    assert!(err(&bytes)
        .to_string()
        .contains("it starts with 'ggjt' at byte 0 instead of 'GGUF'"));
}

#[test]
fn versions_other_than_2_and_3_are_refused() {
    let mut bytes = small_writer().to_bytes().unwrap();
    patch_u32(&mut bytes, 4, 1);
    let e = err(&bytes);
    assert!(matches!(
        e.kind,
        ErrorKind::UnsupportedVersion { version: 1 }
    ));
    assert!(e
        .to_string()
        .contains("is GGUF version 1 at byte 4, which llama.cpp no longer loads"));
    patch_u32(&mut bytes, 4, 4);
    assert!(err(&bytes)
        .to_string()
        .contains("has GGUF version 4 at byte 4"));
    patch_u32(&mut bytes, 4, 0);
    assert!(matches!(
        err(&bytes).kind,
        ErrorKind::UnsupportedVersion { version: 0 }
    ));
}

#[test]
fn big_endian_files_are_recognised() {
    let mut bytes = small_writer().to_bytes().unwrap();
    bytes[4..8].copy_from_slice(&3u32.to_be_bytes());
    let e = err(&bytes);
    assert!(matches!(
        e.kind,
        ErrorKind::ByteSwapped {
            raw_version: 0x0300_0000
        }
    ));
    assert!(
        e.to_string()
            .contains("is a big-endian (byte-swapped) GGUF file"),
        "{e}"
    );
    bytes[..4].copy_from_slice(b"FUGG");
    assert!(matches!(err(&bytes).kind, ErrorKind::ByteSwapped { .. }));
}

#[test]
fn absurd_counts_are_refused_before_allocating() {
    let mut bytes = small_writer().to_bytes().unwrap();
    patch_u64(&mut bytes, 8, u64::MAX / 2);
    let e = err(&bytes);
    assert!(
        matches!(
            e.kind,
            ErrorKind::CountTooLarge {
                what: "tensors",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.offset, Some(8));
    let mut bytes = small_writer().to_bytes().unwrap();
    patch_u64(&mut bytes, 16, 1 << 40);
    let e = err(&bytes);
    assert!(matches!(
        e.kind,
        ErrorKind::CountTooLarge {
            what: "metadata entries",
            ..
        }
    ));
    assert!(
        e.to_string()
            .contains("declares 1099511627776 metadata entries at byte 16"),
        "{e}"
    );
    // Negative as i64.
    let mut bytes = small_writer().to_bytes().unwrap();
    patch_u64(&mut bytes, 8, u64::MAX);
    let options = ReadOptions::default();
    let e = GgufFile::read(&bytes[..], &options).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::CountTooLarge {
                remaining: None,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn huge_string_lengths_are_refused() {
    let mut bytes = small_writer().to_bytes().unwrap();
    let at = find(&bytes, b"ZZZZ") - 8;
    patch_u64(&mut bytes, at, 1 << 40);
    let e = err(&bytes);
    assert!(
        matches!(
            e.kind,
            ErrorKind::StringTooLong {
                len: 1099511627776,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.offset, Some(at as u64));
    assert!(
        e.to_string()
            .contains("for the value of key 'general.name'"),
        "{e}"
    );
    // Without a known size the 64 MiB limit applies.
    let e = GgufFile::read(&bytes[..], &ReadOptions::default()).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::StringTooLong {
                limit: 67108864,
                ..
            }
        ),
        "{e}"
    );
    // A plausible length past the end of the file reads as a file cut short.
    patch_u64(&mut bytes, at, 1 << 20);
    let e = err(&bytes);
    assert!(matches!(e.kind, ErrorKind::Truncated { .. }), "{e}");
    assert_eq!(e.offset, Some(bytes.len() as u64));
    assert!(
        e.to_string()
            .contains(&format!("is truncated at byte {}", bytes.len())),
        "{e}"
    );
}

#[test]
fn huge_array_lengths_are_refused() {
    let mut bytes = small_writer().to_bytes().unwrap();
    // tokens: u32 type 8, u64 count 2, then the first string "ab".
    let at = find(&bytes, b"ab") - 8 - 8;
    assert_eq!(u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()), 2);
    patch_u64(&mut bytes, at, 1 << 50);
    let e = err(&bytes);
    assert!(matches!(e.kind, ErrorKind::ArrayTooLong { .. }), "{e}");
    assert_eq!(e.offset, Some(at as u64));
    assert!(
        e.to_string()
            .contains("elements for key 'tokenizer.ggml.tokens'"),
        "{e}"
    );
}

#[test]
fn unknown_tensor_type_names_tensor_id_and_offset() {
    let mut w = small_writer();
    w.add_raw_tensor(RawTensor {
        name: "blk.0.future.weight".into(),
        dims: vec![64],
        type_id: 43,
        offset: None,
        size_bytes: 64,
    });
    let bytes = w.to_bytes().unwrap();
    let type_at = find(&bytes, b"blk.0.future.weight") + 19 + 4 + 8;
    let e = err(&bytes);
    assert!(
        matches!(e.kind, ErrorKind::UnknownTensorType { type_id: 43, .. }),
        "{e}"
    );
    assert_eq!(e.offset, Some(type_at as u64));
    assert!(
        e.to_string().contains(&format!(
            "stores tensor 'blk.0.future.weight' as ggml type 43 at byte {type_at}"
        )),
        "{e}"
    );
}

#[test]
fn unknown_value_types_are_refused() {
    let mut bytes = small_writer().to_bytes().unwrap();
    let at = find(&bytes, b"llama.block_count") + 17;
    patch_u32(&mut bytes, at, 13);
    let e = err(&bytes);
    assert!(
        matches!(e.kind, ErrorKind::UnknownValueType { type_id: 13, .. }),
        "{e}"
    );
    assert_eq!(e.offset, Some(at as u64));
}

#[test]
fn non_utf8_strings_are_errors_except_in_the_tokenizer() {
    let good = small_writer().to_bytes().unwrap();
    let mut bytes = good.clone();
    let at = find(&bytes, b"ZZZZ");
    bytes[at] = 0xff;
    let e = err(&bytes);
    assert!(matches!(e.kind, ErrorKind::NotUtf8 { .. }));
    assert_eq!(e.offset, Some(at as u64 - 8));
    assert!(
        e.to_string()
            .contains("has the value of key 'general.name' at byte"),
        "{e}"
    );

    // A raw byte in a vocabulary is kept (as U+FFFD): the planner only counts tokens.
    let mut bytes = good.clone();
    let at = find(&bytes, b"YYYY");
    bytes[at] = 0xC3;
    let f = read(&bytes).unwrap();
    let tokens = f
        .metadata
        .get_arr("tokenizer.ggml.tokens")
        .unwrap()
        .as_strings()
        .unwrap();
    assert_eq!(tokens.get(1), Some("\u{fffd}YYY"));

    let mut bytes = good;
    let at = find(&bytes, b"ffn_up");
    bytes[at] = 0x80;
    let e = err(&bytes);
    assert!(
        e.to_string().contains("has the name of tensor 1 at byte"),
        "{e}"
    );
}

#[test]
fn misaligned_offsets_are_refused() {
    let mut w = small_writer();
    w.add_raw_tensor(RawTensor {
        name: "odd".into(),
        dims: vec![4],
        type_id: GgmlType::F32.id(),
        offset: Some(4096 + 16),
        size_bytes: 16,
    });
    let e = err(&w.to_bytes().unwrap());
    assert!(matches!(
        e.kind,
        ErrorKind::MisalignedTensor {
            data_offset: 4112,
            alignment: 32,
            ..
        }
    ));
    assert!(
        e.to_string().contains("not a multiple of the alignment 32"),
        "{e}"
    );
}

#[test]
fn overlapping_tensors_are_refused() {
    let mut w = GgufWriter::new();
    for name in ["a", "b"] {
        w.add_raw_tensor(RawTensor {
            name: name.into(),
            dims: vec![16],
            type_id: GgmlType::F32.id(),
            offset: Some(0),
            size_bytes: 64,
        });
    }
    let e = err(&w.to_bytes().unwrap());
    assert!(
        matches!(e.kind, ErrorKind::OverlappingTensors { .. }),
        "{e}"
    );
}

#[test]
fn overflowing_and_oversized_shapes_are_refused() {
    for dims in [
        vec![1 << 62, 1 << 62],
        vec![u64::MAX],
        vec![1 << 32, 1 << 31],
    ] {
        let mut w = GgufWriter::new();
        w.add_raw_tensor(RawTensor {
            name: "huge".into(),
            dims: dims.clone(),
            type_id: 0,
            offset: None,
            size_bytes: 0,
        });
        let e = err(&w.to_bytes().unwrap());
        assert!(
            matches!(e.kind, ErrorKind::ShapeOverflow { .. }),
            "{dims:?}: {e}"
        );
    }
    // Element count fits but the byte size does not.
    let mut w = GgufWriter::new();
    w.add_raw_tensor(RawTensor {
        name: "wide".into(),
        dims: vec![1 << 61, 2],
        type_id: GgmlType::F64.id(),
        offset: None,
        size_bytes: 0,
    });
    let e = err(&w.to_bytes().unwrap());
    assert!(matches!(e.kind, ErrorKind::BadTensorShape { .. }), "{e}");
    let mut w = GgufWriter::new();
    w.add_raw_tensor(RawTensor {
        name: "five".into(),
        dims: vec![1; 5],
        type_id: 0,
        offset: None,
        size_bytes: 4,
    });
    assert!(matches!(
        err(&w.to_bytes().unwrap()).kind,
        ErrorKind::TooManyDims { n_dims: 5, .. }
    ));
}

#[test]
fn partial_blocks_are_refused() {
    let mut w = GgufWriter::new();
    w.add_raw_tensor(RawTensor {
        name: "q".into(),
        dims: vec![100, 2],
        type_id: GgmlType::Q4_K.id(),
        offset: None,
        size_bytes: 0,
    });
    let e = err(&w.to_bytes().unwrap());
    assert!(
        e.to_string()
            .contains("its rows of 100 elements are not a multiple of the Q4_K block size 256"),
        "{e}"
    );
}

#[test]
fn duplicates_and_empty_keys_are_refused() {
    let mut w = small_writer();
    w.push_duplicate_key("llama.block_count", 2u32);
    let e = err(&w.to_bytes().unwrap());
    assert!(matches!(e.kind, ErrorKind::DuplicateKey { .. }));
    assert!(
        e.to_string()
            .contains("has metadata key 'llama.block_count' twice at byte"),
        "{e}"
    );

    let mut w = small_writer();
    w.add_tensor(
        "blk.0.ffn_up.weight",
        &[8],
        GgmlType::F32,
        TensorData::Zeros,
    );
    let e = err(&w.to_bytes().unwrap());
    assert!(matches!(e.kind, ErrorKind::DuplicateTensor { .. }), "{e}");

    let mut w = small_writer();
    w.set("", 1u8);
    assert!(matches!(
        err(&w.to_bytes().unwrap()).kind,
        ErrorKind::EmptyKey { index: 4 }
    ));
}

#[test]
fn bad_alignments_are_refused() {
    for (value, shown) in [
        (Value::U32(3), "3"),
        (Value::U32(0), "0"),
        (Value::U64(64), "a value of type u64"),
        (Value::String("32".into()), "a value of type str"),
    ] {
        let mut w = small_writer();
        w.set("general.alignment", value);
        let e = err(&w.to_bytes().unwrap());
        assert!(matches!(e.kind, ErrorKind::BadAlignment { .. }));
        assert!(
            e.to_string()
                .contains(&format!("sets general.alignment to {shown} at byte")),
            "{e}"
        );
    }
}

#[test]
fn deeply_nested_arrays_are_refused() {
    let mut a = Array::U8(vec![1]);
    for _ in 0..9 {
        a = Array::Array(vec![a]);
    }
    let mut w = small_writer();
    w.set("deep", Value::Array(a));
    let e = err(&w.to_bytes().unwrap());
    assert!(matches!(e.kind, ErrorKind::ArrayTooDeep { .. }), "{e}");
}

#[test]
fn the_header_size_limit_holds() {
    let bytes = small_writer().to_bytes().unwrap();
    let options = ReadOptions {
        max_header_bytes: Some(64),
        ..ReadOptions::default()
    };
    let e = GgufFile::read(&bytes[..], &options).unwrap_err();
    assert!(
        matches!(e.kind, ErrorKind::HeaderTooLarge { limit: 64 }),
        "{e}"
    );
}

#[test]
fn io_errors_are_reported_with_the_offset() {
    /// Yields a valid start, then fails.
    struct Failing(&'static [u8]);
    impl std::io::Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = buf.len().min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    let e = GgufFile::read(Failing(b"GGUF\x03\0\0\0"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Io(_)));
    assert_eq!(e.offset, Some(8));
    assert!(
        e.to_string()
            .contains("could not be read or written at byte 8: disk on fire"),
        "{e}"
    );
}

#[test]
fn a_missing_file_is_an_io_error_naming_it() {
    let e = GgufFile::open("/nonexistent/m.gguf").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("model file '/nonexistent/m.gguf' could not be read"),
        "{e}"
    );
}

#[test]
fn a_bad_string_in_an_array_is_named_even_if_the_array_as_a_whole_is_utf8() {
    // "é" split over two strings: the concatenation is valid UTF-8, each half is not.
    for key in ["t.names", "tokenizer.ggml.merges"] {
        let mut w = GgufWriter::new();
        w.set(key, vec!["ok", "QQ", "RR"]);
        let mut bytes = w.to_bytes().unwrap();
        let (q, r) = (find(&bytes, b"QQ"), find(&bytes, b"RR"));
        bytes[q..q + 2].copy_from_slice(b"a\xC3");
        bytes[r..r + 2].copy_from_slice(b"\xA9b");
        if key.starts_with("tokenizer.") {
            let f = read(&bytes).unwrap();
            let s = f.metadata.get_arr(key).unwrap().as_strings().unwrap();
            assert_eq!(
                s.iter().collect::<Vec<_>>(),
                ["ok", "a\u{fffd}", "\u{fffd}b"]
            );
        } else {
            let e = err(&bytes);
            assert_eq!(e.offset, Some(q as u64 - 8));
            assert!(
                e.to_string()
                    .contains(&format!("has element 1 of key 't.names' at byte {}", q - 8)),
                "{e}"
            );
        }
    }
}
