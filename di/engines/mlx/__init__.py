"""MLX: its selector, adapter, array family, ``DifferentiateWith`` host and the
array namespace ``f`` computes with on MLX arrays.

:data:`ENGINE` is the record the registries read; importing this package imports
neither MLX nor the adapter. MLX computes in its own family (``mx.array``), in
the dtype of ``x``: float32, its working precision, or float64 on the CPU, where
some elementwise functions (``sin``, ``cos``, ``exp``, ``erf``) are only as
accurate as in float32 (:func:`tolerances`).
"""

from __future__ import annotations

from typing import Any

from di.backends.engine import Engine, NamespaceOverride
from di.engines.mlx.selector import AutoMLX

__all__ = ["ENGINE", "tolerances"]


def tolerances(backend: Any, order: int) -> tuple[float, float]:
    """The error MLX makes beyond rounding, which :func:`di.testing.default_tolerances`
    allows: MLX's float64 ``sin``, ``cos``, ``exp``, ``erf`` and ``sigmoid`` are
    computed to about float32's accuracy (relative errors near ``1e-7``, measured
    on MLX 0.32 against NumPy), so float64 results are good to about six digits,
    not twelve. float32 results keep float32's tolerances (the looser one applies).

    Examples:
        >>> import di
        >>> from di.engines.mlx import tolerances
        >>> tolerances(di.AutoMLX(), 1), tolerances(di.AutoMLX(), 2)
        ((1e-05, 1e-07), (1e-05, 1e-07))
    """
    return 1e-5, 1e-7


ENGINE = Engine(
    name="mlx",
    selectors=(AutoMLX,),
    adapter="di.engines.mlx.adapter:MLXAdapter",
    display="MLX",
    labels={"mlx": AutoMLX(), "mlx-compile": AutoMLX(compile=True)},
    fastest=("mlx-compile", "mlx"),
    compiled=("mlx-compile",),
    module="mlx.core",
    extra="mlx",
    distributions=("mlx",),
    family="di.engines.mlx.family:FAMILY",
    host="di.engines.mlx.host:HOST",
    # array-api-compat answers mlx.core itself, whose functions MLX differentiates but which
    # misses a few array-API names and reads float64 NumPy arrays as float32 (asarray):
    # di answers mlx.core with those fixed.
    namespace=NamespaceOverride(
        replaces="mlx.core",
        build="di.engines.mlx.namespace:build_namespace",
        traced="mlx.core:array",
        mixes_with="numpy",
    ),
    tolerances=tolerances,
)
"""MLX's record: ``AutoFastest`` measures ``AutoMLX(compile=True)`` and
``AutoMLX()`` by default."""
