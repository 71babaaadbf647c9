//! What Gemma 3n and Gemma 4 build alike (`src/models/gemma3n.cpp`, `gemma4.cpp`): the
//! attention with per-head norms and V RMS-normed, each layer's own token embeddings (looked up
//! on the host, projected in from the embeddings), and last layers that read an earlier layer's
//! cache instead of keeping one.

use super::allocator::{Element, Reuse, TensorId};
use super::builder::{layer_heads, Builder};
use crate::kv::ContextGeometry;
use crate::model::ModelShape;
use crate::options::PlacementOptions;

/// Layer `il`'s attention over its `normed` input: Q with its per-head norm and RoPE; K (and V
/// its own projection, or K's again where `value_projection` is false) normed, K roped;
/// [`Builder::attend`] (or, on a layer that keeps no cache, [`Builder::attend_shared`]); the
/// output projection.
pub(super) fn attention(
    b: &mut Builder,
    model: &ModelShape,
    (il, value_projection): (usize, bool),
    normed: TensorId,
    (options, g): (&PlacementOptions, &ContextGeometry),
) -> TensorId {
    let tokens = b.batch.tokens;
    let (head, heads, kv_heads) = layer_heads(model, il);
    let q = b.matmul(head * heads, normed);
    let q = b.graph.reshape(q, [head, heads, tokens, 1]);
    let q = b.rms_norm(q);
    let q = b.rope(q);
    let n_embd = b.n_embd;
    if !model.attention.has_kv(il) {
        let attended = b.attend_shared(model, il, q, options, g);
        return b.matmul(n_embd, attended);
    }
    let k = b.matmul(head * kv_heads, normed);
    let v = if value_projection {
        b.matmul(head * kv_heads, normed)
    } else {
        k
    };
    let [k, v] = [k, v].map(|x| b.graph.reshape(x, [head, kv_heads, tokens, 1]));
    let k = b.rms_norm(k);
    let v = b.op(Reuse::InPlace, [head, kv_heads, tokens, 1], &[v]);
    let k = b.rope(k);
    let attended = b.attend(model, il, [q, k, v], options, g);
    b.matmul(n_embd, attended)
}

/// The width of each layer's own token embedding (`per_layer_proj_norm`'s), when the model
/// has them.
pub(super) fn per_layer_width(model: &ModelShape) -> Option<u64> {
    model
        .tensors
        .iter()
        .find(|t| t.name == "per_layer_proj_norm.weight")
        .map(|t| t.elements)
        .filter(|&width| width > 0)
}

/// `build_inp_per_layer` and `project_per_layer_inputs`: each layer's token embeddings looked
/// up on the host (with a token input of their own) and scaled, the scaled embeddings `scaled`
/// projected to every layer's width, scaled, normed, added to them and scaled; `[width, tokens,
/// layers]` made contiguous out.
pub(super) fn per_layer_inputs(
    b: &mut Builder,
    width: u64,
    n_layer: u64,
    scaled: TensorId,
) -> TensorId {
    let looked_up = b.looked_up_per_layer(width, n_layer);
    let looked_up = b.elementwise(looked_up, &[]);
    b.graph.expand(looked_up);
    projected_per_layer(b, width, looked_up, scaled)
}

/// The rest of [`per_layer_inputs`] after the lookup: the scaled embeddings `scaled` projected
/// to every layer's width, scaled, normed, added to the scaled lookup `looked_up` and scaled;
/// `[width, tokens, layers]` made contiguous out.
pub(super) fn projected_per_layer(
    b: &mut Builder,
    width: u64,
    looked_up: TensorId,
    scaled: TensorId,
) -> TensorId {
    let tokens = b.batch.tokens;
    let n_layer = b.graph.extents(looked_up)[1];
    let projected = b.matmul(width * n_layer, scaled);
    let projected = b.elementwise(projected, &[]);
    let projected = b.graph.reshape(projected, [width, n_layer, tokens, 1]);
    let projected = b.rms_norm(projected);
    let summed = b.elementwise(projected, &[looked_up]);
    let summed = b.elementwise(summed, &[]);
    let permuted = b.graph.permute(summed, [0, 2, 1, 3]);
    b.op(Reuse::Fresh, [width, tokens, n_layer, 1], &[permuted])
}

/// A layer's own embedding gated by `x`: `x` projected to the embedding's `width`, GELU, times
/// this layer's slice of `embedded` (received, a copy of that slice alone, when made on another
/// device), projected back to the embedding width and normed.
pub(super) fn own_embedding(
    b: &mut Builder,
    x: TensorId,
    embedded: Option<TensorId>,
    width: u64,
) -> TensorId {
    let tokens = b.batch.tokens;
    let gate = b.matmul(width, x);
    let gate = b.elementwise(gate, &[]);
    let slice = match embedded {
        Some(all) => {
            let strides = b.graph.strides(all);
            let nb = [4, strides[1], strides[2], strides[2]];
            b.graph.view(all, [width, tokens, 1, 1], nb)
        }
        None => b.input(Element::F32, [width, tokens, 1, 1]),
    };
    let gated = b.elementwise(gate, &[slice]);
    let n_embd = b.n_embd;
    let projected = b.matmul(n_embd, gated);
    b.rms_norm(projected)
}
