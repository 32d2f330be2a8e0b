"""The colored ``jacobian`` and ``hessian`` programs of :class:`di.AutoSparse`
(:class:`SparseSource`), and what preparation found (:class:`SparseInfo`).

At preparation: the pattern is found (:mod:`di.sparse.jaxpr`, dense samples,
or given), colored (:mod:`di.sparse.coloring`), and the dense adapter prepares
its primitive for the seed of every color (``J @ s_c`` as one batched call:
:mod:`di.sparse.products`). Each call runs that program, stacks the compressed
products and gathers the nonzeros by precomputed indices
(:mod:`di.sparse.decompression`), in the engine's family, and assembles the
result in the caller's family. Static contexts are colored per value; a pytree
``x`` is flattened into one vector in the caller's leaf order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.backends import fallbacks
from di.backends.compile import combined_first, counting_static_values, is_static_context, static_positions
from di.backends.outputs import is_real_floating_array, is_real_scalar, raise_bad_output
from di.backends.processes import processes_of
from di.backends.protocol import Programs
from di.backends.registry import get_adapter
from di.backends.source import ProgramSource
from di.contexts import Context, rewrap_context
from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import converter, family_of, identity
from di.prep.info import StrategyInfo
from di.pytrees import is_pytree
from di.sparse.assembly import assembler, chunks, numpy_dtype, solver
from di.sparse.choice import Choice, hessian_decompression, jacobian_decompression
from di.sparse.decompression import Decompression
from di.sparse.detection import TRACED, traced
from di.sparse.layout import leaf_columns, leaf_layout
from di.sparse.patterns import Detection, as_pattern, symmetrize
from di.sparse.products import CompressedProducts, pushforward_count
from di.sparse.selector import AutoSparse
from di.sparse.sources import DenseSparsity, KnownSparsity, SparsitySource

__all__ = ["SparseInfo", "SparseSource"]


_DENSE_SEED = 0


@dataclass(frozen=True, eq=False)
class SparseInfo(StrategyInfo):
    """What an ``AutoSparse`` prep found at preparation (``prep.info``; ``prep.sparsity``
    and ``prep.colors`` read it).

    Attributes:
        pattern: the boolean ``scipy.sparse.csr_array`` pattern (over the
            leaves of a pytree ``x`` one after the other, as :attr:`columns` says).
        n_colors: the number of products per call: pushforwards, pullbacks or hvps.
        mode: ``"forward"``, ``"reverse"``, ``"bidirectional"``, ``"symmetric"``
            (star, read directly) or ``"substitution"`` (acyclic).
        notes: what detection bounded conservatively (unknown primitives, loops).
        sparse_result: whether results are sparse matrices (else dense arrays).
        coloring: ``"column"``, ``"row"``, ``"bidirectional"``, ``"star"``,
            ``"acyclic"`` or ``"given"``.
        order: the vertex order that gave the coloring (``"given"`` for a given one,
            ``"dense"`` for a pattern without zeros: one color per column, no search).
        n_forward: how many of the products are pushforwards: ``n_colors`` in
            ``"forward"`` mode, 0 in ``"reverse"`` mode and for Hessians.
        chunks: how many batches the products are computed in.
        columns: for a pytree ``x``, a pytree shaped like ``x`` holding each
            leaf's ``slice`` of the matrix's columns (and of a Hessian's rows):
            the leaves follow one another in the order the dense gradient dict
            iterates them (each dict in its own key order); ``None`` for an array ``x``.
        tried: ``(order, colors)`` of each candidate the coloring search ran
            (``order="auto"``), in order; the chosen one is :attr:`order`.
        detection_time: seconds spent finding the pattern (tracing ``f``,
            sampling dense matrices, or reading a given pattern).
        coloring_time: seconds spent coloring it and building its decompression.
    """

    pattern: sp.csr_array
    n_colors: int
    mode: str
    notes: tuple[str, ...] = field(default=())
    sparse_result: bool = True
    coloring: str = ""
    order: str = ""
    n_forward: int = 0
    chunks: int = 1
    columns: Any = None
    tried: tuple[tuple[str, int], ...] = ()
    detection_time: float = 0.0
    coloring_time: float = 0.0

    @property
    def sparsity(self) -> sp.csr_array:  # type: ignore[override]
        return self.pattern

    @property
    def colors(self) -> int:  # type: ignore[override]
        return int(self.n_colors)


class SparseSource(CompressedProducts, ProgramSource):
    """The colored ``jacobian`` and ``hessian`` programs of an :class:`di.AutoSparse`
    selector over its dense backend's adapter. Results come out in the caller's
    family (sparse matrices have no generic conversion); what preparation found
    is left in :attr:`info`. A pytree ``x`` is flattened into one vector here, its
    leaves in the caller's order (its pattern is over that vector)."""

    converts_results = False

    def __init__(self, backend: AutoSparse) -> None:
        super().__init__(get_adapter(backend.dense))
        self.backend = backend
        self.selector = backend
        # The adapter of the products: the dense one, or its compiled twin (an eager
        # selector then compiles the colored program once, at preparation).
        self.dense = self.adapter
        self.info: SparseInfo | None = None
        self._detection_failed = False

    def takes_pytree(self, operator: str, x: Any) -> bool:
        return True  # flattened here: the result is one matrix over the flattened leaves

    def programs(
        self,
        operator: str,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        tangents: Sequence[Any] | None = None,
        *,
        has_aux: bool = False,
    ) -> Programs:
        if has_aux:
            raise UnsupportedOperatorError(
                f"{self.backend!r} does not support has_aux for {operator}: sparse matrices need f to return its "
                f"output alone. Compute aux separately, or use the dense backend {self.selector.dense!r}."
            )
        compiled = self.adapter.compiled_twin()
        if any(is_static_context(c) for c in contexts):
            # Static contexts stay eager: compiled in, each new value would be a new compile.
            return self._per_static_value(operator, f, x, contexts)
        if compiled is None:
            return self._colored(operator, f, x, contexts)
        self.dense = compiled
        self._detection_failed = False
        try:
            return self._colored(operator, f, x, contexts)
        except Exception as err:  # an f only the eager engine runs (Python control flow on values)
            if self._detection_failed:  # the tracers do not depend on the engine: it would fail again
                self.dense = self.adapter
                raise
            reason = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}" if str(err) else type(err).__name__
        self.dense = self.adapter
        programs = self._colored(operator, f, x, contexts)
        assert self.info is not None
        note = f"the products run eagerly: {self.backend.dense!r} could not compile f ({reason})"
        self.info = dataclasses.replace(self.info, notes=(*self.info.notes, note))
        return programs

    def _per_static_value(self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """Programs keyed on the values of the static contexts: ``f`` sees them as
        constants (``x[k]`` with a static ``k`` reads one element), so the pattern,
        its coloring and the products hold for those values only. A call with new
        static values detects and colors again, at that call's ``x``, once per
        value (as a compiled backend compiles again); ``prep.info`` describes the
        prepared values."""
        positions = static_positions(contexts, self.backend)

        def key(values: Sequence[Any]) -> tuple[Any, ...]:
            return tuple((type(values[i]), values[i]) for i in positions)

        prepared = self._colored(operator, f, x, contexts)
        by_value = {key([c.value for c in contexts]): prepared}
        lock = threading.Lock()

        def for_values(x: Any, values: Sequence[Any]) -> Programs:
            found = by_value.get(key(values))
            if found is not None:
                return found
            with lock:
                if key(values) not in by_value:
                    again = [rewrap_context(c, v) for c, v in zip(contexts, values)]
                    info = self.info
                    by_value[key(values)] = self._colored(operator, f, x, again)
                    self.info = info
            return by_value[key(values)]

        def dispatch(name: str) -> Callable[..., Any]:
            def program(x: Any, *values: Any) -> Any:
                return for_values(x, values)[name](x, *values)

            return counting_static_values(program, positions, self.backend)

        return {name: dispatch(name) for name in prepared}

    def _colored(self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if is_pytree(x):
            return self._pytree_programs(operator, f, x, contexts)
        if operator == "jacobian":
            return self.prepare_jacobian_programs(f, x, contexts)
        return self.prepare_hessian_programs(f, x, contexts)

    def _pytree_programs(self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        """Programs on the flattened leaves: ``x`` is raveled at each call with its
        leaves in the caller's order (:mod:`di.sparse.layout`: the order in which the
        dense gradient dict iterates, which the matrix's columns follow), ``f`` sees
        the pytree, gradients (and dense results) come back shaped like ``x``."""
        layout = leaf_layout(x)

        def flat_f(vector: Any, *values: Any) -> Any:
            return f(layout.unravel(vector, cast=not self.adapter.capabilities.float64), *values)

        flat_x = layout.ravel(x)
        if operator == "jacobian":
            flat = self.prepare_jacobian_programs(flat_f, flat_x, contexts)
        else:
            flat = self.prepare_hessian_programs(flat_f, flat_x, contexts)
        assert self.info is not None
        self.info = dataclasses.replace(self.info, columns=leaf_columns(layout))
        dense = self.selector.dense_result

        def jacobian(matrix: Any) -> Any:  # dense: one leaf per leaf of x, as the dense backends give
            return layout.unravel_leading(matrix, tuple(matrix.shape[:-1])) if dense else matrix

        def hessian(matrix: Any) -> Any:
            return layout.unravel_hessian(matrix) if dense else matrix

        post: dict[str, Callable[[Any], Any]] = {
            "jacobian": jacobian,
            "value_and_jacobian": lambda r: (r[0], jacobian(r[1])),
            "hessian": hessian,
            "value_gradient_and_hessian": lambda r: (r[0], layout.unravel(r[1]), hessian(r[2])),
        }

        def raveled(name: str) -> Callable[..., Any]:
            program, finish = flat[name], post[name]
            return lambda x, *values: finish(program(layout.ravel(x), *values))

        return {name: raveled(name) for name in flat}

    # --- jacobian and hessian: colored ----------------------------------------------------

    def prepare_jacobian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        x_shape = tuple(x.shape)
        started = time.perf_counter()
        if isinstance(self.selector.sparsity, TRACED):
            # The tracer says what f returns: no (eager, on a compiled backend) evaluation of f.
            detection = self._traced(self.selector.sparsity, "jacobian", f, x, contexts)
            y: Any = detection.output
        else:
            y = self.dense.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
        if not is_real_floating_array(y):
            raise_bad_output(y, self.backend, "jacobian")
        y_shape = tuple(getattr(y, "shape", ()))
        if not isinstance(self.selector.sparsity, TRACED):
            started = time.perf_counter()
            detection = self._detect("jacobian", f, x, contexts, (math.prod(y_shape), math.prod(x_shape)))
        detected = time.perf_counter()
        choice = self._jacobian_choice(detection.pattern)
        timings = (detected - started, time.perf_counter() - detected)
        _check_agreed(x, contexts, choice.decompression)
        engine = self._jacobian_engine(f, x, contexts, choice.decompression, y_shape, numpy_dtype(y))
        names = ("jacobian", "value_and_jacobian")
        programs = self._finished(engine, x, contexts, choice.decompression, y_shape + x_shape, names)
        return self._programs(programs, detection, choice, timings)

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        if not isinstance(self.selector.sparsity, TRACED):  # traced, f is checked by the dense programs
            y = self.dense.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
            if not is_real_scalar(y):
                raise_bad_output(y, self.backend, "hessian")
        x_shape = tuple(x.shape)
        n = math.prod(x_shape)
        started = time.perf_counter()
        detection = self._detect("hessian", f, x, contexts, (n, n))
        pattern = symmetrize(detection.pattern)
        selector = self.selector
        detected = time.perf_counter()
        choice = hessian_decompression(
            pattern, selector.coloring, selector.order, selector.seed, given=self._given(), backend=self.backend
        )
        timings = (detected - started, time.perf_counter() - detected)
        _check_agreed(x, contexts, choice.decompression)
        engine = self._hessian_engine(f, x, contexts, choice.decompression)
        names = ("hessian", "value_gradient_and_hessian")
        programs = self._finished(engine, x, contexts, choice.decompression, x_shape + x_shape, names)
        return self._programs(programs, Detection(pattern, detection.notes), choice, timings)

    def _given(self) -> np.ndarray | None:
        source = self.selector.sparsity
        return source.colors if isinstance(source, KnownSparsity) else None

    def _finished(
        self,
        engine: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        decompression: Decompression,
        dense_shape: tuple[int, ...],
        names: tuple[str, str],
    ) -> dict[str, Any]:
        """The plain and combined programs from ``engine(x, *values) -> (*values_and_gradient, data)``:
        the nonzeros assembled into the result in the caller's family. When the whole
        program is compiled here and the caller is the engine's family, the result (a
        sparse matrix, or the dense scatter) is built inside the compiled program, and
        the plain operator has its own program without the value (the compiler then
        drops its work). A substitution (acyclic) runs on the host after the program."""
        caller = family_of(x) or "numpy"
        assemble = assembler(decompression, caller, self.selector.dense_result, dense_shape)
        substituted = decompression.substitution is not None
        inside = self._fuses() and caller == self.family and not substituted
        to_caller = converter(self.family, caller)

        def full_engine(x: Any, *values: Any) -> Any:
            *others, data = engine(x, *values)
            return (*others, assemble(data) if inside else data)

        def plain_engine(x: Any, *values: Any) -> Any:
            data = engine(x, *values)[-1]
            return assemble(data) if inside else data

        # One program compiled now, the other by its first call, as the dense adapters do: the
        # plain one, or the combined one for a preparation of the value_and_* form (value=True).
        combined = combined_first()
        full_program = self._fused(full_engine, x, contexts, on_first_use=not combined)
        plain_program = self._fused(plain_engine, x, contexts, on_first_use=combined) if self._fuses() else plain_engine
        finish: Callable[[Any], Any] = identity if inside else assemble
        if substituted:
            solve = solver(decompression)

            def finish(flat: Any) -> Any:
                return assemble(solve(flat))

        def full(x: Any, *values: Any) -> Any:
            *others, result = full_program(x, *values)
            return (*[_as_array(to_caller(value)) for value in others], finish(result))

        def plain(x: Any, *values: Any) -> Any:
            return finish(plain_program(x, *values))

        # A result built inside the compiled program needs no wrapper (one call less per call).
        return {names[0]: plain_program if finish is identity else plain, names[1]: full}

    def _programs(
        self, programs: dict[str, Any], detection: Detection, choice: Choice, timings: tuple[float, float]
    ) -> Programs:
        decompression = choice.decompression
        self.info = SparseInfo(
            detection.pattern,
            decompression.n_colors,
            decompression.mode,
            tuple(detection.notes),
            not self.selector.dense_result,
            coloring=choice.coloring,
            order=choice.order,
            n_forward=pushforward_count(decompression),
            chunks=self._chunk_count(decompression),
            tried=choice.tried,
            detection_time=timings[0],
            coloring_time=timings[1],
        )
        return programs

    def _chunk_count(self, decompression: Decompression) -> int:
        if decompression.mode == "bidirectional":
            return len(chunks(decompression.n_forward, self.selector.chunk_size)) + len(
                chunks(decompression.n_reverse, self.selector.chunk_size)
            )
        return len(chunks(decompression.n_colors, self.selector.chunk_size))

    # --- detection and coloring -------------------------------------------------------

    def _detect(
        self, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context], shape: tuple[int, int]
    ) -> Detection:
        source = self.selector.sparsity
        if isinstance(source, KnownSparsity):
            if source.shape != shape:
                raise InvalidInputError(
                    f"{self.backend!r}: the KnownSparsity pattern has shape {source.shape}, but the "
                    f"{operator} of f at this x has shape {shape} (f(x).size, x.size)."
                )
            return Detection(as_pattern(source))
        if isinstance(source, DenseSparsity):
            return Detection(self._sampled_pattern(source, operator, f, x, contexts, shape))
        if isinstance(source, TRACED):
            return self._traced(source, operator, f, x, contexts)
        raise InvalidInputError(f"{self.backend!r}: unknown sparsity source {source!r}")  # pragma: no cover

    def _traced(
        self, source: SparsitySource, operator: str, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Detection:
        """The tracer's pattern; a failure is remembered, so that :meth:`programs`
        does not detect again with the eager products (and run ``f`` to diagnose twice)."""
        try:
            return traced(source, operator, f, x, contexts, self.backend)
        except Exception:
            self._detection_failed = True
            raise

    def _sampled_pattern(
        self,
        source: DenseSparsity,
        operator: str,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        shape: tuple[int, int],
    ) -> sp.csr_array:
        backend = source.backend if source.backend is not None else self.selector.dense
        adapter = get_adapter(backend)
        dense = fallbacks.programs(adapter, operator, f, x, contexts)[operator]
        to_numpy = converter(adapter.capabilities.family, "numpy")
        rng = np.random.default_rng(_DENSE_SEED)
        family = family_of(x) or "numpy"
        nonzero = np.zeros(shape, dtype=bool)
        values = [c.value for c in contexts]
        for _ in range(source.points):
            point = converter("numpy", family)(rng.standard_normal(tuple(x.shape)).astype(numpy_dtype(x)))
            matrix = np.asarray(to_numpy(dense(point, *values)), dtype=np.float64).reshape(shape)
            nonzero |= np.abs(matrix) > source.atol
        return as_pattern(nonzero)

    def _jacobian_choice(self, pattern: sp.csr_array) -> Choice:
        """Columns (pushforwards), rows (pullbacks) or both: the selector's ``mode``,
        else the dense backend's ``mode``, else the fewest products, among the
        primitives the dense adapter implements itself."""
        selector = self.selector
        can_forward = self.dense.has_native("pushforward") or not self.dense.has_native("pullback")
        can_reverse = self.dense.has_native("pullback") or not self.dense.has_native("pushforward")
        mode = selector.mode
        if mode == "auto":
            dense_mode = getattr(selector.dense, "mode", None)
            mode = dense_mode if dense_mode in ("forward", "reverse") else "auto"
        return jacobian_decompression(
            pattern,
            mode,
            selector.order,
            selector.seed,
            can_forward=can_forward,
            can_reverse=can_reverse,
            given=self._given(),
            backend=self.backend,
        )


def _check_agreed(x: Any, contexts: Sequence[Context], decompression: Decompression) -> None:
    """Where ``x`` or a context spans several processes (their collectives need the
    same programs everywhere), check that every process found the same pattern and
    coloring (they are deterministic: traced, or sampled and ordered with fixed
    seeds; a process-local difference in f would show here rather than hang)."""
    processes = processes_of([x, *(c.value for c in contexts)])
    if processes is not None:
        arrays = (decompression.colors, decompression.index, decompression.indptr, decompression.indices)
        digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()
        processes.check_agreed("AutoSparse's sparsity pattern or coloring", digest)


def _as_array(value: Any) -> Any:
    """A NumPy scalar (what an engine computing in NumPy returns for a scalar value)
    as the 0-d array every backend returns; anything else as it is."""
    return np.asarray(value) if isinstance(value, np.generic) else value
