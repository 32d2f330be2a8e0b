"""How the JAX adapter builds its programs (:class:`ProgramBuilder`).

Each operator family is two pure JAX functions of ``(x, [tangents,]
*context_values)``: the plain operator's, returning its result alone, and the
``value_and_*`` one, returning the tuple. With ``AutoJAX(jit=True)`` the plain one
is compiled at preparation and the other on its first call (an output nobody
reads still costs a compiled call its transfer and dispatch), with the static
contexts as ``static_argnums``; without jit, each runs op by op every call.

float64 is kept by running inside a scoped ``jax.enable_x64(True)`` whenever an
input is 64-bit (the global flag is never touched); a call already inside such a
scope enters none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax

from di.backends.compile import (
    combined_first,
    compiled_on_first_use,
    counting_static_values,
    has_static_leaves,
    static_positions,
)
from di.backends.outputs import checking
from di.backends.protocol import Adapter, Program, Programs
from di.backends.registry import get_adapter
from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.engines.jax.meshes import in_mesh
from di.engines.jax.programs import RULES, AuxTracing, StaticLeaves, bare_single, named, passed_tangents, wrap
from di.engines.jax.selector import AutoJAX
from di.engines.jax.x64 import x64_scope
from di.families import family_of, identity
from di.prep.own_checks import checked_by_executable, checks_arguments
from di.pytrees import is_pytree

__all__ = ["ProgramBuilder", "traced_inputs"]


def traced_inputs(inputs: Sequence[Any], tangents: Sequence[Any] | None) -> bool:
    """Whether an input is traced by a JAX transform (a preparation inside one: an
    unprepared call in a jitted or vmapped function), where compiling now would
    compile a program no call runs."""
    leaves = jax.tree_util.tree_leaves([list(inputs), list(tangents or ())])
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def _abstract(args: Sequence[Any]) -> list[Any]:
    """The prepared arguments as abstract values (shape, dtype, weak type): what an
    executable is compiled for, without holding the caller's arrays."""

    def spec(leaf: Any) -> Any:
        aval = jax.typeof(leaf)
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)

    return [jax.tree_util.tree_map(spec, arg) for arg in args]


def _direct_call(compiled: Any) -> Callable[..., Any]:
    """The C++ dispatch of an ahead-of-time compiled executable, which JAX's
    ``Compiled.__call__`` (a Python method) builds on its first call and then
    calls on every one: built now, it saves a Python call per prepared call. It
    refuses other arguments as ``Compiled`` does (a ``TypeError``). Where this JAX
    builds it otherwise, or not at all, the ``Compiled`` itself."""
    try:
        call = compiled._executable.create_cpp_call(compiled._params)
    except Exception:  # pragma: no cover - another JAX layout
        call = None
    return compiled if call is None else call


def _compiled_when_first_used(function: Any, specs: Sequence[Any], x64: bool) -> Callable[..., Any]:
    """The executable of ``function`` for the prepared arguments ``specs``,
    compiled by its first call (once, under a lock)."""
    lock = threading.Lock()
    compiled: list[Any] = []

    def executable(*args: Any) -> Any:
        if not compiled:
            with lock:
                if not compiled:
                    with x64_scope() if x64 else contextlib.nullcontext():
                        compiled.append(_direct_call(function.lower(*specs).compile()))
                    cell[0] = compiled[0]
        return compiled[0](*args)

    # what a caller that checks its arguments by the executable calls: this function until
    # the executable is compiled, then the executable itself (a Python call fewer per call)
    cell: list[Callable[..., Any]] = [executable]
    executable.cell = cell  # type: ignore[attr-defined]
    return executable


def _lowered(function: Any, args: Sequence[Any], backend: AbstractBackend, operator: str, values: Sequence[Any]) -> Any:
    """``function`` lowered for ``args``. Some of JAX's refusals of ``f`` come only
    now, not while ``f`` ran (forward mode through a ``jax.custom_vjp`` function
    under ``jax.jit`` is a primitive that refuses to be lowered): they are
    explained here as the output rules explain them inside ``f``."""
    try:
        return function.lower(*args)
    except (TypeError, NotImplementedError) as err:
        explained = RULES.translate(err, backend, operator, values)
        if explained is None:
            raise
        raise explained from err


def _taken_by_jit(value: Any) -> bool:
    """Whether ``jax.jit`` takes ``value`` as it is: a numpy array, or a pytree of
    numpy and JAX arrays (converting them first would copy each leaf in Python)."""
    if family_of(value) == "numpy":
        return True
    if not is_pytree(value):
        return False
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(family_of(leaf) in ("numpy", "jax") for leaf in leaves)


def _holds_numpy(values: Sequence[Any]) -> bool:
    """Whether a NumPy array is among ``values``' leaves. Outside ``enable_x64``, JAX
    reads a NumPy float64 array as float32 before an executable compares it: a
    float32 executable takes it, where a strict prep must refuse it (and the
    result would be float32). Such arguments are compared by their family's
    matcher instead."""
    return any(family_of(leaf) == "numpy" for leaf in jax.tree_util.tree_leaves(list(values)))


def _mark(program: Program) -> Program:
    """``program``, a wrapper of one that checks its own arguments, marked as such."""
    program.checks_arguments = True  # type: ignore[attr-defined]
    return program


class ProgramBuilder(Adapter):
    """What the JAX adapter makes a program of a pure JAX function with: ``f``'s
    output checked, caller-family inputs converted (``jax.jit`` takes NumPy
    ones itself), the x64 scope its inputs need entered, and with ``jit`` the
    function compiled with its static contexts, now or by its first call, into
    an executable that checks its own arguments where it can; and the twins
    through which a strategy compiles programs of this engine into one.
    """

    # --- compiling programs of this engine into one ---------------------------------------

    def traceable_twin(self) -> Adapter | None:
        """``AutoJAX(jit=False)``'s adapter for ``AutoJAX(jit=True)``: its programs are
        pure JAX functions that ``jax.jit`` traces into one program; ``None`` eager."""
        if not self.compiled:
            return None
        assert isinstance(self.backend, AutoJAX)
        return get_adapter(dataclasses.replace(self.backend, jit=False))

    def compiled_twin(self) -> Adapter | None:
        """``AutoJAX(jit=True)``'s adapter for ``AutoJAX(jit=False)``; ``None`` compiled."""
        if self.compiled:
            return None
        assert isinstance(self.backend, AutoJAX)
        return get_adapter(dataclasses.replace(self.backend, jit=True))

    def compile_program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
    ) -> Program:
        """``core`` under ``jax.jit`` (eager: as it is), taking the caller's inputs,
        static contexts compiled in, in the x64 scope its inputs need; compiled now
        or, ``on_first_use``, by its first call."""
        return self._program(core, x, tangents, contexts, on_first_use=on_first_use)

    # --- building programs ----------------------------------------------------------

    def _checked(self, f: Callable[..., Any], operator: str, aux: AuxTracing | None = None) -> Callable[..., Any]:
        """``f`` with its output checked for ``operator``; with ``aux``, ``f`` returns
        ``(y, aux)`` and the function returns ``(y, aux's arrays)`` (the rest of
        ``aux`` is recorded by ``aux``)."""
        if aux is None:
            return checking(f, self.backend, operator, RULES)
        return checking(f, self.backend, operator, RULES, has_aux=True, aux=aux.split)

    def _program(
        self,
        core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        *,
        on_first_use: bool = False,
        aux: AuxTracing | None = None,
        bare: bool = False,
        operator: str = "",
        compiled_now: list[Any] | None = None,
    ) -> Program:
        """``core(x, [tangents,] *values)`` taking caller-family inputs and running in
        the x64 scope it needs; with jit, compiled now or, ``on_first_use``, by its
        first call (once, under a lock). With ``aux``, ``core`` returns ``(result,
        aux's arrays)`` and the program ``(result, aux)``. ``operator``: the one
        whose refusals of ``f`` found while compiling are explained. ``compiled_now``:
        receives the executable compiled now, if one is (its cost analysis
        compares candidate programs)."""
        values = [c.value for c in contexts]
        scope = self.scope([x, *values])
        x64 = scope is x64_scope or getattr(scope, "x64", False)
        mesh = getattr(scope, "mesh", None)  # a mesh with explicit axes, whose context eager JAX needs
        lead = 1 if tangents is None else 2
        inputs = [x, *values]
        function: Callable[..., Any]
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            # pytree contexts with leaves compiled in (ints, strings): their static leaves travel
            # in the pytree's structure, one program per distinct set, counted as static values
            partly = tuple(
                i
                for i, c in enumerate(contexts)
                if i not in statics and has_static_leaves(c, jax.tree_util.tree_leaves(c.value))
            )
            if aux is not None:
                core = aux.carrying(core)
            # named: JAX's messages then cite x and values[i], which RULES.translate maps to f's arguments
            function = jax.jit(named(core, lead), static_argnums=tuple(lead + i for i in statics))
            # jit takes numpy input itself (one transfer; pytrees of numpy leaves too): only torch
            # needs DLPack.
            converters = [
                identity if _taken_by_jit(v) else convert for v, convert in zip(inputs, self.input_converters(inputs))
            ]
            for i in partly:
                converters[1 + i] = StaticLeaves.split
        else:
            statics, partly, function, converters = (), (), core, self.input_converters(inputs)
        traced = self.compiled and traced_inputs(inputs, tangents)
        executable: Callable[..., Any] | None = None
        if self.compiled and not traced:  # (inside a transform, the caller's trace compiles it instead)
            with scope():  # (64-bit inputs; a mesh with explicit axes, which lowering some programs needs)
                args = [convert(v) for convert, v in zip(converters, inputs)]
                if tangents is not None:
                    args.insert(1, passed_tangents(tangents, bare))
                if not on_first_use:  # compiled now
                    compiled = _lowered(function, args, self.backend, operator, values).compile()
                    if compiled_now is not None:
                        compiled_now.append(compiled)
                    executable = _direct_call(compiled)
                elif not statics and not partly and tangents is None and is_pytree(x):
                    executable = _compiled_when_first_used(function, _abstract(args), x64)
        by_executable = not statics and not partly and tangents is None and is_pytree(x)
        if executable is not None and by_executable and not _holds_numpy(inputs):
            # A pytree x is taken as it is by the compiled executable, which flattens it in
            # C++ and refuses another structure, shape or dtype itself: the strict check of
            # x costs nothing more (an array x is compared faster by its family's matcher).
            function = checked_by_executable(executable, function)
        program = wrap(function, converters, tangents is not None, x64, bare)
        if aux is not None:
            program = aux.joining(program, self.compiled)
        if mesh is not None:  # eager programs, and compiled ones compiled by their first call, run in it
            program = in_mesh(program, mesh)
        if not self.compiled:
            return program
        if on_first_use and not (executable is not None and checks_arguments(function)):
            # (an executable compiled by its first call compiles once under its own lock: no
            # second lock around it, one Python call fewer per call)
            program = compiled_on_first_use(program)
        if checks_arguments(function):
            program = _mark(program)
        counted = sorted(statics + partly)
        return counting_static_values(
            program,
            tuple(lead - 1 + i for i in counted),
            self.backend,
            prepared=[values[i] for i in counted],
            first_context=lead - 1,
            keys={lead - 1 + i: StaticLeaves.key for i in partly},
        )

    def _plain_and_full(
        self,
        plain_core: Callable[..., Any],
        full_core: Callable[..., Any],
        x: Any,
        tangents: Sequence[Any] | None,
        contexts: Sequence[Context],
        names: tuple[str, str],
        aux: AuxTracing | None = None,
        compiled_now: list[Any] | None = None,
    ) -> Programs:
        """The two programs of an operator family: the plain operator's, returning
        its result alone (compiled at preparation), and the ``value_and_*`` one
        (compiled on its first call). One program for both would make the plain
        call pay for outputs it drops: each output of a compiled call costs
        microseconds, and a jacobian returned beside the value is copied out of
        the layout XLA computed it in. For one tangent the compiled plain program
        returns the bare array, put in a tuple in Python. A preparation for the
        combined form (``value=True``) compiles the two the other way round.
        ``compiled_now``: receives the executable compiled at preparation."""
        bare = tangents is not None and aux is None and self.compiled
        if bare:
            plain_core = bare_single(plain_core)
        combined = combined_first()  # prepare_*(..., value=True): the value_and_* program now
        return {
            names[0]: self._program(
                plain_core,
                x,
                tangents,
                contexts,
                on_first_use=combined,
                aux=aux,
                bare=bare,
                operator=names[0],
                compiled_now=compiled_now,
            ),
            names[1]: self._program(
                full_core,
                x,
                tangents,
                contexts,
                on_first_use=not combined,
                aux=aux,
                operator=names[0],
                compiled_now=compiled_now,
            ),
        }

    def _aux(self, contexts: Sequence[Context], has_aux: bool) -> AuxTracing | None:
        if not has_aux:
            return None
        return AuxTracing(self.compiled)
