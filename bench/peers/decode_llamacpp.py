"""llama.cpp (PyPI llama-cpp-python, built from source) decoding at batch 1, for `sparse24 bench-decode`.

From one GGUF source file (e.g. SmolLM2's Q4_1 model.gguf) this makes F32, F16 and Q8_0 GGUF files of the
same weights: every tensor dequantized to fp32 (the weights sparse24's Hugging Face directory holds, which
transformers dequantized from the same file), then stored as F32, F16 or quantized to Q8_0 (1-D tensors stay
F32, as llama.cpp's converter keeps them); the metadata (hyperparameters, tokenizer) is copied. Q4_K_M (and
any other llama-quantize TYPE given in --kinds) is made from the F32 file by llama.cpp's own quantizer. The files are
cached in --cache. Each is timed like sparse24: the given prompt ids in one batch, then greedy decoding of
--generate tokens one at a time; best of two passes. Writes JSON {"llama.cpp F32": {tokens_per_s,
prompt_tokens_per_s, weight_bytes}, ...}.

Each file is timed in a child process. If llama.cpp crashes there, the file is timed again without its extra
buffer types (`use_extra_bufts = false`: no weight repacking, no AMX) and the entry says so ("note"): on an
Intel Xeon with AMX under KVM (session 14) its AMX matmul segfaults on Q8_0 (ggml_backend_amx_mul_mat, as in
llama.cpp issue #20824), which a native build of llama-cpp-python enables there.

  .venv/bin/python bench/peers/decode_llamacpp.py --gguf models/SmolLM2-135M-Instruct/model.gguf \\
      --prompt-ids ids.txt --generate 128 --threads 1 --json out.json
"""
import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np

SKIP_KEYS = {"general.file_type", "general.quantization_version"}


def make_gguf(src, dst, kind):
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst + ".tmp", arch, use_temp_file=True)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in SKIP_KEYS or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub_type=sub)
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
             "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind]
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for t in reader.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        x = x.reshape([int(d) for d in reversed(t.shape.tolist())])
        if x.ndim == 1 or kind == "F32":
            w.add_tensor(t.name, x)
        elif kind == "F16":
            w.add_tensor(t.name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(dst + ".tmp", dst)


def quantize_with_llamacpp(f32_path, dst, kind, threads=1):
    """A llama.cpp file type its own quantizer writes (llama-quantize's TYPE, e.g. Q4_K_M: the mix of Q4_K
    and Q6_K most GGUF downloads are) from the F32 file of the same weights."""
    import ctypes

    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind}")
    params.nthread = threads
    if llama_cpp.llama_model_quantize(f32_path.encode(), (dst + ".tmp").encode(), ctypes.byref(params)) != 0:
        sys.exit(f"decode_llamacpp: llama.cpp could not quantize {f32_path} to {kind}")
    os.replace(dst + ".tmp", dst)


def file_type_name(path):
    """general.file_type's name as llama-quantize spells it (MOSTLY_Q4_K_M: Q4_K_M), or "file"."""
    import gguf

    field = gguf.GGUFReader(path).fields.get("general.file_type")
    if field is None:
        return "file"
    name = gguf.LlamaFileType(int(field.contents())).name
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def tensor_bytes(path):
    import gguf

    return int(sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors))


def time_llamacpp(path, prompt, generate, threads, extra_bufts=True):
    import llama_cpp.llama_cpp as lc
    from llama_cpp import Llama

    if not extra_bufts:  # Llama() takes no such argument: its default model parameters, amended
        default_params = lc.llama_model_default_params

        def without_extra_bufts():
            mp = default_params()
            mp.use_extra_bufts = False
            return mp

        lc.llama_model_default_params = without_extra_bufts

    n_ctx = len(prompt) + generate + 8  # n_batch = n_ctx: without logits_all, scores has n_batch rows
    t_load = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx,
                n_threads=threads, n_threads_batch=threads, verbose=False)
    load_s = time.perf_counter() - t_load
    best_p, best_g, first_token_s = 1e300, 1e300, 0.0
    for rep in range(2):  # the first pass warms caches and pages
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        prompt_s = time.perf_counter() - t0
        if rep == 0:  # as sparse24's: from the file (Llama(): mapping, repacking) to the prompt's first pass
            first_token_s = load_s + prompt_s
        best_p = min(best_p, prompt_s)
        t0 = time.perf_counter()
        for _ in range(generate):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([nxt])
        best_g = min(best_g, time.perf_counter() - t0)
    del llm
    return len(prompt) / best_p, generate / best_g, first_token_s


def _child(queue, *args):
    queue.put(time_llamacpp(*args))


def time_in_child(path, prompt, generate, threads, extra_bufts):
    """time_llamacpp in a child process: (prompt tokens/s, tokens/s, seconds to the first token), or None if the
    child died."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue, path, prompt, generate, threads, extra_bufts))
    child.start()
    child.join()
    if child.exitcode != 0:
        print(f"decode_llamacpp: llama.cpp exited with {child.exitcode} on {os.path.basename(path)}"
              f"{'' if extra_bufts else ' without extra buffer types'}", file=sys.stderr, flush=True)
        return None
    return queue.get(timeout=60)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gguf", required=True, help="the GGUF file the weights come from")
    p.add_argument("--prompt-ids", required=True, help="file of comma-separated token ids")
    p.add_argument("--generate", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", required=True)
    p.add_argument("--kinds", default="F32,F16,Q8_0,Q4_K_M",
                   help="F32, F16, Q8_0 (written here), any llama-quantize TYPE (Q4_K_M, Q5_K_M, ...; from the "
                        "F32 file), or file (the --gguf file itself)")
    p.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                   "sparse24", "gguf"))
    a = p.parse_args()
    with open(a.prompt_ids) as f:
        prompt = [int(x) for x in f.read().replace(",", " ").split()]
    os.makedirs(a.cache, exist_ok=True)
    # One cache entry per source file (its directory, name and a hash of its path: two files in one directory,
    # or two models' model.gguf, must not share one); remade when the source is newer.
    src = os.path.abspath(a.gguf)
    base = (f"{os.path.basename(os.path.dirname(src))}-{os.path.splitext(os.path.basename(src))[0]}-"
            f"{hashlib.sha1(src.encode()).hexdigest()[:8]}")
    def stale(path):  # missing, or older than the source
        return not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(a.gguf)

    out = {}
    for kind in a.kinds.split(","):
        path = os.path.join(a.cache, f"{base}-{kind}.gguf")
        if kind == "file":  # the source itself (an 8B Q4_K_M: its F32 file would not fit), named by its type
            path, kind = a.gguf, file_type_name(a.gguf)
        elif stale(path):
            print(f"decode_llamacpp: making {path}", file=sys.stderr, flush=True)
            if kind in ("F32", "F16", "Q8_0"):
                make_gguf(a.gguf, path, kind)
            else:  # from the F32 file, by llama.cpp's quantizer
                f32 = os.path.join(a.cache, f"{base}-F32.gguf")
                if stale(f32):
                    make_gguf(a.gguf, f32, "F32")
                quantize_with_llamacpp(f32, path, kind)
        note = ""
        rates = time_in_child(path, prompt, a.generate, a.threads, True)
        if rates is None:
            note = "crashed with its extra buffer types (repacking, AMX); timed without them"
            rates = time_in_child(path, prompt, a.generate, a.threads, False)
        if rates is None:
            sys.exit(f"decode_llamacpp: llama.cpp crashed on {path}")
        ptps, gtps, first_s = rates
        out[f"llama.cpp {kind}"] = {"tokens_per_s": gtps, "prompt_tokens_per_s": ptps,
                                    "weight_bytes": tensor_bytes(path), "first_token_s": first_s, "file": path}
        if note:
            out[f"llama.cpp {kind}"]["note"] = note
        print(f"  llama.cpp {kind:5s}          prompt {ptps:8.1f} tokens/s, generation {gtps:7.2f} tokens/s, "
              f"first token {first_s:.2f} s{' (' + note + ')' if note else ''}", file=sys.stderr, flush=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
