"""What an adapter offers: the operator families (and the programs a prep of each
holds) and :class:`Capabilities`, the one record an adapter declares of what it
can do, which the fallbacks, the operator layer, the strategies and the
documentation's tables read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from di.backends.transforms import Composition
from di.errors import InvalidOptionError

__all__ = [
    "AUX_FAMILIES",
    "OPERATOR_FAMILIES",
    "SAME_POINT_FAMILIES",
    "SECOND_ORDER_FAMILIES",
    "X_WRITES",
    "Capabilities",
]


SECOND_ORDER_FAMILIES = frozenset({"hvp", "hessian", "second_derivative"})
"""The operator families the fallbacks build by differentiating the engine's own
first-order programs."""


AUX_FAMILIES = frozenset({"derivative", "gradient", "jacobian", "pushforward", "pullback"})
"""The operator families that take ``has_aux`` (auxiliary outputs of ``f``)."""


OPERATOR_FAMILIES: dict[str, tuple[str, ...]] = {
    "derivative": ("derivative", "value_and_derivative"),
    "gradient": ("gradient", "value_and_gradient"),
    "jacobian": ("jacobian", "value_and_jacobian"),
    "pushforward": ("pushforward", "value_and_pushforward"),
    "pullback": ("pullback", "value_and_pullback"),
    "hvp": ("hvp", "gradient_and_hvp"),
    "hessian": ("hessian", "value_gradient_and_hessian"),
    "second_derivative": ("second_derivative", "value_derivative_and_second_derivative"),
}
"""Each operator family and the programs a prep of it holds: the plain operator
first, then its combined (``value_and_*``) form."""


SAME_POINT_FAMILIES = ("pullback_same_point", "hvp_same_point")
"""The operators prepared at one point (``prepare_<name>_programs`` too)."""


_DIFFERENTIATES = ("none", "own", "any")

X_WRITES = {
    "refused": "a di.InvalidInputError at the call (f wrote into x in place); the caller's x is untouched",
    "own copy": (
        "f writes into the engine's own array, recorded as an operation of f: f is a function of x like any "
        "other, with the derivative of what it computes (0 for an overwritten entry); the caller's x is untouched"
    ),
}
"""What a write into ``x`` inside ``f`` (``x[i] = ...``, ``x += ...``) does, for
each value of :attr:`Capabilities.x_writes`: never a write into the caller's
``x``."""


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can do, declared once on its class (``capabilities = ...``).

    This record is the only declaration of what an adapter offers: the
    documentation's support tables, the fallbacks' choice between native and
    generic programs, the refusal of unsupported contexts and of ``has_aux``,
    the operator layer's conversions and :class:`di.SecondOrder`'s check of its
    pair all read it, so what an engine declares is what ``di`` does. Only
    ``native`` is not declared: which operators an adapter implements is its
    implementation, so the field is filled, when the class is created, with the
    operators whose ``prepare_<operator>_programs`` method the class overrides.

    Attributes:
        family: the array family the engine computes in.
        native: the operator families (and same-point operators) the adapter
            implements itself; the others are built from its primitives.
        cache: whether ``f`` may receive :class:`di.Cache` contexts.
        cache_note: what to know about ``Cache`` on this engine (why it is
            refused, or how buffers reach ``f``).
        compile_option: the selector option that compiles (``"jit"``,
            ``"compile"``), or ``""`` for an engine that never compiles.
        pytrees: the operator families whose programs take a pytree ``x``
            themselves (the others see it flattened into one vector).
        compiled_pytrees: the same when compiled, if it differs.
        aux: the operator families (of :data:`AUX_FAMILIES`) whose native
            programs take ``has_aux``; ``has_aux=True`` for another native
            family is refused at preparation. An operator the fallbacks build
            takes it when the primitive it is built from does.
        complex_numbers: whether the engine differentiates through complex
            values (``f`` of a complex ``x`` is differentiated through its real
            view, :mod:`di.complex`, whose rebuilt ``x`` is complex).
        complex_note: why it does not, and what to do instead (the refusal says it).
        complex_native: the operator families whose native programs, run on
            the complex ``x`` itself, already return the convention of the
            complex numbers page (``df/da + i df/db`` for a real-valued ``f``):
            a complex ``x`` of them skips the real view (a split and a
            recombination per call); the others go through it.
        float64: whether the engine evaluates ``f`` in float64 whatever ``x``'s
            dtype (finite differences).
        differentiates: which programs, as :class:`di.SecondOrder`'s outer
            backend, the engine differentiates: ``"any"`` (it only evaluates
            them), ``"own"`` (those of adapters of its own class, which it
            traces) or ``"none"``.
        x_writes: what a write into ``x`` inside ``f`` does (a key of
            :data:`X_WRITES`): ``"refused"`` (a ``di`` error) or ``"own copy"``
            (the engine's array takes it as one more operation of ``f``).
        transforms: the engine's own transforms and modes a ``di`` call can run
            inside (the names of :attr:`compositions`; set from them).
        compositions: for each of those transforms, what composes inside it and
            what is refused (:class:`di.backends.transforms.Composition`), each
            combination tested (``tests/test_transforms_*.py``).

    Examples:
        >>> import di
        >>> from di.backends.registry import get_adapter
        >>> record = get_adapter(di.AutoFiniteDiff()).capabilities
        >>> record.differentiates, record.support()["derivative"]
        ('any', 'fallback')
    """

    family: str = "numpy"
    native: frozenset[str] = frozenset()
    cache: bool = True
    cache_note: str = ""
    compile_option: str = ""
    pytrees: frozenset[str] = frozenset()
    compiled_pytrees: frozenset[str] | None = None
    aux: frozenset[str] = frozenset()
    complex_numbers: bool = True
    complex_note: str = ""
    complex_native: frozenset[str] = frozenset()
    float64: bool = False
    differentiates: str = "none"
    x_writes: str = "refused"
    transforms: tuple[str, ...] = field(default=())
    compositions: tuple[Composition, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.differentiates not in _DIFFERENTIATES:
            raise InvalidOptionError(f"Capabilities(differentiates={self.differentiates!r}): one of {_DIFFERENTIATES}")
        if self.x_writes not in X_WRITES:
            raise InvalidOptionError(f"Capabilities(x_writes={self.x_writes!r}): one of {tuple(X_WRITES)}")
        if not self.aux <= AUX_FAMILIES:
            raise InvalidOptionError(
                f"Capabilities(aux=...): {sorted(self.aux - AUX_FAMILIES)} take no has_aux; "
                f"aux names operator families among {sorted(AUX_FAMILIES)}"
            )
        if not self.complex_native <= OPERATOR_FAMILIES.keys():
            raise InvalidOptionError(
                f"Capabilities(complex_native=...): {sorted(self.complex_native - OPERATOR_FAMILIES.keys())} are not "
                f"operator families ({sorted(OPERATOR_FAMILIES)})"
            )
        if self.complex_native and not self.complex_numbers:
            raise InvalidOptionError("Capabilities(complex_native=...) needs complex_numbers=True")
        if self.compositions:
            object.__setattr__(self, "transforms", tuple(c.transform for c in self.compositions))

    @property
    def has_primitive(self) -> bool:
        """Whether a pushforward or a pullback is native: every other operator is
        then built from it."""
        return "pushforward" in self.native or "pullback" in self.native

    def support(self) -> dict[str, str]:
        """For each operator family: ``"native"``, ``"fallback"`` or ``"unsupported"``.
        The second-order fallbacks differentiate the engine's own first-order
        programs, so they need an engine that does (``differentiates`` other
        than ``"none"``)."""
        fallback = "fallback" if self.has_primitive else "unsupported"
        nested = fallback if self.differentiates != "none" else "unsupported"
        support = {
            family: "native" if family in self.native else nested if family in SECOND_ORDER_FAMILIES else fallback
            for family in OPERATOR_FAMILIES
        }
        if support["hessian"] == "unsupported" and "hvp" in self.native:
            support["hessian"] = "fallback"  # the hvps of the unit tangents
        return support

    def pytrees_when(self, compiled: bool) -> frozenset[str]:
        """The operator families taking a pytree ``x`` natively, eager or compiled."""
        return self.compiled_pytrees if compiled and self.compiled_pytrees is not None else self.pytrees
