//! Split models: found from any part, merged, checked.

mod common;

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_gguf::{
    ErrorKind, GgmlType, GgufFile, GgufModel, GgufWriter, MissingParts, ModelSummary, SplitName,
    TensorData, Value,
};
use std::path::Path;

fn write_split(dir: &Path, n: u16) -> Vec<std::path::PathBuf> {
    MoeShape::small()
        .writer()
        .write_split(dir, "tiny-Q2", n)
        .unwrap()
}

#[test]
fn any_part_opens_the_whole_model() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_split(dir.path(), 3);
    let names: Vec<_> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "tiny-Q2-00001-of-00003.gguf",
            "tiny-Q2-00002-of-00003.gguf",
            "tiny-Q2-00003-of-00003.gguf"
        ]
    );
    let whole = MoeShape::small().writer();
    let whole = GgufFile::from_bytes(&whole.to_bytes().unwrap(), None).unwrap();
    for path in &paths {
        let model = GgufModel::open(path).unwrap();
        assert_eq!(model.shards.len(), 3);
        assert_eq!(model.tensors.len(), whole.tensors.len());
        // Tensors in order, each in its part, with the part's offsets.
        for (t, w) in model.tensors.iter().zip(&whole.tensors) {
            assert_eq!(
                (&t.info.name, &t.info.dims, t.info.ggml_type),
                (&w.name, &w.dims, w.ggml_type)
            );
        }
        assert_eq!(model.tensors.first().unwrap().shard, 0);
        assert_eq!(model.tensors.last().unwrap().shard, 2);
        let in_part_2: Vec<_> = model.tensors.iter().filter(|t| t.shard == 1).collect();
        assert_eq!(in_part_2[0].info.offset, 0);
        // Metadata from the first part, including its split keys.
        assert_eq!(
            model.metadata.get_str("general.architecture"),
            Some("glm-dsa")
        );
        assert_eq!(model.metadata.get_u64("split.count"), Some(3));
        assert_eq!(model.parameter_count(), whole.parameter_count());
        let sizes: u64 = paths
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert_eq!(model.file_size(), Some(sizes));
    }
    let s = ModelSummary::from_model(&GgufModel::open(&paths[1]).unwrap());
    assert_eq!(s.shard_count, 3);
    assert_eq!(s.layers, Some(4));
}

#[test]
fn parts_beyond_the_first_hold_only_split_keys() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_split(dir.path(), 3);
    let second = GgufFile::open(&paths[1]).unwrap();
    let keys: Vec<_> = second.metadata.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["split.no", "split.count", "split.tensors.count"]);
    assert!(matches!(second.get("split.no"), Some(Value::U16(1))));
    assert!(matches!(
        second.get("split.tensors.count"),
        Some(Value::I32(_))
    ));
}

#[test]
fn an_unsplit_file_is_a_one_part_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plain.gguf");
    common::every_type_writer().write_to_path(&path).unwrap();
    let model = GgufModel::open(&path).unwrap();
    assert_eq!(model.shards.len(), 1);
    assert_eq!(model.tensors.len(), 7);
}

#[test]
fn a_missing_part_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_split(dir.path(), 4);
    std::fs::remove_file(&paths[2]).unwrap();
    std::fs::remove_file(&paths[3]).unwrap();
    let e = GgufModel::open(&paths[0]).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::MissingShards { .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("but 'tiny-Q2-00003-of-00004.gguf', 'tiny-Q2-00004-of-00004.gguf' are not in"),
        "{msg}"
    );
    assert!(
        msg.ends_with("download every part of the model into the same folder"),
        "{msg}"
    );
}

#[test]
fn parts_that_disagree_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let shards = MoeShape::small().writer().split(3).unwrap();
    let write = |shards: &[GgufWriter]| {
        for (i, s) in shards.iter().enumerate() {
            s.write_to_path(dir.path().join(format!("m-{:05}-of-00003.gguf", i + 1)))
                .unwrap();
        }
        GgufModel::open(dir.path().join("m-00001-of-00003.gguf")).unwrap_err()
    };

    let mut bad = shards.clone();
    bad[1].set("split.no", Value::U16(2));
    let e = write(&bad);
    assert!(
        e.to_string()
            .contains("says it is part 3 (split.no 2), but its file name makes it part 2"),
        "{e}"
    );
    assert!(e.file.unwrap().ends_with("m-00002-of-00003.gguf"));

    let mut bad = shards.clone();
    bad[2].set("split.count", Value::U16(4));
    assert!(write(&bad)
        .to_string()
        .contains("says split.count 4, but 3 parts were found"));

    let mut bad = shards.clone();
    bad[0].set("split.tensors.count", Value::I32(5));
    let e = write(&bad);
    assert!(
        e.to_string()
            .contains("says the model has 5 tensors (split.tensors.count)"),
        "{e}"
    );
    assert!(
        e.to_string().ends_with("re-download the model's parts"),
        "{e}"
    );

    // The same tensor in two parts (the counts made consistent so that this is what fails).
    let mut bad = shards;
    bad[2].add_tensor(
        "blk.0.attn_norm.weight",
        &[256],
        GgmlType::F32,
        TensorData::Zeros,
    );
    let total: usize = bad.iter().map(GgufWriter::tensor_count).sum();
    for s in &mut bad {
        s.set("split.tensors.count", Value::I32(total as i32));
    }
    let e = write(&bad);
    assert!(matches!(e.kind, ErrorKind::DuplicateTensor { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("has tensor 'blk.0.attn_norm.weight' twice"),
        "{e}"
    );
}

#[test]
fn a_part_renamed_out_of_the_pattern_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let paths = write_split(dir.path(), 2);
    let renamed = dir.path().join("first-part.gguf");
    std::fs::rename(&paths[0], &renamed).unwrap();
    let e = GgufModel::open(&renamed).unwrap_err();
    assert!(
        e.to_string()
            .contains("says it is part of a 2-part split model"),
        "{e}"
    );
}

#[test]
fn a_name_promising_65535_parts_is_reported_as_a_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x-00001-of-65535.gguf");
    std::fs::write(&path, b"").unwrap();
    let e = GgufModel::open(&path).unwrap_err();
    let ErrorKind::MissingShards { missing, .. } = &e.kind else {
        panic!("{e}");
    };
    assert_eq!(missing.total(), 65534);
    assert_eq!(missing.ranges, vec![(2, 65535)]);
    let msg = e.to_string();
    assert!(
        msg.contains(
            "but 65534 of 65535 parts ('x-00002-of-65535.gguf' … 'x-65535-of-65535.gguf') are not in"
        ),
        "{msg}"
    );
    assert!(msg.len() < 400, "{msg}");
}

#[test]
fn a_name_promising_more_parts_than_llama_cpp_can_write_is_no_split_name() {
    assert_eq!(SplitName::parse("x-00001-of-4000000000.gguf"), None);
    assert_eq!(SplitName::parse("x-00001-of-65536.gguf"), None);
    assert_eq!(
        SplitName::parse("x-00001-of-65535.gguf").map(|s| s.count),
        Some(65535)
    );
    // Opened as the one file it is: a zero-byte file is not GGUF, and nothing else is looked for.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x-00001-of-4000000000.gguf");
    std::fs::write(&path, b"").unwrap();
    let e = GgufModel::open(&path).unwrap_err();
    assert!(!matches!(e.kind, ErrorKind::MissingShards { .. }), "{e}");
}

#[test]
fn missing_parts_between_present_ones_are_separate_ranges() {
    let present = [1u32, 5, 9];
    let missing = MissingParts::find("m", 12, |n| present.contains(&n));
    assert_eq!(missing.ranges, vec![(2, 4), (6, 8), (10, 12)]);
    assert_eq!(missing.total(), 9);
    assert_eq!(
        missing.to_string(),
        "9 of 12 parts ('m-00002-of-00012.gguf' … 'm-00004-of-00012.gguf'; 'm-00006-of-00012.gguf' … \
         'm-00008-of-00012.gguf'; 'm-00010-of-00012.gguf' … 'm-00012-of-00012.gguf') are"
    );
}
