"""PyTorch adapter: ``torch.autograd.grad`` eagerly, ``torch.compile`` when asked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from di.backends.protocol import Adapter, Program, Programs, raise_bad_output
from di.contexts import Cache, Context
from di.families import TORCH, family_of

__all__ = ["TorchAdapter"]


class TorchAdapter(Adapter):
    """Adapter for :class:`di.AutoTorch`.

    Eager gradients differentiate a detached ``requires_grad_()`` alias of ``x``
    (no copy) with ``torch.autograd.grad``. ``Cache`` tensors are passed to ``f``
    as the caller's buffer (numpy buffers through ``torch.from_numpy``, sharing
    memory) and detached after the call, so they hold no graph.
    """

    family = TORCH

    def prepare_value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        return self._gradient_program(f, x, contexts, with_value=True)

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        return {
            "gradient": self._gradient_program(f, x, contexts, with_value=False),
            "value_and_gradient": self._gradient_program(f, x, contexts, with_value=True),
        }

    def _gradient_program(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, with_value: bool
    ) -> Program:
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self.input_converters([c.value for c in contexts])
        # Caller-owned torch tensors written by f hold a graph afterwards: detach them.
        cache_positions = tuple(
            i for i, c in enumerate(contexts) if isinstance(c, Cache) and family_of(c.value) == TORCH
        )
        tensor_type = torch.Tensor
        autograd_grad = torch.autograd.grad
        enable_grad = torch.enable_grad
        is_grad_enabled = torch.is_grad_enabled

        def run(x: Any, *values: Any) -> Any:
            leaf = to_torch_x(x).detach().requires_grad_()
            if values:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            try:
                if is_grad_enabled():
                    y = f(leaf, *values)
                else:
                    with enable_grad():
                        y = f(leaf, *values)
                if not (isinstance(y, tensor_type) and y.dim() == 0 and y.is_floating_point()):
                    y = _scalar_tensor(y, leaf, backend)
                g = autograd_grad(y, leaf, allow_unused=True)[0] if y.requires_grad else None
                if g is None:  # f does not depend on x
                    g = torch.zeros_like(leaf, requires_grad=False)
            finally:
                for i in cache_positions:
                    values[i].detach_()
            if with_value:
                return y.detach(), g
            return g

        return run


def _scalar_tensor(y: Any, leaf: Any, backend: Any) -> Any:
    """Accept a Python float from ``f`` (a constant: zero gradient); refuse the rest."""
    if isinstance(y, float):
        return torch.tensor(y, dtype=leaf.dtype, device=leaf.device)
    raise_bad_output(y, backend)
    raise AssertionError("unreachable")  # pragma: no cover
