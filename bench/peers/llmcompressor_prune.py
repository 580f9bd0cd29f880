"""The peer of `sparse24 prune-model --method wanda|sparsegpt`: llm-compressor (PyPI llmcompressor) prunes a
sentence-transformers encoder (BERT, MPNet) to 2:4 with its WandaPruningModifier / SparseGPTModifier
(sparsity 0.5, mask_structure "2:4") on the same calibration lines, on the CPU.

  .venv-llmc/bin/python bench/peers/llmcompressor_prune.py models/all-MiniLM-L6-v2 OUT_DIR \\
      --method sparsegpt --calib /tmp/corpora/kjv-train.txt [--calib-lines 512] [--max-length N]

Runs in the peer venv .venv-llmc/ (scripts/setup.sh; it sees .venv's torch and transformers). Calibration: the
lines sparse24 picks (--calib-lines N spread evenly over the file: line i*total//N for i < N; all of them when
N <= 0 or N >= total), each tokenized alone by the model's own tokenizer, truncated to the model's
max_seq_length (sentence_bert_config.json; --max-length lowers it), one sequence per calibration batch (no
padding, so no padding token reaches the statistics). llmcompressor's sequential pipeline, one subgraph per
encoder layer (BertLayer / MPNetLayer): each layer is calibrated on the outputs of the already-pruned layers
before it, as sparse24 does. Targets: every Linear of encoder.layer.N (attention q/k/v/output, intermediate,
output); the embeddings and the pooler are left dense.

OUT_DIR: a copy of every file of MODEL_DIR with model.safetensors replaced (same tensor names, dense float32,
the targeted weights exactly 2:4 along the input dimension, checked before writing), loadable by
sentence-transformers and `sparse24 embed`; plus OUT_DIR/llmcompressor.json {method, seconds (wall time of
oneshot: calibration and pruning, the model load excluded), cpu_seconds (the process's CPU time over the
same span: on a shared machine the comparable number), llmcompressor_version, calibration_lines,
calibration_tokens, pruned_weights, threads}. On a shared machine use --threads 1 (docs/accuracy.md).
"""
import json
import os
import re
import shutil
import sys
import time

import common

LAYER_WEIGHT = re.compile(r"^encoder\.layer\.\d+\..+\.weight$")


def spread_lines(lines, n):
    """sparse24's choice (tools/sparse24/cli_util.h spread_lines): n lines evenly over the file, in order."""
    total = len(lines)
    if n <= 0 or n >= total:
        return list(lines)
    return [lines[i * total // n] for i in range(n)]


def check_24(name, w):
    """Exactly 2:4 along the input dimension: at most 2 nonzeros in each group of 4 consecutive inputs."""
    if w.dim() != 2 or w.shape[1] % 4 != 0:
        raise common.Error(f"{name}: shape {tuple(w.shape)} cannot be 2:4 along the input dimension")
    nz = (w.reshape(w.shape[0], -1, 4) != 0).sum(dim=-1)
    bad = int((nz > 2).sum())
    if bad:
        raise common.Error(f"{name}: not 2:4 after llmcompressor ({bad} groups of 4 with more than 2 nonzeros)")


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("out_dir")
    p.add_argument("--method", required=True, choices=["sparsegpt", "wanda"])
    p.add_argument("--calib", required=True, help="UTF-8 text file, one calibration text per line")
    p.add_argument("--calib-lines", type=int, default=512,
                   help="lines spread evenly over the file (<= 0: all); default 512")
    p.add_argument("--max-length", type=common.positive("--max-length"), default=None,
                   help="truncate calibration sequences to this many tokens (default: the model's max_seq_length)")
    p.add_argument("--threads", type=common.positive("--threads"), default=None,
                   help="torch intra-op threads (default: torch's own choice)")
    a = p.parse_args()

    model_dir = common.model_dir(a.model_dir)
    st_file = os.path.join(model_dir, "model.safetensors")
    if not os.path.isfile(st_file):
        raise common.Error(f"{model_dir}: no model.safetensors")
    out_dir = os.path.abspath(a.out_dir)
    if out_dir == model_dir:
        raise common.Error("OUT_DIR must differ from MODEL_DIR")
    if os.path.exists(out_dir) and not os.path.isfile(os.path.join(out_dir, "llmcompressor.json")):
        raise common.Error(f"{out_dir}: exists and is not an earlier output of this script (no llmcompressor.json)")
    lines = spread_lines(common.read_lines(a.calib), a.calib_lines)

    try:
        import llmcompressor
        from llmcompressor import oneshot
        from llmcompressor.modifiers.obcq import SparseGPTModifier
        from llmcompressor.modifiers.pruning import WandaPruningModifier
    except ImportError as e:
        raise common.Error(f"llmcompressor not importable ({e}); run with .venv-llmc/bin/python "
                           "(bash scripts/setup.sh makes it)") from None
    import torch
    from datasets import Dataset
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModel, AutoTokenizer

    if a.threads:
        torch.set_num_threads(a.threads)

    # The model and its tokenizer (not timed).
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    encoder_layers = getattr(getattr(model, "encoder", None), "layer", None)
    if encoder_layers is None or len(encoder_layers) == 0:
        raise common.Error(f"{model_dir}: {type(model).__name__} has no encoder.layer (not a BERT-like encoder)")
    layer_class = type(encoder_layers[0]).__name__

    limit = common.max_seq_length(model_dir) or tokenizer.model_max_length
    limit = min(limit, getattr(model.config, "max_position_embeddings", limit))
    if a.max_length:
        limit = min(limit, a.max_length)
    enc = [tokenizer(line, truncation=True, max_length=limit) for line in lines]
    columns = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc[0]]
    dataset = Dataset.from_dict({k: [e[k] for e in enc] for k in columns})
    tokens = sum(len(e["input_ids"]) for e in enc)

    Modifier = SparseGPTModifier if a.method == "sparsegpt" else WandaPruningModifier
    # targets = the encoder layers: every Linear inside each layer is hooked once and pruned (embeddings and
    # pooler are outside them); sequential_targets = the same class, so one layer per calibration subgraph.
    recipe = Modifier(sparsity=0.5, mask_structure="2:4", targets=[layer_class])
    original = {}
    with safe_open(st_file, "pt") as f:
        metadata = f.metadata()
        for k in f.keys():
            original[k] = f.get_tensor(k)
    targeted = sorted(f"{n}.weight" for n, m in model.named_modules()
                      if isinstance(m, torch.nn.Linear) and LAYER_WEIGHT.match(f"{n}.weight"))
    missing = [k for k in targeted if k not in original]
    if not targeted or missing:
        raise common.Error(f"{model_dir}: the encoder's Linear weights ({missing[:1] or 'none'}) "
                           "are not named encoder.layer.N.* in model.safetensors")

    print(f"llmcompressor {llmcompressor.__version__}: {a.method} 2:4 on {type(model).__name__} "
          f"({len(encoder_layers)} x {layer_class}, {len(targeted)} Linear weights), {len(lines)} calibration "
          f"lines, {tokens} tokens (max {limit}), {torch.get_num_threads()} threads", file=sys.stderr)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        oneshot(model=model, tokenizer=tokenizer, dataset=dataset, recipe=recipe,
                num_calibration_samples=len(dataset), shuffle_calibration_samples=False, batch_size=1,
                pipeline="sequential", sequential_targets=[layer_class])
    except Exception as e:  # noqa: BLE001 - say exactly what stopped llmcompressor, in one line
        msg = " ".join(str(e).split()) or type(e).__name__
        raise common.Error(f"llmcompressor oneshot failed on {type(model).__name__} "
                           f"({layer_class} subgraphs): {type(e).__name__}: {msg}") from None
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0

    # The pruned weights into the original tensor set (everything else exactly as it was, float32).
    state = model.state_dict()
    for k in targeted:
        w = state[k].detach().to(torch.float32).cpu().contiguous()
        check_24(k, w)
        if w.shape != original[k].shape:
            raise common.Error(f"{k}: shape {tuple(w.shape)} after pruning, {tuple(original[k].shape)} before")
        original[k] = w
    tensors = {k: (v.to(torch.float32) if v.is_floating_point() else v).contiguous() for k, v in original.items()}

    tmp = f"{out_dir}.tmp.{os.getpid()}"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    try:
        shutil.copytree(model_dir, tmp, symlinks=False)
        os.remove(os.path.join(tmp, "model.safetensors"))
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata=metadata or {"format": "pt"})
        report = {
            "method": a.method,
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu_seconds, 3),
            "llmcompressor_version": llmcompressor.__version__,
            "calibration_lines": len(lines),
            "calibration_tokens": tokens,
            "pruned_weights": len(targeted),
            "threads": torch.get_num_threads(),
        }
        with open(os.path.join(tmp, "llmcompressor.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    print(f"{out_dir}: {a.method} 2:4 by llmcompressor, {len(targeted)} weights, {seconds:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    common.run(main)
