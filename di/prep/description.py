"""One-line descriptions of arguments, for the mismatch report and a prep's repr."""

from __future__ import annotations

from typing import Any

from di.contexts import Context
from di.families import family_of, get_family, spec_of
from di.prep.traced import traced_type
from di.pytrees import foreign_pytree, is_pytree, tree_flatten

__all__ = ["describe_value"]


def describe_value(value: Any) -> str:
    """One-line description of an argument for reports."""
    family = family_of(value)
    if family is not None:
        annotation = get_family(family).annotation(value)
        return f"{spec_of(value).describe()} ({annotation})" if annotation else spec_of(value).describe()
    traced = traced_type(value)
    if traced is not None:
        return f"{describe_value(traced.value(value))} (traced by {traced.transform})"
    if isinstance(value, Context):
        return f"{type(value).__name__} {describe_value(value.value)}"
    if isinstance(value, tuple) and value.__class__ is tuple and any(family_of(item) is not None for item in value):
        return "(" + ", ".join(describe_value(item) for item in value) + ")"
    if is_pytree(value):
        leaves, _ = tree_flatten(value)
        if len(leaves) == 1 and leaves[0] is value:
            return f"{type(value).__name__} (a {foreign_pytree(value)} pytree)"
        return f"{type(value).__name__} pytree of {len(leaves)} arrays"
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"
