//! The planner on a real GGUF header: a synthetic split model shaped like GLM-5.2 (78 layers,
//! 256 experts with 8 active, MLA), written by our writer as sparse files, read back and placed
//! on the 4× RTX 3090 rig of seed 002.

use rigdeck_gguf::fixtures::MoeShape;
use rigdeck_placement::flags::parse_command;
use rigdeck_placement::from_gguf::load_shape;
use rigdeck_placement::report::report;
use rigdeck_placement::rig::{preset, Margins};
use rigdeck_placement::{DeviceId, PlacementOptions, TensorRole};

fn write_glm(dir: &std::path::Path) -> std::path::PathBuf {
    let paths = MoeShape::glm_5_2()
        .writer()
        .write_split(dir, "GLM-5.2-IQ2", 6)
        .expect("fixture written");
    paths[2].clone()
}

#[test]
fn a_split_glm_reads_as_one_model_with_its_moe_and_mla_shape() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load_shape(&write_glm(dir.path())).unwrap();
    let shape = &loaded.shape;
    assert_eq!(shape.n_layer, 78);
    assert!(shape.tensors.len() > 1500, "{}", shape.tensors.len());
    let experts = shape.experts.unwrap();
    assert_eq!((experts.count, experts.used), (256, 8));
    assert!(shape.attention.mla);
    assert_eq!(shape.attention.head_count_kv[10], 1);
    let expert_layers = shape
        .tensors
        .iter()
        .filter(|t| t.role == TensorRole::Experts)
        .filter_map(|t| t.layer)
        .collect::<std::collections::BTreeSet<_>>();
    assert_eq!(expert_layers.len(), 75, "layers 3–77 are MoE");
    assert_eq!(loaded.summary.shard_count, 6);
}

#[test]
fn automatic_placement_fits_the_4x3090_rig_and_writes_flags_that_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_glm(dir.path());
    let loaded = load_shape(&path).unwrap();
    let devices = preset("4x3090").unwrap().devices(&Margins::default());
    let base = PlacementOptions {
        context: 131_072,
        cache_type_k: rigdeck_placement::KvType::Q8_0,
        cache_type_v: rigdeck_placement::KvType::Q8_0,
        threads: Some(12),
        ..Default::default()
    };
    let r = report(
        &loaded.shape,
        &path.display().to_string(),
        &devices,
        &base,
        true,
    )
    .unwrap();
    assert!(r.fits, "{:?}", r.problems);
    let x1 = r.plan.device(DeviceId::Gpu(3)).unwrap();
    assert!(
        x1.usage.layers.is_empty(),
        "the x1 card stays out of the split"
    );
    for g in 0..3 {
        assert!(
            !r.plan
                .device(DeviceId::Gpu(g))
                .unwrap()
                .usage
                .expert_layers
                .is_empty(),
            "GPU {g} keeps some experts"
        );
    }
    let line = r.command_line.clone().unwrap();
    let reread = parse_command(&line).unwrap();
    let again = report(
        &loaded.shape,
        &path.display().to_string(),
        &devices,
        &reread.options,
        false,
    )
    .unwrap();
    assert_eq!(again.plan, r.plan);
    // MLA K cache at 128K with q8_0: 78 × 576 × 1.0625 B × 131 072 ≈ 5.9 GiB (seed: "~6 GB").
    let kv: u64 = r.plan.devices.iter().map(|d| d.usage.kv_bytes).sum();
    let gib = kv as f64 / (1u64 << 30) as f64;
    assert!(gib > 5.0 && gib < 8.0, "{gib}");
}
