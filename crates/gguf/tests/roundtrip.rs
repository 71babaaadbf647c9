//! Write → read gives back the same metadata, tensors and offsets; summaries of the result.

mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::summary::{PerLayer, SlidingWindowPattern};
use rigdeck_gguf::{
    tensor_bytes, GgmlType, GgufFile, GgufModel, GgufWriter, ModelSummary, ReadOptions, TensorData,
    Value,
};

#[test]
fn every_metadata_type_round_trips_in_order() {
    let w = common::every_type_writer();
    let bytes = w.to_bytes().unwrap();
    let file = GgufFile::from_bytes(&bytes, Some("every.gguf")).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.file_name.as_deref(), Some("every.gguf"));
    // Same pairs, same order, same values (floats included, compared bitwise by PartialEq).
    assert_eq!(&file.metadata[..], &w.metadata()[..]);
    assert_eq!(file.metadata.get_u64("t.u64"), Some(u64::MAX));
    assert_eq!(file.metadata.get_i64("t.i64"), Some(i64::MIN));
    assert_eq!(file.metadata.get_str("t.string"), Some("héllo wörld"));
    assert_eq!(file.metadata.get_u32("t.u8"), Some(200));
    assert_eq!(file.metadata.get_bool("t.bool"), Some(true));
    assert_eq!(file.metadata.get_f32("t.f32"), Some(1.5));
    let nested = file.metadata.get_arr("t.arr.nested").unwrap();
    assert_eq!(nested.len(), 3);
}

#[test]
fn tensors_and_offsets_round_trip() {
    let w = common::every_type_writer();
    let bytes = w.to_bytes().unwrap();
    let file = GgufFile::from_bytes(&bytes, None).unwrap();
    let names: Vec<_> = file.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "token_embd.weight",
            "blk.0.attn_norm.weight",
            "blk.0.attn_q.weight",
            "blk.1.attn_q.weight",
            "output.weight",
            "scalar",
            "empty"
        ]
    );
    assert_eq!(file.alignment, 32);
    assert_eq!(file.data_offset % 32, 0);
    assert!(file.data_offset >= file.header_bytes);
    let mut expected_offset = 0;
    for t in &file.tensors {
        assert_eq!(
            t.size_bytes,
            tensor_bytes(t.ggml_type, &t.dims).unwrap(),
            "{}",
            t.name
        );
        assert_eq!(t.offset, expected_offset, "{}", t.name);
        assert_eq!(t.absolute_offset, file.data_offset + t.offset);
        expected_offset += t.size_bytes.div_ceil(32) * 32;
    }
    assert_eq!(bytes.len() as u64, file.data_offset + expected_offset);
    // The supplied bytes are where the header says.
    let norm = file.tensor("blk.0.attn_norm.weight").unwrap();
    let at = norm.absolute_offset as usize;
    assert_eq!(&bytes[at..at + 1024], &[7u8; 1024][..]);
    assert_eq!(file.tensor("scalar").unwrap().dims, Vec::<u64>::new());
    assert_eq!(file.tensor("empty").unwrap().size_bytes, 0);
}

#[test]
fn custom_alignment_and_version_2_round_trip() {
    let mut w = common::every_type_writer();
    w.set_alignment(4096).set_version(2);
    let file = GgufFile::from_bytes(&w.to_bytes().unwrap(), None).unwrap();
    assert_eq!(file.version, 2);
    assert_eq!(file.alignment, 4096);
    assert_eq!(file.data_offset % 4096, 0);
    assert!(file.tensors.iter().all(|t| t.offset % 4096 == 0));
}

#[test]
fn a_file_without_tensors_has_its_data_at_the_header_end() {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "none");
    let bytes = w.to_bytes().unwrap();
    let file = GgufFile::from_bytes(&bytes, None).unwrap();
    assert_eq!(file.data_offset, file.header_bytes);
    assert_eq!(file.header_bytes, bytes.len() as u64);
}

#[test]
fn written_to_a_path_it_reads_the_same_and_zero_data_is_sparse() {
    let dir = tempfile::tempdir().unwrap();
    let w = common::every_type_writer();
    let path = dir.path().join("m.gguf");
    let size = w.write_to_path(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes().unwrap());
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.file_size, Some(size));

    // 2 GiB of zero weights take no disk space.
    let mut big = GgufWriter::new();
    big.add_tensor("w", &[1 << 16, 1 << 14], GgmlType::F16, TensorData::Zeros);
    let big_path = dir.path().join("big.gguf");
    let size = big.write_to_path(&big_path).unwrap();
    let f = GgufFile::open(&big_path).unwrap();
    assert_eq!(size, f.data_offset + (1 << 31));
    assert_eq!(f.tensors[0].size_bytes, 1 << 31);
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let blocks = std::fs::metadata(&big_path).unwrap().blocks();
        assert!(blocks * 512 < 1 << 20, "{blocks} blocks allocated");
    }
}

#[test]
fn reading_from_a_plain_reader_without_a_size_works() {
    let bytes = common::every_type_writer().to_bytes().unwrap();
    let file = GgufFile::read(&bytes[..], &ReadOptions::default()).unwrap();
    assert_eq!(file.file_size, None);
    assert_eq!(file.tensors.len(), 7);
}

/// A source that hands out at most `step` bytes a call and is interrupted every other call,
/// as pipes and slow disks may be.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
    calls: usize,
}

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(2) {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        let n = self.step.min(out.len()).min(self.bytes.len());
        out[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn short_and_interrupted_reads_give_the_same_header() {
    let writer = MoeShape::small().writer();
    let bytes = writer.to_bytes().unwrap();
    let whole = GgufFile::from_bytes(&bytes, None).unwrap();
    for step in [1, 7, 4096, 300_000] {
        let source = Trickle {
            bytes: &bytes,
            step,
            calls: 0,
        };
        let read = GgufFile::read(source, &ReadOptions::default()).unwrap();
        assert_eq!(read.metadata, whole.metadata, "step {step}");
        assert_eq!(read.tensors, whole.tensors, "step {step}");
        assert_eq!(read.data_offset, whole.data_offset, "step {step}");
    }
}

#[test]
fn writer_refuses_partial_blocks_and_wrong_data_lengths() {
    let mut w = GgufWriter::new();
    w.add_tensor("w", &[100], GgmlType::Q4_K, TensorData::Zeros);
    let e = w.to_bytes().unwrap_err();
    assert!(
        e.to_string()
            .contains("not a multiple of the Q4_K block size 256"),
        "{e}"
    );
    let mut w = GgufWriter::new();
    w.add_tensor("w", &[4], GgmlType::F32, TensorData::Bytes(vec![0; 3]));
    let e = w.to_bytes().unwrap_err();
    assert!(
        e.to_string()
            .contains("needs 16 bytes of data but was given 3"),
        "{e}"
    );
}

#[test]
fn summary_of_a_dense_model() {
    let file =
        GgufFile::from_bytes(&common::every_type_writer().to_bytes().unwrap(), None).unwrap();
    let s = ModelSummary::from_file(&file);
    assert_eq!(s.architecture.as_deref(), Some("llama"));
    assert_eq!(s.name.as_deref(), Some("every type"));
    assert_eq!(s.layers, Some(2));
    assert_eq!(s.context_length, Some(4096));
    assert_eq!(s.head_count, Some(PerLayer::Uniform(4)));
    assert_eq!(s.head_count_kv, Some(PerLayer::PerLayer(vec![2, 4])));
    assert_eq!(s.vocab_size, Some(4));
    assert_eq!(s.experts, None);
    assert_eq!(s.mla, None);
    assert_eq!(s.tensor_count, 7);
    assert_eq!(s.parameter_count, 1024 + 256 + 2 * 65536 + 1024 + 1);
    assert_eq!(s.quantization[0].ggml_type, GgmlType::Q4_K);
    let total: u64 = s.quantization.iter().map(|q| q.bytes).sum();
    assert_eq!(total, s.tensor_bytes);
}

#[test]
fn summary_of_a_moe_model_with_mla_and_sliding_window() {
    let mut w = MoeShape::small().writer();
    w.set("glm-dsa.attention.sliding_window", 128u32).set(
        "glm-dsa.attention.sliding_window_pattern",
        vec![true, true, false, true],
    );
    let file = GgufFile::from_bytes(&w.to_bytes().unwrap(), Some("tiny.gguf")).unwrap();
    let s = ModelSummary::from_model(&GgufModel::from(file));
    assert_eq!(s.architecture.as_deref(), Some("glm-dsa"));
    assert_eq!(s.layers, Some(4));
    let experts = s.experts.clone().unwrap();
    assert_eq!(
        (experts.count, experts.used, experts.shared),
        (8, Some(2), Some(1))
    );
    assert_eq!(experts.leading_dense_blocks, Some(1));
    let mla = s.mla.clone().unwrap();
    assert!(mla.active);
    assert_eq!(mla.kv_lora_rank, Some(256));
    assert_eq!(mla.key_length_mla, Some(128));
    assert_eq!(s.key_length, Some(320));
    assert_eq!(s.head_count_kv, Some(PerLayer::Uniform(1)));
    assert_eq!(s.sliding_window, Some(128));
    assert_eq!(
        s.sliding_window_pattern,
        Some(SlidingWindowPattern::PerLayer(vec![
            true, true, false, true
        ]))
    );
    assert_eq!(s.vocab_size, Some(512));
    assert_eq!(s.file_type.as_ref().unwrap().label, "IQ2_XXS");
    let json = serde_json::to_value(&s).unwrap();
    let types: Vec<_> = s.quantization.iter().map(|q| q.ggml_type).collect();
    assert!(
        types.contains(&GgmlType::IQ2_XXS) && types.contains(&GgmlType::IQ2_XS),
        "{types:?}"
    );
    assert_eq!(
        json["quantization"][0]["ggml_type"],
        s.quantization[0].ggml_type.name()
    );
    assert_eq!(json["head_count_kv"], 1);
    assert_eq!(json["sliding_window_pattern"]["per_layer"][2], false);
}

#[test]
fn glm_shaped_fixture_has_the_advertised_shape() {
    let w = MoeShape::glm_5_2().writer();
    assert!(
        (1750..=1850).contains(&w.tensor_count()),
        "{}",
        w.tensor_count()
    );
    let header = w.header_bytes().unwrap();
    assert!(header.len() > 4 << 20, "header is {} bytes", header.len());
    let file = GgufFile::read(&header[..], &ReadOptions::default()).unwrap();
    let s = ModelSummary::from_file(&file);
    assert_eq!(s.layers, Some(78));
    assert_eq!(s.experts.unwrap().count, 256);
    assert_eq!(s.vocab_size, Some(154_880));
    // An IQ2-class model of roughly 750 B parameters: about 200 GB.
    assert!(
        (700e9..800e9).contains(&(s.parameter_count as f64)),
        "{}",
        s.parameter_count
    );
    assert!(
        (150e9..260e9).contains(&(s.tensor_bytes as f64)),
        "{}",
        s.tensor_bytes
    );
    assert!(matches!(
        file.get("glm-dsa.expert_count"),
        Some(Value::U32(256))
    ));
}
