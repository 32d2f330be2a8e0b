"""Sparse Jacobians and Hessians for :class:`di.AutoSparse`: sparsity sources,
detection, coloring and decompression.

* :mod:`di.backends.sparsity`: ``TracerSparsity``, ``DenseSparsity``,
  ``KnownSparsity`` (import-light: numpy only).
* :mod:`di.sparse.jaxpr`: the pattern of ``f`` from its JAX program (:class:`di.TracerSparsity`).
* :mod:`di.sparse.strategy`: the preparation hook of :class:`di.AutoSparse`.
* :mod:`di.sparse.coloring`: greedy column, row and star colorings.
* :mod:`di.sparse.decompression`: seeds and exact decompression indices.
* :mod:`di.sparse.patterns`: patterns as boolean ``scipy.sparse`` CSR arrays.

This package imports nothing heavy itself; scipy and JAX are imported by the
modules that need them, on first use.
"""
