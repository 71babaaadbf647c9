//! The graph llama.cpp reserves for `mamba` and `mamba2` (`src/models/mamba.cpp`, whose graph
//! `mamba2` shares; `build_mamba_layer` and `build_mamba2_layer` in `mamba-base.cpp`): per layer
//! the input projection, the causal convolution over each sequence's stored columns, the
//! selective scan reading each sequence's state and writing the output and the final state in
//! one tensor, the gate and the output projection (Mamba-2: after a norm over each group;
//! FalconMamba, `ssm.dt_b_c_rms`: the scan's dt, B and C RMS-normed); tensor by tensor.

use super::allocator::{Reuse, TensorId};
use super::builder::{contiguous_strides, replay, Batch, Builder, HostInputs};
use super::scheduler::Scheduler;
use crate::kv::ContextGeometry;
use crate::layers::LayerDevices;
use crate::model::{ModelShape, RecurrentKind, RecurrentShape};
use crate::options::{DeviceId, PlacementOptions};

/// Which of llama.cpp's two Mamba layers the graph builds.
#[derive(Clone, Copy)]
enum Layer {
    /// `build_mamba_layer`: x and z projected, dt, B and C projected from the convolved x.
    Selective,
    /// `build_mamba2_layer`: z, x, B, C and dt in one projection, per-head scan parameters, the
    /// gated output normed over each group.
    Grouped,
}

/// The scan's shape and layer for a header this graph reads: `mamba` without weights on norms
/// of dt, B and C (FalconMamba's weightless ones, `ssm.dt_b_c_rms`, are built), or `mamba2`
/// whose heads and groups divide the inner width; every layer recurrent.
fn scan(model: &ModelShape) -> Option<(RecurrentShape, Layer)> {
    let attention = &model.attention;
    let shape = attention
        .recurrent
        .filter(|r| r.kind == RecurrentKind::Mamba)?;
    let layer = match model.architecture.as_str() {
        "mamba" => {
            let normed = model
                .tensors
                .iter()
                .any(|t| t.name.contains(".ssm_dt_norm"));
            (!normed).then_some(Layer::Selective)?
        }
        "mamba2" => {
            let divides = |n: u32| n > 0 && shape.inner_size % n == 0;
            (divides(shape.time_step_rank) && divides(shape.group_count))
                .then_some(Layer::Grouped)?
        }
        _ => return None,
    };
    let all_recurrent = (0..model.n_layer as usize).all(|il| attention.is_recurrent(il));
    let sized = shape.conv_kernel > 1 && shape.inner_size > 0 && shape.state_size > 0;
    (all_recurrent && sized).then_some((shape, layer))
}

/// Whether [`compute_bytes`] builds `model`'s graph.
pub(super) fn replays(model: &ModelShape) -> bool {
    scan(model).is_some()
}

/// The compute buffer of `device` for a `mamba` or `mamba2` model, or `None` for another one.
pub(super) fn compute_bytes(
    model: &ModelShape,
    device: DeviceId,
    layers: &LayerDevices,
    g: &ContextGeometry,
    (options, scheduler): (&PlacementOptions, &Scheduler),
) -> Option<u64> {
    let (shape, kind) = scan(model)?;
    replay(
        model,
        device,
        layers,
        g,
        options,
        (HostInputs::Decoder, scheduler),
        |mut builder, held, holds_output| {
            let mut cur = builder.decoder_inputs(model, held, options, g);
            for &il in held {
                builder.begin_layer(il);
                let normed = builder.rms_norm(cur);
                let mut mixed = match kind {
                    Layer::Selective => layer(&mut builder, shape, normed),
                    Layer::Grouped => grouped_layer(&mut builder, shape, normed),
                };
                let mut residual = cur;
                if let (true, Some(rows)) = (il + 1 == model.n_layer as usize, builder.output_rows)
                {
                    let ne = [builder.n_embd, builder.batch.outputs, 1, 1];
                    mixed = builder.op(Reuse::Fresh, ne, &[mixed, rows]);
                    residual = builder.op(Reuse::Fresh, ne, &[residual, rows]);
                }
                cur = builder.elementwise(mixed, &[residual]);
            }
            builder.finish(cur, holds_output, |b, x| {
                let normed = b.rms_norm(x);
                b.logits(normed);
            })
        },
    )
}

/// `build_mamba_layer` over the normed input `x` (`[n_embd, tokens]`); `[n_embd, tokens]` out.
fn layer(b: &mut Builder, shape: RecurrentShape, x: TensorId) -> TensorId {
    let Batch {
        tokens,
        sequences,
        per_sequence,
        ..
    } = b.batch;
    let inner = u64::from(shape.inner_size);
    let state = u64::from(shape.state_size);
    let rank = u64::from(shape.time_step_rank);
    let kept = u64::from(shape.conv_kernel) - 1;
    let n_embd = b.n_embd;
    let conv = b.recurrent_state(shape.conv_state_elements());
    let conv = b.graph.reshape(conv, [kept, inner, sequences, 1]);
    let x = b.graph.reshape(x, [n_embd, per_sequence, sequences, 1]);
    let xz = b.matmul(2 * inner, x);
    let strides = b.graph.strides(xz);
    let xs = b
        .graph
        .view(xz, [inner, per_sequence, sequences, 1], strides);
    let z = b
        .graph
        .view(xz, [inner, per_sequence, sequences, 1], strides);
    let convolved = convolve(b, shape, conv, xs);
    // The scan's parameters: dt (projected to every channel), B and C.
    let x_db = b.matmul(rank + 2 * state, convolved);
    let db_strides = b.graph.strides(x_db);
    let dt = b
        .graph
        .view(x_db, [rank, per_sequence, sequences, 1], db_strides);
    let row = db_strides[1];
    let bc = [state, 1, per_sequence, sequences];
    let bc_strides = [4, 4 * state, row, row * per_sequence];
    let big_b = b.graph.view(x_db, bc, bc_strides);
    let big_c = b.graph.view(x_db, bc, bc_strides);
    // dt made contiguous, or (FalconMamba) dt, B and C RMS-normed without weights.
    let [dt, big_b, big_c] = if shape.normed_scan_parameters {
        [dt, big_b, big_c].map(|x| {
            let ne = b.graph.extents(x);
            b.op(Reuse::InPlace, ne, &[x])
        })
    } else {
        let dt = b.op(Reuse::Fresh, [rank, per_sequence, sequences, 1], &[dt]);
        [dt, big_b, big_c]
    };
    let dt = b.matmul(inner, dt);
    let dt_bias = b.weight([inner, 1, 1, 1]);
    let dt = b.elementwise(dt, &[dt_bias]);
    let scanned_x = b
        .graph
        .reshape(convolved, [1, inner, per_sequence, sequences]);
    let ssm_cache = b.cache([state, 1, inner, sequences]);
    let a = b.weight([state, inner, 1, 1]);
    let ids = b.state_copy.unwrap_or(ssm_cache);
    let y_ssm = b.op(
        Reuse::Fresh,
        [inner * tokens + state * inner * sequences, 1, 1, 1],
        &[ssm_cache, scanned_x, dt, a, big_b, big_c, ids],
    );
    b.graph.expand(y_ssm);
    let final_states = b.graph.view(
        y_ssm,
        [state * inner * sequences, 1, 1, 1],
        contiguous_strides([state * inner * sequences, 1, 1, 1]),
    );
    let ssm_store = b.cache([state * inner * sequences, 1, 1, 1]);
    let stored = b.graph.copy(final_states, ssm_store);
    b.graph.expand(stored);
    let y = b.graph.view(
        y_ssm,
        [inner, per_sequence, sequences, 1],
        contiguous_strides([inner, per_sequence, sequences, 1]),
    );
    let d = b.weight([inner, 1, 1, 1]);
    let skip = b.elementwise(convolved, &[d]);
    let y = b.elementwise(y, &[skip]);
    let z = b.op(Reuse::Fresh, [inner, per_sequence, sequences, 1], &[z]);
    let gated = b.op(Reuse::Fresh, [inner, per_sequence, sequences, 1], &[z, y]);
    let out = b.matmul(n_embd, gated);
    b.graph.reshape(out, [n_embd, tokens, 1, 1])
}

/// `build_mamba2_layer` over the normed input `x` (`[n_embd, tokens]`); `[n_embd, tokens]` out.
fn grouped_layer(b: &mut Builder, shape: RecurrentShape, x: TensorId) -> TensorId {
    let Batch {
        tokens,
        sequences,
        per_sequence,
        ..
    } = b.batch;
    let inner = u64::from(shape.inner_size);
    let state = u64::from(shape.state_size);
    let groups = u64::from(shape.group_count);
    let heads = u64::from(shape.time_step_rank);
    let head_dim = inner / heads;
    let channels = shape.conv_channels();
    let kept = u64::from(shape.conv_kernel) - 1;
    let per_head = [head_dim, heads, per_sequence, sequences];
    let conv = b.recurrent_state(shape.conv_state_elements());
    let conv = b.graph.reshape(conv, [kept, channels, sequences, 1]);
    // z, x, B, C and dt in one projection, split per sequence.
    let width = inner + channels + heads;
    let projected = b.matmul(width, x);
    let zxbcdt = b
        .graph
        .reshape(projected, [width, per_sequence, sequences, 1]);
    let nb = b.graph.strides(zxbcdt);
    let z = b
        .graph
        .view(zxbcdt, per_head, [nb[0], head_dim * nb[0], nb[1], nb[2]]);
    let rows = |ne0: u64| {
        (
            [ne0, per_sequence, sequences, 1],
            [nb[0], nb[1], nb[2], nb[3]],
        )
    };
    let (xbc_ne, xbc_nb) = rows(channels);
    let xbc = b.graph.view(zxbcdt, xbc_ne, xbc_nb);
    let (dt_ne, dt_nb) = rows(heads);
    let dt = b.graph.view(zxbcdt, dt_ne, dt_nb);
    // The convolution runs over x, B and C together.
    let convolved = convolve(b, shape, conv, xbc);
    // x, B and C: views of the convolved channels.
    let cnb = b.graph.strides(convolved);
    let xs = b.graph.view(
        convolved,
        per_head,
        [cnb[0], head_dim * cnb[0], cnb[1], cnb[2]],
    );
    let bc = [state, groups, per_sequence, sequences];
    let bc_strides = [cnb[0], state * cnb[0], cnb[1], cnb[2]];
    let big_b = b.graph.view(convolved, bc, bc_strides);
    let big_c = b.graph.view(convolved, bc, bc_strides);
    let dt = b.op(Reuse::Fresh, dt_ne, &[dt]);
    let dt_bias = b.weight([heads, 1, 1, 1]);
    let dt = b.elementwise(dt, &[dt_bias]);
    let ssm_cache = b.cache([state, head_dim, heads, sequences]);
    let a = b.weight([1, heads, 1, 1]);
    let ids = b.state_copy.unwrap_or(ssm_cache);
    let y_ssm = b.op(
        Reuse::Fresh,
        [inner * tokens + state * inner * sequences, 1, 1, 1],
        &[ssm_cache, xs, dt, a, big_b, big_c, ids],
    );
    b.graph.expand(y_ssm);
    let final_states = b.graph.view(
        y_ssm,
        [state * inner, sequences, 1, 1],
        contiguous_strides([state * inner, sequences, 1, 1]),
    );
    let ssm_store = b.cache([state * inner, sequences, 1, 1]);
    let stored = b.graph.copy(final_states, ssm_store);
    b.graph.expand(stored);
    let y = b.graph.view(y_ssm, per_head, contiguous_strides(per_head));
    let d = b.weight([1, heads, 1, 1]);
    let skip = b.elementwise(xs, &[d]);
    let y = b.elementwise(y, &[skip]);
    let z = b.op(Reuse::Fresh, per_head, &[z]);
    let gated = b.op(Reuse::Fresh, per_head, &[z, y]);
    let grouped = b
        .graph
        .reshape(gated, [inner / groups, groups, per_sequence, sequences]);
    let normed = b.rms_norm(grouped);
    let flat = b.graph.reshape(normed, [inner, tokens, 1, 1]);
    b.matmul(b.n_embd, flat)
}

/// The causal convolution over `x` (`[channels, per_sequence, sequences]`, a view of the input
/// projection) after `conv`, each sequence's stored columns: the stored columns, then this
/// batch's, the last ones written back; the kernel, its bias and SiLU. `[channels,
/// per_sequence, sequences]` out.
fn convolve(b: &mut Builder, shape: RecurrentShape, conv: TensorId, x: TensorId) -> TensorId {
    let Batch {
        sequences,
        per_sequence,
        ..
    } = b.batch;
    let channels = shape.conv_channels();
    let kept = u64::from(shape.conv_kernel) - 1;
    let transposed = b.graph.permute(x, [1, 0, 2, 3]);
    let conv_x = b.op(
        Reuse::Fresh,
        [kept + per_sequence, channels, sequences, 1],
        &[conv, transposed],
    );
    let last = b.graph.view(
        conv_x,
        [kept, channels, sequences, 1],
        b.graph.strides(conv_x),
    );
    let conv_cache = b.cache([shape.conv_state_elements(), sequences, 1, 1]);
    let written = b.graph.copy(last, conv_cache);
    b.graph.expand(written);
    let kernel = b.weight([kept + 1, channels, 1, 1]);
    let convolved = b.op(
        Reuse::Fresh,
        [channels, per_sequence, sequences, 1],
        &[conv_x, kernel],
    );
    let bias = b.weight([channels, 1, 1, 1]);
    let convolved = b.elementwise(convolved, &[bias]);
    b.elementwise(convolved, &[])
}
