"""TensorFlow adapter: ``tf.GradientTape`` (reverse mode, ``jacobian`` vectorised
with ``pfor``) and ``tf.autodiff.ForwardAccumulator`` (forward mode), eager or
under ``tf.function(jit_compile=True)``.

Each operator is a function of :mod:`di.engines.tensorflow.programs`;
:class:`~di.engines.tensorflow.building.ProgramBuilder` makes programs of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from di.backends.capabilities import AUX_FAMILIES, Capabilities
from di.backends.protocol import Programs
from di.contexts import Context
from di.engines.tensorflow import programs
from di.engines.tensorflow.behavior import numpy_behavior
from di.engines.tensorflow.building import ProgramBuilder
from di.engines.tensorflow.compositions import COMPOSITIONS

__all__ = ["TensorFlowAdapter"]


class TensorFlowAdapter(ProgramBuilder):
    """Adapter for :class:`di.AutoTensorFlow`.

    Native: every operator. ``gradient`` and ``pullback`` are one tape each
    (one persistent tape for several cotangents), ``pushforward`` and
    ``derivative`` a forward accumulator per tangent, ``jacobian`` the tape's
    vectorised ``jacobian`` (``pfor``), ``hvp`` an accumulator around a tape
    (forward over reverse), ``hessian`` the vectorised jacobian of the gradient,
    ``second_derivative`` two nested accumulators. ``x`` is computed on in its
    own dtype (float64 stays float64); a ``tf.Variable`` is read as a tensor.
    ``Cache`` values reach ``f`` as tensors, which are immutable: ``f`` must
    build new ones.
    """

    capabilities = Capabilities(
        family="tensorflow",
        compile_option="compile",
        aux=AUX_FAMILIES,
        complex_native=frozenset({"gradient", "hvp"}),
        cache_note="TensorFlow tensors are immutable: f receives the cache as a tensor it must not write into.",
        differentiates="own",
        compositions=COMPOSITIONS,
    )

    def scope(self, values: Sequence[Any]) -> Callable[[], contextlib.AbstractContextManager[Any]]:
        """TensorFlow's NumPy behavior, on while ``f`` is evaluated outside the
        programs (their bodies turn it on themselves): see
        :mod:`di.engines.tensorflow.behavior`."""
        return numpy_behavior

    def prepare_gradient_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self.programs(programs.gradient, f, x, None, contexts, "gradient", has_aux)

    def prepare_pullback_programs(
        self, f: Callable[..., Any], x: Any, ty: Sequence[Any], contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self.programs(programs.pullback, f, x, ty, contexts, "pullback", has_aux)

    def prepare_pushforward_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self.programs(programs.pushforward, f, x, tx, contexts, "pushforward", has_aux)

    def prepare_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self.programs(programs.derivative, f, x, None, contexts, "derivative", has_aux)

    def prepare_jacobian_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context], *, has_aux: bool = False
    ) -> Programs:
        return self.programs(programs.jacobian, f, x, None, contexts, "jacobian", has_aux)

    def prepare_hvp_programs(
        self, f: Callable[..., Any], x: Any, tx: Sequence[Any], contexts: Sequence[Context]
    ) -> Programs:
        return self.programs(programs.hvp, f, x, tx, contexts, "hvp", False)

    def prepare_hessian_programs(self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]) -> Programs:
        return self.programs(programs.hessian, f, x, None, contexts, "hessian", False)

    def prepare_second_derivative_programs(
        self, f: Callable[..., Any], x: Any, contexts: Sequence[Context]
    ) -> Programs:
        return self.programs(programs.second_derivative, f, x, None, contexts, "second_derivative", False)
