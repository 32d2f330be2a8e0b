"""HIPS autograd adapter: reverse mode over NumPy code."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import autograd
import numpy as np

from di.backends.protocol import Adapter, Program, Programs, is_real_scalar, raise_bad_output
from di.contexts import Context
from di.families import NUMPY

__all__ = ["AutogradAdapter"]


class AutogradAdapter(Adapter):
    """Adapter for :class:`di.AutoAutograd`.

    ``x`` and array contexts are handed to autograd as numpy arrays (torch tensors
    zero-copy through ``.numpy()``). ``Cache`` is refused at preparation:
    autograd's traced values (``ArrayBox``) cannot be written into arrays.
    """

    family = NUMPY
    supports_cache = False
    cache_note = (
        "autograd cannot write traced values into arrays. Use AutoTorch, AutoJAX or AutoFiniteDiff, "
        "or pass the buffer as a Constant and build new arrays inside f."
    )

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
        to_numpy_x = self.input_converters([x])[0]
        convert_contexts = self.input_converters([c.value for c in contexts])
        x_dtype = np.asarray(to_numpy_x(x)).dtype

        def checked(x: Any, *values: Any) -> Any:
            y = f(x, *values)
            if not is_real_scalar(y):
                raise_bad_output(y, backend)
            return y

        value_and_grad = autograd.value_and_grad(checked)

        def run(x: Any, *values: Any) -> Any:
            if values:
                values = tuple(convert(v) for convert, v in zip(convert_contexts, values))
            y, g = value_and_grad(to_numpy_x(x), *values)
            g = np.asarray(g)
            if g.dtype != x_dtype:
                g = g.astype(x_dtype)
            if with_value:
                return np.asarray(y), g
            return g

        return run
