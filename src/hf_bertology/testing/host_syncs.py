"""Count the operations that make the host wait for the device, on any machine (a CPU included).

`.item()`, `bool(tensor)`, a boolean index, `nonzero`, `masked_select`, `unique`, `.tolist()`, `.numpy()`, `.cpu()`
and blocking copies between devices stop a GPU step's host from running ahead (docs/speed.md, "No host sync in a
training step"). `torch.cuda.set_sync_debug_mode` reports them on CUDA only; `HostSyncs` finds the same operations
at the dispatcher (`TorchDispatchMode`), so a CPU test can check that a training step has none:

    with HostSyncs(ignore=("hf_bertology/collators/", "torch/utils/data/")) as syncs:
        trainer.train()
    syncs.count, syncs.by_site()      # {"modeling_bert.py:135 in forward: aten.index.Tensor[bool]": 8, ...}

`ignore`: operations called from these source paths are not counted (a collator's tensors are host tensors on a GPU
machine too). Each sync is recorded with the innermost frame of our code, `transformers` or `accelerate` calling it.
"""

from __future__ import annotations

import traceback
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

# Operations whose output size or value the host must read from the device.
_SYNC_OPS = {
    aten._local_scalar_dense.default: "item",  # .item(), bool(), int(), float() of a tensor
    aten.nonzero.default: "nonzero",
    aten.masked_select.default: "masked_select",
    aten._unique2.default: "unique",
    aten.unique_dim.default: "unique",
    aten.unique_consecutive.default: "unique",
    aten.repeat_interleave.Tensor: "repeat_interleave without output_size",
}
# Index operations that sync when an index is a boolean mask (it becomes `nonzero` inside the kernel).
_BOOL_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
# Tensor methods that read a tensor's values on the host without going through the dispatcher on a CPU tensor.
_HOST_READS = ("tolist", "numpy", "cpu")
# Frames of these paths are torch's own plumbing: the site reported is the first frame outside them.
_INTERNAL = ("/torch/", "/contextlib.py", "/functools.py", "/hf_bertology/testing/host_syncs.py")


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(torch.is_tensor(i) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())


def _crosses_devices(func, args, kwargs) -> bool:
    """A copy between two devices (blocking unless `non_blocking=True` from pinned memory)."""
    if func is aten._to_copy.default:
        device = kwargs.get("device")
        return device is not None and torch.is_tensor(args[0]) and torch.device(device) != args[0].device
    if func is aten.copy_.default:
        return args[0].device != args[1].device
    return False


class HostSyncs(TorchDispatchMode):
    """Context manager that records every host-syncing operation run inside it (module docstring)."""

    def __init__(self, ignore: tuple[str, ...] = ()):
        super().__init__()
        self.ignore = tuple(ignore)
        self.sites: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return sum(self.sites.values())

    def by_site(self) -> dict[str, int]:
        return dict(self.sites.most_common())

    def __enter__(self):
        self._originals = {name: getattr(torch.Tensor, name) for name in _HOST_READS}
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, self._reader(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._originals.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)

    def _reader(self, name: str, original):
        def read(tensor, *args, **kwargs):
            self._record(f"Tensor.{name}()")
            return original(tensor, *args, **kwargs)

        return read

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _SYNC_OPS.get(func)
        if kind is None and func in _BOOL_INDEX_OPS and _bool_index(args):
            kind = f"{func}[bool]"
        if kind is None and _crosses_devices(func, args, kwargs):
            kind = "copy between devices"
        if kind is not None:
            self._record(kind)
        return func(*args, **kwargs)

    def _record(self, kind: str) -> None:
        frames = traceback.extract_stack()[:-2]
        if any(pattern in frame.filename for frame in frames for pattern in self.ignore):
            return
        site = next((f for f in reversed(frames) if not any(p in f.filename for p in _INTERNAL)), frames[-1])
        self.sites[f"{site.filename.rsplit('/', 1)[-1]}:{site.lineno} in {site.name}: {kind}"] += 1


__all__ = ["HostSyncs"]
