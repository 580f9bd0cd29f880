"""One rank of the DDP retraining test (test_ddp.py): RANK WORLD PORT OUT.

Dense-trains a small MLP identically on every rank (same seed), prunes it with prune_for_retraining,
wraps it in DistributedDataParallel (gloo) and retrains on this rank's share of each global batch; writes
the final weights and masks to OUT. WORLD = 1 is the single-process run on the whole global batch.
"""
import os
import sys

import torch
import torch.distributed as dist

from sparse24.torch import prune_for_retraining

GLOBAL_BATCH, STEPS = 8, 12


def main():
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randint(0, 4, (GLOBAL_BATCH,), generator=g))
            for _ in range(STEPS)]
    for x, y in data[:3]:  # a short dense phase, the same on every rank
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    masks = prune_for_retraining(model, opt)
    initial = {k: v.clone() for k, v in masks.masks.items()}
    share = GLOBAL_BATCH // world
    for x, y in data:
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()  # the mean over this rank's share
        opt.step()
    masks.check()
    for k in initial:
        assert torch.equal(initial[k], masks.masks[k])
    core = model.module if world > 1 else model
    torch.save({"state": core.state_dict(), "masks": initial}, out)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
