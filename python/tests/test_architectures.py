"""The Llama-style decoder architectures (Llama with attention and MLP biases, Mistral with a sliding window,
Qwen2 with Q/K/V biases, Qwen3 with per-head Q/K norms, Gemma 2 and 3 with sliding and full layers, sandwich
norms, GELU, their scales and logit soft caps, Gemma 2's soft-capped scores) against the real implementations: small random
models made by transformers from its own configs, run by sparse24 from their directories, pruned 2:4, and as
GGUF files (written here under llama.cpp's conventions) run by sparse24, by llama.cpp (llama-cpp-python) and
converted back to directories that transformers loads."""
import json

import numpy as np
import pytest

import sparse24

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ["In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the face of the deep.",
        "And God said, Let there be light: and there was light."]
SHAPE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0)
ARCHS = {
    "llama": dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
    "mistral": dict(sliding_window=5, tie_word_embeddings=False),
    "qwen2": dict(tie_word_embeddings=True),
    "qwen3": dict(head_dim=16, tie_word_embeddings=False),
    "phi3": dict(sliding_window=6, tie_word_embeddings=False, pad_token_id=0, bos_token_id=0, eos_token_id=0),
    # A score cap of 0.5 bends these models' scores (Gemma 2's own 50 would not).
    "gemma2": dict(head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                   query_pre_attn_scalar=24, attn_logit_softcapping=0.5, final_logit_softcapping=30.0),
    "gemma3_text": dict(head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                        rope_local_base_freq=100.0, query_pre_attn_scalar=24, final_logit_softcapping=30.0),
}
# llama.cpp's general.architecture for each (Mistral's files are written as llama's).
GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2", "gemma3_text": "gemma3"}
# llama.cpp takes Gemma's score scale from head_dim (from hidden / heads for the 27Bs): the GGUF test's
# models have query_pre_attn_scalar = head_dim, as Gemma's sizes but the 27Bs do.
GGUF_OVERRIDES = {"gemma2": dict(query_pre_attn_scalar=16), "gemma3_text": dict(query_pre_attn_scalar=16)}
TOL = 1e-3  # max abs on logits spanning about -10 .. 10


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    """A byte-level BPE tokenizer trained by `tokenizers` on a few verses (GPT-2's pre-tokenizer)."""
    tok = tokenizers.ByteLevelBPETokenizer()
    tok.train_from_iterator(TEXT * 20, vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"])
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


def make_model(arch, tokenizer_json, path, **overrides):
    """transformers' model of `arch` with every parameter random (biases too: its init zeroes them)."""
    vocab = json.loads(tokenizer_json.read_text())["model"]["vocab"]
    config = transformers.AutoConfig.for_model(arch, vocab_size=len(vocab), **{**SHAPE, **ARCHS[arch], **overrides})
    torch.manual_seed(sorted(ARCHS).index(arch))
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.5 if "embed" in name else 0.08)
    model.save_pretrained(str(path))
    (path / "tokenizer.json").write_text(tokenizer_json.read_text())
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return model


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch_model(request, tokenizer_json, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, path, make_model(request.param, tokenizer_json, path)


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_directories_match_transformers(arch_model):
    arch, path, ref = arch_model
    d = sparse24.Decoder.load(str(path), max_context=64)
    assert d.capacity == 64  # a sliding window (Mistral's, Gemma 3's) does not cap the context
    # an untied model's embeddings stay in model.safetensors (float32 as saved); a tied table is the head
    table = ref.get_input_embeddings().weight.numel() * 4
    assert d.stored_bytes == (0 if ref.config.tie_word_embeddings else table), arch
    for text in TEXT:
        ids = d.tokenize(text)[:d.capacity]
        want = logits_of(ref, ids)
        d.reset()
        np.testing.assert_allclose(d.forward(ids, all=True), want, atol=TOL, rtol=0, err_msg=arch)
        # Three tokens, then one at a time against the KV cache.
        d.reset()
        d.forward(ids[:3])
        for j in range(3, len(ids)):
            np.testing.assert_allclose(d.forward([ids[j]]), want[j], atol=TOL, rtol=0, err_msg=f"{arch} {j}")


def test_pruned_checkpoints_run_sparse_like_transformers(arch_model, cli, tmp_path):
    """`convert --prune` keeps the biases and norms; the 2:4 kernels (fp32, then bf16 and int8 within their
    rounding) give the logits transformers gives on the same pruned weights."""
    arch, path, _ = arch_model
    cli("convert", path, tmp_path / "24", "--to", "sparse24", "--prune")
    cli("convert", tmp_path / "24", tmp_path / "dense", "--to", "dense")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "dense"), dtype=torch.float32).eval()
    d = sparse24.Decoder.load(str(tmp_path / "24"), max_context=64)
    assert d.sparse_linears == 4 * SHAPE["num_hidden_layers"]
    ids = d.tokenize(TEXT[1])[:d.capacity]
    want = logits_of(ref, ids)
    np.testing.assert_allclose(d.forward(ids, all=True), want, atol=TOL, rtol=0, err_msg=arch)
    for weights in ("bf16", "int8"):
        q = sparse24.Decoder.load(str(tmp_path / "24"), max_context=64, weights=weights)
        got = q.forward(ids, all=True)
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max(), (arch, weights)


def test_int8_checkpoints_run_like_transformers(arch_model, cli, tmp_path):
    """`prune-model --int8` saves int8 2:4 values with their scales; `convert --to dense` dequantizes them for
    transformers, which gives the logits sparse24's int8 kernels give on the saved directory (the same
    values: only the summation order differs)."""
    arch, path, _ = arch_model
    cli("prune-model", path, "-o", tmp_path / "i8", "--int8")
    cli("convert", tmp_path / "i8", tmp_path / "dense", "--to", "dense")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "dense"), dtype=torch.float32).eval()
    d = sparse24.Decoder.load(str(tmp_path / "i8"), max_context=64)
    assert d.sparse_linears == 4 * SHAPE["num_hidden_layers"]
    ids = d.tokenize(TEXT[1])[:d.capacity]
    np.testing.assert_allclose(d.forward(ids, all=True), logits_of(ref, ids), atol=TOL, rtol=0, err_msg=arch)


def write_gguf(model, arch, tokenizer_json, path):
    """The model as llama.cpp's converter writes it: its tensor names and metadata, fp32, the tokenizer's
    tokens and merges; for the llama architecture Q's and K's rows in llama.cpp's RoPE order; for Gemma its
    norms as 1 + w, its sliding window and soft caps; for Gemma 3 which layers slide and the sliding layers'
    RoPE base (Gemma 2's layers slide in turn)."""
    gguf = pytest.importorskip("gguf")
    c = model.config
    g = GGUF_ARCH[arch]
    w = gguf.GGUFWriter(str(path), g)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    gemma = g.startswith("gemma")
    rope = getattr(c, "rope_parameters", None) or {"rope_theta": c.rope_theta}
    w.add_rope_freq_base((rope["full_attention"] if g == "gemma3" else rope)["rope_theta"])
    if gemma:
        w.add_sliding_window(c.sliding_window)
        w.add_float32(f"{g}.final_logit_softcapping", c.final_logit_softcapping)
    if g == "gemma2":
        w.add_float32("gemma2.attn_logit_softcapping", c.attn_logit_softcapping)
    if g == "gemma3":
        w.add_float32("gemma3.rope.freq_base_swa", rope["sliding_attention"]["rope_theta"])
        w.add_array("gemma3.attention.sliding_window_pattern", [t == "sliding_attention" for t in c.layer_types])
    if rope.get("rope_type") == "llama3":  # Llama 3.1's scaling: llama.cpp's converter's divisor per frequency
        inv = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)
        wavelen, orig = 2 * np.pi / inv, rope["original_max_position_embeddings"]
        low, high, factor = rope["low_freq_factor"], rope["high_freq_factor"], rope["factor"]
        smooth = np.clip((orig / wavelen - low) / (high - low), 0, 1)
        w.add_tensor("rope_freqs.weight", (1 / ((1 - smooth) / factor + smooth)).astype(np.float32))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    tok = json.loads(tokenizer_json.read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t, _ in vocab])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]])
    w.add_eos_token_id(tok["model"]["vocab"]["<|endoftext|>"])

    def rope_rows(t, heads):  # llama.cpp's LlamaModel.permute
        if g != "llama":
            return t
        return t.reshape(heads, 2, t.shape[0] // heads // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)

    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "post_attention_norm" if gemma else "ffn_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for name, t in model.state_dict().items():
        t = t.float().numpy().copy()
        if gemma and name.endswith("norm.weight"):  # llama.cpp's converter stores Gemma's norms as 1 + w
            t = t + 1
        if name == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", t)
        elif name == "model.norm.weight":
            w.add_tensor("output_norm.weight", t)
        elif name == "lm_head.weight":
            if not c.tie_word_embeddings:
                w.add_tensor("output.weight", t)
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            if module == "self_attn.q_proj":
                t = rope_rows(t, c.num_attention_heads)
            elif module == "self_attn.k_proj":
                t = rope_rows(t, c.num_key_value_heads)
            w.add_tensor(f"blk.{layer}.{names[module]}.{kind}", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch", sorted(GGUF_ARCH))
def test_gguf_files_match_transformers_and_llama_cpp(arch, tokenizer_json, cli, tmp_path):
    ref = make_model(arch, tokenizer_json, tmp_path / "hf", **GGUF_OVERRIDES.get(arch, {}))
    path = tmp_path / "model.gguf"
    write_gguf(ref, arch, tokenizer_json, path)
    d = sparse24.Decoder.load(str(path), max_context=64)
    # an untied model's token_embd.weight stays in the file (float32 as written); a tied table is the head
    table = ref.get_input_embeddings().weight.numel() * 4
    assert d.stored_bytes == (0 if ref.config.tie_word_embeddings else table), arch
    ids = d.tokenize(TEXT[0])
    assert ids == sparse24.Decoder.load(str(tmp_path / "hf"), max_context=64).tokenize(TEXT[0])
    want = logits_of(ref, ids)
    got = d.forward(ids, all=True)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=arch)
    # llama.cpp on the same file: the same logits (its own kernels and RoPE; fp32 weights and, to compare at
    # this tolerance, an fp32 KV cache: its default f16 one moves these logits by up to 3e-3).
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False,
                          n_threads=1, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.eval(ids)
    theirs = np.array(llm.scores[:len(ids)], dtype=np.float32)
    # Gemma's GELU: llama.cpp's CPU path looks it up in an fp16 table (input and output rounded to half),
    # which moved these logits by up to 8e-3 (transformers with that rounding agrees with llama.cpp to 9e-4).
    tol = 0.02 if arch.startswith("gemma") else TOL
    np.testing.assert_allclose(got, theirs, atol=tol, rtol=0, err_msg=f"{arch} llama.cpp")
    assert (got.argmax(1) == theirs.argmax(1)).all(), arch
    # `convert MODEL.gguf DIR`: a directory transformers loads to the same model.
    cli("convert", path, tmp_path / "back", "--to", "dense")
    cfg = json.loads((tmp_path / "back" / "config.json").read_text())
    assert cfg["model_type"] == arch
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "back"), dtype=torch.float32).eval()
    np.testing.assert_allclose(logits_of(back, ids), want, atol=1e-5, rtol=0, err_msg=f"{arch} converted")


def test_llama3_rope_scaling_in_gguf_files(tokenizer_json, cli, tmp_path):
    """Llama 3.1's and 3.2's RoPE scaling, which llama.cpp's converter stores as a divisor per frequency
    (rope_freqs.weight): sparse24 reads it back as rope_scaling "llama3" and gives transformers' logits (and
    llama.cpp's) on a model whose scaling moves them (original context 16: every frequency but the highest
    three scaled); `convert` writes it into config.json."""
    rope = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 8.0,
            "original_max_position_embeddings": 16, "rope_theta": 10000.0}
    ref = make_model("llama", tokenizer_json, tmp_path / "hf", rope_scaling=rope)
    path = tmp_path / "model.gguf"
    write_gguf(ref, "llama", tokenizer_json, path)
    d = sparse24.Decoder.load(str(path), max_context=64)
    ids = d.tokenize(" ".join(TEXT))[:64]
    want = logits_of(ref, ids)
    got = d.forward(ids, all=True)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    plain = make_model("llama", tokenizer_json, tmp_path / "plain")  # the same weights, RoPE unscaled
    assert np.abs(logits_of(plain, ids) - want).max() > 50 * TOL
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False,
                          n_threads=1, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.eval(ids)
    np.testing.assert_allclose(got, np.array(llm.scores[:len(ids)], dtype=np.float32), atol=TOL, rtol=0)
    cli("convert", path, tmp_path / "back", "--to", "dense")
    params = json.loads((tmp_path / "back" / "config.json").read_text())["rope_scaling"]
    assert params["rope_type"] == "llama3" and params["factor"] == 4.0
    back = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "back"), dtype=torch.float32).eval()
    np.testing.assert_allclose(logits_of(back, ids), want, atol=1e-4, rtol=0)


def test_phi3_longrope_over_part_of_each_head(tokenizer_json, tmp_path):
    """Phi-4-mini's RoPE over the first 12 of each head's 16 dims (partial_rotary_factor 0.75) with Phi-3's
    longrope: the short factors while the sequence holds at most original_max_position_embeddings (16) tokens,
    the long ones for all of it beyond, cos and sin scaled by sqrt(1 + ln(128 / 16) / ln(16)). One pass at
    lengths around the switch, then token by token across it, against transformers on the sequence so far."""
    g = np.random.default_rng(5)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": (1 + g.random(6)).tolist(), "long_factor": (1 + 20 * g.random(6)).tolist()}
    ref = make_model("phi3", tokenizer_json, tmp_path / "hf", rope_parameters=rope,
                     original_max_position_embeddings=16)
    cfg = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert "longrope" in json.dumps(cfg) and "0.75" in json.dumps(cfg)
    d = sparse24.Decoder.load(str(tmp_path / "hf"), max_context=64)
    ids = d.tokenize(TEXT[1])
    assert len(ids) > 20
    for n in (10, 16, 17, len(ids)):
        d.reset()
        np.testing.assert_allclose(d.forward(ids[:n]), logits_of(ref, ids[:n])[-1], atol=TOL, rtol=0, err_msg=n)
    d.reset()
    d.forward(ids[:3])
    for j in range(3, len(ids)):
        np.testing.assert_allclose(d.forward([ids[j]]), logits_of(ref, ids[:j + 1])[-1], atol=TOL, rtol=0,
                                   err_msg=f"token {j}")


O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def test_phi4_mini_style_model_with_its_tokenizer(tmp_path):
    """What a Phi-4-mini directory holds, at toy size: a phi3 model with RoPE over 3/4 of each head, longrope,
    the head tied, and a byte-level BPE tokenizer with GPT-4o's Split pattern as its converted tokenizer.json
    writes it (Removed, inverted). sparse24 tokenizes as transformers' tokenizer does and gives its logits."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(O200K), behavior="removed", invert=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXT * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                           show_progress=False))
    tok_path = tmp_path / "tokenizer.json"
    tok.save(str(tok_path))
    saved = json.loads(tok_path.read_text())["pre_tokenizer"]["pretokenizers"][0]
    assert saved["behavior"] == "Removed" and saved["invert"] is True
    g = np.random.default_rng(7)
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": (1 + g.random(6)).tolist(), "long_factor": (1 + 9 * g.random(6)).tolist()}
    ref = make_model("phi3", tok_path, tmp_path / "hf", rope_parameters=rope, original_max_position_embeddings=32,
                     tie_word_embeddings=True)
    d = sparse24.Decoder.load(str(tmp_path / "hf"), max_context=64)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    for text in TEXT + ["HelloWorld, McDONALD'S iPhone/x\n\n  naïve ÉCOLE 12345 don't"]:
        ids = d.tokenize(text)
        assert ids == hf_tok(text)["input_ids"], text
    for text in TEXT:
        ids = d.tokenize(text)
        d.reset()
        np.testing.assert_allclose(d.forward(ids, all=True), logits_of(ref, ids), atol=TOL, rtol=0)


# llama.cpp's file types (`llama-quantize`'s TYPE): each writes its own mix of ggml types (Q4_K_M: Q4_K with
# Q6_K for the head and half the V and down projections; Q3_K_M: Q3_K, Q4_K, Q5_K, Q6_K; ...).
QUANT_FTYPES = ["Q3_K_S", "Q3_K_M", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q4_0", "Q5_0", "Q5_1", "Q2_K",
                "IQ4_NL", "IQ4_XS"]


@pytest.fixture(scope="module")
def f32_llama_file(tokenizer_json, tmp_path_factory):
    """An fp32 GGUF file of a random llama model whose rows are whole K-quant blocks (256 wide)."""
    path = tmp_path_factory.mktemp("quantized")
    ref = make_model("llama", tokenizer_json, path / "hf", hidden_size=256, intermediate_size=512,
                     attention_bias=False, mlp_bias=False)
    write_gguf(ref, "llama", tokenizer_json, path / "f32.gguf")
    return path / "f32.gguf"


def llama_cpp_without_extra_bufts(llama_cpp):
    """llama.cpp's model parameters without its extra buffer types (weight repacking, AMX): on the Intel Xeon
    with AMX under KVM they crash it on K-quant files (SIGILL; bench/peers/decode_llamacpp.py)."""
    lc = llama_cpp.llama_cpp
    default_params = lc.llama_model_default_params

    def params():
        mp = default_params()
        mp.use_extra_bufts = False
        return mp
    return params


@pytest.mark.parametrize("ftype", QUANT_FTYPES)
def test_llama_cpp_quantized_files(ftype, f32_llama_file, tmp_path, monkeypatch):
    """A file quantized by llama.cpp's own quantizer runs in sparse24 with the logits transformers' GGUF
    loader gives the same file (both dequantize every tensor; sparse24's are bit-identical to the gguf
    package's, test/io/compare_gguf.py), and as close to llama.cpp's as transformers' are: llama.cpp also
    rounds the activations to 8 bits for these types' dot products, which moves its logits (span about 35)
    by up to 1.8 on this random model (docs/accuracy.md)."""
    import ctypes

    llama_cpp = pytest.importorskip("llama_cpp")
    gguf = pytest.importorskip("gguf")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.nthread = 1
    path = tmp_path / f"{ftype}.gguf"
    assert llama_cpp.llama_model_quantize(str(f32_llama_file).encode(), str(path).encode(),
                                          ctypes.byref(params)) == 0
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}
    assert ftype.split("_")[0] + "_" + ftype.split("_")[1] in types, types
    d = sparse24.Decoder.load(str(path), max_context=64)
    ids = d.tokenize(TEXT[0])
    got = d.forward(ids, all=True)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name,
                                                            dtype=torch.float32).eval()
    want = logits_of(ref, ids)
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=f"{ftype} ({sorted(types)})")
    monkeypatch.setattr(llama_cpp.llama_cpp, "llama_model_default_params", llama_cpp_without_extra_bufts(llama_cpp))
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, logits_all=True, verbose=False,
                          n_threads=1, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    llm.eval(ids)
    theirs = np.array(llm.scores[:len(ids)], dtype=np.float32)
    assert np.abs(got - theirs).max() <= np.abs(want - theirs).max() + 1e-2, ftype
