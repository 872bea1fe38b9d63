#!/usr/bin/env python3
"""Writes a GGUF model with Qwen3-MoE's structure (or gpt-oss's, --arch gpt-oss) and random
weights, for runs of llama.cpp's tools with and without the QMOE backend (nothing is learned). Uses the gguf package of the
llama.cpp tree (PYTHONPATH=<tree>/gguf-py) and numpy.

--type f16 writes every matrix as F16, the input llama-quantize wants for Q8_0 / Q4_0 / Q4_K_M.
--logit-scale multiplies the output projection: random weights give logits of about unit spread,
a next-token distribution close to uniform over the vocabulary, where every quantization's KL
divergence is tiny; a larger spread makes the distributions peaked (tests/ggml/kl_check.py).
gpt-oss adds what its FFN and attention read beside the matrices: biases on the router, on every
expert's gate, up and down rows (ADD_ID in llama.cpp's graph) and on the attention projections,
attention sinks, a post-attention norm, and sliding-window attention on every other layer; its
expert weights become MXFP4 through `llama-quantize ... MXFP4_MOE` of the F16 file.
The vocabulary is SentencePiece-style: control tokens, the 256 byte tokens, single letters and
digits, then two-letter pieces (so lowercase text tokenizes to many different ids), then
placeholders.

usage: make_moe_gguf.py OUT.gguf [--arch qwen3moe|gpt-oss] [--type f16|q8_0|q4_0] [--hidden 256] [--experts 16] [--used 4]
       [--expert-ffn 128] [--layers 2] [--heads 4] [--kv-heads 2] [--head-dim 64] [--vocab 512]
       [--logit-scale 1] [--seed 1]
"""
import string
import argparse

import numpy as np
import gguf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", default="qwen3moe", choices=["qwen3moe", "gpt-oss"])
    ap.add_argument("--type", default="q8_0", choices=["f16", "q8_0", "q4_0"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--used", type=int, default=4)
    ap.add_argument("--expert-ffn", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--logit-scale", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.vocab < 259 + 62:
        ap.error("--vocab must be at least 321 (control, byte and single-character tokens)")
    qtype = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
             "q4_0": gguf.GGMLQuantizationType.Q4_0}[a.type]
    ftype = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}[a.type]
    rng = np.random.default_rng(a.seed)
    H, E, I, D = a.hidden, a.experts, a.expert_ffn, a.head_dim

    oss = a.arch == "gpt-oss"
    w = gguf.GGUFWriter(a.out, a.arch)
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(I)
    w.add_expert_feed_forward_length(I)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_expert_count(E)
    w.add_expert_used_count(a.used)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    if oss:
        w.add_sliding_window(128)
    w.add_file_type(ftype)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    chars = string.ascii_letters + string.digits
    pairs = [x + y for x in string.ascii_lowercase for y in string.ascii_lowercase]
    tokens += list(chars) + pairs[:a.vocab - len(tokens) - len(chars)]
    tokens += [f"\u2581t{i}" for i in range(a.vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (a.vocab - 259)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * a.vocab)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    # (name, numpy shape, scale or None for a norm's ones, quantized): numpy's shape is ggml's ne
    # reversed, the last axis is the row (K)
    specs = [("token_embd.weight", (a.vocab, H), 1.0, True),
             ("output_norm.weight", (H,), None, False),
             ("output.weight", (a.vocab, H), a.logit_scale / np.sqrt(H), True)]
    for l in range(a.layers):
        p = f"blk.{l}."
        specs += [(p + "attn_norm.weight", (H,), None, False),
                  (p + "attn_q.weight", (a.heads * D, H), None, True),
                  (p + "attn_k.weight", (a.kv_heads * D, H), None, True),
                  (p + "attn_v.weight", (a.kv_heads * D, H), None, True),
                  (p + "attn_output.weight", (H, a.heads * D), None, True),
                  (p + "ffn_gate_inp.weight", (E, H), None, False),
                  (p + "ffn_gate_exps.weight", (E, I, H), None, True),
                  (p + "ffn_up_exps.weight", (E, I, H), None, True),
                  (p + "ffn_down_exps.weight", (E, H, I), None, True)]
        if oss:  # biases are rows of random values scaled by 1/sqrt(their length), as a matrix's
            specs += [(p + "post_attention_norm.weight", (H,), None, False),
                      (p + "attn_q.bias", (a.heads * D,), None, False),
                      (p + "attn_k.bias", (a.kv_heads * D,), None, False),
                      (p + "attn_v.bias", (a.kv_heads * D,), None, False),
                      (p + "attn_output.bias", (H,), None, False),
                      (p + "attn_sinks.weight", (a.heads,), None, False),
                      (p + "ffn_gate_inp.bias", (E,), None, False),
                      (p + "ffn_gate_exps.bias", (E, I), None, False),
                      (p + "ffn_up_exps.bias", (E, I), None, False),
                      (p + "ffn_down_exps.bias", (E, H), None, False)]
        else:
            specs += [(p + "attn_q_norm.weight", (D,), None, False),
                      (p + "attn_k_norm.weight", (D,), None, False),
                      (p + "ffn_norm.weight", (H,), None, False)]

    def dtype_of(quant):
        if not quant:
            return np.float32, None
        return (np.float16, None) if a.type == "f16" else (np.float32, qtype)

    # Tensor infos first, then the data one tensor at a time, so that a model of several GB
    # (the benchmark's) never sits in memory whole.
    for name, shape, _, quant in specs:
        dt, raw = dtype_of(quant)
        n = int(np.prod(shape))
        if raw is None:
            nbytes = n * np.dtype(dt).itemsize
        else:
            block, size = gguf.GGML_QUANT_SIZES[raw]
            nbytes = n // block * size
        w.add_tensor_info(name, shape, np.dtype(dt), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape, scale, quant in specs:
        if scale is None and not quant:
            x = (np.ones(shape, dtype=np.float32) if name.endswith("norm.weight") else
                 rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[-1])))
        else:
            s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(s)
        dt, raw = dtype_of(quant)
        if raw is not None:
            x = gguf.quants.quantize(x, raw)
        w.write_tensor_data(x.astype(dt) if raw is None else x)
        del x
    w.close()

if __name__ == "__main__":
    main()
