"""Times embedding a whole corpus of texts, end to end (text in, sentence embeddings out), with
sentence-transformers' encode (PyTorch) and with ONNX Runtime and OpenVINO run the way encode runs
(its tokenizer, its length-sorted batches padded to their longest text), after checking that each one's
embeddings match encode's. `sparse24 bench-embed` runs it and merges its JSON with the engine's own timings.

  .venv/bin/python bench/peers/bench_embed_peers.py models/all-MiniLM-L6-v2 --texts texts.json --batch 32

Timing: each peer embeds the corpus once (warm-up, and the embeddings checked), then --reps rounds, the
peers in turn within a round; "s" is the best time for the corpus, "median_s" the median. The tokenizer runs
on one thread (TOKENIZERS_PARALLELISM=false, as sparse24's); the models on --threads.
"""
import json
import os
import re
import statistics
import sys
import time

import bench_peers
import common

PEERS = ("sentence-transformers", "onnxruntime", "openvino")


def read_texts(path):
    try:
        with open(path, encoding="utf-8") as f:
            texts = json.load(f)
    except (OSError, ValueError) as e:
        raise common.Error(f"{path}: {e}") from None
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise common.Error(f"{path}: not a non-empty JSON list of strings")
    return texts


def main():
    p = common.Parser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir")
    p.add_argument("--texts", required=True, help="JSON list of the texts to embed")
    p.add_argument("--batch", type=common.positive("--batch"), default=32)
    p.add_argument("--threads", type=common.positive("--threads"), default=1)
    p.add_argument("--reps", type=common.positive("--reps"), default=3)
    p.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of " + ",".join(PEERS))
    p.add_argument("--tolerance", type=float, default=1e-3, help="max abs embedding difference to encode's")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--emit-embeddings", help="write encode's embeddings here (.npy float32 [texts, dim])")
    p.add_argument("--cache-dir", default=os.path.join(bench_peers.ROOT, "build", "peers-cache"))
    a = p.parse_args()

    peers = [x for x in a.peers.split(",") if x]
    bad = [x for x in peers if x not in PEERS] or ([] if PEERS[0] in peers else [f"({PEERS[0]} is required)"])
    if bad:
        raise common.Error(f"--peers: unknown or missing {', '.join(bad)}")
    model_dir = common.model_dir(a.model_dir)
    mode, normalize = bench_peers.pooling_of(model_dir)
    texts = read_texts(a.texts)

    import numpy as np
    import sentence_transformers
    import torch

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    st = sentence_transformers.SentenceTransformer(model_dir, device="cpu")

    def run_st():
        with torch.inference_mode():
            return st.encode(texts, batch_size=a.batch, convert_to_numpy=True, show_progress_bar=False)

    # encode's own batching for the other runtimes: texts sorted by length, longest first, its tokenizer
    # (padding to each batch's longest, truncation at max_seq_length), the embeddings put back in order.
    order = np.argsort([-len(t) for t in texts], kind="stable")
    batches = [[texts[i] for i in order[s:s + a.batch]] for s in range(0, len(texts), a.batch)]
    tokens = 0
    for b in batches:
        tokens += int(st.preprocess(b)["attention_mask"].sum())

    def batched(run):
        def go():
            out = []
            for b in batches:
                f = st.preprocess(b)
                out.append(run({"input_ids": f["input_ids"].numpy(), "attention_mask": f["attention_mask"].numpy()}))
            e = np.concatenate(out)
            return e[np.argsort(order, kind="stable")]
        return go

    runners = {"sentence-transformers": (run_st, sentence_transformers.__version__)}
    notes = {}
    if "onnxruntime" in peers or "openvino" in peers:
        from transformers import AutoModel

        name = os.path.basename(model_dir.rstrip("/"))
        onnx_path = os.path.join(a.cache_dir, f"{name}-{bench_peers.fingerprint(model_dir)}-dynamic.onnx")
        f = st.preprocess(texts[:2] + ["a"])  # a padded example: the traced graph then keeps the mask
        embedder = bench_peers.make_embedder(torch, AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval(),
                                             mode, normalize)
        bench_peers.export_onnx(torch, embedder, f["input_ids"].numpy(), f["attention_mask"].numpy(), onnx_path,
                                dynamic=True)
        del embedder
        if "onnxruntime" in peers:
            run, version = bench_peers.onnxruntime_runner(onnx_path, a.threads)
            runners["onnxruntime"] = (batched(run), version)
        if "openvino" in peers:
            try:
                run, version = bench_peers.openvino_runner(onnx_path, a.threads)
            except ImportError as e:
                notes["openvino"] = f"not importable: {e}"
            else:
                runners["openvino"] = (batched(run), version)

    ref = None
    diffs = {}
    for peer, (fn, _) in runners.items():  # the warm-up run, checked against encode's
        out = np.asarray(fn(), dtype=np.float32)
        if ref is None:
            ref = out
            if a.emit_embeddings:
                common.save_npy(a.emit_embeddings, np.ascontiguousarray(ref))
        if out.shape != ref.shape:
            raise common.Error(f"{peer}: output shape {out.shape}, encode's is {ref.shape}")
        diffs[peer] = float(np.abs(out - ref).max())
        if not diffs[peer] < a.tolerance:
            raise common.Error(f"{peer}: embeddings differ from encode's by {diffs[peer]:.3g} (> {a.tolerance})")
    times = {peer: [] for peer in runners}
    for _ in range(a.reps):
        for peer, (fn, _) in runners.items():
            t0 = time.perf_counter()
            fn()
            times[peer].append(time.perf_counter() - t0)

    result = {"model_dir": model_dir, "texts": len(texts), "tokens": tokens, "batch": a.batch,
              "threads": a.threads, "reps": a.reps, "cpu": bench_peers.cpu_name(), "dim": int(ref.shape[1]),
              "peers": {}}
    for peer, (_, version) in runners.items():
        result["peers"][peer] = {"s": round(min(times[peer]), 5), "median_s": round(statistics.median(times[peer]), 5),
                                 "version": str(version), "max_abs_diff": diffs[peer]}
    for peer, note in notes.items():
        result["peers"][peer] = {"skipped": note}
    if a.json:
        common.write_json(a.json, result)

    print(f"{len(texts)} texts, {tokens} tokens, batch {a.batch}, {a.threads} thread(s), best/median of {a.reps} "
          f"({result['cpu']})")
    print(f"{'peer':<22} {'version':<14} {'best s':>8} {'median s':>9} {'texts/s':>8} {'max |diff|':>11}")
    for peer, r in result["peers"].items():
        if "skipped" in r:
            print(f"{peer:<22} skipped: {r['skipped']}")
        else:
            print(f"{peer:<22} {re.split('[-+]', r['version'])[0]:<14} {r['s']:>8.3f} {r['median_s']:>9.3f} "
                  f"{len(texts) / r['s']:>8.1f} {r['max_abs_diff']:>11.2e}")
    sys.stdout.flush()


if __name__ == "__main__":
    common.run(main)
