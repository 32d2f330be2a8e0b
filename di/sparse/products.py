"""The engine side of :class:`di.AutoSparse`'s colored programs
(:class:`CompressedProducts`): the dense engine's products on the seeds of the
colors, in batches of ``chunk_size``, their nonzeros gathered, in the engine's
family. Where the dense adapter's engine compiles programs it can trace whole,
the gather is compiled into the same program; other compiled engines keep their
own compiled program and the gather (one indexing kernel) runs after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from di.backends import fallbacks
from di.backends.protocol import Adapter, Programs, keeping_error
from di.contexts import Context, rewrap_context
from di.errors import DIError
from di.sparse.assembly import chunks, empty_data, gatherer, numpy_dtype
from di.sparse.decompression import Decompression, seeds
from di.sparse.selector import AutoSparse

__all__ = ["CompressedProducts", "pushforward_count"]


class CompressedProducts:
    """The engine-side program of :class:`~di.sparse.colored.SparseSource`: the dense
    engine's products (pushforwards, pullbacks or hvps) on the seeds of the colors,
    in batches, their nonzeros gathered, all compiled as one program where the dense
    engine fuses programs.

    Attributes:
        dense: the adapter of the products (the dense backend's, or its compiled twin).
        selector: the :class:`di.AutoSparse` selector.
        backend: the selector, as errors name it.
    """

    dense: Adapter
    selector: AutoSparse
    backend: AutoSparse

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
        return converted[0], [rewrap_context(c, v) for c, v in zip(contexts, converted[1:])]

    def _batched(
        self,
        adapter: Adapter,
        primitive: str,
        f: Callable[..., Any],
        x_engine: Any,
        contexts: Sequence[Context],
        seed_rows: np.ndarray,
        shape: tuple[int, ...],
    ) -> tuple[Callable[..., Any], Callable[..., Any]]:
        """``(with_value, plain)``: ``with_value(x, *values) -> (value, products)`` and
        ``plain(x, *values) -> products``, the products of ``primitive`` on the seeds,
        in batches of ``chunk_size``: where the engine fuses programs and has a
        batched form (:meth:`~di.backends.protocol.Adapter.stacked_products`), one
        seed matrix per batch, ``f`` traced once for all of them; else one prepared
        program per batch size, a tangent per seed."""
        stacked = self._stacked(adapter, primitive, f, x_engine, contexts, seed_rows, shape)
        if stacked is not None:
            return stacked
        tangent_sets = [
            tuple(row.reshape(shape) for row in seed_rows[part])
            for part in chunks(seed_rows.shape[0], self.selector.chunk_size)
        ]
        by_size: dict[int, Programs] = {}
        for tangents in tangent_sets:
            if len(tangents) not in by_size:
                by_size[len(tangents)] = fallbacks.programs(adapter, primitive, f, x_engine, contexts, tangents)
        combined = "gradient_and_hvp" if primitive == "hvp" else f"value_and_{primitive}"
        first = tangent_sets[0]
        first_program = by_size[len(first)][combined]
        later = [(by_size[len(t)][primitive], t) for t in tangent_sets[1:]]

        def with_value(x: Any, *values: Any) -> Any:
            value, products = first_program(x, first, *values)
            products = list(products)
            for program, tangents in later:
                products.extend(program(x, tangents, *values))
            return value, products

        def plain(x: Any, *values: Any) -> Any:
            products: list[Any] = []
            for program, tangents in [(by_size[len(first)][primitive], first), *later]:
                products.extend(program(x, tangents, *values))
            return products

        return with_value, plain

    def _stacked(
        self,
        adapter: Adapter,
        primitive: str,
        f: Callable[..., Any],
        x_engine: Any,
        contexts: Sequence[Context],
        seed_rows: np.ndarray,
        shape: tuple[int, ...],
    ) -> tuple[Callable[..., Any], Callable[..., Any]] | None:
        """:meth:`_batched` from the engine's batched form: the products of each batch
        are one stacked array (the gather reads them as the stacked products they
        are), ``None`` where the engine has no such form or does not fuse (its
        products then run outside one compiled program)."""
        at = adapter.stacked_products(primitive, f, x_engine, contexts) if self._fuses() else None
        if at is None:
            return None
        batches = [
            seed_rows[part].reshape((part.stop - part.start, *shape))
            for part in chunks(seed_rows.shape[0], self.selector.chunk_size)
        ]

        def with_value(x: Any, *values: Any) -> Any:
            value, apply = at(x, *values)
            return value, [apply(seeds) for seeds in batches]

        def plain(x: Any, *values: Any) -> Any:
            return with_value(x, *values)[1]

        return with_value, plain

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
        gather = gatherer(adapter.capabilities.family, None if decompression.substitution else decompression.index)
        if decompression.n_colors == 0:
            value = adapter.prepare_value_program(f, x_engine, engine_contexts)
            empty = empty_data(adapter.capabilities.family, y_dtype)

            def without_colors(x: Any, *values: Any) -> Any:
                return value(x, *values), empty

            return without_colors
        x_shape, x_dtype = tuple(x.shape), numpy_dtype(x)
        m, n = math.prod(y_shape), math.prod(x_shape)
        forward_colors = decompression.colors if decompression.mode != "reverse" else None
        reverse_colors = decompression.row_colors if decompression.mode == "bidirectional" else None
        n_forward = pushforward_count(decompression)
        if decompression.mode == "reverse":
            forward_colors, reverse_colors = None, decompression.colors
        pushforwards = pullbacks = None
        if forward_colors is not None and n_forward:
            seed_rows = seeds(forward_colors, n_forward, n).astype(x_dtype)
            pushforwards = self._batched(adapter, "pushforward", f, x_engine, engine_contexts, seed_rows, x_shape)
        if reverse_colors is not None and decompression.n_colors - n_forward:
            seed_rows = seeds(reverse_colors, decompression.n_colors - n_forward, m).astype(y_dtype)
            pullbacks = self._batched(adapter, "pullback", f, x_engine, engine_contexts, seed_rows, y_shape)

        def engine(x: Any, *values: Any) -> Any:
            if pushforwards is not None:
                y, products = pushforwards[0](x, *values)
                if pullbacks is not None:
                    products = [*products, *pullbacks[1](x, *values)]
            else:
                assert pullbacks is not None
                y, products = pullbacks[0](x, *values)
            return y, gather(products)

        return engine

    def _hessian_engine(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], decompression: Decompression
    ) -> Callable[..., Any]:
        """``engine(x, *values) -> (f(x), gradient, data)`` in the engine's family."""
        adapter = self._engine_adapter()
        x_engine, engine_contexts = self._engine_arguments(x, contexts)
        value = adapter.prepare_value_program(f, x_engine, engine_contexts)
        gather = gatherer(adapter.capabilities.family, None if decompression.substitution else decompression.index)
        if decompression.n_colors == 0:
            gradient = fallbacks.programs(adapter, "gradient", f, x_engine, engine_contexts)["gradient"]
            empty = empty_data(adapter.capabilities.family, numpy_dtype(x))

            def without_colors(x: Any, *values: Any) -> Any:
                return value(x, *values), gradient(x, *values), empty

            return without_colors
        seed_rows = seeds(decompression.colors, decompression.n_colors, math.prod(x.shape)).astype(numpy_dtype(x))
        gradient_and_hvps = self._batched(adapter, "hvp", f, x_engine, engine_contexts, seed_rows, tuple(x.shape))[0]

        def engine(x: Any, *values: Any) -> Any:
            g, products = gradient_and_hvps(x, *values)
            return value(x, *values), g, gather(products)

        return engine

    def _fused(
        self, engine: Callable[..., Any], x: Any, contexts: Sequence[Context], *, on_first_use: bool = False
    ) -> Callable[..., Any]:
        """Where the dense engine fuses programs: ``engine`` (compressed products and
        gather) compiled as one program by the dense adapter, compiled now (or, with
        ``on_first_use``, by its first call), taking caller-family inputs. Elsewhere
        ``engine`` itself (the dense adapter compiled what it compiles)."""
        if not self._fuses():
            return engine
        twin, chosen = repr(self._engine_adapter().backend), repr(self.selector.dense)

        def engine_named_as_chosen(*args: Any) -> Any:
            # the products run on the dense engine's traceable twin (AutoJAX(jit=False) inside
            # AutoJAX(jit=True)'s compiled program): its refusals name the selector the user chose
            try:
                return engine(*args)
            except DIError as err:
                message = str(err)
                if twin == chosen or twin not in message:
                    raise
                renamed = type(err)(message.replace(twin, chosen))
                if hasattr(err, "__notes__"):
                    renamed.__notes__ = list(err.__notes__)
                raise renamed.with_traceback(err.__traceback__) from err.__cause__

        return self.dense.compile_program(
            keeping_error(engine_named_as_chosen, engine), x, None, contexts, on_first_use=on_first_use
        )


def pushforward_count(decompression: Decompression) -> int:
    """How many of the products are pushforwards."""
    if decompression.mode == "bidirectional":
        return decompression.n_forward
    return decompression.n_colors if decompression.mode == "forward" else 0
