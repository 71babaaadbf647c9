//! Large string arrays read across the reader's buffer, and the tokenizer's arrays only
//! counted (`TokenizerArrays::Counted`): the same header, the same errors, the same summary.

mod common;

use rigdeck_gguf::{
    Array, ErrorKind, GgufError, GgufFile, GgufModel, GgufWriter, ModelSummary, ReadOptions,
    StringArray, TokenizerArrays, Value, ValueType,
};

/// About 1.3 MB of tokens of 0 to 40 bytes (ASCII and two-byte characters), so strings of
/// every length straddle the reader's 256 KiB buffer.
fn tokens(n: usize) -> StringArray {
    (0..n)
        .map(|i| {
            let len = (i * 7) % 41;
            if i % 5 == 0 {
                "é".repeat(len / 2)
            } else {
                "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ"[..len].to_owned()
            }
        })
        .collect()
}

/// A model with a 60 000-token vocabulary, merges, token types and a chat template, beside
/// arrays and strings of other keys.
fn writer() -> GgufWriter {
    let mut w = common::every_type_writer();
    let merges: StringArray = (0..50_000).map(|i| format!("m{i} x{}", i % 97)).collect();
    w.set("tokenizer.ggml.model", "gpt2")
        .set("tokenizer.ggml.tokens", Value::from(tokens(60_000)))
        .set("tokenizer.ggml.merges", Value::from(merges))
        .set("tokenizer.ggml.token_type", vec![1i32; 60_000])
        .set("tokenizer.chat_template", "{{ messages }}")
        .set("t.arr.after", Value::from(tokens(30_000)));
    w
}

fn read(
    bytes: &[u8],
    arrays: TokenizerArrays,
    file_size: Option<u64>,
) -> Result<GgufFile, GgufError> {
    let options = ReadOptions {
        file_name: Some("m.gguf".into()),
        file_size,
        tokenizer_arrays: arrays,
        ..ReadOptions::default()
    };
    GgufFile::read(bytes, &options)
}

/// `file` with every top-level array of a `tokenizer.*` key replaced by its count.
fn counted(file: &GgufFile) -> GgufFile {
    let entries = file.metadata.iter().map(|(key, value)| {
        let value = match value {
            Value::Array(a) if key.starts_with("tokenizer.") => Value::Array(Array::Counted {
                elem: a.elem_type(),
                len: a.len(),
            }),
            other => other.clone(),
        };
        (key.clone(), value)
    });
    GgufFile {
        metadata: rigdeck_gguf::Metadata::from_entries(entries.collect()),
        ..file.clone()
    }
}

#[test]
fn strings_across_the_read_buffer_come_back_whole() {
    let w = writer();
    let bytes = w.to_bytes().unwrap();
    assert!(bytes.len() > 1 << 20, "{} bytes", bytes.len());
    for size in [Some(bytes.len() as u64), None] {
        let file = read(&bytes, TokenizerArrays::Kept, size).unwrap();
        assert_eq!(&file.metadata[..], &w.metadata()[..]);
        let kept = file.metadata.get_arr("t.arr.after").unwrap().as_strings();
        assert_eq!(kept.unwrap().get(29_999), tokens(30_000).get(29_999));
    }
}

#[test]
fn counted_tokenizer_arrays_keep_their_type_and_length_only() {
    let w = writer();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    w.write_to_path(&path).unwrap();
    let kept = GgufFile::open(&path).unwrap();
    let only_counted = GgufFile::open_with(&path, TokenizerArrays::Counted).unwrap();
    assert_eq!(only_counted, counted(&kept));
    let md = &only_counted.metadata;
    assert_eq!(
        md.get_arr("tokenizer.ggml.tokens"),
        Some(&Array::Counted {
            elem: ValueType::String,
            len: 60_000
        })
    );
    assert_eq!(
        md.get_arr("tokenizer.ggml.token_type").map(Array::len),
        Some(60_000)
    );
    // Other keys' arrays and the tokenizer's strings are kept.
    assert_eq!(md.get_arr("t.arr.after").map(Array::len), Some(30_000));
    assert_eq!(
        md.get_str("tokenizer.chat_template"),
        Some("{{ messages }}")
    );
    assert!(md.get_arr("t.arr.after").unwrap().as_strings().is_some());

    let summary = |m: &GgufModel| serde_json::to_value(ModelSummary::from_model(m)).unwrap();
    let model = GgufModel::open_with(&path, TokenizerArrays::Counted).unwrap();
    assert_eq!(summary(&model), summary(&GgufModel::open(&path).unwrap()));
    assert_eq!(ModelSummary::from_model(&model).vocab_size, Some(60_000));
}

/// Damaged copies of `bytes` and the file size to read each with: cut inside the tokens, the
/// merges and the token types (read as a stream: with the size known the array's count is
/// refused first), and a string length forged past the limit and past the file inside the
/// tokens.
fn damaged(bytes: &[u8]) -> Vec<(Vec<u8>, Option<u64>)> {
    let tokens_at = find(bytes, b"tokenizer.ggml.tokens");
    let merges_at = find(bytes, b"tokenizer.ggml.merges");
    let types_at = find(bytes, b"tokenizer.ggml.token_type");
    let mut out: Vec<_> = [
        tokens_at + 300_000,
        tokens_at + 300_003,
        merges_at + 262_144,
        types_at + 100_001,
    ]
    .iter()
    .map(|&cut| (bytes[..cut].to_vec(), None))
    .collect();
    // The 10 000th token's length field, found by walking the lengths.
    let mut at = tokens_at + "tokenizer.ggml.tokens".len() + 4 + 4 + 8;
    for _ in 0..10_000 {
        at += 8 + u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    }
    for forged in [(64u64 << 20) + 1, bytes.len() as u64] {
        let mut b = bytes.to_vec();
        b[at..at + 8].copy_from_slice(&forged.to_le_bytes());
        out.push((b.clone(), None));
        out.push((b, Some(bytes.len() as u64)));
    }
    out
}

fn find(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

#[test]
fn damaged_arrays_fail_alike_kept_or_counted() {
    let bytes = writer().to_bytes().unwrap();
    for (case, (damaged, size)) in damaged(&bytes).iter().enumerate() {
        let kept = read(damaged, TokenizerArrays::Kept, *size).unwrap_err();
        let counted = read(damaged, TokenizerArrays::Counted, *size).unwrap_err();
        assert_eq!(kept.to_string(), counted.to_string(), "case {case}");
        assert_eq!(kept.offset, counted.offset, "case {case}");
        assert!(
            matches!(
                kept.kind,
                ErrorKind::Truncated { .. } | ErrorKind::StringTooLong { .. }
            ),
            "case {case}: {kept}"
        );
    }
}

#[test]
fn a_counted_array_is_not_written_back() {
    let bytes = writer().header_bytes().unwrap();
    let file = read(&bytes, TokenizerArrays::Counted, None).unwrap();
    let mut w = GgufWriter::new();
    for (key, value) in file.metadata.iter() {
        w.set(key, value.clone());
    }
    let e = w.header_bytes().unwrap_err();
    let message = e.to_string();
    assert!(message.contains("'tokenizer.ggml.tokens'"), "{message}");
    assert!(message.contains("kept"), "{message}");
}
