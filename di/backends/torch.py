"""PyTorch adapter: ``torch.autograd.grad`` eagerly, ``torch.compile`` when asked."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from di.backends.protocol import (
    Adapter,
    Program,
    Programs,
    counting_static_values,
    raise_bad_output,
    static_positions,
)
from di.backends.selectors import AutoTorch
from di.contexts import Cache, Context
from di.errors import RecompileWarning
from di.families import TORCH, family_of

__all__ = ["TorchAdapter"]


class TorchAdapter(Adapter):
    """Adapter for :class:`di.AutoTorch`.

    Eager gradients differentiate a detached ``requires_grad_()`` alias of ``x``
    (no copy) with ``torch.autograd.grad``. ``Cache`` tensors are passed to ``f``
    as the caller's buffer (numpy buffers through ``torch.from_numpy``, sharing
    memory) and detached after the call, so they hold no graph.

    Compiled (``compile=True``): ``f`` is wrapped in ``torch.compile`` once at
    preparation (``fullgraph=True`` unless ``compile_options`` says otherwise) and
    run once there so compilation happens then; AOTAutograd compiles the
    backward pass with it. Python float contexts are passed as 0-d tensors so a
    new value does not recompile; ints and other hashable values are compiled in.
    """

    family = TORCH

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        assert isinstance(self.backend, AutoTorch)
        return self.backend.compile

    def prepare_value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        return self.prepare_gradient_programs(f, x, contexts)["value_and_gradient"]

    def prepare_gradient_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if not self.compiled:
            return {
                "gradient": self._gradient_program(f, x, contexts, with_value=False),
                "value_and_gradient": self._gradient_program(f, x, contexts, with_value=True),
            }
        compiled_f = self.compile_function(f, x, contexts)
        statics = static_positions(contexts, self.backend)
        return {
            name: counting_static_values(
                self._gradient_program(compiled_f, x, contexts, with_value=with_value, traced_scalars=True),
                statics,
                self.backend,
            )
            for name, with_value in (("gradient", False), ("value_and_gradient", True))
        }

    # --- compilation --------------------------------------------------------------

    def compile_function(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Callable[..., Any]:
        """``torch.compile(f)``, compiled now by one gradient call on the prepared
        arguments. A graph break under the default ``fullgraph=True`` is reported
        as a :class:`di.RecompileWarning` and ``f`` is compiled with graph breaks."""
        assert isinstance(self.backend, AutoTorch)
        options = self.backend.compile_kwargs
        fullgraph_default = "fullgraph" not in options
        options.setdefault("fullgraph", True)
        compiled_f = torch.compile(f, **options)
        warm_up = self._gradient_program(compiled_f, x, contexts, with_value=False, traced_scalars=True)
        values = [c.value for c in contexts]
        try:
            warm_up(x, *values)
        except torch._dynamo.exc.Unsupported as err:
            if not fullgraph_default:
                raise
            reason = str(err).strip().splitlines()[0]
            warnings.warn(
                f"{self.backend!r}: f cannot be compiled as one graph ({reason}); it runs with graph breaks, "
                f"partly eagerly. Remove the data-dependent Python control flow, or pass "
                f"compile_options={{'fullgraph': False}} to accept graph breaks silently.",
                RecompileWarning,
                stacklevel=5,
            )
            options["fullgraph"] = False
            compiled_f = torch.compile(f, **options)
            self._gradient_program(compiled_f, x, contexts, with_value=False, traced_scalars=True)(x, *values)
        return compiled_f

    # --- programs -----------------------------------------------------------------

    def _gradient_program(
        self,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        *,
        with_value: bool,
        traced_scalars: bool = False,
    ) -> Program:
        backend = self.backend
        to_torch_x = self.input_converters([x])[0]
        convert_contexts = self.input_converters([c.value for c in contexts])
        if traced_scalars:
            statics = static_positions(contexts, backend)
            x_dtype = to_torch_x(np.asarray(x) if isinstance(x, float) else x).dtype
            for i, context in enumerate(contexts):
                if i not in statics and isinstance(context.value, (int, float)):
                    convert_contexts[i] = _scalar_to_tensor(x_dtype if isinstance(context.value, float) else None)
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


def _scalar_to_tensor(dtype: Any) -> Callable[[Any], Any]:
    """Python scalars become 0-d tensors, so torch.compile traces instead of
    guarding on (and recompiling for) each value. Floats take ``x``'s dtype so the
    result's dtype is what eager code would give."""

    def to_tensor(value: Any) -> Any:
        return torch.tensor(value, dtype=dtype)

    return to_tensor


def _scalar_tensor(y: Any, leaf: Any, backend: Any) -> Any:
    """Accept a Python float from ``f`` (a constant: zero gradient); refuse the rest."""
    if isinstance(y, float):
        return torch.tensor(y, dtype=leaf.dtype, device=leaf.device)
    raise_bad_output(y, backend)
    raise AssertionError("unreachable")  # pragma: no cover
