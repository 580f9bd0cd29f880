# What bf16 or int8 activations (--bf16-activations, --int8-activations; PackOptions) do to a real decoder:
# SmolLM2-135M pruned 2:4 by SparseGPT (128 calibration lines of the KJV training books), perplexity over 32
# windows of 512 tokens of two texts and the logits of 256 tokens, with fp32 / bf16 / int8 2:4 weights and
# fp32, bf16 or (int8 weights) int8 activations, beside transformers (LlamaForCausalLM, fp32) on the same
# checkpoint. Configurations whose activations do not take effect on this CPU say so. docs/accuracy.md.
# Usage (after scripts/make_corpora.sh corpora):
#   .venv/bin/python scripts/activations_accuracy.py --model models/SmolLM2-135M-Instruct-hf \
#       --corpora corpora --work /tmp/xact
import argparse, json, math, os, subprocess, sys

import numpy as np

CTX = 512
CONFIGS = {"fp32": [], "bf16": ["--bf16"], "bf16 x bf16": ["--bf16", "--bf16-activations"], "int8": ["--int8"],
           "int8 x bf16": ["--int8", "--bf16-activations"], "int8 x int8": ["--int8", "--int8-activations"]}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout + r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparse24", default=os.path.join(os.path.dirname(__file__), "..", "build", "sparse24"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--windows", type=int, default=32, help="512-token windows of each text")
    a = ap.parse_args()
    WINDOWS = a.windows
    os.makedirs(a.work, exist_ok=True)
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(a.model)
    ids = {}
    for name in ("kjv-heldout", "fortunes"):
        text = open(os.path.join(a.corpora, name + ".txt")).read()
        ids[name] = tok(text[:120000], add_special_tokens=False)["input_ids"][: CTX * WINDOWS]
        assert len(ids[name]) == CTX * WINDOWS, len(ids[name])
        open(os.path.join(a.work, name + ".ids"), "w").write(" ".join(map(str, ids[name])) + "\n")
    sg = os.path.join(a.work, "sgpt")
    if not os.path.exists(sg):
        run([a.sparse24, "prune-model", a.model, "-o", sg, "--method", "sparsegpt", "--calib",
             os.path.join(a.corpora, "kjv-train.txt"), "--calib-lines", "128"])
    for name in ids:
        for c, flags in CONFIGS.items():
            js = os.path.join(a.work, f"{name}-{c.replace(' ', '_')}.json")
            run([a.sparse24, "perplexity", sg, "--input-ids", os.path.join(a.work, name + ".ids"), "--ctx",
                 str(CTX), "--json", js] + flags)
            j = json.load(open(js))
            print(f"{name} {c}: perplexity {j['perplexity']:.4f} (bf16 / int8 activations in effect: "
                  f"{j['bf16_activations']} / {j['int8_activations']})", flush=True)
    dd = os.path.join(a.work, "sgpt-dense")
    if not os.path.exists(dd):
        run([a.sparse24, "convert", sg, dd, "--to", "dense"])
    model = LlamaForCausalLM.from_pretrained(dd, torch_dtype=torch.float32).eval()
    for name in ids:
        nll, n = 0.0, 0
        with torch.no_grad():
            for w in range(WINDOWS):
                x = torch.tensor([ids[name][w * CTX:(w + 1) * CTX]])
                logp = torch.log_softmax(model(x).logits[0].double(), -1)
                nll -= logp[torch.arange(CTX - 1), x[0, 1:]].sum().item()
                n += CTX - 1
        print(f"{name} transformers fp32: perplexity {math.exp(nll / n):.4f}", flush=True)
    # The logits of the first 256 held-out tokens in one pass, against transformers.
    seq = ids["kjv-heldout"][:256]
    open(os.path.join(a.work, "seq.ids"), "w").write(" ".join(map(str, seq)) + "\n")
    with torch.no_grad():
        ref = model(torch.tensor([seq])).logits[0].double().numpy()
    got = {}
    for c, flags in CONFIGS.items():
        out = os.path.join(a.work, f"logits-{c.replace(' ', '_')}.npy")
        run([a.sparse24, "logits", sg, "--ids", os.path.join(a.work, "seq.ids"), "-o", out] + flags)
        got[c] = np.load(out).astype(np.float64)
        d = np.abs(got[c] - ref)
        top = (got[c].argmax(-1) == ref.argmax(-1)).mean()
        print(f"logits {c}: against transformers max abs diff {d.max():.4f}, mean {d.mean():.5f}, top-1 "
              f"equal {top * 100:.1f}% of {len(seq)}", flush=True)
    for w, x in (("bf16", "bf16"), ("int8", "bf16"), ("int8", "int8")):
        a32, ax = got[w], got[f"{w} x {x}"]
        print(f"logits {w} x {x} against {w}: max abs diff {np.abs(a32 - ax).max():.4f}, top-1 equal "
              f"{(a32.argmax(-1) == ax.argmax(-1)).mean() * 100:.1f}%", flush=True)


if __name__ == "__main__":
    main()
