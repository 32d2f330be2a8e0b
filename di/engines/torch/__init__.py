"""PyTorch: its selector, adapter, array family and ``DifferentiateWith`` host.

:data:`ENGINE` is the record the registries read; importing this package imports
neither torch nor the adapter.
"""

from __future__ import annotations

from di.backends.engine import Engine
from di.engines.torch.selector import AutoTorch

__all__ = ["ENGINE"]

ENGINE = Engine(
    name="torch",
    selectors=(AutoTorch,),
    adapter="di.engines.torch.adapter:TorchAdapter",
    display="PyTorch",
    aliases=("pytorch",),
    labels={"torch": AutoTorch(), "torch-compile": AutoTorch(compile=True)},
    fastest=("torch",),
    module="torch",
    extra="torch",
    family="di.engines.torch.family:FAMILY",
    host="di.engines.torch.host:HOST",
    processes="di.engines.torch.distributed:processes_of",
)
"""PyTorch's record: ``AutoFastest`` measures ``AutoTorch()`` by default
(``AutoTorch(compile=True)`` costs seconds of compilation: only when listed)."""
