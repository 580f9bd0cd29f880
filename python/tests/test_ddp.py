"""prune_for_retraining under DistributedDataParallel: two processes (gloo) on this machine keep the same
fixed masks, and end where one process does on the same global batch."""
import pathlib
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

WORKER = pathlib.Path(__file__).with_name("ddp_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def test_ddp_two_ranks_equal_single_process(tmp_path):
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, str(WORKER), str(r), "2", port, str(tmp_path / f"rank{r}.pt")])
             for r in range(2)]
    single = subprocess.run([sys.executable, str(WORKER), "0", "1", port, str(tmp_path / "single.pt")],
                            timeout=120)
    assert [p.wait(timeout=120) for p in ranks] == [0, 0] and single.returncode == 0
    r0, r1, one = (torch.load(tmp_path / f, weights_only=True) for f in ("rank0.pt", "rank1.pt", "single.pt"))
    assert r0["masks"].keys() == {"0", "2"}
    for k in r0["masks"]:
        assert torch.equal(r0["masks"][k], r1["masks"][k]) and torch.equal(r0["masks"][k], one["masks"][k])
    for k, v in r0["state"].items():
        assert torch.equal(v, r1["state"][k])  # DDP keeps the ranks identical
        torch.testing.assert_close(v, one["state"][k], rtol=1e-5, atol=1e-6)
        if k.endswith("weight"):
            assert (v[r0["masks"][k[:-len(".weight")]] == 0] == 0).all()
