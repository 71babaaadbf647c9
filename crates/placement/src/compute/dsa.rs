//! The DSA lightning indexer of `glm-dsa` (GLM-5.x, `src/models/glm-dsa.cpp`), which picks the
//! keys each token's MLA attention reads: on a "full" layer the indexer's queries (from the
//! compressed queries) and its one key (from the layer's normed input), roped and rotated, the
//! key cached, one score per cached key and token from the fused `ggml_lightning_indexer`, and
//! the best `top_k` keys selected; a "shared" layer reuses the last full layer's selection.

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{Builder, CacheKind, IndexerInputs};
use crate::model::ModelShape;

/// The indexer's shape, from the header.
pub(super) struct Indexer {
    heads: u64,
    /// Each indexer head's width, and its key's (`indexer.key_length`).
    width: u64,
    /// The keys each token keeps (`indexer.top_k`).
    top_k: u64,
    /// Per layer: an indexer of its own ("full") or the previous selection reused.
    full: Vec<bool>,
}

impl Indexer {
    /// `None` for a header whose indexer this graph does not build: no heads or keys selected,
    /// a width the Hadamard rotation does not cover (llama.cpp rotates by the largest power of
    /// two from 64 dividing it, which must be the whole width), a rope wider than the head, or
    /// a first layer without an indexer of its own (which llama.cpp refuses).
    pub(super) fn of(model: &ModelShape, rope: u64) -> Option<Indexer> {
        let attention = &model.attention;
        let width = u64::from(attention.indexer_key_length.iter().copied().max()?);
        let full: Vec<bool> = attention
            .indexer_key_length
            .iter()
            .map(|&w| w > 0)
            .collect();
        let indexer = Indexer {
            heads: u64::from(attention.indexer_heads),
            width,
            top_k: u64::from(attention.indexer_top_k),
            full,
        };
        let rotated = width >= 64 && width.is_power_of_two();
        let built = indexer.heads > 0
            && indexer.top_k > 0
            && rotated
            && rope <= width
            && indexer.full.first() == Some(&true);
        built.then_some(indexer)
    }

    /// Whether layer `il` makes its own selection (a full indexer layer).
    pub(super) fn selects(&self, il: usize) -> bool {
        self.full.get(il).copied().unwrap_or(false)
    }

    /// The width of the indexer's heads (its rotation is this square).
    pub(super) fn width(&self) -> u64 {
        self.width
    }

    /// The keys layer `il` attends to (`[top-k, tokens per stream, 1, streams]` I32): on a full
    /// layer the indexer's selection over `normed` (the layer's normed input) and `queries` (the
    /// normed compressed queries), its key written to the indexer cache at once; on a shared
    /// layer `previous`, or when the full layer is on another device, the selection received
    /// (a copy for each shared layer).
    pub(super) fn select(
        &self,
        b: &mut Builder,
        inputs: IndexerInputs,
        il: usize,
        [normed, queries]: [TensorId; 2],
        previous: Option<TensorId>,
    ) -> TensorId {
        // The indexer's mask spans its cache's cells.
        let cells = b.graph.extents(inputs.mask)[0];
        let streams = b.batch.streams;
        let per_stream = b.batch.tokens / streams;
        let selected = [self.top_k.min(cells), per_stream, 1, streams];
        if !self.selects(il) {
            // Each shared layer reads its own view of the selection: made on another device,
            // each view is copied here apart.
            return match previous {
                Some(made_here) if !b.graph.is_input(made_here) => {
                    let strides = b.graph.strides(made_here);
                    b.graph.view(made_here, selected, strides)
                }
                _ => b.graph.input(Element::I32, selected),
            };
        }
        let [q, k] = self.rotated_query_and_key(b, inputs, normed, queries);
        let tokens = b.batch.tokens;
        let flat = b.graph.reshape(k, [self.width, tokens, 1, 1]);
        let cache = b.graph.external(Element::F16, [self.width, cells, 1, 1]);
        let written = b.graph.write_rows(cache, flat, inputs.key_rows);
        b.cache_written(written);
        b.graph.expand(written);
        let weights = b.matmul(self.heads, normed);
        let keys = b.cache_read([self.width, 1, cells, streams], CacheKind::Key);
        let [q_0, q_1, q_2, q_3] = b.graph.strides(q);
        let q = b.graph.view(
            q,
            [self.width, self.heads, per_stream, streams],
            [q_0, q_1, q_2, q_3 / streams],
        );
        let [w_0, w_1, w_2, w_3] = b.graph.strides(weights);
        let by_stream = [self.heads, per_stream, 1, streams];
        let weights = b
            .graph
            .view(weights, by_stream, [w_0, w_1, w_2 / streams, w_3 / streams]);
        let scaled = b.op(Reuse::InPlace, by_stream, &[weights]);
        let scores = b.op(
            Reuse::Fresh,
            [cells, per_stream, 1, streams],
            &[q, keys, scaled, inputs.mask],
        );
        let best = b.graph.op(Reuse::Fresh, Element::I32, selected, &[scores]);
        b.graph.op(Reuse::Fresh, Element::I32, selected, &[best])
    }

    /// The indexer's queries `[width, heads, tokens]` from `queries` and its key `[width, 1,
    /// tokens]` from `normed` (layer-normed with a bias), both roped, then rotated.
    fn rotated_query_and_key(
        &self,
        b: &mut Builder,
        inputs: IndexerInputs,
        normed: TensorId,
        queries: TensorId,
    ) -> [TensorId; 2] {
        let tokens = b.batch.tokens;
        let q = b.matmul(self.heads * self.width, queries);
        let q = b.graph.reshape(q, [self.width, self.heads, tokens, 1]);
        let q = b.rope(q);
        let k = b.matmul(self.width, normed);
        let k = b.layer_norm(k);
        let bias = b.weight([self.width, 1, 1, 1]);
        let k = b.elementwise(k, &[bias]);
        let k = b.graph.reshape(k, [self.width, 1, tokens, 1]);
        let k = b.rope(k);
        [q, k].map(|x| {
            let ne = b.graph.extents(x);
            b.op(Reuse::Fresh, ne, &[inputs.rotation, x])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::compute_estimate_note;
    use crate::plan::plan;
    use crate::testing::{gpus, shape_of_writer, GIB};
    use crate::{DeviceId, ModelShape, PlacementOptions};
    use rigdeck_gguf::fixtures::MoeShape;

    fn glm_dsa() -> ModelShape {
        shape_of_writer(&MoeShape::small().writer()).expect("the fixture reads")
    }

    #[test]
    fn a_glm_dsa_file_is_replayed_where_llama_cpp_would_build_its_indexer() {
        let model = glm_dsa();
        assert_eq!(compute_estimate_note(&model), None);
        // A head the Hadamard rotation does not cover whole (llama.cpp rotates 64 of 96).
        let mut odd = model.clone();
        for width in odd.attention.indexer_key_length.iter_mut() {
            *width = if *width > 0 { 96 } else { 0 };
        }
        let note = compute_estimate_note(&odd).expect("the formulas' note");
        assert!(note.contains("glm-dsa"), "{note}");
        // A first layer reusing a selection no layer made (llama.cpp refuses the file).
        let mut shared_first = model.clone();
        shared_first.attention.indexer_key_length[0] = 0;
        assert!(compute_estimate_note(&shared_first).is_some());
    }

    #[test]
    fn a_hostile_indexer_header_plans_as_too_big() {
        // Replayed with saturating sizes: the formulas, which count one score per key and not
        // the indexer's heads, would call it small.
        let mut model = glm_dsa();
        model.attention.indexer_heads = u32::MAX;
        let plan = plan(&model, &gpus(1, 80 * GIB), &PlacementOptions::default()).unwrap();
        let gpu = &plan.device(DeviceId::Gpu(0)).unwrap().usage;
        assert!(gpu.compute_estimate_bytes > 80 * GIB, "{gpu:?}");
        assert!(!plan.fits());
    }
}
