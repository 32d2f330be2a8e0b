"""What ``di`` does inside an engine's own transforms: one record per transform.

An engine's adapter declares, in its :class:`~di.backends.capabilities.Capabilities`
(``compositions=...``), each transform or mode of its engine that a ``di`` call
may run inside (``jit``, ``vmap``, ``grad``, a grad mode, a compiler tracing the
caller's code) and what, inside it, is refused. Everything else composes: every
operator, prepared (strict) or not, traces through to the engine's own
transforms. The tests run every declared combination against the engine's own
composition and check each refusal's error; the documentation's table
("Inside jit, vmap and grad") is generated from the same records, so the two
cannot drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ASPECTS", "BREAKS", "REFUSALS", "Composition"]

REFUSALS: dict[str, str] = {
    "same point": (
        "A same-point prep (prepare_pullback_same_point, prepare_hvp_same_point) computes at preparation, from "
        "the point's values: a traced x has none, and its results could not carry the graph of an x that "
        "requires grad. Use prepare_pullback or prepare_hvp, whose preps serve every point."
    ),
    "Cache": (
        "f would write values the transform traces into the buffer, which the transform cannot do: pass the "
        "buffer as a Constant and build new arrays in f."
    ),
}
"""What each kind of refusal means and what to do instead (the errors say it too,
naming the transform)."""

BREAKS: dict[str, str] = {
    "same point": "The by-value check of the point reads values the compiler does not trace.",
    "Cache": "Writing into a buffer runs eager reverse mode, which the compiler does not trace.",
    "unprepared": (
        "Preparing is Python the compiler does not trace: prepare outside the compiled function and call the "
        "prep inside."
    ),
}
"""Why each aspect that breaks a compiler's graph does (run with ``fullgraph=False``,
or do what it says)."""

ASPECTS: tuple[str, ...] = (
    "derivative",
    "gradient",
    "jacobian",
    "pushforward",
    "pullback",
    "hvp",
    "hessian",
    "second_derivative",
    "same point",
    "Cache",
    "unprepared",
)
"""What a composition says yes or no to: each operator family (those of
:data:`di.backends.capabilities.OPERATOR_FAMILIES`, in its order: a test keeps them
equal), then same-point preps, ``Cache`` contexts and unprepared calls."""


@dataclass(frozen=True)
class Composition:
    """How ``di`` composes with one transform or mode of an engine.

    Attributes:
        transform: the transform as a user writes it (``"jax.vmap"``,
            ``"torch.func.grad"``, ``"torch.no_grad"``).
        refused: the :data:`ASPECTS` refused inside it, each with a ``di`` error
            naming the transform (an operator family, ``"same point"``,
            ``"Cache"``, ``"unprepared"``); every other one composes.
        breaks: the aspects that run inside a compiler's trace of the caller's
            code (``torch.compile``) only by breaking its graph.
        note: what to know beyond yes and no, shown in the documentation.
        run: the ``"module:function"`` path of ``run(call, x)``, which returns
            ``call(x)`` computed inside the transform (on the engine's arrays; a
            vectorising transform batches ``x`` with another point and returns
            the first result): how the differential fuzzer
            (:mod:`di.testing.fuzz`) calls ``di`` inside it. ``""``: the fuzzer
            does not (a transform of ``f`` itself, a mode, a loop).

    Examples:
        >>> from di.backends.transforms import Composition
        >>> vmap = Composition("jax.vmap", refused=frozenset({"same point"}))
        >>> vmap.composes("gradient"), vmap.composes("same point")
        (True, False)
    """

    transform: str
    refused: frozenset[str] = field(default=frozenset())
    breaks: frozenset[str] = field(default=frozenset())
    note: str = ""
    run: str = ""

    def __post_init__(self) -> None:
        unknown = (set(self.refused) | set(self.breaks)) - set(ASPECTS)
        if unknown:
            raise ValueError(f"Composition({self.transform!r}): unknown aspects {sorted(unknown)}; one of {ASPECTS}")

    def composes(self, aspect: str) -> bool:
        """Whether ``aspect`` (one of :data:`ASPECTS`) works inside the transform
        (with a graph break when :meth:`status` says so)."""
        return aspect not in self.refused

    def status(self, aspect: str) -> str:
        """``"yes"``, ``"refused"`` (a ``di`` error naming the transform) or
        ``"graph break"`` (it runs, but the compiler tracing the caller's code
        stops there: an error under ``fullgraph=True``)."""
        if aspect in self.refused:
            return "refused"
        return "graph break" if aspect in self.breaks else "yes"
