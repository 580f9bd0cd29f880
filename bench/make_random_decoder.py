"""A decoder GGUF file (or Hugging Face directory) with the shape of a real model and random weights, for `sparse24 bench-decode` (which
times sparse24 and llama.cpp on it; decoding speed does not depend on the weights' values). No Qwen or Llama 3
weights ship in the project's packages; their shapes (hidden size, layers, heads, vocabulary) decide the
bytes a token reads, and the architectures' extras (Qwen2's Q/K/V biases, Qwen3's Q/K norms, Gemma 3's four
norms per layer, GELU and sliding layers, Gemma 2's soft-capped scores) the work.

The file is what llama.cpp's converter writes for the architecture: its metadata and tensor names, F16
weights (1-D tensors F32), a vocabulary of the model's size (byte-level: the 256 byte tokens, filler tokens,
one merge; or SentencePiece-style for TinyLlama), the head tied where the model ties it.

  .venv/bin/python bench/make_random_decoder.py --shape qwen2.5-0.5b --out /tmp/qwen2.5-0.5b.gguf
  build/sparse24 bench-decode /tmp/qwen2.5-0.5b.gguf --threads 1 --prompt 128 --generate 128
  .venv/bin/python bench/make_random_decoder.py --shape llama3.1-8b --quantize Q4_K_M --out /tmp/llama8b.gguf
  .venv/bin/python bench/make_random_decoder.py --shape llama3.1-8b --hf-dir --out /tmp/llama8b-hf
"""
import argparse
import os
import sys

import numpy as np

# The configs of the models (their config.json on the Hugging Face hub).
SHAPES = {
    "qwen2.5-0.5b": dict(arch="qwen2", hidden=896, layers=24, heads=14, kv=2, head_dim=64, ffn=4864,
                         vocab=151936, tied=True, theta=1e6, ctx=32768),
    "qwen3-0.6b": dict(arch="qwen3", hidden=1024, layers=28, heads=16, kv=8, head_dim=128, ffn=3072,
                       vocab=151936, tied=True, theta=1e6, ctx=40960),
    # Llama 3.1 and 3.2: RoPE scaled as rope_scaling "llama3" says (factor, low_freq_factor, high_freq_factor,
    # original_max_position_embeddings), which llama.cpp's converter writes as rope_freqs.weight.
    "llama3.2-1b": dict(arch="llama", hidden=2048, layers=16, heads=32, kv=8, head_dim=64, ffn=8192,
                        vocab=128256, tied=True, theta=5e5, ctx=131072, llama3=(32.0, 1.0, 4.0, 8192)),
    "llama3.1-8b": dict(arch="llama", hidden=4096, layers=32, heads=32, kv=8, head_dim=128, ffn=14336,
                        vocab=128256, tied=False, theta=5e5, ctx=131072, llama3=(8.0, 1.0, 4.0, 8192)),
    # TinyLlama-1.1B: a SentencePiece-style ("llama") vocabulary and an untied head.
    "tinyllama-1.1b": dict(arch="llama", hidden=2048, layers=22, heads=32, kv=4, head_dim=64, ffn=5632,
                           vocab=32000, tied=False, theta=1e4, ctx=2048, spm=True),
    # Gemma 2: SentencePiece-style vocabulary without a space prefix, 4096-position windows in every other
    # layer, the scores soft-capped at 50 and the logits at 30, a 256,000-token tied head.
    "gemma2-2b": dict(arch="gemma2", hidden=2304, layers=26, heads=8, kv=4, head_dim=256, ffn=9216,
                      vocab=256000, tied=True, theta=1e4, ctx=8192, spm=True, window=4096),
    # Gemma 3: SentencePiece-style vocabulary without a space prefix, 512-position windows in five of every
    # six layers, a 262,144-token tied head (most of the 270M model's bytes).
    "gemma3-270m": dict(arch="gemma3", hidden=640, layers=18, heads=4, kv=1, head_dim=256, ffn=2048,
                        vocab=262144, tied=True, theta=1e6, ctx=32768, spm=True, window=512),
    "gemma3-1b": dict(arch="gemma3", hidden=1152, layers=26, heads=4, kv=1, head_dim=256, ffn=6912,
                      vocab=262144, tied=True, theta=1e6, ctx=32768, spm=True, window=512),
}


def add_vocabulary(w, s):
    """Byte-level: GPT-2's byte characters, one merge, fillers up to the vocabulary size. SentencePiece-style
    (Llama 2's layout): <unk> <s> </s>, the 256 byte tokens, U+2581, fillers, with scores."""
    if s.get("spm"):
        tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"]
        tokens += [f"\u2581filler{i}" for i in range(s["vocab"] - len(tokens))]
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)])
        w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259))
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        if s["arch"].startswith("gemma"):
            w.add_add_space_prefix(False)
        return
    byte_chars = [chr(b) for b in range(33, 127)] + [chr(b) for b in range(161, 173)] + [chr(b) for b in range(174, 256)]
    byte_chars += [chr(256 + i) for i in range(256 - len(byte_chars))]
    tokens = byte_chars + ["\u0120\u0120"]  # and one merge (llama.cpp requires merges): two spaces
    tokens += [f"<|filler_{i}|>" for i in range(s["vocab"] - len(tokens) - 1)] + ["<|endoftext|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if s["arch"] != "llama" else "llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_token_merges(["\u0120 \u0120"])
    w.add_eos_token_id(len(tokens) - 1)


def llama3_rope_factors(theta, dim, factor, low, high, original):
    """rope_freqs.weight as llama.cpp's converter computes it from rope_scaling "llama3": per frequency the
    divisor that turns RoPE's default frequency into Llama 3's (1 for short wavelengths, `factor` for long ones,
    smoothly in between)."""
    freqs = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def layer_tensors(s):
    """Each layer's Llama-style tensors as (transformers' name, llama.cpp's name, shape, kind): kind "w" a
    random weight, "b" a random bias, "1" a norm of ones."""
    H, D, q, kv, F = s["hidden"], s["head_dim"], s["heads"] * s["head_dim"], s["kv"] * s["head_dim"], s["ffn"]
    out = [("input_layernorm.weight", "attn_norm.weight", (H,), "1"),
           ("post_attention_layernorm.weight", "ffn_norm.weight", (H,), "1"),
           ("self_attn.q_proj.weight", "attn_q.weight", (q, H), "w"),
           ("self_attn.k_proj.weight", "attn_k.weight", (kv, H), "w"),
           ("self_attn.v_proj.weight", "attn_v.weight", (kv, H), "w"),
           ("self_attn.o_proj.weight", "attn_output.weight", (H, q), "w"),
           ("mlp.gate_proj.weight", "ffn_gate.weight", (F, H), "w"),
           ("mlp.up_proj.weight", "ffn_up.weight", (F, H), "w"),
           ("mlp.down_proj.weight", "ffn_down.weight", (H, F), "w")]
    if s["arch"] == "qwen2":
        out += [(f"self_attn.{n}_proj.bias", f"attn_{n}.bias", (rows,), "b") for n, rows in (("q", q), ("k", kv), ("v", kv))]
    if s["arch"] in ("qwen3", "gemma3"):
        out += [("self_attn.q_norm.weight", "attn_q_norm.weight", (D,), "1"),
                ("self_attn.k_norm.weight", "attn_k_norm.weight", (D,), "1")]
    if s["arch"].startswith("gemma"):  # norms stored as 1 + w, as llama.cpp's converter writes them
        out += [(None, "post_attention_norm.weight", (H,), "1"), (None, "post_ffw_norm.weight", (H,), "1")]
    return out


def to_bf16(x):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    b = x.astype(np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def write_hf_dir(s, g, out):
    """The same model as a Hugging Face directory, as real checkpoints are published: transformers' names,
    bf16 tensors in shards of at most 5 GB with model.safetensors.index.json, config.json. Each shard is
    written as safetensors (header, then the tensors' bytes in order) one tensor at a time, so an 8B model's
    16 GB are never in memory."""
    import json

    if s["arch"] not in ("llama", "qwen2", "qwen3"):
        sys.exit(f"--hf-dir: not written for {s['arch']} (llama, qwen2, qwen3)")
    H, D, F = s["hidden"], s["head_dim"], s["ffn"]
    rnd = lambda *shape, scale=0.02: (shape, lambda: g.standard_normal(shape, dtype=np.float32) * scale)
    ones = lambda n: ((n,), lambda: np.ones(n, np.float32))
    tensors = {"model.embed_tokens.weight": rnd(s["vocab"], H)}
    for l in range(s["layers"]):
        for hf, _, shape, kind in layer_tensors(s):  # (hf is None only for Gemma, refused above)
            tensors[f"model.layers.{l}.{hf}"] = (ones(shape[0]) if kind == "1" else
                                                 rnd(*shape, scale=0.1 if kind == "b" else 0.02))
    tensors["model.norm.weight"] = ones(H)
    if not s["tied"]:
        tensors["lm_head.weight"] = rnd(s["vocab"], H)
    shards, size = [[]], 0
    for name, (shape, _) in tensors.items():
        nbytes = int(np.prod(shape)) * 2
        if shards[-1] and size + nbytes > 5_000_000_000:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    tmp = out + ".tmp"
    os.makedirs(tmp)
    weight_map = {}
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, at = {"__metadata__": {"format": "pt"}}, 0
        for n in names:
            nbytes = int(np.prod(tensors[n][0])) * 2
            header[n] = {"dtype": "BF16", "shape": list(tensors[n][0]), "data_offsets": [at, at + nbytes]}
            at += nbytes
            weight_map[n] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(tmp, file), "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text)
            for n in names:
                f.write(to_bf16(tensors[n][1]()).tobytes())
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(int(np.prod(t[0])) * 2 for t in tensors.values())},
                   "weight_map": weight_map}, f, indent=2)
    config = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                                 "qwen3": "Qwen3ForCausalLM"}[s["arch"]]],
              "model_type": s["arch"], "hidden_size": H, "intermediate_size": F, "num_hidden_layers": s["layers"],
              "num_attention_heads": s["heads"], "num_key_value_heads": s["kv"], "head_dim": D,
              "vocab_size": s["vocab"], "max_position_embeddings": s["ctx"], "rms_norm_eps": 1e-6,
              "rope_theta": s["theta"], "tie_word_embeddings": s["tied"], "torch_dtype": "bfloat16"}
    if "llama3" in s:
        factor, low, high, original = s["llama3"]
        config["rope_scaling"] = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                                  "high_freq_factor": high, "original_max_position_embeddings": original}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    os.replace(tmp, out)


def main():
    import gguf

    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quantize", metavar="TYPE",
                    help="then quantize the file with llama.cpp's quantizer to TYPE (Q4_K_M, Q8_0, ...)")
    ap.add_argument("--hf-dir", action="store_true",
                    help="write a Hugging Face directory (bf16 shards, config.json) at --out instead of a GGUF file")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    g = np.random.default_rng(a.seed)
    if a.hf_dir:
        write_hf_dir(s, g, a.out)
        print(f"{a.out}: random {a.shape} ({s['arch']}, a Hugging Face directory, bf16)")
        return
    f16 = a.out + (".f16.tmp" if a.quantize else ".tmp")  # (the quantizer writes a.out + ".tmp")
    w = gguf.GGUFWriter(f16, s["arch"])
    w.add_name(f"random {a.shape}")
    w.add_block_count(s["layers"])
    w.add_context_length(s["ctx"])
    w.add_embedding_length(s["hidden"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    if "window" in s:
        w.add_sliding_window(s["window"])
    if s["arch"] == "gemma3":
        w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    if s["arch"] == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", 50.0)
        w.add_float32("gemma2.final_logit_softcapping", 30.0)
    add_vocabulary(w, s)

    # The tensors as (name, shape, dtype, maker): their infos are written first, then each is made and written
    # in turn (an 8B model's 16 GB are never in memory, nor in a temporary file).
    def rnd(*shape, scale=0.02, dtype=np.float16):
        return shape, dtype, lambda: (g.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)

    def ones(n):
        return (n,), np.float32, lambda: np.ones(n, np.float32)

    H, D = s["hidden"], s["head_dim"]
    tensors = {"token_embd.weight": rnd(s["vocab"], H), "output_norm.weight": ones(H)}
    if "llama3" in s:
        tensors["rope_freqs.weight"] = ((D // 2,), np.float32,
                                        lambda: llama3_rope_factors(s["theta"], D, *s["llama3"]))
    if not s["tied"]:
        tensors["output.weight"] = rnd(s["vocab"], H)
    for l in range(s["layers"]):
        for _, name, shape, kind in layer_tensors(s):
            tensors[f"blk.{l}.{name}"] = (ones(shape[0]) if kind == "1" else
                                          rnd(*shape, scale=0.1, dtype=np.float32) if kind == "b" else rnd(*shape))
    for name, (shape, dtype, _) in tensors.items():
        w.add_tensor_info(name, shape, np.dtype(dtype), int(np.prod(shape)) * np.dtype(dtype).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for shape, dtype, make in tensors.values():
        w.write_tensor_data(make())
    w.close()
    if a.quantize:  # F16 first, then llama.cpp's quantizer (e.g. Q4_K_M: 4.9 GB at 8B instead of 16)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
        from decode_llamacpp import quantize_with_llamacpp

        quantize_with_llamacpp(f16, a.out, a.quantize, threads=os.cpu_count())
        os.remove(f16)
    else:
        os.replace(a.out + ".tmp", a.out)
    print(f"{a.out}: random {a.shape} ({s['arch']}{', ' + a.quantize if a.quantize else ''})")


if __name__ == "__main__":
    main()
