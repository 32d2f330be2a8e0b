"""JAX adapter: ``jax.value_and_grad`` eagerly, one ``jax.jit`` program when compiled.

float64 is kept by running inside a scoped ``jax.enable_x64(True)`` whenever an
input is float64 (the global flag is never touched).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from di.backends.protocol import (
    Adapter,
    Program,
    counting_static_values,
    is_real_scalar,
    raise_bad_output,
    static_positions,
)
from di.backends.selectors import AutoJAX
from di.contexts import Context
from di.families import JAX, NUMPY, family_of, identity

__all__ = ["JAXAdapter", "needs_x64"]



def needs_x64(values: Sequence[Any]) -> bool:
    """Whether any value is a 64-bit array or a Python float ``x`` (float64 in JAX
    only exists inside ``jax.enable_x64``)."""
    for value in values:
        if family_of(value) is not None and np.dtype(str(value.dtype).replace("torch.", "")).itemsize == 8:
            return True
    return False


class JAXAdapter(Adapter):
    """Adapter for :class:`di.AutoJAX`.

    Eager (``jit=False``): ``jax.value_and_grad(f)`` runs op by op on every call,
    so Python control flow on values works. Compiled (``jit=True``): one fused
    value-and-gradient program is compiled at preparation; contexts are traced or
    compiled in as :func:`di.backends.protocol.is_static_context` says. ``Cache`` values are passed as
    immutable JAX arrays: ``f`` must build new arrays rather than write into them.
    """

    family = JAX
    cache_note = "JAX arrays are immutable: f receives the cache as an array it must not write into."

    @property
    def compiled(self) -> bool:  # type: ignore[override]
        assert isinstance(self.backend, AutoJAX)
        return self.backend.jit

    def prepare_value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        return self._value_and_gradient(f, x, contexts)

    def _checked(self, f: Callable[..., Any]) -> Callable[..., Any]:
        backend = self.backend

        def checked(x: Any, *values: Any) -> Any:
            y = f(x, *values)
            if isinstance(y, float):
                return jnp.asarray(y, dtype=x.dtype)
            if not is_real_scalar(y):
                raise_bad_output(y, backend)
            return y

        return checked

    def _value_and_gradient(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Program:
        # One program serves gradient and value_and_gradient: built once per prep.
        values = [c.value for c in contexts]
        x64 = needs_x64([x, *values])
        if self.compiled:
            return self._compiled_value_and_gradient(f, x, contexts, x64)
        value_and_grad = jax.value_and_grad(self._checked(f))
        return _in_engine_family(value_and_grad, self.input_converters([x, *values]), x64)

    def _compiled_value_and_gradient(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], x64: bool
    ) -> Program:
        statics = static_positions(contexts, self.backend)
        jitted = jax.jit(jax.value_and_grad(self._checked(f)), static_argnums=tuple(1 + i for i in statics))
        # jit takes numpy input itself (one device_put, no intermediate array); only
        # torch tensors need converting, through DLPack.
        inputs = [x, *[c.value for c in contexts]]
        converters = [
            identity if family_of(v) == NUMPY else convert for v, convert in zip(inputs, self.input_converters(inputs))
        ]
        program = _in_engine_family(jitted, converters, x64)
        with jax.enable_x64(True) if x64 else contextlib.nullcontext():
            jitted.lower(*[convert(v) for convert, v in zip(converters, inputs)]).compile()
        return counting_static_values(program, statics, self.backend)


def _in_engine_family(function: Callable[..., Any], converters: Sequence[Callable[[Any], Any]], x64: bool) -> Program:
    """Wrap ``function`` so its inputs are converted and run in the right x64 scope,
    adding nothing when neither is needed."""
    if all(convert is identity for convert in converters):
        if not x64:
            return function

        def scoped(*args: Any) -> Any:
            with jax.enable_x64(True):
                return function(*args)

        return scoped
    convert_x, convert_values = converters[0], converters[1:]

    def converted(x: Any, *values: Any) -> Any:
        with jax.enable_x64(True) if x64 else contextlib.nullcontext():
            return function(convert_x(x), *[convert(v) for convert, v in zip(convert_values, values)])

    return converted
