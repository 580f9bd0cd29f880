"""Every ```python example in docs/python.md runs as written (from the repository root)."""
import os
import re

import pytest

from conftest import ROOT

DOC = ROOT / "docs" / "python.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_there_are_examples():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_example_runs(i, monkeypatch):
    if "models/" in BLOCKS[i] and not (ROOT / "models" / "all-MiniLM-L6-v2" / "config.json").is_file():
        pytest.skip("models/ not present")
    monkeypatch.chdir(ROOT)
    exec(compile(BLOCKS[i], f"docs/python.md example {i + 1}", "exec"), {"__name__": f"doc{i}"})
