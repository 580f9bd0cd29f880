"""sparse24.torch: SparseLinear and sparsify_ against torch, retraining with fixed masks, export -> Engine."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sparse24  # noqa: E402
from sparse24.torch import SparseLinear, export, prune_for_retraining, sparsify_  # noqa: E402


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4)])
@pytest.mark.parametrize("threads", [1, 2])
def test_sparse_linear_matches_torch(shape, threads):
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 48)
    sl = SparseLinear.from_dense(lin, threads=threads)
    w = sl.dense_weight()
    assert torch.equal(w, torch.from_numpy(sparse24.prune(lin.weight.detach().numpy())))
    x = torch.randn(*shape, 64)
    y = sl(x)
    assert y.shape == (*shape, 48) and y.dtype == torch.float32
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w, lin.bias), rtol=1e-5, atol=1e-5)
    # a non-contiguous input (a transposed view) gives the same result
    xt = torch.randn(64, 9).t()
    torch.testing.assert_close(sl(xt), torch.nn.functional.linear(xt, w, lin.bias), rtol=1e-5, atol=1e-5)


def test_sparse_linear_no_bias_and_errors():
    sl = SparseLinear.from_dense(torch.nn.Linear(16, 8, bias=False))
    x = torch.randn(4, 16)
    torch.testing.assert_close(sl(x), x @ sl.dense_weight().t())
    with pytest.raises(sparse24.Error, match="float32"):
        sl(x.double())
    with pytest.raises(sparse24.Error, match="16"):
        sl(torch.randn(4, 15))
    with pytest.raises(sparse24.Error, match="2:4"):
        SparseLinear.from_dense(torch.nn.Linear(16, 8), prune=False)
    assert sl(torch.randn(0, 16)).shape == (0, 8)


def test_sparsify_swaps_eligible_linears():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 6),
                                torch.nn.Sequential(torch.nn.Linear(6, 4)))
    x = torch.randn(3, 16)
    done = sparsify_(model, targets=r"^[02]$")
    assert done == ["0", "2"] and isinstance(model[0], SparseLinear) and type(model[3][0]) is torch.nn.Linear
    assert sparsify_(model) == []  # 3.0 has in_features 6, not a multiple of 4
    ref = model[3](torch.nn.functional.linear(
        torch.relu(torch.nn.functional.linear(x, model[0].dense_weight(), model[0].bias)),
        model[2].dense_weight(), model[2].bias))
    torch.testing.assert_close(model(x), ref)


def _train(model, opt, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g)
        y = torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test_prune_for_retraining_keeps_masks_fixed():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    _train(model, opt, 3)
    w0 = model[0].weight.detach().clone()
    ms = prune_for_retraining(model, opt)
    assert set(ms.masks) == {"0", "2"}
    assert torch.equal(ms.masks["0"], torch.from_numpy(sparse24.mask(w0.numpy()).astype(np.float32)))
    masks = {k: v.clone() for k, v in ms.masks.items()}
    before = model[0].weight.detach().clone()
    _train(model, opt, 10, seed=1)
    ms.check()
    assert not torch.equal(before, model[0].weight)  # it trained
    for name, m in masks.items():
        w = ms.params[name].detach()
        assert sparse24.inspect(w.numpy())["valid"]
        assert torch.equal(m, ms.masks[name])
        assert (w[m == 0] == 0).all()
    ms.remove()


def test_transposable_and_conv():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, groups=2),
                                torch.nn.Flatten(), torch.nn.Linear(8, 6))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ms = prune_for_retraining(model, opt)
    assert set(ms.masks) == {"0", "3"} and "grouped" in ms.skipped["1"]
    ms.remove()
    lin = torch.nn.Sequential(torch.nn.Linear(16, 16))
    ms = prune_for_retraining(lin, torch.optim.SGD(lin.parameters(), lr=0.1), transposable=True)
    w = lin[0].weight.detach().numpy()
    assert sparse24.inspect(w)["valid"] and sparse24.inspect(np.ascontiguousarray(w.T))["valid"]


def test_export_runs_in_the_engine(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ms = prune_for_retraining(model, opt)
    assert set(ms.masks) == {"4", "7", "10"}  # the first conv's K = 1 is not a multiple of 4
    g = torch.Generator().manual_seed(0)
    for _ in range(3):  # a little training so BatchNorm's running statistics are not the defaults
        opt.zero_grad()
        model(torch.randn(16, 1, 8, 8, generator=g)).square().mean().backward()
        opt.step()
    model.eval()
    config = export(model, tmp_path / "m", input_shape=(1, 8, 8))
    assert set(config["pruned"]) == {"4.weight", "7.weight", "10.weight"}
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        ref = model(x).numpy()
    for mode in ("dense", "sparse"):
        e = sparse24.Engine.load(str(tmp_path / "m"), mode=mode, batch=4)
        np.testing.assert_allclose(e.run(x.numpy()), ref, rtol=1e-4, atol=1e-4)
    e = sparse24.Engine.load(str(tmp_path / "m"), mode="sparse", batch=4)
    assert e.sparse_layers == [False, True, True, True] and not e.is_text
    with pytest.raises(sparse24.Error, match="input"):
        e.run(np.zeros((2, 1, 8, 9), np.float32))


@pytest.mark.parametrize("t,k,m", [(37, 20, 13), (64, 64, 64), (9, 128, 40), (130, 36, 17)])
def test_sparse_linear_sizes(t, k, m):
    # the kernel's token-major entry: small and compute-bound token counts, 4 x 4 blocks and remainders
    torch.manual_seed(t)
    lin = torch.nn.Linear(k, m)
    for threads in (1, 2):
        sl = SparseLinear.from_dense(lin, threads=threads)
        x = torch.randn(t, k)
        torch.testing.assert_close(sl(x), torch.nn.functional.linear(x, sl.dense_weight(), lin.bias),
                                   rtol=1e-5, atol=1e-5)
