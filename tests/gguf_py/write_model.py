#!/usr/bin/env python3
"""Writes a GGUF model header with the gguf-py package of the pinned llama.cpp tree, so that the
planner is checked on files its own writer did not make. The tensor data is left as a hole in a
sparse file: `llama-fit-params` reads only the header.

Usage: write_model.py GGUF_PY_DIR OUT.gguf SPEC_JSON

SPEC_JSON keys: arch (gemma3, qwen2, qwen3, qwen3moe, llama), n_vocab, n_embd, n_layer, n_head,
n_head_kv, head_dim, n_ff, and optionally context_length, sliding_window (gemma3),
sliding_window_pattern (gemma3: a list of booleans, one per layer), experts, experts_used,
expert_ff (qwen3moe and llama), tied (no output tensor: the embedding is reused).
"""

import json
import sys

import numpy as np


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
    writer.add_feed_forward_length(spec["n_ff"])
    writer.add_head_count(spec["n_head"])
    writer.add_head_count_kv(spec["n_head_kv"])
    writer.add_key_length(spec["head_dim"])
    writer.add_value_length(spec["head_dim"])
    writer.add_rope_dimension_count(spec["head_dim"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if "sliding_window" in spec:
        writer.add_sliding_window(spec["sliding_window"])
        if "sliding_window_pattern" in spec:
            writer.add_sliding_window_pattern(spec["sliding_window_pattern"])
    if "experts" in spec:
        writer.add_expert_count(spec["experts"])
        writer.add_expert_used_count(spec["experts_used"])
        if "expert_ff" in spec:
            writer.add_expert_feed_forward_length(spec["expert_ff"])


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
    for il in range(spec["n_layer"]):
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
        if arch in ("gemma3", "qwen3", "qwen3moe"):
            out += [
                (name(T.ATTN_Q_NORM, il), (spec["head_dim"],), np.float32),
                (name(T.ATTN_K_NORM, il), (spec["head_dim"],), np.float32),
            ]
        if arch == "gemma3":
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
