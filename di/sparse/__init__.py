"""Sparse Jacobians and Hessians for :class:`di.AutoSparse`: sparsity sources,
detection, coloring and decompression.

* :mod:`di.sparse.sources`: ``TracerSparsity``, ``LocalTracerSparsity``,
  ``DenseSparsity``, ``KnownSparsity`` (import-light: numpy only).
* :mod:`di.sparse.detection`: which tracer reads the pattern.
* :mod:`di.sparse.jaxpr`: the pattern of ``f`` from its JAX program (``TracerSparsity(method="program")``).
* :mod:`di.sparse.arrays`: the pattern of ``f`` run on traced arrays of the array API
  (``TracerSparsity(method="arrays")``, :class:`di.LocalTracerSparsity`), second order for Hessians.
* :mod:`di.sparse.strategy`: the preparation hook of :class:`di.AutoSparse`;
  :mod:`di.sparse.colored`: its colored jacobian and hessian programs, whose engine
  side (the batched products and the gather) is :mod:`di.sparse.products`;
  :mod:`di.sparse.choice` picks the coloring, :mod:`di.sparse.assembly` gathers the result.
* :mod:`di.sparse.coloring`, :mod:`di.sparse.kernels`: greedy column, row, star,
  acyclic and bidirectional colorings and their orders (Numba when installed).
* :mod:`di.sparse.decompression`: seeds, exact decompression indices and substitution.
* :mod:`di.sparse.patterns`: patterns as boolean ``scipy.sparse`` CSR arrays.

This package imports nothing heavy itself; scipy and JAX are imported by the
modules that need them, on first use.
"""
