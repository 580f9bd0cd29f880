"""sparse24.Decoder on the real decoder (models/SmolLM2-135M-Instruct-hf, made by scripts/setup.sh) against
transformers (PyTorch) and the C++ tool."""
import numpy as np
import pytest

import sparse24
from conftest import ROOT, model_dir

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


@pytest.mark.parametrize("weights", ["int8", "bf16"])
def test_prefill_layout(smol24, cli, tmp_path, weights):
    # A prompt of more than 16 tokens runs on the compute-bound layout, which keeps int8 and bf16 values in
    # their type (about twice the memory-bound layout's bytes, not four or three times as when it held fp32):
    # the same logits up to summation order as the memory-bound layout's, and the tool's with --prefill-layout.
    base = sparse24.Decoder.load(str(smol24), weights=weights, max_context=128)
    d = sparse24.Decoder.load(str(smol24), weights=weights, max_context=128, prefill_layout=True)
    assert base.weight_bytes < d.weight_bytes < 2 * base.weight_bytes
    ids = d.tokenize(" ".join(PROMPTS * 3))
    assert len(ids) > 16
    got = d.forward(ids, all=True)
    np.testing.assert_allclose(got, base.forward(ids, all=True), atol=2e-3, rtol=0)
    (tmp_path / "ids.txt").write_text(" ".join(map(str, ids)) + "\n")
    cli("logits", smol24, "--ids", tmp_path / "ids.txt", "-o", tmp_path / "l.npy", "--" + weights, "--prefill-layout")
    np.testing.assert_allclose(got, np.load(tmp_path / "l.npy"), atol=1e-5, rtol=0)


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


def test_pruned_as_read_equals_cli(smol, cli, tmp_path):
    """Decoder.load(prune=True) and the tool's --prune read the model the same way (pruned, with int8 weights
    quantized, layer by layer) and pick the same tokens; the logits equal those of the pruned checkpoint
    `convert --prune` writes (the same magnitude pruning, done at load time)."""
    d = sparse24.Decoder.load(str(smol), weights="int8", max_context=64, prune=True, threads=2)
    assert d.sparse_linears == 4 * 30
    ids = d.tokenize(PROMPTS[0])
    out = cli("generate", smol, "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", 8, "--prune", "--int8")
    assert d.generate(ids, max_tokens=8) == [int(t) for t in out.split()]
    cli("convert", smol, tmp_path / "24", "--to", "sparse24", "--prune")
    d.reset()
    want = sparse24.Decoder.load(str(tmp_path / "24"), weights="int8", max_context=64).forward(ids, all=True)
    np.testing.assert_array_equal(d.forward(ids, all=True), want)


def test_a_gguf_head_runs_in_its_file(smol):
    """The SmolLM2 GGUF's tied Q8_0 table (its embeddings and its head) stays in the file and the head runs
    there as stored, whatever the weights: stored_bytes is the table as stored (49,152 x 576 in blocks of 32
    values in 34 bytes) and weight_bytes counts it; the logits are the directory's (the same weights,
    dequantized) but for the head's summation order."""
    gguf_file = ROOT / "models" / "SmolLM2-135M-Instruct" / "model.gguf"
    if not gguf_file.is_file():
        pytest.skip(f"{gguf_file} not present (scripts/setup.sh puts it there)")
    table = 49152 * 576 // 32 * 34
    ids = None
    for weights in ("fp32", "bf16", "int8"):
        g = sparse24.Decoder.load(str(gguf_file), weights=weights, max_context=64)
        assert g.stored_bytes == table, weights
        assert g.weight_bytes > table, weights
        if weights == "fp32":
            ids = g.tokenize(PROMPTS[1])
            got = g.forward(ids, all=True)
    want = sparse24.Decoder.load(str(smol), max_context=64).forward(ids, all=True)
    assert np.abs(got - want).max() < 2e-4 * np.abs(want).max()


def peak_rss_kb(*args):
    """Runs a command; its peak resident set (kB). Through a small Python: a child forked from this process
    (torch and all) would start its count at this process's size."""
    import subprocess
    import sys

    code = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, capture_output=True, text=True)
    return int(out.stdout)


def write_q8_llama_gguf(path, H, F, layers, heads, context, tokens=None, attn_norm=1.0):
    """A random Llama as llama.cpp writes a quantized one: F32 embeddings (a vocabulary of 1,024, or of
    `tokens` with a byte-level BPE tokenizer over them) and norms (the attention norms `attn_norm`), Q8_0
    Linears (normal x 0.02, seed 0); returns each Linear's values as gguf dequantizes them, by GGUF name."""
    gguf = pytest.importorskip("gguf")
    vocab = len(tokens) if tokens else 1024
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(context)
    w.add_embedding_length(H)
    w.add_feed_forward_length(F)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    if tokens:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types([3] + [1] * (len(tokens) - 1))
        w.add_token_merges(["A B"])
    g = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", g.standard_normal((vocab, H), dtype=np.float32) * 0.02)
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    linears = {}
    for l in range(layers):
        w.add_tensor(f"blk.{l}.attn_norm.weight", np.full(H, attn_norm, np.float32))
        w.add_tensor(f"blk.{l}.ffn_norm.weight", np.ones(H, np.float32))
        for name, rows, cols in (("attn_q", H, H), ("attn_k", H, H), ("attn_v", H, H), ("attn_output", H, H),
                                 ("ffn_gate", F, H), ("ffn_up", F, H), ("ffn_down", H, F)):
            q = gguf.quants.quantize(g.standard_normal((rows, cols), dtype=np.float32) * 0.02,
                                     gguf.GGMLQuantizationType.Q8_0)
            linears[f"blk.{l}.{name}.weight"] = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(f"blk.{l}.{name}.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return linears


def test_pruned_int8_load_never_holds_the_model_in_fp32(tmp_path):
    """A model read with --prune --int8 peaks under its Linears' fp32 bytes (here 512 MiB: read whole into fp32
    first, as before, it could not peak below them; measured 381 MiB), and under 0.7 of the dense load's
    peak (668 MiB)."""
    import os

    pytest.importorskip("gguf")
    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    H, F, layers = 1024, 4096, 8
    path = tmp_path / "m.gguf"
    linear_params = sum(v.size for v in write_q8_llama_gguf(path, H, F, layers, heads=16, context=256).values())
    run = [cli_path, "generate", path, "--prompt-ids", "1,2,3", "--max-tokens", 2]
    dense = peak_rss_kb(*run)
    pruned = peak_rss_kb(*run, "--prune", "--int8")
    fp32_kb = linear_params * 4 / 1024
    assert dense > fp32_kb  # the measure sees the fp32 model
    assert pruned < 0.9 * fp32_kb and pruned < 0.7 * dense, (pruned, dense, fp32_kb)


def write_sharded_bf16_llama(path, layers=16, H=1024, F=4096, vocab=1024):
    """A random Llama as Hugging Face directories hold real checkpoints: bf16, in two shards with an index;
    returns the shards' bytes."""
    import json
    import os

    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": F,
        "num_hidden_layers": layers, "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": vocab,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True}))
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    weight_map, shard_bytes = {}, 0
    for shard, span in enumerate((range(0, layers // 2), range(layers // 2, layers))):
        name = f"model-0000{shard + 1}-of-00002.safetensors"
        tensors = {"model.embed_tokens.weight": randn(vocab, H)} if shard == 0 else {"model.norm.weight":
                                                                                    torch.ones(H, dtype=torch.bfloat16)}
        for l in span:
            p = f"model.layers.{l}."
            tensors[p + "input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
            tensors[p + "post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
            for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                tensors[p + f"self_attn.{proj}.weight"] = randn(H, H)
            for proj, shape in (("gate_proj", (F, H)), ("up_proj", (F, H)), ("down_proj", (H, F))):
                tensors[p + f"mlp.{proj}.weight"] = randn(*shape)
        st.save_file(tensors, str(path / name))
        shard_bytes += os.path.getsize(path / name)
        weight_map.update({t: name for t in tensors})
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return shard_bytes


CALIBRATION = ["In the beginning God created the heaven and the earth.",
               "And the earth was without form, and void; and darkness was upon the face of the deep."] * 8


def write_calibration(model, tmp_path):
    """A byte-level BPE tokenizer.json for `model` (trained by `tokenizers` on CALIBRATION) and the calibration
    text as a file, one line per text; returns the file."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(CALIBRATION * 4, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok.save(str(model / "tokenizer.json"))
    calib = tmp_path / "calib.txt"
    calib.write_text("\n".join(CALIBRATION) + "\n")
    return calib


def test_pruned_int8_load_of_a_directory_never_holds_its_shards(tmp_path):
    """A Hugging Face directory (bf16, as real checkpoints are, in two shards) read with --prune --int8 peaks
    under the bytes of its shards: they are mapped and each tensor's pages dropped once it is converted,
    never copied into memory whole (as read_hf_dir did before, so the peak could not go below them). With
    --prune --bf16 under 0.9 of them: the 2:4 values are rounded to bf16 as each layer is read (held pruned in
    fp32 first, as before session 45, they alone were 1.06 of the shards' bytes)."""
    import os

    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    shard_bytes = write_sharded_bf16_llama(tmp_path)
    run = [cli_path, "generate", tmp_path, "--prompt-ids", "1,2,3", "--max-tokens", 2]
    dense = peak_rss_kb(*run)
    pruned = peak_rss_kb(*run, "--prune", "--int8")
    assert dense > 2 * shard_bytes / 1024  # the measure sees the fp32 model (twice the bf16 bytes)
    assert pruned < 0.8 * shard_bytes / 1024, (pruned, dense, shard_bytes / 1024)
    bf16 = peak_rss_kb(*run, "--prune", "--bf16")
    assert bf16 < 0.9 * shard_bytes / 1024, (bf16, dense, shard_bytes / 1024)


def test_prune_model_of_a_directory_holds_a_layer_at_a_time(tmp_path):
    """prune-model of a decoder directory (bf16, two shards) reads it layer by layer and writes each layer as a
    shard of its own: Wanda's calibrated pruning peaks under 0.6 of the input's bytes (measured 244 of 514 MiB:
    a layer in fp32, its dense copy for the calibration pass, its bf16 output; reading the directory whole, as
    before, took all of them and the fp32 model, twice them, beside), and the output keeps bf16 values (in the
    kernels' layout), is sharded and runs; interrupted, it leaves nothing behind."""
    import json
    import os
    import subprocess

    safetensors = pytest.importorskip("safetensors")
    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    model = tmp_path / "model"
    model.mkdir()
    shard_bytes = write_sharded_bf16_llama(model)
    calib = write_calibration(model, tmp_path)
    out = tmp_path / "pruned"
    peak = peak_rss_kb(cli_path, "prune-model", model, "-o", out, "--method", "wanda", "--calib", calib,
                       "--calib-ctx", 64)
    assert peak < 0.6 * shard_bytes / 1024, (peak, shard_bytes / 1024)
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(index.values())) == 17  # a shard per layer and one for the rest
    with safetensors.safe_open(str(out / index["model.layers.3.mlp.down_proj.weight.lanes"]), "np") as f:
        assert f.metadata()["model.layers.3.mlp.down_proj.weight.lanes_dtype"] == "BF16"  # (the kernels' layout)
    ran = subprocess.run([cli_path, "generate", str(out), "--prompt-ids", "1,2,3", "--max-tokens", "2"],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    # Interrupted (Ctrl-C) once its first shards are written: it stops with an error and leaves nothing.
    import signal
    import time

    out2 = tmp_path / "interrupted"
    p = subprocess.Popen([cli_path, "prune-model", str(model), "-o", str(out2), "--method", "wanda", "--calib",
                          str(calib), "--calib-ctx", "64"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while p.poll() is None and not list(tmp_path.glob("interrupted.tmp.*/.sparse24-part-*")):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=300)
    assert p.returncode != 0 and "interrupted" in err, err
    assert not out2.exists() and not list(tmp_path.glob("interrupted*")), list(tmp_path.iterdir())



def test_prune_model_of_a_quantized_gguf_writes_bf16(tmp_path):
    """prune-model of a GGUF file (read a layer at a time) writes a quantized type's weights in bf16: the kept
    values of each pruned Linear are bf16 of gguf's own dequantization, 2 of each 4 nonzero, the norms and the
    F32 embeddings stay F32, config.json says bfloat16, the output runs."""
    import json
    import os
    import subprocess

    pytest.importorskip("gguf")
    torch = pytest.importorskip("torch")
    safetensors = pytest.importorskip("safetensors")
    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    H, F, layers = 256, 512, 2
    tokens = ["<|s|>"] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + ["\u0120", "AB"]
    path = tmp_path / "m.gguf"
    q8 = write_q8_llama_gguf(path, H, F, layers, heads=4, context=64, tokens=tokens, attn_norm=1.5)
    out = tmp_path / "pruned"
    ran = subprocess.run([cli_path, "prune-model", str(path), "-o", str(out)], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "pruned"]
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    dense = tmp_path / "dense"  # the 2:4 layout read back as plain tensors
    ran = subprocess.run([cli_path, "convert", str(out), str(dense), "--to", "dense"], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    tensors = {}
    for shard in dense.glob("*.safetensors"):
        with safetensors.safe_open(str(shard), "pt") as f:
            tensors.update({k: f.get_tensor(k) for k in f.keys()})
    assert tensors["model.embed_tokens.weight"].dtype == torch.float32
    assert tensors["model.layers.1.input_layernorm.weight"].dtype == torch.float32
    assert torch.all(tensors["model.layers.1.input_layernorm.weight"] == 1.5)
    for l in range(layers):  # Q's and K's rows are in transformers' order: the others compared
        for hf, gg in (("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                       ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
            got = tensors[f"model.layers.{l}.{hf}.weight"]
            assert got.dtype == torch.bfloat16
            want = torch.from_numpy(q8[f"blk.{l}.{gg}.weight"]).to(torch.bfloat16)
            kept = got != 0
            assert torch.equal(got[kept], want[kept]), hf
            assert int(kept.reshape(got.shape[0], -1, 4).sum(-1).max()) <= 2, hf
            assert kept.float().mean() > 0.49, hf
    ran = subprocess.run([cli_path, "generate", str(out), "--prompt-ids", "1,2,3", "--max-tokens", "2"],
                         capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr


def from_lanes(data, rows, cols, kb):
    """A 2:4 int8 layer stored in the kernels' layout (docs/formats.md: tensor <name>.lanes, __metadata__
    <name>.lanes_kb), decoded with numpy from the documented layout alone: its int8 values [rows, cols / 2],
    4-bit codes [rows, cols / 8] and fp32 scales [rows, cols / 64] (rows a multiple of 8, cols of 64)."""
    blocks, supers, per = rows // 8, cols // 64, kb // 64
    entries = np.frombuffer(data.tobytes(), np.uint8).reshape(-1, 352)
    index = np.empty((blocks, supers), np.int64)  # K block, then row block, then super chunk
    for s in range(supers):
        s0 = s // per * per
        index[:, s] = blocks * s0 + np.arange(blocks) * min(per, supers - s0) + (s - s0)
    e = entries[index]  # [row block, super chunk, 352]
    codes = e[..., :64].reshape(blocks, supers, 2, 8, 4).transpose(0, 3, 1, 2, 4).reshape(rows, cols // 8)
    scales = e[..., 64:96].copy().view("<f4").reshape(blocks, supers, 8).transpose(0, 2, 1).reshape(rows, supers)
    values = e[..., 96:].view(np.int8).reshape(blocks, supers, 32, 8).transpose(0, 3, 1, 2).reshape(rows, cols // 2)
    return values, codes, scales


def test_prune_model_int8_writes_scaled_int8_values(tmp_path):
    """prune_model(int8=True) of a Q8_0 GGUF file writes each Linear as int8 values, 4-bit codes and fp32
    scales in the kernels' layout (the sparse24 layout's <name>.lanes and __metadata__ <name>.lanes_kb),
    read here with safetensors and numpy alone: the kept positions are the 2 largest |w| of each group of 4 of gguf's
    own dequantization, each kept value int8 * its scale within half a scale step of it, each scale the
    largest |w| kept in its 64 positions / 127; the embeddings an int8 table alike. The output runs; the bitmask
    layout is refused."""
    pytest.importorskip("gguf")
    safetensors = pytest.importorskip("safetensors.numpy")
    H, F, layers = 256, 512, 2
    tokens = ["<|s|>"] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + ["\u0120", "AB"]
    path = tmp_path / "m.gguf"
    q8 = write_q8_llama_gguf(path, H, F, layers, heads=4, context=64, tokens=tokens)
    out = tmp_path / "int8"
    import json
    import os
    import subprocess
    report = sparse24.prune_model(str(path), str(out), int8=True)
    assert len(report["weights"]) == 7 * layers
    tensors, meta = {}, {}
    for shard in out.glob("*.safetensors"):
        tensors.update(safetensors.load_file(str(shard)))
        with open(shard, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
            meta.update(header.get("__metadata__", {}))
    for l in range(layers):  # Q's and K's rows are in transformers' order: the others compared
        for hf, gg in (("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                       ("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"), ("mlp.down_proj", "ffn_down")):
            name = f"model.layers.{l}.{hf}.weight"
            want = q8[f"blk.{l}.{gg}.weight"].astype(np.float32)
            rows, cols = want.shape
            assert meta[name + ".lanes_kb"] == "1024" and meta[name + ".lanes_dtype"] == "I8"
            assert meta[name + ".shape"] == f"[{rows}, {cols}]"
            assert name + ".values" not in tensors and name + ".scale_group" not in meta
            values, codes, scales = from_lanes(tensors[name + ".lanes"], rows, cols, 1024)
            assert values.dtype == np.int8 and values.shape == (rows, cols // 2)
            assert codes.dtype == np.uint8 and codes.shape == (rows, cols // 8)
            assert scales.dtype == np.float32 and scales.shape == (rows, cols // 64)
            nibbles = np.stack([codes & 15, codes >> 4], axis=-1).reshape(rows, cols // 4)
            first, second = nibbles & 3, nibbles >> 2
            assert np.all(first < second), name
            groups = want.reshape(rows, cols // 4, 4)
            at = np.stack([first, second], axis=-1).astype(np.int64)
            kept = np.take_along_axis(groups, at, -1)
            dropped = np.abs(groups).copy()
            np.put_along_axis(dropped, at, -1.0, -1)
            assert np.all(np.abs(kept).min(-1) >= dropped.max(-1)), name  # the 2 largest |w| (ties either way)
            kept = kept.reshape(rows, cols // 2)
            scale = np.repeat(scales, 32, axis=1)  # 32 kept values per 64 positions
            assert np.all(np.abs(values * scale - kept) <= 0.5 * scale + 1e-7), name
            top = np.abs(kept).reshape(rows, cols // 64, 32).max(-1)
            assert np.allclose(scales, top / 127, rtol=1e-6), name
            # sparse24.load reads the layer back as the same matrix (its dequantized values where kept).
            (shard,) = [s for s in out.glob("*.safetensors") if name + ".lanes" in safetensors.load_file(str(s))]
            dense = sparse24.decompress(sparse24.load(shard)[name])
            want_dense = np.zeros((rows, cols // 4, 4), np.float32)
            np.put_along_axis(want_dense, at, (values * scale).reshape(rows, cols // 4, 2), -1)
            assert np.array_equal(dense, want_dense.reshape(rows, cols)), name
    # The (tied) embeddings: an int8 table with a scale per 64 of a row, the largest |w| there / 127; the
    # value within half a step of the file's; sparse24.load gives its values.
    import gguf
    embd = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    want = np.asarray(embd.data, np.float32).reshape(len(tokens), H)
    table, scales = tensors["model.embed_tokens.weight"], tensors["model.embed_tokens.weight.scales"]
    assert meta["model.embed_tokens.weight.scale_group"] == "64"
    assert table.dtype == np.int8 and table.shape == want.shape and scales.shape == (len(tokens), H // 64)
    assert np.allclose(scales, np.abs(want).reshape(len(tokens), H // 64, 64).max(-1) / 127, rtol=1e-6)
    step = np.repeat(scales, 64, axis=1)
    assert np.all(np.abs(table * step - want) <= 0.5 * step + 1e-7)
    (shard,) = [s for s in out.glob("*.safetensors") if "model.embed_tokens.weight" in safetensors.load_file(str(s))]
    loaded = sparse24.load(shard)["model.embed_tokens.weight"]
    assert loaded.dtype == np.float32 and np.array_equal(loaded, table * step)
    logits = sparse24.Decoder.load(str(out)).forward([1, 2, 3])
    assert logits.shape == (len(tokens),) and np.all(np.isfinite(logits))
    cli_path = os.environ.get("SPARSE24_CLI")
    if cli_path:  # inspect names the scales: I8/64 (one per 64 positions), 0.6875 bytes per 2:4 weight
        info = json.loads(subprocess.run([cli_path, "inspect", "--json", str(out)], check=True,
                                         capture_output=True, text=True).stdout)
        linears = [t for t in info["tensors"] if t["sparse"]]
        assert len(linears) == 7 * layers and all(t["dtype"] == "I8" and t["scale_group"] == 64 for t in linears)
        assert info["sparse_bytes_per_weight"] == pytest.approx(0.6875)
        text = subprocess.run([cli_path, "inspect", str(out)], check=True, capture_output=True, text=True).stdout
        assert f"{7 * layers} 2:4 (I8/64 {7 * layers})" in text and "I8/64 1)" in text, text
    with pytest.raises(sparse24.Error, match="only in the sparse24 layout"):
        sparse24.prune_model(str(path), str(tmp_path / "bm"), int8=True, format="sparse-24-bitmask")
    assert not (tmp_path / "bm").exists()


def test_bench_decode_rows(smol, cli, tmp_path):
    """bench-decode times the rows --runs names (without the dense row the model is pruned as read, so whether
    it came pruned is unknown: null), each with its weight bytes and its time to the first token; an unknown
    row is refused."""
    import json
    import subprocess

    cli("bench-decode", smol, "--runs", "int8,fp32", "--no-peers", "--prompt", 4, "--generate", 2, "--json",
        tmp_path / "b.json")
    b = json.loads((tmp_path / "b.json").read_text())
    assert set(b["runtimes"]) == {"sparse24 2:4 fp32", "sparse24 2:4 int8"}
    assert b["pruned_as_read"] is True and b["model_was_pruned"] is None
    fp32, int8 = b["runtimes"]["sparse24 2:4 fp32"], b["runtimes"]["sparse24 2:4 int8"]
    assert fp32["tokens_per_s"] > 0 and int8["tokens_per_s"] > 0
    assert fp32["first_token_s"] > 0 and int8["first_token_s"] > 0
    assert int8["weight_bytes"] < 0.5 * fp32["weight_bytes"]
    with pytest.raises(subprocess.CalledProcessError):
        cli("bench-decode", smol, "--runs", "fp16", "--no-peers")


def test_prune_model_from_python_is_the_cli(tmp_path):
    """sparse24.prune_model runs what `sparse24 prune-model` runs: SparseGPT with permutations on a small bf16
    Llama gives the same files as the CLI, reports every Linear, calls progress up to its total; errors are
    sparse24.Error, and an exception from progress stops it with nothing left behind."""
    import os
    import subprocess

    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    model = tmp_path / "model"
    model.mkdir()
    write_sharded_bf16_llama(model, layers=4, H=128, F=256, vocab=512)
    calib = write_calibration(model, tmp_path)
    seen = []
    # A work budget stops each permutation search at the same point in both runs (the seconds are not reached).
    kw = dict(method="sparsegpt", permute=True, permute_seconds=3600, permute_evaluations=3000, calib_ctx=64)
    report = sparse24.prune_model(str(model), str(tmp_path / "py"), calibration=CALIBRATION,
                                  progress=lambda done, total: seen.append((done, total)), **kw)
    assert len(report["weights"]) == 7 * 4 and report["calibration_tokens"] > 0, report
    assert [w["permutation"].startswith("with") for w in report["weights"]].count(True) == 2 * 4  # o and down
    assert any(w["stopped_early"] and 3000 <= w["evaluations"] < 3256 for w in report["weights"]), report
    assert seen and seen[-1][0] == seen[-1][1] and [d for d, _ in seen] == sorted(d for d, _ in seen), seen
    subprocess.run([cli_path, "prune-model", str(model), "-o", str(tmp_path / "cli"), "--method", "sparsegpt",
                    "--permute", "--permute-seconds", "3600", "--permute-evaluations", "3000",
                    "--calib", str(calib), "--calib-ctx", "64"],
                   check=True, capture_output=True)
    files = sorted(p.name for p in (tmp_path / "py").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "cli").iterdir())
    for name in files:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name

    with pytest.raises(sparse24.Error, match="already exists"):
        sparse24.prune_model(str(model), str(tmp_path / "py"))
    with pytest.raises(sparse24.Error, match="calibration"):
        sparse24.prune_model(str(model), str(tmp_path / "x"), method="wanda")
    with pytest.raises(sparse24.Error, match="no weight matched"):
        sparse24.prune_model(str(model), str(tmp_path / "x"), targets="nothing-like-this")

    def stop(done, total):
        if done >= 10:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        sparse24.prune_model(str(model), str(tmp_path / "stopped"), method="wanda", calibration=CALIBRATION,
                             calib_ctx=64, progress=stop)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("stopped", "x"))], list(tmp_path.iterdir())


def test_convert_from_python_is_the_cli(tmp_path):
    """sparse24.convert runs what `sparse24 convert` runs: a sharded bf16 Llama directory pruned into
    sparse-24-bitmask gives the CLI's files, a shard for each input shard, with a report of every Linear;
    converted back to dense the 2:4 weights hold the same values; errors are sparse24.Error and leave
    nothing."""
    import os
    import subprocess

    cli_path = os.environ.get("SPARSE24_CLI")
    if not cli_path:
        pytest.skip("needs the C++ tool (SPARSE24_CLI)")
    model = tmp_path / "model"
    model.mkdir()
    write_sharded_bf16_llama(model, layers=2, H=64, F=128, vocab=512)
    write_calibration(model, tmp_path)  # its tokenizer.json (carried along)
    shards = sorted(p.name for p in model.glob("*.safetensors"))
    report = sparse24.convert(str(model), str(tmp_path / "py"), "sparse-24-bitmask", prune=True)
    assert report["shards"] == len(shards) and len(report["pruned"]) == 7 * 2 and report["sparse_out"] == 14
    assert any("embed_tokens" in s for s in report["skipped"]), report
    subprocess.run([cli_path, "convert", str(model), str(tmp_path / "cli"), "--to", "sparse-24-bitmask", "--prune"],
                   check=True, capture_output=True)
    files = sorted(p.name for p in (tmp_path / "py").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert sorted(f for f in files if f.endswith(".safetensors")) == shards
    for name in files:
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    back = sparse24.convert(str(tmp_path / "py"), str(tmp_path / "dense"), "dense")
    assert back["sparse_in"] == 14 and back["sparse_out"] == 0
    a = sparse24.Decoder.load(str(tmp_path / "py"), max_context=8)
    b = sparse24.Decoder.load(str(tmp_path / "dense"), mode="dense", max_context=8)
    np.testing.assert_allclose(a.forward([1, 2, 3]), b.forward([1, 2, 3]), atol=1e-4, rtol=1e-4)

    with pytest.raises(sparse24.Error, match="already exists"):
        sparse24.convert(str(model), str(tmp_path / "py"), "sparse24")
    with pytest.raises(sparse24.Error, match="unknown checkpoint format"):
        sparse24.convert(str(model), str(tmp_path / "x"), "bitmask")
    with pytest.raises(sparse24.Error, match="not a valid regular expression"):
        sparse24.convert(str(model), str(tmp_path / "x"), "sparse24", targets="(")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("x")], list(tmp_path.iterdir())
