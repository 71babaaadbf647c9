#!/usr/bin/env python3
"""Writes a GGUF model header with the gguf-py package of the pinned llama.cpp tree, so that the
planner is checked on files its own writer did not make. The tensor data is left as a hole in a
sparse file: `llama-fit-params` reads only the header.

Usage: write_model.py GGUF_PY_DIR OUT.gguf SPEC_JSON

SPEC_JSON keys: arch (deepseek4, gemma, gemma2, gemma3, gemma-embedding, gemma3n, gemma4, gemma4-assistant, minimax-m2, minimax-m3, qwen2, qwen3, qwen3moe, llama, phi3, command-r,
deepseek2, glm-dsa, gpt-oss, mamba, mamba2), n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, and optionally context_length,
sliding_window (gemma2, gemma3, gpt-oss), sliding_window_pattern (gemma3: a list of booleans, one
per layer), soft_caps (gemma2: [attention logits, final logits]), experts, experts_used, expert_ff, expert_groups ([groups, groups kept]), tied (no output
tensor: the embedding is reused).
deepseek2 (MLA, the cache holding the latent and the roped key) also takes mla = {q_lora_rank
(0: one Q projection), kv_lora_rank, rope, nope, v_head}, dense_lead (leading layers with a
dense feed-forward), shared_experts, sigmoid (gating with a selection bias), weights_scale,
weights_norm (default true); head_dim and n_head_kv are then the cache's (kv_lora_rank + rope,
1). With mla.absorbed false the file is of the older conversion without key_length_mla: one
attn_kv_b decompression, full K (nope + rope) and V (v_head) per head cached (n_head_kv =
n_head).
glm-dsa takes deepseek2's keys (q_lora_rank non-zero) and indexer = {heads, head_size, top_k,
types (optional: one flag per layer, true for a layer with its own indexer, false for one reusing
the previous selection)}: the DSA lightning indexer's projections on each full layer.
gpt-oss: biases on Q, K, V, the output, the router and every expert, attention sinks, a norm
after the attention.
phi3: one fused QKV projection and one up projection twice n_ff wide (gate and up together).
command-r: layer norms, the attention and the feed-forward side by side on one norm, the output
tied to the embedding, a logit scale.
mamba takes ssm = {d_conv, d_inner, d_state, dt_rank, dt_b_c_rms (optional: FalconMamba's RMS
norms over dt, B and C, weightless)} (n_head, n_head_kv, head_dim and n_ff are unused: give 0).
mamba2 takes ssm = {d_conv, d_inner, d_state, dt_rank (the heads), n_group}: one projection to
z, x, B, C and dt, the convolution over x, B and C, per-head A, D and dt bias, the gated output's
norm over each group.
minimax-m2: Q and K normed over all their heads at once, partial rotary (rope: the rotated
width), routed experts n_ff wide chosen by sigmoid gating over a selection bias.
minimax-m3: MiniMax-M2's attention with per-head norms, dense_lead leading dense layers, then
routed experts (expert_ff wide, sigmoid gating over a selection bias, weights_scale) beside
shared_experts, and on those layers the sparse attention's indexer = {heads (one per KV head), head_size, top_k
(blocks), block_size, local_blocks}.
gemma4 takes head_dim and n_head_kv for its full-attention layers and head_dim_swa and n_head_kv_swa
for its sliding ones, sliding_window and sliding_window_pattern (required), k_eq_v (the full
layers have no V projection: V is K's, as Gemma 4's larger models), and optionally experts,
experts_used, expert_ff (every layer's routed experts beside its dense feed-forward, n_ff wide, as
the 26B-A4B), fused_gate_up (one ffn_gate_up_exps per layer), expert_scales (a per-expert scale on
the down projection), layer_scale (a scalar per layer) and soft_caps ([0, final logits]); the
smaller models' per_layer (the width of each layer's own token embedding, as E2B's and E4B's 256)
and shared_kv_layers (the last layers, reading the cache of the last sliding or full layer
before them, their feed-forward twice n_ff wide).
deepseek4 (DeepSeek V4: one 512-wide KV head with sinks, Q through a low-rank projection, the
output through grouped low-rank projections, hyper-connections over hc streams) takes q_lora_rank,
o_groups, o_lora_rank, rope, hc (the streams), compress_ratios (one per layer: 0, 4 with the
indexer, or 128), indexer = {heads, head_size, top_k}, hash_layers (the first layers, routed by
token id), sliding_window, experts, experts_used, expert_ff and shared_experts.
gemma4-assistant (Gemma 4's draft head: Q alone over its target's cache, each layer's output
scaled, projections from and to the target's width) takes gemma4's attention keys and target
(the target's embedding width); every block is a next-token-prediction block.
gemma-embedding (EmbeddingGemma: gemma3's layers, attention over the micro-batch alone, no cache)
takes gemma3's keys, and optionally pooling (none, mean, cls, last) and dense ([width]: the
sentence-transformers projections after the final norm, n_embd to width and back).
gemma3n takes gemma3's keys (sliding_window and sliding_window_pattern required) and gives every
layer what Gemma 3n's layers load: AltUp's four streams (predict and correct coefficients, router
and its norm, the scale of the corrected stream; the projections in and out beside the output),
Laurel's rank-64 low-rank path, each layer's own 256-wide token embedding; llama.cpp caches the
first 20 layers, later ones read theirs (shared_kv_layers is written as n_layer - 20).
"""

import json
import sys

import numpy as np

# What llama.cpp's Gemma 3n takes as fixed (`llama_hparams`, `llama_model_gemma3n`): AltUp's
# streams, Laurel's rank, each layer's own embedding width, the layers with a cache of their own.
GEMMA3N_ALTUP, GEMMA3N_LAUREL_RANK, GEMMA3N_PER_LAYER, GEMMA3N_CACHED_LAYERS = 4, 64, 256, 20


def main() -> None:
    gguf_py, out, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    sys.path.insert(0, gguf_py)
    import gguf  # noqa: E402  (the pinned tree's package, not an installed one)

    arch = spec["arch"]
    writer = gguf.GGUFWriter(out, arch)
    describe(writer, gguf, spec)
    vocabulary(writer, spec["n_vocab"])
    for name, shape, dtype in tensors(gguf, spec):
        itemsize = np.dtype(dtype).itemsize
        writer.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * itemsize)
    write_sparse(writer)


def describe(writer, gguf, spec) -> None:
    writer.add_context_length(spec.get("context_length", 131072))
    writer.add_embedding_length(spec["n_embd"])
    writer.add_block_count(spec["n_layer"])
    gemma4 = spec["arch"] in ("gemma4", "gemma4-assistant")
    if not gemma4 or not spec.get("shared_kv_layers"):
        writer.add_feed_forward_length(spec["n_ff"])
    writer.add_head_count(spec["n_head"])
    if not gemma4:
        writer.add_head_count_kv(spec["n_head_kv"])
    if "ssm" in spec:
        ssm = spec["ssm"]
        writer.add_ssm_conv_kernel(ssm["d_conv"])
        writer.add_ssm_inner_size(ssm["d_inner"])
        writer.add_ssm_state_size(ssm["d_state"])
        writer.add_ssm_time_step_rank(ssm["dt_rank"])
        if "n_group" in ssm:
            writer.add_ssm_group_count(ssm["n_group"])
        if ssm.get("dt_b_c_rms"):
            writer.add_ssm_dt_b_c_rms(True)
    elif gemma4:
        gemma4_attention(writer, spec)
    elif "mla" not in spec:
        writer.add_key_length(spec["head_dim"])
        writer.add_value_length(spec["head_dim"])
        writer.add_rope_dimension_count(spec.get("rope", spec["head_dim"]))
    writer.add_layer_norm_rms_eps(1e-6)
    if spec["arch"] == "command-r":
        writer.add_layer_norm_eps(1e-5)
        writer.add_logit_scale(0.0625)
    if "soft_caps" in spec:
        writer.add_attn_logit_softcapping(spec["soft_caps"][0])
        writer.add_final_logit_softcapping(spec["soft_caps"][1])
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if "sliding_window" in spec:
        writer.add_sliding_window(spec["sliding_window"])
        if "sliding_window_pattern" in spec:
            writer.add_sliding_window_pattern(spec["sliding_window_pattern"])
    if "mla" in spec:
        mla = spec["mla"]
        if mla.get("absorbed", True):
            writer.add_key_length(mla["kv_lora_rank"] + mla["rope"])
            writer.add_value_length(mla["kv_lora_rank"])
            writer.add_key_length_mla(mla["nope"] + mla["rope"])
            writer.add_value_length_mla(mla["v_head"])
        else:
            writer.add_key_length(mla["nope"] + mla["rope"])
            writer.add_value_length(mla["v_head"])
        writer.add_rope_dimension_count(mla["rope"])
        writer.add_kv_lora_rank(mla["kv_lora_rank"])
        if mla["q_lora_rank"]:
            writer.add_q_lora_rank(mla["q_lora_rank"])
        writer.add_leading_dense_block_count(spec.get("dense_lead", 0))
        writer.add_expert_shared_count(spec.get("shared_experts", 0))
        writer.add_expert_weights_scale(spec.get("weights_scale", 1.0))
        writer.add_expert_weights_norm(spec.get("weights_norm", True))
        gating = gguf.ExpertGatingFuncType
        writer.add_expert_gating_func(gating.SIGMOID if spec.get("sigmoid") else gating.SOFTMAX)
    if "indexer" in spec:
        indexer = spec["indexer"]
        writer.add_indexer_head_count(indexer["heads"])
        writer.add_indexer_key_length(indexer["head_size"])
        writer.add_indexer_top_k(indexer["top_k"])
        if "types" in indexer:
            writer.add_indexer_types(indexer["types"])
    if spec["arch"] == "deepseek4":
        deepseek4_header(writer, gguf, spec)
    if spec["arch"] == "gemma-embedding":
        gemma_embedding_header(writer, gguf, spec)
    if spec["arch"] == "gemma4-assistant":
        writer.add_embedding_length_out(spec["target"])
        writer.add_nextn_predict_layers(spec["n_layer"])
    if spec["arch"] == "gemma3n":
        writer.add_shared_kv_layers(max(spec["n_layer"] - GEMMA3N_CACHED_LAYERS, 0))
        writer.add_altup_active_idx(0)
        writer.add_altup_num_inputs(GEMMA3N_ALTUP)
        writer.add_embedding_length_per_layer_input(GEMMA3N_PER_LAYER)
    if spec["arch"] in ("minimax-m2", "minimax-m3"):
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if spec["arch"] == "minimax-m3":
        indexer = spec["indexer"]
        writer.add_leading_dense_block_count(spec.get("dense_lead", 0))
        writer.add_expert_shared_count(spec.get("shared_experts", 1))
        writer.add_expert_weights_scale(spec.get("weights_scale", 1.0))
        writer.add_expert_weights_norm(True)
        writer.add_indexer_block_size(indexer["block_size"])
        writer.add_indexer_local_blocks(indexer["local_blocks"])
    if "experts" in spec:
        writer.add_expert_count(spec["experts"])
        writer.add_expert_used_count(spec["experts_used"])
        if "expert_ff" in spec:
            writer.add_expert_feed_forward_length(spec["expert_ff"])
        if "expert_groups" in spec:
            writer.add_expert_group_count(spec["expert_groups"][0])
            writer.add_expert_group_used_count(spec["expert_groups"][1])


def vocabulary(writer, n_vocab: int) -> None:
    """A SentencePiece-style vocabulary: unknown, BOS, EOS, the 256 byte tokens, then words."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"w{i}" for i in range(n_vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)


def tensors(gguf, spec):
    """(name, numpy shape (outermost first), element type) of every tensor the family loads."""
    arch = spec["arch"]
    T = gguf.MODEL_TENSOR
    name = lambda t, bid=None, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=bid)}.{kind}"
    e, v, ff = spec["n_embd"], spec["n_vocab"], spec["n_ff"]
    q = spec["n_head"] * spec["head_dim"]
    kv = spec["n_head_kv"] * spec["head_dim"]
    out = [(name(T.TOKEN_EMBD), (v, e), np.float16), (name(T.OUTPUT_NORM), (e,), np.float32)]
    if not spec.get("tied", False):
        out.append((name(T.OUTPUT), (v, e), np.float16))
    if arch in ("deepseek2", "glm-dsa"):
        return out + [t for il in range(spec["n_layer"]) for t in mla_layer(gguf, spec, il)]
    if arch == "gpt-oss":
        return out + [t for il in range(spec["n_layer"]) for t in gpt_oss_layer(gguf, spec, il)]
    if arch == "mamba":
        return out + [t for il in range(spec["n_layer"]) for t in mamba_layer(gguf, spec, il)]
    if arch == "mamba2":
        return out + [t for il in range(spec["n_layer"]) for t in mamba2_layer(gguf, spec, il)]
    if arch == "minimax-m3":
        return out + [t for il in range(spec["n_layer"]) for t in minimax_m3_layer(gguf, spec, il)]
    if arch == "deepseek4":
        hc, e_hc = spec["hc"], spec["hc"] * e
        out += [
            (name(T.HC_HEAD_FN), (hc, e_hc), np.float32),
            (name(T.HC_HEAD_BASE), (hc,), np.float32),
            (name(T.HC_HEAD_SCALE), (1,), np.float32),
        ]
        return out + [t for il in range(spec["n_layer"]) for t in deepseek4_layer(gguf, spec, il)]
    if arch == "gemma-embedding" and "dense" in spec:
        out += [
            (name(T.DENSE_2_OUT), (spec["dense"], e), np.float16),
            (name(T.DENSE_3_OUT), (e, spec["dense"]), np.float16),
        ]
    if arch == "gemma3n":
        ple, alt = GEMMA3N_PER_LAYER * spec["n_layer"], GEMMA3N_ALTUP - 1
        out += [
            (name(T.ALTUP_PROJ), (alt, e, e), np.float16),
            (name(T.ALTUP_UNEMBD_PROJ), (alt, e, e), np.float16),
            (name(T.PER_LAYER_TOKEN_EMBD), (v, ple), np.float16),
            (name(T.PER_LAYER_MODEL_PROJ), (ple, e), np.float16),
            (name(T.PER_LAYER_PROJ_NORM), (GEMMA3N_PER_LAYER,), np.float32),
        ]
        return out + [t for il in range(spec["n_layer"]) for t in gemma3n_layer(gguf, spec, il)]
    if arch == "gemma4-assistant":
        target = spec["target"]
        out += [
            (name(T.ROPE_FREQS), (spec["head_dim"] // 2,), np.float32),
            (name(T.NEXTN_PROJ_PRE), (e, 2 * target), np.float16),
            (name(T.NEXTN_PROJ_POST), (target, e), np.float16),
        ]
        return out + [t for il in range(spec["n_layer"]) for t in assistant_layer(gguf, spec, il)]
    if arch == "gemma4":
        out.append((name(T.ROPE_FREQS), (spec["head_dim"] // 2,), np.float32))
        if spec.get("per_layer"):
            ple = spec["per_layer"] * spec["n_layer"]
            out += [
                (name(T.PER_LAYER_TOKEN_EMBD), (v, ple), np.float16),
                (name(T.PER_LAYER_MODEL_PROJ), (ple, e), np.float16),
                (name(T.PER_LAYER_PROJ_NORM), (spec["per_layer"],), np.float32),
            ]
        return out + [t for il in range(spec["n_layer"]) for t in gemma4_layer(gguf, spec, il)]
    for il in range(spec["n_layer"]):
        if arch == "command-r":
            out += [
                (name(T.ATTN_NORM, il), (e,), np.float32),
                (name(T.ATTN_Q, il), (q, e), np.float16),
                (name(T.ATTN_K, il), (kv, e), np.float16),
                (name(T.ATTN_V, il), (kv, e), np.float16),
                (name(T.ATTN_OUT, il), (e, q), np.float16),
                (name(T.FFN_GATE, il), (ff, e), np.float16),
                (name(T.FFN_UP, il), (ff, e), np.float16),
                (name(T.FFN_DOWN, il), (e, ff), np.float16),
            ]
            continue
        if arch == "phi3":
            attn = [(name(T.ATTN_QKV, il), (q + 2 * kv, e), np.float16)]
            if spec.get("separate_qkv"):
                attn = [
                    (name(T.ATTN_Q, il), (q, e), np.float16),
                    (name(T.ATTN_K, il), (kv, e), np.float16),
                    (name(T.ATTN_V, il), (kv, e), np.float16),
                ]
            out += attn + [
                (name(T.ATTN_NORM, il), (e,), np.float32),
                (name(T.ATTN_OUT, il), (e, q), np.float16),
                (name(T.FFN_NORM, il), (e,), np.float32),
                (name(T.FFN_UP, il), (2 * ff, e), np.float16),
                (name(T.FFN_DOWN, il), (e, ff), np.float16),
            ]
            continue
        out += [
            (name(T.ATTN_NORM, il), (e,), np.float32),
            (name(T.ATTN_Q, il), (q, e), np.float16),
            (name(T.ATTN_K, il), (kv, e), np.float16),
            (name(T.ATTN_V, il), (kv, e), np.float16),
            (name(T.ATTN_OUT, il), (e, q), np.float16),
            (name(T.FFN_NORM, il), (e,), np.float32),
        ]
        if arch == "qwen2":
            out += [
                (name(T.ATTN_Q, il, "bias"), (q,), np.float32),
                (name(T.ATTN_K, il, "bias"), (kv,), np.float32),
                (name(T.ATTN_V, il, "bias"), (kv,), np.float32),
            ]
        if arch in ("gemma3", "gemma-embedding", "qwen3", "qwen3moe"):
            out += [
                (name(T.ATTN_Q_NORM, il), (spec["head_dim"],), np.float32),
                (name(T.ATTN_K_NORM, il), (spec["head_dim"],), np.float32),
            ]
        if arch == "minimax-m2":
            out += [
                (name(T.ATTN_Q_NORM, il), (q,), np.float32),
                (name(T.ATTN_K_NORM, il), (kv,), np.float32),
                (name(T.FFN_EXP_PROBS_B, il, "bias"), (spec["experts"],), np.float32),
            ]
        if arch in ("gemma2", "gemma3", "gemma-embedding"):
            out += [
                (name(T.ATTN_POST_NORM, il), (e,), np.float32),
                (name(T.FFN_POST_NORM, il), (e,), np.float32),
            ]
        if "experts" in spec:
            n, w = spec["experts"], spec.get("expert_ff", ff)
            out += [
                (name(T.FFN_GATE_INP, il), (n, e), np.float32),
                (name(T.FFN_GATE_EXP, il), (n, w, e), np.float16),
                (name(T.FFN_UP_EXP, il), (n, w, e), np.float16),
                (name(T.FFN_DOWN_EXP, il), (n, e, w), np.float16),
            ]
        else:
            out += [
                (name(T.FFN_GATE, il), (ff, e), np.float16),
                (name(T.FFN_UP, il), (ff, e), np.float16),
                (name(T.FFN_DOWN, il), (e, ff), np.float16),
            ]
    return out


def minimax_m3_layer(gguf, spec, il):
    """A MiniMax-M3 layer as `llama_model_minimax_m3::load_arch_tensors` reads it: the attention
    with per-head Q and K norms, then a leading layer's dense feed-forward, or routed experts
    with a selection bias beside the shared expert and the sparse attention's indexer."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}.{kind}"
    e, head = spec["n_embd"], spec["head_dim"]
    q, kv = spec["n_head"] * head, spec["n_head_kv"] * head
    out = normed_attention(name, T, e, (q, kv, head)) + [(name(T.FFN_NORM), (e,), np.float32)]
    if il < spec.get("dense_lead", 0):
        return out + dense_feed_forward(name, T, e, spec["n_ff"])
    n, w = spec["experts"], spec["expert_ff"]
    shared = w * spec.get("shared_experts", 1)
    size = spec["indexer"]["head_size"]
    return out + [
        (name(T.FFN_GATE_INP), (n, e), np.float32),
        (name(T.FFN_EXP_PROBS_B, "bias"), (n,), np.float32),
        (name(T.FFN_GATE_EXP), (n, w, e), np.float16),
        (name(T.FFN_UP_EXP), (n, w, e), np.float16),
        (name(T.FFN_DOWN_EXP), (n, e, w), np.float16),
        (name(T.FFN_GATE_SHEXP), (shared, e), np.float16),
        (name(T.FFN_UP_SHEXP), (shared, e), np.float16),
        (name(T.FFN_DOWN_SHEXP), (e, shared), np.float16),
        (name(T.INDEXER_Q_PROJ), (spec["indexer"]["heads"] * size, e), np.float32),
        (name(T.INDEXER_K_PROJ), (size, e), np.float32),
        (name(T.INDEXER_Q_NORM), (size,), np.float32),
        (name(T.INDEXER_K_NORM), (size,), np.float32),
    ]


def gemma4_attention(writer, spec) -> None:
    """Gemma 4's heads: full-attention layers `head_dim` wide with `n_head_kv` KV heads, sliding
    ones `head_dim_swa` wide with `n_head_kv_swa` (one KV head count per layer)."""
    pattern = spec["sliding_window_pattern"]
    writer.add_head_count_kv([spec["n_head_kv_swa"] if swa else spec["n_head_kv"] for swa in pattern])
    writer.add_key_length(spec["head_dim"])
    writer.add_value_length(spec["head_dim"])
    writer.add_key_length_swa(spec["head_dim_swa"])
    writer.add_value_length_swa(spec["head_dim_swa"])
    writer.add_rope_dimension_count(spec["head_dim"])
    writer.add_rope_dimension_count_swa(spec["head_dim_swa"])
    shared = spec.get("shared_kv_layers", 0)
    writer.add_shared_kv_layers(shared)
    writer.add_embedding_length_per_layer_input(spec.get("per_layer", 0))
    if shared:
        first_shared = spec["n_layer"] - shared
        writer.add_feed_forward_length(
            [spec["n_ff"] * (2 if il >= first_shared else 1) for il in range(spec["n_layer"])]
        )


def gemma_embedding_header(writer, gguf, spec) -> None:
    """EmbeddingGemma's pooling and its sentence-transformers projections' widths, as llama.cpp's
    converter writes them (`EmbeddingGemma.set_gguf_parameters`)."""
    if "pooling" in spec:
        writer.add_pooling_type(gguf.PoolingType[spec["pooling"].upper()])
    if "dense" in spec:
        writer.add_dense_features_dims("dense_2", spec["n_embd"], spec["dense"])
        writer.add_dense_features_dims("dense_3", spec["dense"], spec["n_embd"])


def deepseek4_header(writer, gguf, spec) -> None:
    """DeepSeek V4's keys as `conversion/deepseek.py` writes them."""
    n = spec["n_layer"]
    writer.add_q_lora_rank(spec["q_lora_rank"])
    writer.add_expert_shared_count(spec["shared_experts"])
    writer.add_expert_weights_scale(1.5)
    writer.add_expert_weights_norm(True)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SQRTSOFTPLUS)
    writer.add_swiglu_clamp_exp([10.0] * n)
    writer.add_swiglu_clamp_shexp([10.0] * n)
    writer.add_attention_output_group_count(spec["o_groups"])
    writer.add_attention_output_lora_rank(spec["o_lora_rank"])
    writer.add_attention_compress_ratios(spec["compress_ratios"])
    writer.add_attention_compress_rope_freq_base(160_000.0)
    writer.add_hyper_connection_count(spec["hc"])
    writer.add_hyper_connection_sinkhorn_iterations(20)
    writer.add_hyper_connection_epsilon(1e-6)
    writer.add_hash_layer_count(spec["hash_layers"])
    writer.add_embedding_length_out(spec["n_embd"] * spec["hc"])


def deepseek4_layer(gguf, spec, il):
    """A DeepSeek V4 layer as `llama_model_deepseek4::load_arch_tensors` reads it: the
    attention (sinks, low-rank Q, one KV head, grouped low-rank output), the hyper-connections'
    mixes, the compressor of a compressed layer (and on a ratio-4 layer the indexer's), the
    router (by token id on the hash layers, else with a selection bias), routed and shared
    experts."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}.{kind}"
    e, head, heads, r = spec["n_embd"], spec["head_dim"], spec["n_head"], spec["q_lora_rank"]
    groups, rank, hc = spec["o_groups"], spec["o_lora_rank"], spec["hc"]
    mix = (2 + hc) * hc
    out = [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.ATTN_SINKS), (heads,), np.float32),
        (name(T.ATTN_Q_A), (r, e), np.float16),
        (name(T.ATTN_Q_A_NORM), (r,), np.float32),
        (name(T.ATTN_Q_B), (heads * head, r), np.float16),
        (name(T.ATTN_KV), (head, e), np.float16),
        (name(T.ATTN_KV_NORM), (head,), np.float32),
        (name(T.ATTN_OUT_A), (groups * rank, heads * head // groups), np.float16),
        (name(T.ATTN_OUT_B), (e, groups * rank), np.float16),
        (name(T.HC_ATTN_FN), (mix, hc * e), np.float32),
        (name(T.HC_ATTN_BASE), (mix,), np.float32),
        (name(T.HC_ATTN_SCALE), (3,), np.float32),
        (name(T.HC_FFN_FN), (mix, hc * e), np.float32),
        (name(T.HC_FFN_BASE), (mix,), np.float32),
        (name(T.HC_FFN_SCALE), (3,), np.float32),
    ]
    ratio = spec["compress_ratios"][il]
    if ratio:
        coff = 2 if ratio == 4 else 1
        out += [
            (name(T.ATTN_COMPRESSOR_WKV), (coff * head, e), np.float16),
            (name(T.ATTN_COMPRESSOR_WGATE), (coff * head, e), np.float16),
            (name(T.ATTN_COMPRESSOR_APE), (ratio, coff * head), np.float32),
            (name(T.ATTN_COMPRESSOR_NORM), (head,), np.float32),
        ]
    if ratio == 4:
        ih, iw = spec["indexer"]["heads"], spec["indexer"]["head_size"]
        out += [
            (name(T.INDEXER_PROJ), (ih, e), np.float16),
            (name(T.INDEXER_ATTN_Q_B), (ih * iw, r), np.float16),
            (name(T.INDEXER_COMPRESSOR_WKV), (2 * iw, e), np.float16),
            (name(T.INDEXER_COMPRESSOR_WGATE), (2 * iw, e), np.float16),
            (name(T.INDEXER_COMPRESSOR_APE), (ratio, 2 * iw), np.float32),
            (name(T.INDEXER_COMPRESSOR_NORM), (iw,), np.float32),
        ]
    n, used, w = spec["experts"], spec["experts_used"], spec["expert_ff"]
    shared = w * spec["shared_experts"]
    out.append((name(T.FFN_GATE_INP), (n, e), np.float16))
    if il < spec["hash_layers"]:
        out.append((name(T.FFN_GATE_TID2EID), (spec["n_vocab"], used), np.int32))
    else:
        out.append((name(T.FFN_EXP_PROBS_B, kind="bias"), (n,), np.float32))
    return out + [
        (name(T.FFN_NORM), (e,), np.float32),
        (name(T.FFN_GATE_EXP), (n, w, e), np.float16),
        (name(T.FFN_DOWN_EXP), (n, e, w), np.float16),
        (name(T.FFN_UP_EXP), (n, w, e), np.float16),
        (name(T.FFN_GATE_SHEXP), (shared, e), np.float16),
        (name(T.FFN_DOWN_SHEXP), (e, shared), np.float16),
        (name(T.FFN_UP_SHEXP), (shared, e), np.float16),
    ]


def gemma3n_layer(gguf, spec, il):
    """A Gemma 3n layer as `llama_model_gemma3n::load_arch_tensors` reads it: Gemma 3's attention
    (Q, K and V on every layer, used or not) and feed-forward with their norms, AltUp's
    coefficients, router and scale, Laurel's two projections and norm, the gate and projection of
    the layer's own embedding."""
    T = gguf.MODEL_TENSOR
    name = lambda t: f"{gguf.TENSOR_NAMES[t].format(bid=il)}.weight"
    e, ff, head, n = spec["n_embd"], spec["n_ff"], spec["head_dim"], GEMMA3N_ALTUP
    q, kv, w = spec["n_head"] * head, spec["n_head_kv"] * head, GEMMA3N_PER_LAYER
    return normed_attention(name, T, e, (q, kv, head)) + post_normed(name, T, e, ff) + [
        (name(T.PER_LAYER_INP_GATE), (w, e), np.float16),
        (name(T.PER_LAYER_PROJ), (e, w), np.float16),
        (name(T.PER_LAYER_POST_NORM), (e,), np.float32),
        (name(T.ALTUP_CORRECT_COEF), (n, n), np.float32),
        (name(T.ALTUP_CORRECT_SCALE), (e,), np.float32),
        (name(T.ALTUP_PREDICT_COEF), (n * n, n), np.float32),
        (name(T.ALTUP_ROUTER), (n, e), np.float16),
        (name(T.ALTUP_ROUTER_NORM), (e,), np.float32),
        (name(T.LAUREL_L), (GEMMA3N_LAUREL_RANK, e), np.float16),
        (name(T.LAUREL_R), (e, GEMMA3N_LAUREL_RANK), np.float16),
        (name(T.LAUREL_POST_NORM), (e,), np.float32),
    ]


def gemma4_layer(gguf, spec, il):
    """A Gemma 4 layer as `llama_model_gemma4::load_arch_tensors` reads it: Q, K (and V, but on
    a full layer of a k_eq_v model) with per-head norms, the norms after the attention and the
    feed-forward, the dense feed-forward, and the routed experts beside it with their router's
    scale and their own norms."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}.{kind}"
    e, ff = spec["n_embd"], spec["n_ff"]
    swa = spec["sliding_window_pattern"][il]
    head = spec["head_dim_swa"] if swa else spec["head_dim"]
    kv = head * (spec["n_head_kv_swa"] if swa else spec["n_head_kv"])
    q = spec["n_head"] * head
    shared = il >= spec["n_layer"] - spec.get("shared_kv_layers", 0)
    if shared:
        ff *= 2
    out = [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.ATTN_Q), (q, e), np.float16),
        (name(T.ATTN_OUT), (e, q), np.float16),
        (name(T.ATTN_Q_NORM), (head,), np.float32),
    ] + post_normed(name, T, e, ff)
    if not shared:
        out += [
            (name(T.ATTN_K), (kv, e), np.float16),
            (name(T.ATTN_K_NORM), (head,), np.float32),
        ]
        if swa or not spec.get("k_eq_v"):
            out.append((name(T.ATTN_V), (kv, e), np.float16))
    if spec.get("per_layer"):
        out += [
            (name(T.PER_LAYER_INP_GATE), (spec["per_layer"], e), np.float16),
            (name(T.PER_LAYER_PROJ), (e, spec["per_layer"]), np.float16),
            (name(T.PER_LAYER_POST_NORM), (e,), np.float32),
        ]
    if spec.get("layer_scale"):
        out.append((name(T.LAYER_OUT_SCALE), (1,), np.float32))
    if "experts" not in spec:
        return out
    n, w = spec["experts"], spec["expert_ff"]
    out += [
        (name(T.FFN_GATE_INP), (n, e), np.float16),
        (name(T.FFN_GATE_INP, "scale"), (e,), np.float32),
        (name(T.FFN_PRE_NORM_2), (e,), np.float32),
        (name(T.FFN_POST_NORM_1), (e,), np.float32),
        (name(T.FFN_POST_NORM_2), (e,), np.float32),
        (name(T.FFN_DOWN_EXP), (n, e, w), np.float16),
    ]
    if spec.get("fused_gate_up"):
        out.append((name(T.FFN_GATE_UP_EXP), (n, 2 * w, e), np.float16))
    else:
        out += [
            (name(T.FFN_GATE_EXP), (n, w, e), np.float16),
            (name(T.FFN_UP_EXP), (n, w, e), np.float16),
        ]
    if spec.get("expert_scales"):
        out.append((name(T.FFN_DOWN_EXP, "scale"), (n,), np.float32))
    return out


def assistant_layer(gguf, spec, il):
    """A Gemma 4 assistant's layer as `llama_model_gemma4_assistant::load_arch_tensors` reads it:
    Q and its per-head norm (K and V are the target's cache), the output projection, the norms
    after the attention and the feed-forward, the dense feed-forward, the output's scale."""
    T = gguf.MODEL_TENSOR
    name = lambda t: f"{gguf.TENSOR_NAMES[t].format(bid=il)}.weight"
    e = spec["n_embd"]
    head = spec["head_dim_swa"] if spec["sliding_window_pattern"][il] else spec["head_dim"]
    q = spec["n_head"] * head
    return [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.ATTN_Q), (q, e), np.float16),
        (name(T.ATTN_OUT), (e, q), np.float16),
        (name(T.ATTN_Q_NORM), (head,), np.float32),
        (name(T.LAYER_OUT_SCALE), (1,), np.float32),
    ] + post_normed(name, T, e, spec["n_ff"])


def normed_attention(name, T, e, widths):
    """A layer's norm, Q, K, V and output projections and the per-head norms of Q and K
    (`widths`: Q's, K's and V's, and a head's)."""
    q, kv, head = widths
    return [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.ATTN_Q), (q, e), np.float16),
        (name(T.ATTN_K), (kv, e), np.float16),
        (name(T.ATTN_V), (kv, e), np.float16),
        (name(T.ATTN_OUT), (e, q), np.float16),
        (name(T.ATTN_Q_NORM), (head,), np.float32),
        (name(T.ATTN_K_NORM), (head,), np.float32),
    ]


def post_normed(name, T, e, ff):
    """Gemma's norm after the attention, then its feed-forward (`ff` wide) between a norm
    before and one after."""
    return (
        [(name(T.ATTN_POST_NORM), (e,), np.float32), (name(T.FFN_NORM), (e,), np.float32)]
        + dense_feed_forward(name, T, e, ff)
        + [(name(T.FFN_POST_NORM), (e,), np.float32)]
    )


def dense_feed_forward(name, T, e, ff):
    """A leading dense layer's gate, up and down projections, `ff` wide."""
    return [
        (name(T.FFN_GATE), (ff, e), np.float16),
        (name(T.FFN_UP), (ff, e), np.float16),
        (name(T.FFN_DOWN), (e, ff), np.float16),
    ]


def mla_layer(gguf, spec, il):
    """A deepseek2 or glm-dsa layer: the low-rank Q (or one Q projection), the latent KV with its
    roped key, the absorbed K and V decompressions per head, a glm-dsa full layer's indexer, then
    a dense feed-forward (the leading layers) or routed experts with shared ones."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}.{kind}"
    e, h, mla = spec["n_embd"], spec["n_head"], spec["mla"]
    q_lora, kv_lora, rope, nope = mla["q_lora_rank"], mla["kv_lora_rank"], mla["rope"], mla["nope"]
    out = [(name(T.ATTN_NORM), (e,), np.float32)]
    if q_lora:
        out += [
            (name(T.ATTN_Q_A), (q_lora, e), np.float16),
            (name(T.ATTN_Q_A_NORM), (q_lora,), np.float32),
            (name(T.ATTN_Q_B), (h * (nope + rope), q_lora), np.float16),
        ]
    else:
        out.append((name(T.ATTN_Q), (h * (nope + rope), e), np.float16))
    out += [
        (name(T.ATTN_KV_A_MQA), (kv_lora + rope, e), np.float16),
        (name(T.ATTN_KV_A_NORM), (kv_lora,), np.float32),
        (name(T.ATTN_OUT), (e, h * mla["v_head"]), np.float16),
        (name(T.FFN_NORM), (e,), np.float32),
    ]
    if mla.get("absorbed", True):
        out += [
            (name(T.ATTN_K_B), (h, kv_lora, nope), np.float16),
            (name(T.ATTN_V_B), (h, mla["v_head"], kv_lora), np.float16),
        ]
    else:
        out.append((name(T.ATTN_KV_B), (h * (nope + mla["v_head"]), kv_lora), np.float16))
    indexer = spec.get("indexer")
    if indexer and indexer.get("types", [True] * spec["n_layer"])[il]:
        heads, size = indexer["heads"], indexer["head_size"]
        out += [
            (name(T.INDEXER_K_NORM), (size,), np.float32),
            (name(T.INDEXER_K_NORM, "bias"), (size,), np.float32),
            (name(T.INDEXER_PROJ), (heads, e), np.float16),
            (name(T.INDEXER_ATTN_K), (size, e), np.float16),
            (name(T.INDEXER_ATTN_Q_B), (heads * size, q_lora), np.float16),
        ]
    if il < spec.get("dense_lead", 0):
        return out + dense_feed_forward(name, T, e, spec["n_ff"])
    n, w = spec["experts"], spec["expert_ff"]
    shared = w * spec.get("shared_experts", 0)
    out += [
        (name(T.FFN_GATE_INP), (n, e), np.float32),
        (name(T.FFN_GATE_EXP), (n, w, e), np.float16),
        (name(T.FFN_UP_EXP), (n, w, e), np.float16),
        (name(T.FFN_DOWN_EXP), (n, e, w), np.float16),
    ]
    if spec.get("sigmoid"):
        out.append((name(T.FFN_EXP_PROBS_B, "bias"), (n,), np.float32))
    if shared:
        out += [
            (name(T.FFN_GATE_SHEXP), (shared, e), np.float16),
            (name(T.FFN_UP_SHEXP), (shared, e), np.float16),
            (name(T.FFN_DOWN_SHEXP), (e, shared), np.float16),
        ]
    return out


def gpt_oss_layer(gguf, spec, il):
    """A gpt-oss layer: biased Q, K, V and output projections, sinks, routed experts with
    biases (F16 here, MXFP4 in the released files: the compute graph is the same)."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}.{kind}"
    e, n, w = spec["n_embd"], spec["experts"], spec["expert_ff"]
    q = spec["n_head"] * spec["head_dim"]
    kv = spec["n_head_kv"] * spec["head_dim"]
    out = [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.ATTN_POST_NORM), (e,), np.float32),
        (name(T.ATTN_SINKS), (spec["n_head"],), np.float32),
        (name(T.ATTN_OUT), (e, q), np.float16),
        (name(T.ATTN_OUT, "bias"), (e,), np.float32),
        (name(T.FFN_GATE_INP), (n, e), np.float32),
        (name(T.FFN_GATE_INP, "bias"), (n,), np.float32),
    ]
    for t, rows in ((T.ATTN_Q, q), (T.ATTN_K, kv), (T.ATTN_V, kv)):
        out += [(name(t), (rows, e), np.float16), (name(t, "bias"), (rows,), np.float32)]
    for t, shape, bias in (
        (T.FFN_GATE_EXP, (n, w, e), (n, w)),
        (T.FFN_UP_EXP, (n, w, e), (n, w)),
        (T.FFN_DOWN_EXP, (n, e, w), (n, e)),
    ):
        out += [(name(t), shape, np.float16), (name(t, "bias"), bias, np.float32)]
    return out


def mamba_layer(gguf, spec, il):
    """A Mamba layer: the x/z projection, the causal convolution, the selective scan's
    projections and parameters, the output projection."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}" + (f".{kind}" if kind else "")
    e, ssm = spec["n_embd"], spec["ssm"]
    inner, state, rank = ssm["d_inner"], ssm["d_state"], ssm["dt_rank"]
    return [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.SSM_IN), (2 * inner, e), np.float16),
        (name(T.SSM_CONV1D), (inner, ssm["d_conv"]), np.float32),
        (name(T.SSM_CONV1D, "bias"), (inner,), np.float32),
        (name(T.SSM_X), (rank + 2 * state, inner), np.float16),
        (name(T.SSM_DT), (inner, rank), np.float16),
        (name(T.SSM_DT, "bias"), (inner,), np.float32),
        (name(T.SSM_A, None), (inner, state), np.float32),
        (name(T.SSM_D, None), (inner,), np.float32),
        (name(T.SSM_OUT), (e, inner), np.float16),
    ]


def mamba2_layer(gguf, spec, il):
    """A Mamba-2 layer as `llama_model_mamba2::load_arch_tensors` reads it: the one input
    projection, the convolution over x, B and C, the per-head parameters, the grouped norm, the
    output projection."""
    T = gguf.MODEL_TENSOR
    name = lambda t, kind="weight": f"{gguf.TENSOR_NAMES[t].format(bid=il)}" + (f".{kind}" if kind else "")
    e, ssm = spec["n_embd"], spec["ssm"]
    inner, state, heads, groups = ssm["d_inner"], ssm["d_state"], ssm["dt_rank"], ssm["n_group"]
    channels = inner + 2 * groups * state
    return [
        (name(T.ATTN_NORM), (e,), np.float32),
        (name(T.SSM_IN), (inner + channels + heads, e), np.float16),
        (name(T.SSM_CONV1D), (channels, ssm["d_conv"]), np.float32),
        (name(T.SSM_CONV1D, "bias"), (channels,), np.float32),
        (name(T.SSM_DT, "bias"), (heads,), np.float32),
        (name(T.SSM_A, None), (heads, 1), np.float32),
        (name(T.SSM_D, None), (heads, 1), np.float32),
        (name(T.SSM_NORM), (groups, inner // groups), np.float32),
        (name(T.SSM_OUT), (e, inner), np.float16),
    ]


def write_sparse(writer) -> None:
    """The header, key-values and tensor infos, then a hole as long as the aligned tensor data."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    fout = writer.fout[0]
    align = writer.data_alignment
    start = fout.tell()
    start += (-start) % align
    data = sum(writer.ggml_pad(ti.nbytes, align) for ti in writer.tensors[0].values())
    fout.truncate(start + data)
    writer.close()


if __name__ == "__main__":
    main()
