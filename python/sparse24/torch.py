"""PyTorch on the CPU with sparse24's 2:4 kernels, and ASP-style 2:4 retraining.

- ``SparseLinear.from_dense(linear)``: an ``nn.Module`` whose forward is the library's 2:4 kernel
  (inference only: no autograd through it; float32 in and out, any leading batch dimensions).
- ``sparsify_(model, targets=...)``: swaps every eligible ``nn.Linear`` in place.
- ``prune_for_retraining(model, optimizer, ...)``: 2:4 masks from the library's mask code, held fixed
  through training (gradient and weight masked at every optimizer step, as the C++ workflow does);
  works unchanged under DistributedDataParallel.
- ``export(model, out_dir, input_shape)``: the workflow's export format (model.json + model.safetensors)
  that ``sparse24.Engine.load`` and ``sparse24 run`` execute.
"""

from __future__ import annotations

import json
import os
import re
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from . import Compressed, Error, _core
from . import compress as _compress
from . import decompress as _decompress
from . import mask as _mask

__all__ = ["SparseLinear", "sparsify_", "prune_for_retraining", "MaskSet", "export"]


class SparseLinear(nn.Module):
    """y = x W^T + b with W 2:4 sparse, on sparse24's kernels (forward only)."""

    def __init__(self, weight: Compressed, bias: torch.Tensor | None, threads: int | None = None):
        super().__init__()
        if not isinstance(weight, Compressed) or len(weight.shape) != 2 or weight.dtype != "float32":
            raise Error("SparseLinear: weight must be a float32 2-D sparse24.Compressed")
        self.out_features, self.in_features = weight.shape
        self.weight_compressed = weight
        self._packed = _core._pack(weight, False)
        if bias is not None:
            bias = bias.detach().to("cpu", torch.float32).contiguous().clone()
            if bias.shape != (self.out_features,):
                raise Error(f"SparseLinear: bias {tuple(bias.shape)}, expected ({self.out_features},)")
        self.register_buffer("bias", bias)
        self.threads = threads  # None: torch.get_num_threads() at each call

    @classmethod
    def from_dense(cls, linear: nn.Linear, prune: bool = True, threads: int | None = None) -> "SparseLinear":
        """From an nn.Linear: its weight magnitude-pruned to 2:4 (prune=True) or required to be 2:4."""
        if not isinstance(linear, nn.Linear):
            raise Error(f"SparseLinear.from_dense: expected nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach().to("cpu", torch.float32).contiguous().numpy()
        return cls(_compress(w, prune=prune), linear.bias, threads)

    @property
    def isa(self) -> str:
        return self._packed.isa

    def dense_weight(self) -> torch.Tensor:
        """The 2:4 weight as a dense [out, in] tensor."""
        return torch.from_numpy(_decompress(self.weight_compressed))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor) or x.dtype != torch.float32 or x.device.type != "cpu":
            raise Error("SparseLinear: input must be a float32 CPU tensor")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise Error(f"SparseLinear: input {tuple(x.shape)}, expected [..., {self.in_features}]")
        lead = x.shape[:-1]
        x2 = x.detach().reshape(-1, self.in_features)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        out = torch.empty((x2.shape[0], self.out_features), dtype=torch.float32)
        threads = self.threads if self.threads is not None else torch.get_num_threads()
        _core._linear(self._packed, x2, out, self.bias, threads)
        return out.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, isa={self.isa}")


def _matches(name: str, targets) -> bool:
    if targets is None:
        return True
    if isinstance(targets, str):
        return re.search(targets, name) is not None
    if callable(targets):
        return bool(targets(name))
    return name in set(targets)


def sparsify_(model: nn.Module, targets=None, prune: bool = True, threads: int | None = None) -> list[str]:
    """Replaces every nn.Linear (float32, on the CPU, in_features a multiple of 4) whose qualified name
    matches `targets` (a regex searched in the name, a collection of names, a predicate, or None for
    all) with SparseLinear.from_dense. Returns the names replaced."""
    done = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if (type(child) is nn.Linear and child.weight.dtype == torch.float32 and
                    child.weight.device.type == "cpu" and child.in_features % 4 == 0 and _matches(full, targets)):
                setattr(module, child_name, SparseLinear.from_dense(child, prune=prune, threads=threads))
                done.append(full)
    return done


# ---- retraining --------------------------------------------------------------------------------------------

def _unwrap(model: nn.Module) -> nn.Module:
    # DistributedDataParallel (and DataParallel) hold the real model in .module; the names are its names.
    return model.module if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) else model


class MaskSet:
    """The fixed 2:4 masks of a model: name -> (weight parameter, float 0/1 mask)."""

    def __init__(self):
        self.masks: dict[str, torch.Tensor] = {}
        self.params: dict[str, nn.Parameter] = {}
        self.skipped: dict[str, str] = {}
        self._handles = []

    @torch.no_grad()
    def apply(self) -> None:
        """weight *= mask for every pruned layer."""
        for name, m in self.masks.items():
            self.params[name].mul_(m)

    def check(self) -> None:
        """Error unless every pruned position is exactly zero."""
        for name, m in self.masks.items():
            w = self.params[name].detach()
            if bool((w[m == 0] != 0).any()):
                raise Error(f"{name}: a pruned weight is nonzero")

    def remove(self) -> None:
        """Detaches the gradient and optimizer hooks (the weights stay as they are)."""
        for h in self._handles:
            h.remove()
        self._handles = []


def prune_for_retraining(model: nn.Module, optimizer: torch.optim.Optimizer, method: str = "magnitude",
                         targets=None, transposable: bool = False, search: str = "exact") -> MaskSet:
    """Prunes every eligible nn.Linear and nn.Conv2d (groups 1, K = in_features or in_channels a multiple
    of 4, and with transposable also rows a multiple of 4) whose name matches `targets` to 2:4 with the
    library's mask code, and keeps the masks fixed: each gradient is masked as it is computed and the
    weights are masked again after every optimizer.step(). Call it after the dense training and before
    wrapping the model in DistributedDataParallel or after (the masks depend only on the weights, which
    DDP keeps identical on every rank)."""
    if method != "magnitude":
        raise Error(f"method '{method}': prune_for_retraining supports magnitude (with transposable=True "
                    "for 2:4 in W and W^T)")
    core = _unwrap(model)
    ms = MaskSet()
    for name, module in core.named_modules():
        if not isinstance(module, (nn.Linear, nn.Conv2d)) or not _matches(name, targets):
            continue
        w = module.weight
        k = w.shape[1]
        rows = w.numel() // k
        if isinstance(module, nn.Conv2d) and module.groups != 1:
            ms.skipped[name] = "grouped convolution"
        elif k % 4:
            ms.skipped[name] = f"K = {k} is not a multiple of 4"
        elif transposable and (rows % 4 or w.dim() != 2):
            ms.skipped[name] = "transposable needs a 2-D weight with rows a multiple of 4"
        else:
            wn = w.detach().to("cpu", torch.float32).contiguous().numpy()
            m = _mask(wn, "2:4", "transposable" if transposable else "magnitude", search)
            mt = torch.from_numpy(m.astype(np.float32)).to(device=w.device, dtype=w.dtype)
            ms.masks[name] = mt
            ms.params[name] = w
            ms._handles.append(w.register_hook(lambda g, mt=mt: g * mt))
    ms.apply()
    ms._handles.append(optimizer.register_step_post_hook(lambda opt, args, kwargs: ms.apply()))
    return ms


# ---- export ------------------------------------------------------------------------------------------------

def _layer_specs(core: nn.Module) -> list[tuple[str, nn.Module, dict]]:
    if not isinstance(core, nn.Sequential):
        raise Error("export: the model must be an nn.Sequential of Conv2d, Linear, BatchNorm2d, ReLU, "
                    "MaxPool2d, Flatten, Dropout")
    specs = []
    for name, m in core.named_children():
        if isinstance(m, nn.Linear):
            s = {"type": "linear", "name": name, "in": m.in_features, "out": m.out_features}
        elif isinstance(m, nn.Conv2d):
            k, st, pad = m.kernel_size, m.stride, m.padding
            if (m.groups != 1 or m.dilation != (1, 1) or k[0] != k[1] or st[0] != st[1] or
                    not isinstance(pad, tuple) or pad[0] != pad[1] or m.padding_mode != "zeros"):
                raise Error(f"export: conv '{name}' must be square, groups 1, no dilation, zero padding")
            s = {"type": "conv2d", "name": name, "in": m.in_channels, "out": m.out_channels,
                 "kernel": k[0], "stride": st[0], "padding": pad[0]}
        elif isinstance(m, nn.BatchNorm2d):
            s = {"type": "batchnorm2d", "name": name, "features": m.num_features}
        elif isinstance(m, nn.ReLU):
            s = {"type": "relu"}
        elif isinstance(m, nn.MaxPool2d):
            if m.stride not in (None, m.kernel_size) or m.padding != 0 or not isinstance(m.kernel_size, int):
                raise Error(f"export: maxpool '{name}' must have stride = kernel and no padding")
            s = {"type": "maxpool2d", "kernel": m.kernel_size}
        elif isinstance(m, nn.Flatten):
            s = {"type": "flatten"}
        elif isinstance(m, nn.Dropout):
            s = {"type": "dropout", "p": m.p}
        else:
            raise Error(f"export: layer '{name}' ({type(m).__name__}) is not one the engine runs")
        specs.append((name, m, s))
    return specs


def export(model: nn.Module, out_dir: str | os.PathLike, input_shape: Iterable[int], name: str = "model") -> dict:
    """Writes OUT_DIR/model.json and OUT_DIR/model.safetensors in the format of the C++ workflow's
    export (docs/training.md, "Export format"): every weight that is 2:4 (all pruned ones) compressed,
    the rest dense. `input_shape` is one sample's shape ([features] or [C, H, W]). Returns the config."""
    core = _unwrap(model)
    specs = _layer_specs(core)
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    tensors, pruned = {}, {}
    classes = None
    for lname, m, s in specs:
        if s["type"] == "linear":
            classes = s["out"]
        for pname, t in list(m.named_parameters(recurse=False)) + list(m.named_buffers(recurse=False)):
            if t is None or not t.is_floating_point():
                continue  # BatchNorm's num_batches_tracked: inference never reads it
            full = f"{lname}.{pname}"
            a = t.detach().to("cpu", torch.float32).contiguous().numpy()
            if pname == "weight" and s["type"] in ("linear", "conv2d") and a.shape[1] % 4 == 0 and \
                    _core._inspect_dense(a, "2:4")["valid"] and (a != 0).any():
                c = _compress(a)
                tensors[full + ".values"] = np.ascontiguousarray(c.values)
                tensors[full + ".metadata"] = np.ascontiguousarray(c.metadata)
                pruned[full] = {"shape": list(a.shape), "pattern": "2:4", "dtype": "float32"}
            else:
                tensors[full] = a
    if classes is None:
        raise Error("export: the model has no Linear layer")
    config = {"model": name, "input_shape": [int(d) for d in input_shape], "classes": classes,
              "normalize": {"mean": 0.0, "std": 1.0}, "layers": [s for _, _, s in specs],
              "format": "sparse24-model", "version": 1, "weights": "model.safetensors", "pruned": pruned}
    _core._save_safetensors(os.path.join(out_dir, "model.safetensors"), tensors,
                            {"format": "sparse24-model", "config": "model.json"})
    _core._write_text(os.path.join(out_dir, "model.json"), json.dumps(config, indent=2) + "\n")
    return config
