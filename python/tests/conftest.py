"""Shared fixtures: the repository's paths, the C++ CLI when built (build/sparse24), the real models."""
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cli():
    """The C++ command-line tool of the release build (scripts/test.sh builds it first), else skip."""
    required = "SPARSE24_CLI" in os.environ  # scripts/test.sh sets it: the comparisons must run
    path = pathlib.Path(os.environ.get("SPARSE24_CLI", ROOT / "build" / "sparse24"))
    if not path.is_file():
        if required:
            pytest.fail(f"SPARSE24_CLI={path} does not exist")
        pytest.skip(f"{path} not built")

    def run(*args, input=None):
        return subprocess.run([str(path), *map(str, args)], check=True, capture_output=True, text=True,
                              input=input).stdout
    return run


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def model_dir(name):
    d = ROOT / "models" / name
    if not (d / "config.json").is_file():
        pytest.skip(f"{d} not present (scripts/setup.sh makes it)")
    return d
