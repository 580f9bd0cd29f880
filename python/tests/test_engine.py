"""sparse24.Engine on the real text encoder (models/, made by scripts/setup.sh) against sentence-transformers
and the C++ tool."""
import subprocess

import numpy as np
import pytest

import sparse24
from conftest import model_dir

TEXTS = ["In the beginning God created the heaven and the earth.", "Jesus wept.",
         "And God said, Let there be light: and there was light."]


@pytest.fixture(scope="module")
def minilm():
    return model_dir("all-MiniLM-L6-v2")


def test_embed_matches_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    e = sparse24.Engine.load(str(minilm), mode="dense", threads=2)
    assert e.is_text and e.dim == 384 and e.plan is None
    # the word embeddings (30522 x 384, float32) stay in model.safetensors; the rest is held
    assert e.stored_bytes == 30522 * 384 * 4 and 0 < e.weight_bytes < e.stored_bytes
    got = e.embed(TEXTS)
    ref = st.SentenceTransformer(str(minilm), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(got, ref, atol=2e-5)
    # ids in, the same out; one text at a time, the same as a batch
    np.testing.assert_allclose(e.run([e.tokenize(t) for t in TEXTS]), got, atol=1e-6)
    np.testing.assert_allclose(e.embed(TEXTS[1:2])[0], got[1], atol=1e-6)


def test_embed_equals_cli(minilm, cli, tmp_path):
    cli("embed", minilm, "--mode", "sparse", "--text", *TEXTS, "-o", tmp_path / "e.npy")
    e = sparse24.Engine.load(str(minilm), mode="sparse")
    np.testing.assert_allclose(e.embed(TEXTS), np.load(tmp_path / "e.npy"), atol=1e-6)


def test_engine_hostile(minilm):
    e = sparse24.Engine.load(str(minilm), mode="dense")
    with pytest.raises(sparse24.Error):
        e.run([[1, 2, 10 ** 9]])
    with pytest.raises(sparse24.Error):
        e.run([[]])
    with pytest.raises(sparse24.Error, match="embed"):
        e.run(np.zeros((1, 4), np.float32))
    assert e.embed([]).shape == (0, 384)


def test_threads_share_an_engine(minilm):
    import concurrent.futures
    e = sparse24.Engine.load(str(minilm), mode="dense")
    want = e.embed(TEXTS)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # the GIL is released; the engine serialises
        for got in pool.map(lambda _: e.embed(TEXTS), range(8)):
            np.testing.assert_allclose(got, want, atol=1e-6)


def test_narrower_sparse_weights(minilm, cli, tmp_path):
    """weights='bf16' / 'int8' (and bf16_activations) on a 2:4 MiniLM: near the fp32 2:4 embeddings, not equal
    to them; the dense mode runs the same narrowed values."""
    pruned = tmp_path / "minilm-24"
    cli("prune-model", minilm, "-o", pruned)
    fp32 = sparse24.Engine.load(str(pruned), mode="sparse").embed(TEXTS)
    for weights in ("bf16", "int8"):
        for xbf16 in (False, True):
            e = sparse24.Engine.load(str(pruned), mode="sparse", weights=weights, bf16_activations=xbf16)
            got = e.embed(TEXTS)
            cos = np.sum(got * fp32, axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(fp32, axis=1)
            assert cos.min() > 0.999 and np.abs(got - fp32).max() > 0, (weights, xbf16, cos)
            if not xbf16:
                dense = sparse24.Engine.load(str(pruned), mode="dense", weights=weights).embed(TEXTS)
                np.testing.assert_allclose(got, dense, atol=1e-5)
    # the CLI's flags are the same precision
    cli("embed", pruned, "--mode", "sparse", "--int8", "--text", *TEXTS, "-o", tmp_path / "e.npy")
    want = sparse24.Engine.load(str(pruned), mode="sparse", weights="int8").embed(TEXTS)
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), want, atol=1e-6)
    # eval-embed of the int8 model against the fp32 one, each text alone (a query's tokens per call)
    lines = tmp_path / "lines.txt"
    lines.write_text("\n".join(f"{t} ({i})" for i in range(4) for t in TEXTS) + "\n")
    cli("eval-embed", pruned, pruned, "--input", lines, "--batch", "1", "--int8", "--json", tmp_path / "q.json")
    import json
    q = json.loads((tmp_path / "q.json").read_text())
    assert q["texts"] == 12 and 0.999 < q["mean_cosine"] < 1.0, q
    with pytest.raises(sparse24.Error, match="bf16_activations"):
        sparse24.Engine.load(str(pruned), bf16_activations=True)
    with pytest.raises(sparse24.Error, match="int4"):
        sparse24.Engine.load(str(pruned), weights="int4")


def test_bench_model_rows(minilm, cli, tmp_path):
    """bench-model times dense and the 2:4 copy with fp32, bf16 and int8 values (and bf16 activations where the
    CPU has them), each narrower row's embeddings within a cosine of the fp32 2:4 row's."""
    cli("bench-model", minilm, "--seq", "4", "--reps", "1", "--no-peers", "--json", tmp_path / "b.json")
    import json
    r = json.loads((tmp_path / "b.json").read_text())["runtimes"]
    assert {"sparse24_dense", "sparse24_2to4", "sparse24_2to4_bf16", "sparse24_2to4_int8"} <= set(r)
    for key, row in r.items():
        assert row["ms"] > 0 and row["weight_bytes"] > 0, key
        if key not in ("sparse24_dense", "sparse24_2to4"):
            assert 0.999 < row["min_cosine_vs_2to4_fp32"] < 1.0, (key, row)


def test_bench_embed_against_encode(minilm, cli, tmp_path):
    """bench-embed embeds a text file end to end in every row and in the peers (sentence-transformers' encode,
    ONNX Runtime on encode's padded batches): the same tokens, our dense embeddings checked against encode's
    inside the command, the narrower rows near the fp32 2:4 row."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("onnxruntime")
    import json
    lines = tmp_path / "lines.txt"
    long = " ".join(["And it came to pass"] * 80)  # past MiniLM's max_seq_length (256): truncated alike
    lines.write_text("\n".join([*TEXTS, "", long, "Jesus wept. " * 3]) + "\n")
    cli("bench-embed", minilm, "--input", lines, "--batch", "2", "--reps", "1", "--threads", "2",
        "--peers", "sentence-transformers,onnxruntime", "--json", tmp_path / "b.json")
    r = json.loads((tmp_path / "b.json").read_text())
    assert r["texts"] == 6 and r["tokens"] == r["peer_tokens"] and r["tokens"] > 256, r
    assert set(r["peers"]) == {"sentence-transformers", "onnxruntime"}
    for name, p in r["peers"].items():
        assert p["s"] > 0 and p["max_abs_diff"] < 1e-3, (name, p)
    for key, row in r["runtimes"].items():
        assert row["texts_per_s"] > 0 and row["vs_best_peer"] > 0, key
        if key not in ("sparse24_dense", "sparse24_2to4"):
            assert 0.995 < row["min_cosine_vs_2to4_fp32"] < 1.0, (key, row)  # int8 x int8: 0.9986 seen
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe not utf-8\n")
    with pytest.raises(subprocess.CalledProcessError) as e:
        cli("bench-embed", minilm, "--input", bad, "--no-peers")
    assert "not UTF-8" in e.value.stderr and e.value.stderr.count("\n") == 1
