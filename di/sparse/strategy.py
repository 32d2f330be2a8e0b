"""``AutoSparse(dense)``: sparse Jacobians and Hessians from a dense backend's
batched pushforwards, pullbacks or hvps, one per color (a strategy).

At preparation: the pattern is found (:mod:`di.sparse.jaxpr`, dense samples,
or given), colored (:mod:`di.sparse.coloring`), and the dense adapter prepares
its primitive for the seed of every color (``J @ s_c`` as one batched call).
Each call runs that program, stacks the compressed products and gathers the
nonzeros by precomputed indices (:mod:`di.sparse.decompression`), in the
engine's family. Where the dense adapter's engine compiles programs it can
trace whole, the gather is compiled into the same program; other compiled
engines keep their own compiled program and the gather (one indexing kernel)
runs after it.

The result is built in the caller's family (its record's sparse-matrix builder,
2-D ``(f(x).size, x.size)``), or dense, shaped ``f(x).shape + x.shape``, with
``dense_result=True``. Every other operator is the dense backend's prep.

The engine adapters know nothing of this module: it uses them only through the
adapter protocol.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from di.backends import fallbacks
from di.backends.protocol import (
    OPERATOR_FAMILIES,
    Adapter,
    Programs,
    is_real_floating_array,
    is_real_scalar,
    raise_bad_output,
)
from di.backends.registry import get_adapter
from di.backends.selectors import AbstractBackend, AutoSparse
from di.backends.source import ProgramSource
from di.backends.sparsity import DenseSparsity, KnownSparsity, TracerSparsity
from di.contexts import Context
from di.errors import InvalidInputError, UnsupportedOperatorError
from di.families import converter, family_of, get_family, identity
from di.prep.base import Prep
from di.prep.strategy import Preparer, PrepareRequest, Strategy, StrategyInfo
from di.pytrees import is_pytree
from di.sparse import coloring
from di.sparse.decompression import (
    Decompression,
    column_decompression,
    row_decompression,
    seeds,
    star_decompression,
)
from di.sparse.jaxpr import traced_pattern
from di.sparse.patterns import Detection, as_pattern, symmetrize

__all__ = ["SparseInfo", "SparseSource", "SparseStrategy"]

_DENSE_SEED = 0


@dataclass(frozen=True, eq=False)
class SparseInfo(StrategyInfo):
    """What an ``AutoSparse`` prep found at preparation (``prep.info``; ``prep.sparsity``
    and ``prep.colors`` read it).

    Attributes:
        pattern: the boolean ``scipy.sparse.csr_array`` pattern.
        n_colors: the number of colors: pushforwards, pullbacks or hvps per call.
        mode: ``"forward"``, ``"reverse"`` or ``"symmetric"``.
        notes: what detection bounded conservatively (unknown primitives, loops).
        sparse_result: whether results are sparse matrices (else dense arrays).
    """

    pattern: sp.csr_array
    n_colors: int
    mode: str
    notes: tuple[str, ...] = field(default=())
    sparse_result: bool = True

    @property
    def sparsity(self) -> sp.csr_array:  # type: ignore[override]
        return self.pattern

    @property
    def colors(self) -> int:  # type: ignore[override]
        return int(self.n_colors)


class SparseStrategy(Strategy):
    """The preparation hook of :class:`di.AutoSparse`: colored ``jacobian`` and
    ``hessian``, the dense backend's prep for everything else.

    Examples:
        >>> import numpy as np, di
        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(np.eye(2, dtype=bool)))
        >>> di.prepare_jacobian(lambda x: x ** 2, backend, np.zeros(2)).colors
        1
    """

    def engine(self, backend: AbstractBackend) -> AbstractBackend | None:
        assert isinstance(backend, AutoSparse)
        return backend.dense

    def support(self, backend: AbstractBackend) -> dict[str, str]:
        colored = {"jacobian": "sparse (colored pushforwards or pullbacks)", "hessian": "sparse (star-colored hvps)"}
        return {family: colored.get(family, "as the dense backend") for family in OPERATOR_FAMILIES}

    def prepare(self, backend: AbstractBackend, request: PrepareRequest, preparer: Preparer) -> Prep:
        assert isinstance(backend, AutoSparse)
        if request.operator not in ("jacobian", "hessian") or request.same_point:
            return preparer.with_backend(backend.dense).with_backend(backend)
        source = SparseSource(backend)
        prep = preparer.with_source(source, backend)
        assert source.info is not None  # set by the programs the prep was made from
        return prep.with_backend(backend, source.info)


class SparseSource(ProgramSource):
    """The colored ``jacobian`` and ``hessian`` programs of an :class:`di.AutoSparse`
    selector over its dense backend's adapter. Results come out in the caller's
    family (sparse matrices have no generic conversion); what preparation found
    is left in :attr:`info`."""

    converts_results = False

    def __init__(self, backend: AutoSparse) -> None:
        super().__init__(get_adapter(backend.dense))
        self.backend = backend
        self.selector = backend
        self.dense = self.adapter
        self.info: SparseInfo | None = None

    def takes_pytree(self, operator: str, x: Any) -> bool:
        return True  # pytrees reach jacobian and hessian, which refuse them clearly

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
        if operator == "jacobian":
            return self.prepare_jacobian_programs(f, x, contexts, has_aux=has_aux)
        return self.prepare_hessian_programs(f, x, contexts)

    # --- jacobian and hessian: colored ----------------------------------------------------

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        if has_aux:
            raise UnsupportedOperatorError(
                f"{self.backend!r} does not support has_aux for jacobian: sparse Jacobians need f to return its "
                f"output alone. Compute aux separately, or use the dense backend {self.selector.dense!r}."
            )
        self._refuse_pytree(x, "jacobian")
        x_shape = tuple(x.shape)
        if isinstance(self.selector.sparsity, TracerSparsity):
            # The traced program says what f returns: no (eager, on a compiled backend) evaluation of f.
            detection = traced_pattern("jacobian", f, x, contexts)
            y: Any = detection.output
        else:
            y = self.dense.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
        if not is_real_floating_array(y):
            raise_bad_output(y, self.backend, "jacobian")
        y_shape = tuple(getattr(y, "shape", ()))
        if not isinstance(self.selector.sparsity, TracerSparsity):
            detection = self._detect("jacobian", f, x, contexts, (math.prod(y_shape), math.prod(x_shape)))
        decompression = self._jacobian_coloring(detection.pattern)
        engine = self._jacobian_engine(f, x, contexts, decompression, y_shape, _numpy_dtype(y))
        programs = self._finished(
            engine, x, contexts, decompression, y_shape + x_shape, ("jacobian", "value_and_jacobian")
        )
        return self._programs(programs, detection, decompression)

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        self._refuse_pytree(x, "hessian")
        if not isinstance(self.selector.sparsity, TracerSparsity):  # traced, f is checked by the dense programs
            y = self.dense.prepare_value_program(f, x, contexts)(x, *[c.value for c in contexts])
            if not is_real_scalar(y):
                raise_bad_output(y, self.backend, "hessian")
        x_shape = tuple(x.shape)
        n = math.prod(x_shape)
        detection = self._detect("hessian", f, x, contexts, (n, n))
        pattern = symmetrize(detection.pattern)
        colors = coloring.star_coloring(pattern, self.selector.order)
        decompression = star_decompression(pattern, colors)
        engine = self._hessian_engine(f, x, contexts, decompression)
        names = ("hessian", "value_gradient_and_hessian")
        programs = self._finished(engine, x, contexts, decompression, x_shape + x_shape, names)
        return self._programs(programs, Detection(pattern, detection.notes), decompression)

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
        program is compiled here and the caller is JAX, the result (a ``BCOO``, or
        the dense scatter) is built inside the compiled program, and the plain
        operator has its own program without the value (XLA then drops its work)."""
        caller = family_of(x) or "numpy"
        assemble = _assembler(decompression, caller, self.selector.dense_result, dense_shape)
        inside = self._fuses() and caller == self.family
        to_caller = converter(self.family, caller)

        def full_engine(x: Any, *values: Any) -> Any:
            *others, data = engine(x, *values)
            return (*others, assemble(data) if inside else data)

        def plain_engine(x: Any, *values: Any) -> Any:
            data = engine(x, *values)[-1]
            return assemble(data) if inside else data

        full_program = self._fused(full_engine, x, contexts)
        plain_program = self._fused(plain_engine, x, contexts) if self._fuses() else plain_engine
        finish = identity if inside else assemble

        def full(x: Any, *values: Any) -> Any:
            *others, result = full_program(x, *values)
            return (*[to_caller(value) for value in others], finish(result))

        def plain(x: Any, *values: Any) -> Any:
            return finish(plain_program(x, *values))

        return {names[0]: plain, names[1]: full}

    def _programs(self, programs: dict[str, Any], detection: Detection, decompression: Decompression) -> Programs:
        self.info = SparseInfo(
            detection.pattern,
            decompression.n_colors,
            decompression.mode,
            tuple(detection.notes),
            not self.selector.dense_result,
        )
        return programs

    def _refuse_pytree(self, x: Any, operator: str) -> None:
        if is_pytree(x):
            raise InvalidInputError(
                f"{self.backend!r}: sparse {operator}s need x to be one array, not a pytree. Concatenate the "
                f"leaves into one vector (and split it inside f), or use the dense backend {self.selector.dense!r}."
            )

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
        if isinstance(source, TracerSparsity):
            return traced_pattern(operator, f, x, contexts)
        raise InvalidInputError(f"{self.backend!r}: unknown sparsity source {source!r}")  # pragma: no cover

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
        to_numpy = converter(adapter.family, "numpy")
        rng = np.random.default_rng(_DENSE_SEED)
        family = family_of(x) or "numpy"
        nonzero = np.zeros(shape, dtype=bool)
        values = [c.value for c in contexts]
        for _ in range(source.points):
            point = converter("numpy", family)(rng.standard_normal(tuple(x.shape)).astype(_numpy_dtype(x)))
            matrix = np.asarray(to_numpy(dense(point, *values)), dtype=np.float64).reshape(shape)
            nonzero |= np.abs(matrix) > source.atol
        return as_pattern(nonzero)

    def _jacobian_coloring(self, pattern: sp.csr_array) -> Decompression:
        """Column coloring (pushforwards) or row coloring (pullbacks): the one the
        dense backend's ``mode`` asks for, else the one with fewer colors, among the
        primitives the dense adapter implements itself."""
        order = self.selector.order
        can_forward = self.dense.has_native("pushforward") or not self.dense.has_native("pullback")
        can_reverse = self.dense.has_native("pullback") or not self.dense.has_native("pushforward")
        mode = getattr(self.selector.dense, "mode", None)
        if (mode == "forward" and can_forward) or not can_reverse:
            return column_decompression(pattern, coloring.column_coloring(pattern, order))
        if mode == "reverse" or not can_forward:
            return row_decompression(pattern, coloring.row_coloring(pattern, order))
        columns = coloring.column_coloring(pattern, order)
        rows = coloring.row_coloring(pattern, order)
        if _count(rows) < _count(columns):
            return row_decompression(pattern, rows)
        return column_decompression(pattern, columns)

    # --- the engine-side programs: compressed evaluation and gather -------------------------

    def _engine_adapter(self) -> Adapter:
        """The adapter that computes the compressed products: the dense one, or its
        traceable twin when the whole program is compiled here."""
        twin = self.dense.traceable_twin()
        return self.dense if twin is None else twin

    def _fuses(self) -> bool:
        """Whether the dense engine compiles the whole program (products and gather) into one."""
        return self.dense.traceable_twin() is not None

    def _engine_arguments(self, x: Any, contexts: Sequence[Context]) -> tuple[Any, list[Context]]:
        """``x`` and contexts to prepare the engine's programs with: as they are,
        or (when compiled here) converted to the engine's family, which is what the
        compiled program will receive."""
        if not self._fuses():
            return x, list(contexts)
        values = [x, *[c.value for c in contexts]]
        with self.dense.scope(values)():
            converted = [convert(v) for convert, v in zip(self.dense.input_converters(values), values)]
        return converted[0], [fallbacks.rewrap_context(c, v) for c, v in zip(contexts, converted[1:])]

    def _jacobian_engine(
        self,
        f: Callable[..., Any],
        x: Any,
        contexts: Sequence[Context],
        decompression: Decompression,
        y_shape: tuple[int, ...],
        y_dtype: Any,
    ) -> Callable[..., Any]:
        """``engine(x, *values) -> (y, data)`` in the engine's family."""
        adapter = self._engine_adapter()
        x_engine, engine_contexts = self._engine_arguments(x, contexts)
        n_colors = decompression.n_colors
        gather = _gatherer(adapter.family, decompression.index)
        if n_colors == 0:
            value = adapter.prepare_value_program(f, x_engine, engine_contexts)
            empty = _empty_data(adapter.family, y_dtype)

            def without_colors(x: Any, *values: Any) -> Any:
                return value(x, *values), empty

            return without_colors
        if decompression.mode == "forward":
            tangent_shape, dtype = tuple(x.shape), _numpy_dtype(x)
            size, primitive = math.prod(tangent_shape), "pushforward"
        else:
            tangent_shape, dtype = y_shape, y_dtype
            size, primitive = math.prod(y_shape), "pullback"
        seed_matrix = seeds(decompression.colors, n_colors, size).astype(dtype)
        tangents = tuple(seed.reshape(tangent_shape) for seed in seed_matrix)
        compressed = fallbacks.programs(adapter, primitive, f, x_engine, engine_contexts, tangents)
        value_and_products = compressed[f"value_and_{primitive}"]

        def engine(x: Any, *values: Any) -> Any:
            y, products = value_and_products(x, tangents, *values)
            return y, gather(products)

        return engine

    def _hessian_engine(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], decompression: Decompression
    ) -> Callable[..., Any]:
        """``engine(x, *values) -> (f(x), gradient, data)`` in the engine's family."""
        adapter = self._engine_adapter()
        x_engine, engine_contexts = self._engine_arguments(x, contexts)
        value = adapter.prepare_value_program(f, x_engine, engine_contexts)
        gather = _gatherer(adapter.family, decompression.index)
        if decompression.n_colors == 0:
            gradient = fallbacks.programs(adapter, "gradient", f, x_engine, engine_contexts)["gradient"]
            empty = _empty_data(adapter.family, _numpy_dtype(x))

            def without_colors(x: Any, *values: Any) -> Any:
                return value(x, *values), gradient(x, *values), empty

            return without_colors
        seed_matrix = seeds(decompression.colors, decompression.n_colors, math.prod(x.shape)).astype(_numpy_dtype(x))
        tangents = tuple(seed.reshape(tuple(x.shape)) for seed in seed_matrix)
        gradient_and_hvp = fallbacks.programs(adapter, "hvp", f, x_engine, engine_contexts, tangents)[
            "gradient_and_hvp"
        ]

        def engine(x: Any, *values: Any) -> Any:
            g, products = gradient_and_hvp(x, tangents, *values)
            return value(x, *values), g, gather(products)

        return engine

    def _fused(self, engine: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Callable[..., Any]:
        """Where the dense engine fuses programs: ``engine`` (compressed products and
        gather) compiled as one program by the dense adapter, compiled now, taking
        caller-family inputs. Elsewhere ``engine`` itself (the dense adapter compiled
        what it compiles)."""
        if not self._fuses():
            return engine
        return self.dense.compile_program(engine, x, None, contexts)


# --- helpers ----------------------------------------------------------------------------------


def _count(colors: np.ndarray) -> int:
    return int(colors.max(initial=-1)) + 1


def _numpy_dtype(value: Any) -> Any:
    """The NumPy dtype of an array of any family (bfloat16 as float32, which NumPy has)."""
    family = family_of(value)
    name = get_family(family).describe_dtype(value.dtype) if family else str(getattr(value, "dtype", "float64"))
    return np.dtype("float32" if name == "bfloat16" else name)


def _gatherer(family: str, index: np.ndarray) -> Callable[[Sequence[Any]], Any]:
    """``gather(products)``: stack the compressed products and read the nonzeros."""
    record = get_family(family)
    xp = record.namespace()
    where = record.index(index)

    def gather(products: Sequence[Any]) -> Any:
        return xp.reshape(xp.stack(list(products)), (-1,))[where]

    return gather


def _empty_data(family: str, dtype: Any) -> Any:
    return converter("numpy", family)(np.zeros(0, dtype=dtype))


def _assembler(
    decompression: Decompression, family: str, dense_result: bool, dense_shape: tuple[int, ...]
) -> Callable[[Any], Any]:
    """``assemble(data)``: the result in the caller's family from the nonzeros (in
    the engine's family, CSR order): a sparse matrix, or a dense array."""
    if dense_result:
        return _dense_assembler(decompression, family, dense_shape)
    build, to_caller = (
        get_family(family).sparse_matrix(decompression.indices, decompression.indptr, decompression.shape),
        _to(family),
    )

    def sparse(data: Any) -> Any:
        return build(to_caller(data))

    with warnings.catch_warnings():  # torch warns once per process that sparse CSR is in beta
        warnings.simplefilter("ignore", UserWarning)
        sparse(np.zeros(decompression.index.size))
    return sparse


def _to(family: str) -> Callable[[Any], Any]:
    """Convert arrays of any family to ``family``."""

    def convert(data: Any) -> Any:
        return converter(family_of(data), family)(data)

    return convert


def _dense_assembler(decompression: Decompression, family: str, dense_shape: tuple[int, ...]) -> Callable[[Any], Any]:
    record, to_caller = get_family(family), _to(family)
    positions = record.index(decompression.flat_positions)
    size = math.prod(dense_shape)

    def dense(data: Any) -> Any:
        return record.scatter(to_caller(data), positions, size).reshape(dense_shape)

    return dense
