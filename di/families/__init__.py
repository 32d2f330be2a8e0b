"""Array families as plug-ins: one module per library, one registry to ask.

``di`` meets the caller's arrays only through this package. Each family module
(``numpy``, ``torch``, ``jax``) defines a :class:`Family` record; the registry
recognises arrays by class without importing any library (a library's arrays
are recognised once it is in ``sys.modules``, as array-api-compat does),
converts them through one hub, and describes them for a prep's signature. A new
array library is one more :class:`Family` and :func:`register_family`.
"""

from __future__ import annotations

from di.families.family import Family, Matcher
from di.families.registry import (
    ArraySpec,
    converter,
    dtype_kind,
    families,
    family_of,
    get_family,
    identity,
    is_64_bit,
    is_floating_dtype,
    register_family,
    spec_of,
)

__all__ = [
    "ArraySpec",
    "Family",
    "Matcher",
    "converter",
    "dtype_kind",
    "families",
    "family_of",
    "get_family",
    "identity",
    "is_64_bit",
    "is_floating_dtype",
    "register_family",
    "spec_of",
]
