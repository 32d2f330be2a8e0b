"""Programs an eager prep runs inside ``torch.func`` transforms and ``torch.compile``
traces, built on their first call there from stand-ins of the prepared arguments
(most preps never run there, and the prep then holds none of the caller's values)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from di.backends.protocol import Programs
from di.contexts import Context
from di.engines.torch.family import transform_of
from di.engines.torch.transforms import dynamo_compiling, inside_transform

__all__ = ["built_on_first_use", "eager_beside_traced", "same", "stand_in_maker"]


def same(value: Any) -> Any:
    """``value`` itself (the programs inside transforms are the ``torch.func`` ones as they are)."""
    return value


def eager_beside_traced(
    traced: Callable[[Any, Any, Sequence[Context], Callable[[Programs], Programs]], Programs],
    eager: Callable[[Programs], Programs],
    x: Any,
    tangents: Sequence[Any] | None,
    contexts: Sequence[Context],
    names: tuple[str, str],
) -> Programs:
    """An eager prep's programs: ``eager(inside)`` serves calls outside transforms,
    the ``torch.func`` programs ``traced(x, tangents, contexts, fast)`` (with
    ``fast`` :func:`same`) serve calls inside, built on their first use there
    (:func:`built_on_first_use`), or now, with ``eager`` as their fast path, where
    the prepared arguments have no stand-ins."""

    def inside(x: Any, tangents: Any, contexts: Sequence[Context]) -> Programs:
        return traced(x, tangents, contexts, same)

    lazy = built_on_first_use(inside, x, tangents, contexts, names)
    if lazy is not None:
        return eager(lazy)
    return traced(x, tangents, contexts, eager)


def built_on_first_use(
    build: Callable[[Any, Any, Sequence[Context]], Programs],
    x: Any,
    tangents: Sequence[Any] | None,
    contexts: Sequence[Context],
    names: tuple[str, str],
) -> Programs | None:
    """The programs an eager prep runs inside ``torch.func`` transforms (and
    ``torch.compile`` traces), built by ``build`` on their first call there
    rather than at every preparation (most preps never run there). They are
    built from stand-ins of the prepared arguments with the same signature and
    no data (meta tensors, Python scalars of the same type), so the prep holds
    none of the caller's values. ``None`` where the arguments have no such
    stand-ins (a pytree ``x``, another family's arrays): build them now."""
    if inside_transform():
        return None
    found = [stand_in_maker(value) for value in (x, *(tangents or ()), *(c.value for c in contexts))]
    makers = [maker for maker in found if maker is not None]
    if len(makers) < len(found):
        return None
    wrappers, with_tangents = [type(c) for c in contexts], tangents is not None
    count = len(tangents) if tangents is not None else 0  # (the closure holds no tangent)
    built: list[Programs] = []  # (two threads may both build: the programs are the same)

    def programs() -> Programs:
        if built:
            return built[0]
        stand_in_x, *rest = [make() for make in makers]
        stand_in_tangents = tuple(rest[:count]) if with_tangents else None
        stand_in_contexts = [wrap(value) for wrap, value in zip(wrappers, rest[count:])]
        fresh = build(stand_in_x, stand_in_tangents, stand_in_contexts)
        if not dynamo_compiling():  # kept; a torch.compile trace builds its own (a kept one would recompile)
            built.append(fresh)
        return fresh

    def on_first_use(name: str) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            return programs()[name](*args)

        return run

    return {name: on_first_use(name) for name in names}


def stand_in_maker(value: Any) -> Callable[[], Any] | None:
    """A maker of values with ``value``'s signature and none of its data (a meta
    tensor like a plain torch tensor, a Python scalar of its type), holding
    only that signature; ``None`` for other values."""
    if isinstance(value, torch.Tensor):
        if value.__class__ is not torch.Tensor or transform_of(value):
            return None
        shape, dtype = tuple(value.shape), value.dtype
        return lambda: torch.empty(shape, dtype=dtype, device="meta")
    scalar_type = value.__class__
    if scalar_type in (float, int, bool):
        return scalar_type
    return None
