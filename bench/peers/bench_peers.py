"""Times one sentence-transformers model in PyTorch, ONNX Runtime and OpenVINO on the same token ids, after
checking that each peer's sentence embeddings match PyTorch's. `sparse24 bench-model` runs it and merges
its JSON with the engine's own timings.

  .venv/bin/python bench/peers/bench_peers.py models/all-MiniLM-L6-v2 --seq 128 --batch 1 --threads 1
  ... --ids ids.npy --emit-embeddings emb.npy   (time exactly these int64 [batch, seq] ids, no padding)

Timing: each peer runs --warmup times, then --reps rounds, the peers in turn (round robin) within a round;
"ms" is the best time per batch, "median_ms" the median. The ONNX file (the transformer with the model's
pooling and normalization, static shapes) is exported once per model and shape to build/peers-cache/.
"""
import hashlib
import os
import statistics
import sys
import time
import warnings

import common

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = ("pytorch", "onnxruntime", "openvino")


def pooling_of(model_dir):
    """(mode, normalize) from the model's modules.json and Pooling config."""
    modules = common.read_json(os.path.join(model_dir, "modules.json"))
    if not modules:
        raise common.Error(f"{model_dir}: no modules.json (not a sentence-transformers model)")
    pool = [m for m in modules if m["type"].endswith(".Pooling")]
    if len(pool) != 1:
        raise common.Error(f"{model_dir}: modules.json has {len(pool)} Pooling modules, expected 1")
    cfg = common.read_json(os.path.join(model_dir, pool[0]["path"], "config.json"), {})
    modes = [k[len("pooling_mode_"):] for k, v in cfg.items() if k.startswith("pooling_mode_") and v is True]
    names = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max"}
    if len(modes) != 1 or modes[0] not in names:
        raise common.Error(f"{model_dir}: unsupported pooling {modes or 'none'} (supported: mean, cls, max)")
    normalize = any(m["type"].endswith(".Normalize") for m in modules)
    return names[modes[0]], normalize


def make_embedder(torch, model, mode, normalize):
    class Embedder(torch.nn.Module):
        """AutoModel + the model's pooling (+ L2 normalization): what sentence-transformers computes."""

        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            h = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            if mode == "mean":
                e = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            elif mode == "cls":
                e = h[:, 0]
            else:
                e = h.masked_fill(m == 0, -1e9).max(1).values
            return torch.nn.functional.normalize(e, p=2, dim=1) if normalize else e

    return Embedder().eval()


def load_ids(a, np, vocab, special):
    if a.ids and a.inputs:
        raise common.Error("give at most one of --ids and --inputs")
    if a.ids or a.inputs:
        try:
            if a.ids:
                ids, mask = np.load(a.ids), None
            else:
                with np.load(a.inputs) as z:
                    if "input_ids" not in z:
                        raise common.Error(f"{a.inputs}: no input_ids array")
                    ids = z["input_ids"]
                    mask = z["attention_mask"] if "attention_mask" in z else None
        except (OSError, ValueError) as e:
            raise common.Error(f"{a.ids or a.inputs}: {e}") from None
        if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise common.Error(f"input ids must be a non-empty integer [batch, seq] array, got {ids.dtype} {ids.shape}")
        if ids.min() < 0 or ids.max() >= vocab:
            raise common.Error(f"input ids out of range [0, {vocab})")
        if mask is not None and mask.shape != ids.shape:
            raise common.Error(f"attention_mask {mask.shape} does not match input_ids {ids.shape}")
        b, s = ids.shape
        for name, want, got in (("--batch", a.batch, b), ("--seq", a.seq, s)):
            if want is not None and want != got:
                raise common.Error(f"{name} {want} but the ids have {got}")
        ids = ids.astype(np.int64)
        mask = np.ones_like(ids) if mask is None else mask.astype(np.int64)
        return ids, mask
    if a.seq is None or a.batch is None:
        raise common.Error("--seq and --batch are needed without --ids/--inputs")
    if a.seq < 2:
        raise common.Error("--seq must be at least 2 (the two special tokens)")
    # Random ordinary tokens between the model's own start and end tokens: exactly seq tokens, no padding.
    rng = np.random.default_rng(a.seed)
    ids = rng.integers(1000, vocab, size=(a.batch, a.seq), dtype=np.int64)
    ids[:, 0], ids[:, -1] = special
    return ids, np.ones_like(ids)


def fingerprint(model_dir):
    h = hashlib.sha256()
    for f in ("config.json", "modules.json", "model.safetensors"):
        p = os.path.join(model_dir, f)
        if os.path.isfile(p):
            st = os.stat(p)
            h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def export_onnx(torch, embedder, ids, mask, path, dynamic=False):
    """The embedder as ONNX at path (kept once written): static shapes, or with `dynamic` any batch and
    sequence length (the example's mask must then have padding, or the tracer drops it)."""
    if os.path.isfile(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}.onnx"
    try:
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on shape-dependent Python code (the outputs are checked)
            torch.onnx.export(embedder, (torch.from_numpy(ids), torch.from_numpy(mask)), tmp,
                              input_names=["input_ids", "attention_mask"], output_names=["embedding"],
                              opset_version=17, dynamo=False,
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                            "attention_mask": {0: "batch", 1: "seq"},
                                            "embedding": {0: "batch"}} if dynamic else None)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def onnxruntime_runner(onnx_path, threads):
    """(run(feeds) -> embeddings, version): an ONNX Runtime session on `threads` threads, all optimizations."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    return (lambda feeds: sess.run(None, feeds)[0]), ort.__version__


def openvino_runner(onnx_path, threads):
    """(run(feeds) -> embeddings, version): the ONNX file compiled by OpenVINO for the CPU, fp32, latency
    hint, one stream of `threads` threads. ImportError when OpenVINO is not importable."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(onnx_path), "CPU", {
        "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1})
    req = compiled.create_infer_request()

    def run(feeds):
        req.infer(feeds)
        return req.get_output_tensor(0).data.copy()

    return run, (ov.__version__ if hasattr(ov, "__version__") else ov.get_version())


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--seq", type=common.positive("--seq"))
    p.add_argument("--batch", type=common.positive("--batch"))
    p.add_argument("--threads", type=common.positive("--threads"), default=1)
    p.add_argument("--reps", type=common.positive("--reps"), default=10)
    p.add_argument("--warmup", type=common.positive("--warmup"), default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ids", help="int64 .npy [batch, seq] of token ids to time (all attended)")
    p.add_argument("--inputs", help=".npz with input_ids (and attention_mask)")
    p.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    p.add_argument("--tolerance", type=float, default=1e-3, help="max abs embedding difference to PyTorch")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--emit-embeddings", help="write PyTorch's embeddings of the ids here (.npy float32)")
    p.add_argument("--cache-dir", default=os.path.join(ROOT, "build", "peers-cache"))
    a = p.parse_args()

    peers = [x for x in a.peers.split(",") if x]
    bad = [x for x in peers if x not in PEERS] or ([] if "pytorch" in peers else ["(pytorch is required)"])
    if bad:
        raise common.Error(f"--peers: unknown or missing {', '.join(bad)}")
    model_dir = common.model_dir(a.model_dir)
    mode, normalize = pooling_of(model_dir)

    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModel

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    config = AutoConfig.from_pretrained(model_dir)
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_padding()  # a tokenizer.json may carry padding settings (all-MiniLM-L6-v2's pads to 128)
    special = tok.encode("").ids
    if len(special) != 2:
        raise common.Error(f"{model_dir}: expected 2 special tokens around a text, got {special}")
    ids, mask = load_ids(a, np, config.vocab_size, special)
    batch, seq = ids.shape
    offset = 2 if config.model_type in ("mpnet", "roberta", "xlm-roberta") else 0  # padding_idx + 1 positions
    if seq > config.max_position_embeddings - offset:
        raise common.Error(f"seq {seq} exceeds the model's {config.max_position_embeddings - offset} positions")

    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
    embedder = make_embedder(torch, model.eval(), mode, normalize)
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)
    with torch.inference_mode():
        ref = embedder(t_ids, t_mask).numpy()
    # The pooling above must be what sentence-transformers itself computes for this model.
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(model_dir, device="cpu")
    with torch.inference_mode():
        st_emb = st({"input_ids": t_ids, "attention_mask": t_mask})["sentence_embedding"].numpy()
    del st
    if float(np.abs(st_emb - ref).max()) > 1e-5:
        raise common.Error(f"AutoModel + {mode} pooling differs from sentence-transformers by {np.abs(st_emb - ref).max():.3g}")
    if a.emit_embeddings:
        common.save_npy(a.emit_embeddings, np.ascontiguousarray(ref, dtype=np.float32))

    def run_torch():
        with torch.inference_mode():
            return embedder(t_ids, t_mask).numpy()

    runners = {"pytorch": (run_torch, torch.__version__)}
    notes = {}
    name = os.path.basename(model_dir.rstrip("/"))
    # Traced graphs are shape-specialised, and transformers drops an all-ones mask while tracing: key both.
    masked = "full" if mask.all() else "padded"
    onnx_path = os.path.join(a.cache_dir, f"{name}-{fingerprint(model_dir)}-b{batch}-s{seq}-{masked}.onnx")
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "onnxruntime" in peers or "openvino" in peers:
        export_onnx(torch, embedder, ids, mask, onnx_path)
    if "onnxruntime" in peers:
        run, version = onnxruntime_runner(onnx_path, a.threads)
        runners["onnxruntime"] = (lambda: run(feeds), version)
    if "openvino" in peers:
        try:
            run_ov, version = openvino_runner(onnx_path, a.threads)
        except ImportError as e:
            notes["openvino"] = f"not importable: {e}"
        else:
            runners["openvino"] = (lambda: run_ov(feeds), version)

    diffs = {}
    for peer, (fn, _) in runners.items():
        out = np.asarray(fn(), dtype=np.float32)
        if out.shape != ref.shape:
            raise common.Error(f"{peer}: output shape {out.shape}, PyTorch's is {ref.shape}")
        diffs[peer] = float(np.abs(out - ref).max())
        if not diffs[peer] < a.tolerance:
            raise common.Error(f"{peer}: embeddings differ from PyTorch's by {diffs[peer]:.3g} (> {a.tolerance})")
    for _ in range(a.warmup):
        for fn, _ in runners.values():
            fn()
    times = {peer: [] for peer in runners}
    for _ in range(a.reps):
        for peer, (fn, _) in runners.items():
            t0 = time.perf_counter()
            fn()
            times[peer].append((time.perf_counter() - t0) * 1e3)

    result = {"model": name, "model_dir": model_dir, "seq": seq, "batch": batch, "threads": a.threads,
              "reps": a.reps, "cpu": cpu_name(), "dim": int(ref.shape[1]), "pooling": mode, "normalize": normalize,
              "peers": {}}
    for peer, (_, version) in runners.items():
        result["peers"][peer] = {"ms": round(min(times[peer]), 4), "median_ms": round(statistics.median(times[peer]), 4),
                                 "version": str(version), "max_abs_diff": diffs[peer]}
    for peer, note in notes.items():
        result["peers"][peer] = {"skipped": note}
    if a.json:
        common.write_json(a.json, result)

    print(f"{name}: batch {batch}, seq {seq}, {a.threads} thread(s), best/median of {a.reps} ({result['cpu']})")
    print(f"{'peer':<12} {'version':<22} {'best ms':>9} {'median ms':>10} {'max |diff|':>11}")
    for peer, r in result["peers"].items():
        if "skipped" in r:
            print(f"{peer:<12} skipped: {r['skipped']}")
        else:
            print(f"{peer:<12} {r['version'].split('-')[0]:<22} {r['ms']:>9.3f} {r['median_ms']:>10.3f} {r['max_abs_diff']:>11.2e}")
    sys.stdout.flush()


if __name__ == "__main__":
    common.run(main)
