"""sparse24.Decoder on the real decoder (models/SmolLM2-135M-Instruct-hf, made by scripts/setup.sh) against
transformers (PyTorch) and the C++ tool."""
import numpy as np
import pytest

import sparse24
from conftest import model_dir

PROMPTS = ["In the beginning God created the heaven and the earth.", "The capital of France is"]


@pytest.fixture(scope="module")
def smol():
    return model_dir("SmolLM2-135M-Instruct-hf")


@pytest.fixture(scope="module")
def smol24(smol, cli, tmp_path_factory):
    """The model pruned 2:4 by magnitude into a sparse24 checkpoint by the C++ tool."""
    out = tmp_path_factory.mktemp("smol24") / "model"
    cli("convert", smol, out, "--to", "sparse24", "--prune")
    return out


def test_logits_and_greedy_tokens_match_transformers(smol):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(smol), dtype=torch.float32).eval()
    d = sparse24.Decoder.load(str(smol), max_context=64)
    assert d.vocab == ref.config.vocab_size and d.capacity == 64 and d.sparse_linears == 0
    for text in PROMPTS:
        ids = d.tokenize(text)
        with torch.no_grad():
            want = ref(torch.tensor([ids])).logits[0].numpy()
        d.reset()
        got = d.forward(ids, all=True)
        assert got.shape == (len(ids), d.vocab) and d.position == len(ids)
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=0)
        # Greedy decoding: transformers' tokens while its top two logits are apart by more than the
        # tolerance (closer ones may order either way within it).
        new = d.generate(ids, max_tokens=8)
        with torch.no_grad():
            seq = ref.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False,
                               output_scores=True, return_dict_in_generate=True)
        for i, scores in enumerate(seq.scores):
            top2 = torch.topk(scores[0], 2).values
            if top2[0] - top2[1] < 1e-3 or i >= len(new):
                break
            assert new[i] == int(seq.sequences[0, len(ids) + i]), (text, i)
        assert d.detokenize(ids) == text and d.generate(text, max_tokens=0) == ""


@pytest.mark.parametrize("weights,kv", [("fp32", "f32"), ("bf16", "f32"), ("int8", "f32"), ("int8", "f16")])
def test_pruned_equals_cli(smol24, cli, tmp_path, weights, kv):
    d = sparse24.Decoder.load(str(smol24), weights=weights, max_context=64, kv=kv)
    assert d.sparse_linears == 4 * 30
    ids = d.tokenize(PROMPTS[0])
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)) + "\n")
    flags = ([] if weights == "fp32" else ["--" + weights]) + ["--kv", kv]
    cli("logits", smol24, "--ids", tmp_path / "ids.txt", "-o", tmp_path / "l.npy", *flags)
    np.testing.assert_allclose(d.forward(ids, all=True), np.load(tmp_path / "l.npy"), atol=1e-5, rtol=0)
    out = cli("generate", smol24, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 10, *flags)
    assert d.generate(ids, max_tokens=10) == [int(t) for t in out.split()]
    # Sampled: the same seed, the same tokens as the tool.
    out = cli("generate", smol24, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 10, "--temperature",
              0.8, "--top-p", 0.9, "--seed", 7, *flags)
    assert d.generate(ids, max_tokens=10, temperature=0.8, top_p=0.9, seed=7) == [int(t) for t in out.split()]


def test_stream_equals_generate(smol24):
    d = sparse24.Decoder.load(str(smol24), max_context=48)
    for kwargs in ({}, {"temperature": 0.8, "top_p": 0.9, "seed": 7}):
        pieces = list(d.stream(PROMPTS[1], max_tokens=12, **kwargs))
        assert len(pieces) >= 2 and "".join(pieces) == d.generate(PROMPTS[1], max_tokens=12, **kwargs)
    # A full cache ends both (48 positions: the prompt and 40-odd tokens).
    assert "".join(d.stream(PROMPTS[1], max_tokens=100)) == d.generate(PROMPTS[1], max_tokens=100)
    assert d.position == d.capacity
    # Another call ends a stream.
    it = d.stream(PROMPTS[1], max_tokens=12)
    next(it)
    d.reset()
    assert list(it) == []


def test_perplexity_equals_cli(smol24, cli, tmp_path):
    text = " ".join(PROMPTS * 12)
    (tmp_path / "t.txt").write_text(text)
    d = sparse24.Decoder.load(str(smol24), weights="int8", max_context=32, prefill_layout=True)
    p = d.perplexity(text, ctx=32)
    assert p["windows"] >= 2 and p["scored"] == 31 * p["windows"] and d.position == 0
    out = cli("perplexity", smol24, "--input", tmp_path / "t.txt", "--ctx", 32, "--int8")
    assert f"perplexity {p['perplexity']:.4f}" in out
    assert np.isclose(np.log(p["perplexity"]), p["mean_nll"])


def test_decoder_hostile(smol, tmp_path):
    with pytest.raises(sparse24.Error, match="weights"):
        sparse24.Decoder.load(str(smol), weights="fp8")
    with pytest.raises(sparse24.Error, match="mode"):
        sparse24.Decoder.load(str(smol), mode="fast")
    with pytest.raises(sparse24.Error, match="kv"):
        sparse24.Decoder.load(str(smol), kv="bf16")
    with pytest.raises((sparse24.Error, OSError)):
        sparse24.Decoder.load(str(tmp_path))  # no config.json, no tokenizer
    d = sparse24.Decoder.load(str(smol), max_context=8)
    with pytest.raises(sparse24.Error):
        d.forward([d.vocab])  # outside the vocabulary
    with pytest.raises(sparse24.Error):
        d.forward([])
    with pytest.raises(sparse24.Error):
        d.forward(list(range(9)))  # more than the cache holds
    with pytest.raises(sparse24.Error):
        d.generate("", max_tokens=2)
    with pytest.raises(sparse24.Error, match="top_p"):
        d.generate([1, 2], top_p=0)
    with pytest.raises(sparse24.Error):
        d.perplexity([1, 2, 3], ctx=16)  # a window longer than the context
    with pytest.raises(TypeError):
        d.forward("not ids")
