#!/usr/bin/env python3
"""Writes a small GGUF model with Qwen3-MoE's structure and random weights, for smoke runs of
llama.cpp's tools with and without the QMOE backend (nothing is learned: the tokens are
placeholders). Uses the gguf package of the llama.cpp tree (PYTHONPATH=<tree>/gguf-py) and numpy.

usage: make_moe_gguf.py OUT.gguf [--type q8_0|q4_0] [--hidden 256] [--experts 16] [--used 4]
       [--expert-ffn 128] [--layers 2] [--heads 4] [--kv-heads 2] [--head-dim 64] [--vocab 512]
"""
import argparse

import numpy as np
import gguf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--type", default="q8_0", choices=["q8_0", "q4_0"])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--used", type=int, default=4)
    ap.add_argument("--expert-ffn", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    qtype = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[a.type]
    rng = np.random.default_rng(a.seed)
    H, E, I, D = a.hidden, a.experts, a.expert_ffn, a.head_dim

    w = gguf.GGUFWriter(a.out, "qwen3moe")
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
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if a.type == "q8_0" else gguf.LlamaFileType.MOSTLY_Q4_0)
    # a SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then placeholders
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
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

    def mat(name, *shape, scale=None, quant=True):
        # numpy shape is ggml's ne reversed: the last axis is the row (K)
        s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        x = (rng.standard_normal(shape) * s).astype(np.float32)
        if quant:
            w.add_tensor(name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, x)

    def ones(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    mat("token_embd.weight", a.vocab, H, scale=1.0)
    ones("output_norm.weight", H)
    mat("output.weight", a.vocab, H)
    for l in range(a.layers):
        p = f"blk.{l}."
        ones(p + "attn_norm.weight", H)
        mat(p + "attn_q.weight", a.heads * D, H)
        mat(p + "attn_k.weight", a.kv_heads * D, H)
        mat(p + "attn_v.weight", a.kv_heads * D, H)
        mat(p + "attn_output.weight", H, a.heads * D)
        ones(p + "attn_q_norm.weight", D)
        ones(p + "attn_k_norm.weight", D)
        ones(p + "ffn_norm.weight", H)
        mat(p + "ffn_gate_inp.weight", E, H, quant=False)
        mat(p + "ffn_gate_exps.weight", E, I, H)
        mat(p + "ffn_up_exps.weight", E, I, H)
        mat(p + "ffn_down_exps.weight", E, H, I)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
