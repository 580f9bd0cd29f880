"""Shared helpers for the peer/reference scripts: offline mode, one-line errors, atomic writes,
reading a sentence-transformers model directory."""
import argparse
import json
import os
import sys

# Never reach a model hub: every model is a local directory (models/, made by scripts/setup.sh).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

PROG = os.path.basename(sys.argv[0])


class Error(Exception):
    pass


def die(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(1)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error (and exit code 1, like the C++ CLI)."""

    def error(self, message):
        die(message)


def run(main):
    """Runs main(); any exception becomes one line on stderr and exit code 1."""
    try:
        main()
    except KeyboardInterrupt:
        die("interrupted")
    except Exception as e:  # noqa: BLE001 - the scripts' contract is one line per failure
        msg = " ".join(str(e).split()) or type(e).__name__
        die(msg if isinstance(e, Error) else f"{type(e).__name__}: {msg}")


def model_dir(path):
    if not os.path.isdir(path):
        raise Error(f"{path}: not a directory")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise Error(f"{path}: no config.json (not a Hugging Face model directory)")
    return os.path.abspath(path)


def read_json(path, default=None):
    if not os.path.isfile(path):
        return default
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_lines(path, max_lines=None):
    """One text per line, UTF-8; the line ends ('\\n' or '\\r\\n') are not part of the text.
    A last line without '\\n' counts; a file that ends with '\\n' has no empty text after it."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            data = f.read()
    except OSError as e:
        raise Error(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise Error(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    if max_lines is not None:
        lines = lines[:max_lines]
    if not lines:
        raise Error(f"{path}: no lines")
    return lines


def max_seq_length(model):
    """sentence-transformers' max_seq_length (sentence_bert_config.json), or None."""
    cfg = read_json(os.path.join(model, "sentence_bert_config.json"), {})
    return cfg.get("max_seq_length")


def positive(name):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got '{text}'") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be positive, got {v}")
        return v
    return parse


def atomic_write(path, write):
    """write(tmp_path) then rename over path, so a failure never leaves a half-written file."""
    d = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(d):
        raise Error(f"{path}: directory {d} does not exist")
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def write_json(path, obj):
    """obj as indented JSON at path (atomically)."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
    atomic_write(path, write)


def save_npy(path, array):
    import numpy as np

    def write(tmp):
        with open(tmp, "wb") as f:
            np.save(f, array)
    atomic_write(path, write)
