#!/usr/bin/env python3
"""Byte-level BPE with Llama 3's, Qwen2's and GPT-4o's (o200k: Phi-4-mini's) Split pre-tokenizers, and SentencePiece-style BPE (Llama 2's,
Mistral v0.1's, TinyLlama's: U+2581 for spaces, byte fallback): sparse24 against Hugging Face `tokenizers`
and against llama.cpp.

No Llama 3 or Qwen tokenizer ships in the project's packages, so `tokenizers` trains one of each here on the
King James Bible with exactly their tokenizer.json settings (the Split regex, ByteLevel without its own
regex; Llama 3's ignore_merges and BOS template; Qwen2's NFC normalizer; GPT-4o's Split written as its
converted tokenizers write it, Removed with invert). Then, for every verse, every line
of unicode_edge_cases.txt and 3,000 seeded random strings built from the regex's corner cases (contractions
in both cases and with U+017F, CR/LF runs, digit runs, mixed whitespace, decomposed accents):
  1. `sparse24 tokenize DIR` gives the ids `tokenizers` gives;
  2. the same vocabulary as a GGUF file (tokenizer.ggml.pre "llama-bpe" / "qwen2", as llama.cpp's
     converter writes them) gives through `sparse24 tokenize FILE.gguf` the ids llama.cpp (llama-cpp-python)
     gives; and those equal `tokenizers`' on every text whose NFC form is itself (llama.cpp does not
     normalize). GPT-4o's ("gpt-4o"): llama.cpp approximates its upper- and lower-case letter classes by
     ASCII's, so it is compared with llama.cpp on the ASCII texts (the rest counted); sparse24's GGUF path
     follows the regex as `tokenizers` does;
  3. `sparse24 convert`'s tokenizer.json writer (to_json) is read back by `tokenizers` to the same ids.
The SentencePiece-style tokenizer ("spm") is checked the same way, its GGUF file as llama.cpp's converter
writes a Llama 2 vocabulary (tokenizer.ggml.model "llama", a score per token: here minus the merge rank, so
llama.cpp's highest-score-first merging replays the merges' order; byte tokens of type BYTE), except GGUF vs
`tokenizers`: llama.cpp merges any two tokens that join into a token, where `tokenizers` merges only listed
pairs, so the two may differ on some texts (counted, not asserted). The same vocabulary in tokenizer.json's
other SentencePiece form (no normalizer, a Metaspace pre-tokenizer: transformers' non-legacy Llama tokenizer,
newer Mistral releases), with each prepend_scheme and with split, and in Gemma's (a Replace normalizer alone, no
space prepended), is checked against `tokenizers` too.
Exit 0 when all agree, 1 naming the first difference.

  .venv/bin/python test/text/compare_split_tokenizers.py --sparse24 build/sparse24 \\
      --corpus build/kjv_verses.txt --edge test/text/unicode_edge_cases.txt --work DIR
"""
import argparse
import json
import pathlib
import random
import shutil
import subprocess
import sys
import unicodedata

PATTERNS = {
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "o200k": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
GGUF_PRE = {"llama3": "llama-bpe", "qwen2": "qwen2", "o200k": "gpt-4o"}
SPECIALS = {"llama3": ["<|begin_of_text|>", "<|end_of_text|>"], "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "o200k": ["<|endoftext|>", "<|end|>"],
            "spm": ["<unk>", "<s>", "</s>"]}
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]
PIECES = ["'s", "'S", "'ll", "'LL", "'Re", "'ve", "'m", "'d", "'t", "'\u017f", "'", "''", " ", "  ", "   ", "\t",
          "\n", "\r\n", "\r", "\n\n", " \n", "\n ", " \r\n\t", "\u00a0", "\u3000", "\u2028", "1", "12", "123", "12345",
          "\u0663\u0664", "x", "Hello", "world", "LORD", "\u01c5", "!", "!!", "...", "?!", "\u00bf", "-", "--",
          "\u00e9", "e\u0301", "A\u030a", "\u4e2d\u6587", "\U0001f642", "\u00bd", "\u2167", "_", "__init__",
          "<|im_start|>", "<|begin_of_text|>", "<s>", "</s>",
          # GPT-4o's letter cases: case changes inside words, titlecase, modifier letters, marks, scripts
          # without case, "/" after punctuation
          "HelloWorld", "iPhone", "McDONALD'S", "DON'T", "l'\u00c9T\u00c9", "na\u00efve", "\u00c9COLE", "\u01c5emal",
          "\u02b0", "\u00aa", "\u0928\u092e\u0938\u094d\u0924\u0947", "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3", "/", "!/", "x/\n", ".//",
          "\u0301", "A\u0301b", "\u1e9e", "\u0130stanbul"]


def train_spm(verses, out):
    """Llama 2's tokenizer.json settings: BPE with byte fallback over characters, spaces as U+2581 with one
    prepended, no pre-tokenizer, the byte-fallback decoders, <s> first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS["spm"] + BYTE_TOKENS, show_progress=False)
    tok.train_from_iterator(verses, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    return tok


def metaspace(scheme, split):
    return {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": scheme, "split": split}


# The "spm" vocabulary in tokenizer.json's other forms: (normalizer, pre_tokenizer, Strip in the decoder).
# Metaspace with each prepend_scheme and with split; Gemma's Replace alone and a Split on " " after it.
VARIANTS = {
    "spm-metaspace-first": (None, metaspace("first", False), True),
    "spm-metaspace-always": (None, metaspace("always", False), True),
    "spm-metaspace-never": (None, metaspace("never", False), False),
    "spm-metaspace-always-split": (None, metaspace("always", True), True),
    "spm-gemma": ({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
                  {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
                  False),
}


def variant(tok, normalizer, pre_tokenizer, strip, out):
    from tokenizers import Tokenizer
    j = json.loads(tok.to_str())
    j["normalizer"] = normalizer
    j["pre_tokenizer"] = pre_tokenizer
    if not strip:
        j["decoder"]["decoders"] = [d for d in j["decoder"]["decoders"] if d["type"] != "Strip"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return Tokenizer.from_file(str(out / "tokenizer.json"))


def train(kind, verses, out):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    if kind == "spm":
        return train_spm(verses, out)
    tok = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    if kind == "qwen2":
        tok.normalizer = normalizers.NFC()
    o200k = kind == "o200k"  # its converted tokenizers keep the matches as Removed + invert
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERNS[kind]), behavior="removed" if o200k else "isolated", invert=o200k),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=SPECIALS[kind],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(verses, trainer)
    if kind == "llama3":
        bos = SPECIALS[kind][0]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))])
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    # tokenizers' JSON of the Split regex must be the pattern as Llama 3's / Qwen2's files spell it.
    saved = json.loads((out / "tokenizer.json").read_text())
    assert saved["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] == PATTERNS[kind]
    return tok


def write_gguf(kind, tok, path):
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    vocab = json.loads(tok.to_str())["model"]
    ids = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    # A one-layer model around the vocabulary, so that `convert` (and llama.cpp) take the file whole.
    import numpy as np
    g = np.random.default_rng(0)
    shapes = {"token_embd.weight": (len(ids), 8), "output_norm.weight": (8,), "blk.0.attn_norm.weight": (8,),
              "blk.0.ffn_norm.weight": (8,), "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (8, 8),
              "blk.0.attn_v.weight": (8, 8), "blk.0.attn_output.weight": (8, 8), "blk.0.ffn_gate.weight": (16, 8),
              "blk.0.ffn_up.weight": (16, 8), "blk.0.ffn_down.weight": (8, 16)}
    for name, shape in shapes.items():
        w.add_tensor(name, g.normal(0, 0.1, shape).astype(np.float32))
    merges = [m if isinstance(m, str) else " ".join(m) for m in vocab["merges"]]
    if kind == "spm":  # Llama 2's layout: scores (minus the merge rank), <unk> UNKNOWN, bytes BYTE
        rank = {m.replace(" ", ""): r for r, m in enumerate(merges)}
        w.add_tokenizer_model("llama")
        w.add_token_list([t for t, _ in ids])
        w.add_token_scores([-float(rank.get(t, 0)) if t in rank else 0.0 for t, _ in ids])
        w.add_token_types([2 if t == "<unk>" else 3 if t in SPECIALS[kind] else 6 if t in BYTE_TOKENS else 1
                           for t, _ in ids])
        w.add_add_space_prefix(True)
    else:
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(GGUF_PRE[kind])
        w.add_token_list([t for t, _ in ids])
        w.add_token_types([3 if t in SPECIALS[kind] else 1 for t, _ in ids])
        w.add_token_merges(merges)
    w.add_bos_token_id(tok.token_to_id(SPECIALS[kind][1 if kind == "spm" else 0]))
    w.add_eos_token_id(tok.token_to_id(SPECIALS[kind][-1]))
    w.add_add_bos_token(kind in ("llama3", "spm"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sparse24_ids(bin_, model, texts):
    out = []
    for i in range(0, len(texts), 500):
        # --text=T: a text may start with '-'.
        r = subprocess.run([bin_, "tokenize", str(model), *[f"--text={t}" for t in texts[i:i + 500]]],
                           capture_output=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: sparse24 tokenize {model}: {r.stderr.decode(errors='replace')}")
        out += [json.loads(x) for x in r.stdout.decode().split("\n") if x]
    if len(out) != len(texts):
        sys.exit(f"FAIL: sparse24 tokenize {model} printed {len(out)} lines for {len(texts)} texts")
    return out


def first_difference(what, texts, ours, theirs, tok=None):
    for t, x, y in zip(texts, ours, theirs):
        if x != y:
            print(f"FAIL: {what}: {t!r}\n  sparse24: {x}\n  theirs:   {y}")
            if tok is not None:
                print(f"  tokens: {tok.encode(t).tokens}")
            return True
    return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sparse24", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--edge", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    try:
        import llama_cpp
        import tokenizers
    except ImportError as e:
        print(f"missing: {e}")
        return 1
    work = pathlib.Path(a.work)
    shutil.rmtree(work, ignore_errors=True)  # convert refuses an existing output directory
    verses = pathlib.Path(a.corpus).read_text(encoding="utf-8").split("\n")
    verses = [v for v in verses if v]
    edge = [x for x in pathlib.Path(a.edge).read_text(encoding="utf-8").split("\n") if x]
    rng = random.Random(20261125)
    stress = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    texts = verses + edge + stress
    failed = False
    for kind in (*PATTERNS, "spm"):
        tok = train(kind, verses[:20000], work / kind)
        theirs = [e.ids for e in tok.encode_batch(texts)]
        ours = sparse24_ids(a.sparse24, work / kind, texts)
        failed |= first_difference(f"{kind} directory vs tokenizers", texts, ours, theirs, tok)
        gguf_path = work / f"{kind}.gguf"
        write_gguf(kind, tok, gguf_path)
        ours_gguf = sparse24_ids(a.sparse24, gguf_path, texts)
        llm = llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
        cpp = [llm.tokenize(t.encode("utf-8"), add_bos=kind in ("llama3", "spm"), special=True) for t in texts]
        if kind == "o200k":  # llama.cpp's ASCII approximation of the letter cases: ASCII texts asserted
            ascii = [i for i, t in enumerate(texts) if t.isascii()]
            failed |= first_difference(f"{kind} GGUF vs llama.cpp (ASCII texts)", [texts[i] for i in ascii],
                                       [ours_gguf[i] for i in ascii], [cpp[i] for i in ascii])
            same = sum(ours_gguf[i] == cpp[i] for i in range(len(texts)))
            print(f"o200k: GGUF equals llama.cpp on {same} of {len(texts)} texts ({len(ascii)} ASCII)")
        else:
            failed |= first_difference(f"{kind} GGUF vs llama.cpp", texts, ours_gguf, cpp)
        nfc = [i for i, t in enumerate(texts) if unicodedata.normalize("NFC", t) == t]
        if kind == "spm":
            same = sum(ours_gguf[i] == theirs[i] for i in range(len(texts)))
            print(f"spm: GGUF (llama.cpp's merging) equals tokenizers on {same} of {len(texts)} texts")
        else:
            failed |= first_difference(f"{kind} GGUF vs tokenizers (NFC texts)", [texts[i] for i in nfc],
                                       [ours_gguf[i] for i in nfc], [theirs[i] for i in nfc], tok)
        # The tokenizer.json sparse24 writes (convert MODEL.gguf DIR), read by tokenizers.
        back = work / f"{kind}-back"
        r = subprocess.run([a.sparse24, "convert", str(gguf_path), str(back), "--to", "dense"], capture_output=True)
        if r.returncode != 0:
            sys.exit(f"FAIL: sparse24 convert {gguf_path}: {r.stderr.decode(errors='replace')}")
        written = tokenizers.Tokenizer.from_file(str(back / "tokenizer.json"))
        failed |= first_difference(f"{kind} written tokenizer.json vs the GGUF", texts,
                                   [e.ids for e in written.encode_batch(texts)], ours_gguf)
        if not failed:
            vs_cpp = "GGUF vs llama.cpp on the ASCII ones" if kind == "o200k" else "GGUF vs llama.cpp"
            print(f"{kind}: {len(texts)} texts identical (directory vs tokenizers, {vs_cpp}, "
                  f"GGUF vs tokenizers on {len(nfc)} NFC texts)")
        if kind != "spm":
            continue
        for name, (normalizer, pre_tokenizer, strip) in VARIANTS.items():
            other = variant(tok, normalizer, pre_tokenizer, strip, work / name)
            ours = sparse24_ids(a.sparse24, work / name, texts)
            bad = first_difference(f"{name} directory vs tokenizers", texts, ours,
                                   [e.ids for e in other.encode_batch(texts)], other)
            failed |= bad
            if not bad:
                print(f"{name}: {len(texts)} texts identical (directory vs tokenizers)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
