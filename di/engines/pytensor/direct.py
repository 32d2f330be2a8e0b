"""The compiled program of a ``pytensor.function`` called without the function's
own Python around it, where PyTensor's linker makes one (:func:`direct_call`).

A ``pytensor.function`` call with ``trust_input=True`` writes its arguments into
the function's input storage, runs the linker's thunk, which reads them back,
calls the compiled program and writes its outputs into the output storage, then
clears both storages and returns the outputs: about 2 us of Python around a
Numba-compiled program (PyTensor 3.0, the default linker), half of a gradient's
call at n = 1e3. The program itself takes the inputs as arguments and returns the
outputs, so ``di`` calls it directly where it can find it.

It reads PyTensor internals (the JIT linker's thunk and its default arguments),
so it checks their layout and falls back to the function's own call for
anything else: another linker (C, Python), a function with updates or implicit
inputs (shared variables), storage that is not the function's own. The program computes what the function's call
computes: the graph is the one the function compiled (with the copies it
inserts so that no output is an input, a constant or another output), and the
call has no state (two threads may run it at once). tests/test_pytensor_details.py
fails when the layout changes, so a PyTensor upgrade shows the fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["direct_call"]

_THUNK_ARGUMENTS = ("fgraph_jit", "thunk_inputs", "thunk_outputs")
"""The names of the JIT linker's thunk's first parameters (``pytensor.link.basic.JITLinker``)."""


def direct_call(function: Any) -> Callable[..., Any] | None:
    """The compiled program of ``function`` (a ``pytensor.function``): called with
    the function's inputs in order, it returns the tuple of its outputs, as the
    function's call with ``trust_input=True`` returns their list; ``None`` where
    the function's linker makes none this module recognises.

    Examples:
        >>> import numpy as np, pytensor, pytensor.tensor as pt
        >>> from di.engines.pytensor.direct import direct_call
        >>> x = pt.vector("x", dtype="float64")
        >>> function = pytensor.function([x], [2 * x])
        >>> run = direct_call(function)
        >>> run(np.array([1.0, 2.0])) if run is not None else (function(np.array([1.0, 2.0]))[0],)
        (array([2., 4.]),)
    """
    thunk = getattr(function, "vm", None)
    code = getattr(thunk, "__code__", None)
    defaults = getattr(thunk, "__defaults__", None)
    if code is None or defaults is None or len(defaults) != len(_THUNK_ARGUMENTS):
        return None
    if code.co_varnames[: len(_THUNK_ARGUMENTS)] != _THUNK_ARGUMENTS:
        return None
    program, thunk_inputs, thunk_outputs = defaults
    if not callable(program) or getattr(function, "_has_updates", True):
        return None
    maker_inputs = getattr(getattr(function, "maker", None), "inputs", None)
    if maker_inputs is None or any(getattr(given, "implicit", True) for given in maker_inputs):
        return None  # (an implicit input, a shared variable's value, is the function's to pass)
    inputs = [container.storage for container in getattr(function, "input_storage", ())]
    outputs = [container.storage for container in getattr(function, "output_storage", ())]
    same_inputs = len(inputs) == len(thunk_inputs) and all(a is b for a, b in zip(inputs, thunk_inputs))
    same_outputs = len(outputs) == len(thunk_outputs) and all(a is b for a, b in zip(outputs, thunk_outputs))
    return program if same_inputs and same_outputs else None  # type: ignore[no-any-return]
