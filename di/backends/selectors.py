"""Backend selectors: small frozen dataclasses naming an engine and its options.

Building a selector imports nothing; the engine is imported when a prep is made
with it. Selectors are hashable and compare by value, so they can be dictionary
keys, defaults of function arguments, or read from a configuration file with
:func:`di.backend`.
"""

from __future__ import annotations

import math
import numbers
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from di.errors import InvalidOptionError, InvalidOptionTypeError

_BY_NAME: dict[str, type[AbstractBackend]] = {}
"""Selector classes by ``name`` and ``aliases`` (lower case), filled as they are defined."""

__all__ = [
    "AbstractBackend",
    "AutoAutograd",
    "AutoFastest",
    "AutoFiniteDiff",
    "AutoJAX",
    "AutoSparse",
    "AutoTorch",
    "SecondOrder",
    "available_backends",
    "backend",
    "check_flag",
    "selector_classes",
]


@dataclass(frozen=True)
class AbstractBackend:
    """Base class of every backend selector.

    Subclasses name the engine module they need (``engine``), the pip extra that
    installs it (``extra``), where their adapter lives (``adapter``, a
    ``"module:Class"`` path imported on first use, or ``strategy`` for selectors
    that wrap other backends), and the short ``name`` by which
    :func:`di.backend` and the command line know them (with ``aliases``).

    A ``name`` (or alias) another selector class has is refused when the class is
    defined (:class:`di.InvalidOptionError`); the same class defined again (its
    module reloaded) takes its own name back.

    Examples:
        >>> import di
        >>> isinstance(di.AutoJAX(), di.AbstractBackend)
        True
    """

    engine: ClassVar[str] = ""
    engine_display: ClassVar[str] = ""
    extra: ClassVar[str] = ""
    distributions: ClassVar[tuple[str, ...]] = ()
    """The installed distributions whose versions a cached plan depends on (by
    default the ``engine`` module's own)."""
    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    adapter: ClassVar[str] = ""
    strategy: ClassVar[str] = ""
    prepared_only: ClassVar[str] = ""
    """Non-empty for a selector that serves prepared calls only: why an
    unprepared call (``di.gradient(f, backend, x)``) is refused."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # its own aliases only: a subclass naming itself does not inherit (and take over) its parent's
        own = (cls.name, *cls.__dict__.get("aliases", ())) if cls.__dict__.get("name") else ()
        keys = [key.lower() for key in own]
        for key in keys:  # all checked before any is taken
            taken = _BY_NAME.get(key)
            if taken is not None and not _redefines(cls, taken):
                raise InvalidOptionError(
                    f"{cls.__qualname__}: the backend name {key!r} is taken by {taken.__module__}.{taken.__qualname__}"
                    f" (di.backend({key!r}) builds it); give {cls.__qualname__} a name of its own"
                )
        for key in keys:
            _BY_NAME[key] = cls

    def __str__(self) -> str:
        return repr(self)

    @property
    def is_installed(self) -> bool:
        """Whether this selector's engine can be imported (checked without importing it)."""
        if not self.engine:
            return True
        import importlib.util  # here, not at the top: ``import di`` stays light

        return importlib.util.find_spec(self.engine) is not None


def _redefines(cls: type, taken: type) -> bool:
    """Whether ``cls`` is ``taken`` defined again (its module reloaded, or one
    out-of-tree class run from two places, a page and its test), which may take
    its name over; another class may not, and nothing takes a name of ``di``'s own."""
    if cls.__qualname__ != taken.__qualname__:
        return False
    return cls.__module__ == taken.__module__ or taken.__module__.split(".")[0] != "di"


def check_flag(owner: str, option: str, value: Any) -> bool:
    """``value`` as a ``bool``, refusing anything but ``True`` and ``False``.

    Truthiness is not enough: ``jit="False"`` or ``compile="no"`` are true
    strings, and would quietly do the opposite of what was meant.

    Args:
        owner: what takes the option, as the message names it (``"AutoJAX"``).
        option: the option's name.
        value: what was given: a Python ``bool`` or a ``numpy.bool_``.

    Returns:
        ``value`` as a Python ``bool``.

    Raises:
        InvalidOptionTypeError: any other value (a ``TypeError``).

    Examples:
        >>> from di.backends.selectors import check_flag
        >>> check_flag("AutoJAX", "jit", True)
        True
        >>> check_flag("AutoJAX", "jit", "no")
        Traceback (most recent call last):
        ...
        di.errors.InvalidOptionTypeError: AutoJAX(jit='no'): jit takes True or False (a Python bool ...), not str
    """
    if value is True or value is False:
        return value
    numpy = sys.modules.get("numpy")  # a numpy.bool_ exists only once numpy is imported: ``import di`` stays light
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    raise InvalidOptionTypeError(
        f"{owner}({option}={value!r}): {option} takes True or False (a Python bool or numpy.bool_), "
        f"not {type(value).__name__}"
    )


def _check_flags(selector: AbstractBackend, *options: str) -> None:
    """Check a selector's boolean options, storing each as a Python ``bool``."""
    for option in options:
        object.__setattr__(selector, option, check_flag(type(selector).__name__, option, getattr(selector, option)))


def _not_a_selector(value: Any) -> str:
    """How to make a selector of ``value``, for the messages refusing it."""
    if isinstance(value, type) and issubclass(value, AbstractBackend):
        return f"the class {value.__name__} itself: call it, di.{value.__name__}()"
    if isinstance(value, str):
        return f"the name {value!r}: di.backend({value!r}) builds its selector"
    return f"{value!r}"


def _check_mode(mode: str | None, name: str) -> None:
    if mode not in (None, "forward", "reverse"):
        raise InvalidOptionError(f"{name}(mode={mode!r}): mode must be None, 'forward' or 'reverse'")


@dataclass(frozen=True)
class AutoJAX(AbstractBackend):
    """JAX.

    Args:
        jit: ``False`` runs ``f`` eagerly, op by op, every call (Python control
            flow on values works; each call re-traces). ``True`` compiles one
            program per operator at preparation with ``jax.jit``; see
            ``docs/compiled.md`` for which contexts are traced and which are
            compiled in.
        mode: ``"forward"`` or ``"reverse"`` to force the strategy of
            ``jacobian``; ``None`` picks forward mode when ``x`` has no more
            elements than ``f(x)``. (``derivative`` always uses forward mode.)

    Examples:
        >>> import di
        >>> di.AutoJAX(jit=True)
        AutoJAX(jit=True, mode=None)
    """

    jit: bool = False
    mode: str | None = None
    engine: ClassVar[str] = "jax"
    distributions: ClassVar[tuple[str, ...]] = ("jax", "jaxlib")
    engine_display: ClassVar[str] = "JAX"
    extra: ClassVar[str] = "jax"
    name: ClassVar[str] = "jax"
    adapter: ClassVar[str] = "di.backends.jax:JAXAdapter"

    def __post_init__(self) -> None:
        _check_flags(self, "jit")
        _check_mode(self.mode, "AutoJAX")


@dataclass(frozen=True)
class AutoTorch(AbstractBackend):
    """PyTorch.

    Args:
        compile: ``True`` builds the operator's program once at preparation and
            wraps it in ``torch.compile``.
        compile_options: keyword arguments for ``torch.compile`` (for example
            ``{"backend": "aot_eager"}``); stored as a sorted tuple of pairs so the
            selector stays hashable.
        mode: ``"forward"`` or ``"reverse"`` to force the strategy of
            ``jacobian``; ``None`` picks forward mode when ``x`` has no more
            elements than ``f(x)``. (``derivative`` always uses forward mode.)
        create_graph: when ``x``, a ``Constant`` or a tangent requires grad and
            grad mode is on, results carry the caller's autograd graph, as
            ``torch.autograd.grad(..., create_graph=True)`` and ``torch.func``
            give them (gradient penalties, meta-learning, implicit
            differentiation); ``False`` detaches them. When nothing requires
            grad, results never carry a graph either way.

    Examples:
        >>> import di
        >>> di.AutoTorch(compile=True, compile_options={"backend": "eager"}).compile_options
        (('backend', 'eager'),)
    """

    compile: bool = False
    compile_options: Any = field(default=None)
    mode: str | None = None
    create_graph: bool = True
    engine: ClassVar[str] = "torch"
    engine_display: ClassVar[str] = "PyTorch"
    extra: ClassVar[str] = "torch"
    name: ClassVar[str] = "torch"
    aliases: ClassVar[tuple[str, ...]] = ("pytorch",)
    adapter: ClassVar[str] = "di.backends.torch:TorchAdapter"

    def __post_init__(self) -> None:
        _check_flags(self, "compile", "create_graph")
        _check_mode(self.mode, "AutoTorch")
        options = self.compile_options
        if isinstance(options, Mapping):
            object.__setattr__(self, "compile_options", tuple(sorted(options.items())))
        elif options is not None and not isinstance(options, tuple):
            raise InvalidOptionTypeError(
                f"AutoTorch(compile_options={options!r}): compile_options must be a mapping of torch.compile "
                f"keyword arguments, such as {{'backend': 'aot_eager'}}, or None"
            )

    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """``compile_options`` as the keyword arguments of ``torch.compile``."""
        return dict(self.compile_options or ())


@dataclass(frozen=True)
class AutoAutograd(AbstractBackend):
    """HIPS autograd (reverse mode over NumPy code).

    ``f`` must be written with ``autograd.numpy`` or the array API. ``Cache``
    contexts are not supported: autograd cannot write traced values into arrays.

    Examples:
        >>> import di
        >>> di.AutoAutograd()
        AutoAutograd()
    """

    engine: ClassVar[str] = "autograd"
    engine_display: ClassVar[str] = "autograd"
    extra: ClassVar[str] = "autograd"
    name: ClassVar[str] = "autograd"
    adapter: ClassVar[str] = "di.backends.autograd.adapter:AutogradAdapter"


@dataclass(frozen=True)
class AutoFiniteDiff(AbstractBackend):
    """NumPy finite differences, evaluated in float64.

    Args:
        method: ``"central"`` (default, error O(h^2)) or ``"forward"`` (O(h), half
            the evaluations).
        step: relative step; ``None`` picks ``eps**(1/3)`` for central and
            ``eps**(1/2)`` for forward differences (eps of float64). Each
            coordinate's step is scaled by ``max(1, |x_i|)``.

    Examples:
        >>> import di
        >>> di.AutoFiniteDiff(method="forward")
        AutoFiniteDiff(method='forward', step=None)
    """

    method: Literal["central", "forward"] = "central"
    step: float | None = None
    engine: ClassVar[str] = ""
    engine_display: ClassVar[str] = "finite differences"
    extra: ClassVar[str] = ""
    name: ClassVar[str] = "finitediff"
    aliases: ClassVar[tuple[str, ...]] = ("finite_diff", "fd")
    adapter: ClassVar[str] = "di.backends.finitediff:FiniteDiffAdapter"

    def __post_init__(self) -> None:
        if self.method not in ("central", "forward"):
            raise InvalidOptionError(f"AutoFiniteDiff(method={self.method!r}): method must be 'central' or 'forward'")
        step = self.step
        if step is not None and not (
            isinstance(step, numbers.Real) and not isinstance(step, bool) and 0 < step < math.inf
        ):
            raise InvalidOptionError(f"AutoFiniteDiff(step={step!r}): step must be a positive float")


@dataclass(frozen=True)
class SecondOrder(AbstractBackend):
    """Second order by differentiating one backend's gradient with another.

    ``hvp`` and ``hessian`` take the ``outer`` backend's pushforward of the
    ``inner`` backend's gradient; first-order operators use ``inner``. The outer
    backend must be able to differentiate the inner one's program: finite
    differences can differentiate anything, JAX can differentiate JAX.

    Args:
        outer: the backend differentiating the gradient (forward mode is used).
        inner: the backend computing the gradient.

    Examples:
        >>> import di
        >>> di.SecondOrder(di.AutoFiniteDiff(), di.AutoJAX())
        SecondOrder(outer=AutoFiniteDiff(method='central', step=None), inner=AutoJAX(jit=False, mode=None))
    """

    outer: AbstractBackend = field(default_factory=lambda: AutoFiniteDiff())
    inner: AbstractBackend = field(default_factory=lambda: AutoFiniteDiff())
    engine_display: ClassVar[str] = "its two backends"
    strategy: ClassVar[str] = "di.second_order.strategy:SecondOrderStrategy"

    def __post_init__(self) -> None:
        for option in ("outer", "inner"):
            given = getattr(self, option)
            if not isinstance(given, AbstractBackend):
                raise InvalidOptionTypeError(
                    f"SecondOrder({option}=...) must be a backend selector such as di.AutoJAX(), not "
                    f"{_not_a_selector(given)}"
                )

    @property
    def is_installed(self) -> bool:
        """Whether both engines are installed."""
        return self.outer.is_installed and self.inner.is_installed


@dataclass(frozen=True)
class AutoFastest(AbstractBackend):
    """Measure the candidate backends at preparation and keep the fastest correct one.

    ``prepare_<operator>(f, di.AutoFastest(), x, *contexts)`` prepares the operator
    on every candidate, runs each once on the given arguments, drops the ones that
    fail or whose result differs from the majority's beyond ``rtol``, times the
    others (whole prepared calls, conversions to and from the caller's array
    family included; interleaved rounds, median), and returns the fastest one's
    prep. Its calls then cost exactly what that backend's prepared calls cost.
    ``prep.plan`` (a :class:`di.plan.Plan`) tells which candidate won and why the
    others did not. Prepare on a representative ``x``: the candidates are checked
    and timed there. Unprepared calls are refused (they would measure every time).

    Args:
        candidates: the selectors to choose among; ``None`` means
            ``AutoJAX(jit=True)`` (when ``include_compiled``), ``AutoJAX()``,
            ``AutoTorch()`` and ``AutoAutograd()``, those installed.
            ``AutoTorch(compile=True)`` (seconds of compilation) and finite
            differences (approximate, and ``2n`` evaluations of ``f`` per
            gradient) are candidates only when listed.
        budget_s: seconds spent timing the candidates (their preparation and
            first call come on top). Each candidate gets at least three rounds.
        rtol: how far, relative to the largest entry of the result, a
            candidate's result may differ from the majority's; ``None`` picks it
            from the result's dtype (1e-5 for float64, 1e-3 for float32, 3e-2 for
            16-bit floats).
        atol: an absolute allowance added to ``rtol`` times the largest entry,
            so rounding noise around a zero result (a gradient at a minimum)
            agrees; ``None``: 1e-8 for float64, 1e-4 for float32, 1e-2 for
            16-bit floats.
        include_compiled: whether the default candidates include ``AutoJAX(jit=True)``.
        cache: a JSON file remembering plans by function (module and qualified
            name, and a hash of its bytecode), operator, signature, candidates
            and installed engine versions: a later process with the same ones
            prepares the remembered winner without measuring.

    Raises:
        InvalidOptionError: an empty candidate list, a non-positive budget or
            ``rtol`` (a ``ValueError``).
        InvalidOptionTypeError: one selector instead of a list of them; a
            candidate that is not a backend selector, or an AutoFastest (a
            ``TypeError``).

    Examples:
        >>> import numpy as np, di
        >>> f = lambda x: (x * x).sum()
        >>> backend = di.AutoFastest([di.AutoFiniteDiff(), di.AutoFiniteDiff(method="forward")], budget_s=0.01)
        >>> prep = di.prepare_gradient(f, backend, np.ones(3))
        >>> di.gradient(f, prep, backend, np.array([1.0, 2.0, 3.0])).round(4)
        array([2., 4., 6.])
        >>> prep.plan.chosen in backend.candidates
        True
    """

    candidates: Sequence[AbstractBackend] | None = None
    budget_s: float = field(default=1.0, kw_only=True)
    rtol: float | None = field(default=None, kw_only=True)
    atol: float | None = field(default=None, kw_only=True)
    include_compiled: bool = field(default=True, kw_only=True)
    cache: str | os.PathLike[str] | None = field(default=None, kw_only=True)
    engine_display: ClassVar[str] = "its candidates"
    strategy: ClassVar[str] = "di.fastest.strategy:FastestStrategy"
    prepared_only: ClassVar[str] = (
        "it chooses a backend by measuring every candidate, which an unprepared call would repeat every time"
    )

    def __post_init__(self) -> None:
        if self.candidates is not None:
            given = self.candidates
            if isinstance(given, (AbstractBackend, str)) or not isinstance(given, Iterable):
                raise InvalidOptionTypeError(
                    f"AutoFastest(candidates=...) takes a list of backend selectors, not one {type(given).__name__}: "
                    f"pass AutoFastest([{given!r}]), or several to choose among"
                )
            candidates = tuple(dict.fromkeys(given))  # in order, without repeats
            if not candidates:
                raise InvalidOptionError(
                    "AutoFastest(candidates=...) needs at least one candidate (None: the default ones)"
                )
            for candidate in candidates:
                if not isinstance(candidate, AbstractBackend) or isinstance(candidate, AutoFastest):
                    raise InvalidOptionTypeError(
                        f"AutoFastest candidates must be backend selectors such as di.AutoJAX(jit=True), other than "
                        f"AutoFastest, not {_not_a_selector(candidate)}"
                    )
            object.__setattr__(self, "candidates", candidates)
        if not (isinstance(self.budget_s, (int, float)) and 0 < self.budget_s < float("inf")):
            raise InvalidOptionError(
                f"AutoFastest(budget_s={self.budget_s!r}): budget_s must be a positive number of seconds"
            )
        if self.rtol is not None and not (isinstance(self.rtol, numbers.Real) and self.rtol > 0):
            raise InvalidOptionError(
                f"AutoFastest(rtol={self.rtol!r}): rtol must be positive, or None to pick it by dtype"
            )
        if self.atol is not None and not (isinstance(self.atol, numbers.Real) and self.atol >= 0):
            raise InvalidOptionError(f"AutoFastest(atol={self.atol!r}): atol must be >= 0, or None to pick it by dtype")
        _check_flags(self, "include_compiled")
        if self.cache is not None and not isinstance(self.cache, str):
            object.__setattr__(self, "cache", os.fspath(self.cache))

    def default_candidates(self) -> tuple[AbstractBackend, ...]:
        """The candidates when none are given: the installed automatic-differentiation engines.

        Examples:
            >>> import di
            >>> di.AutoFastest(include_compiled=False).default_candidates()[0] == di.AutoJAX(jit=True)
            False
        """
        defaults: list[AbstractBackend] = [AutoJAX(), AutoTorch(), AutoAutograd()]
        if self.include_compiled:
            defaults.insert(0, AutoJAX(jit=True))
        return tuple(candidate for candidate in defaults if candidate.is_installed)


@dataclass(frozen=True)
class AutoSparse(AbstractBackend):
    """Sparse Jacobians and Hessians: a dense backend, colored.

    ``jacobian`` and ``hessian`` (and their ``value_and_*`` forms) detect the
    sparsity pattern at preparation, color it, and compute one batched
    pushforward (or pullback, or hvp) per color with the ``dense`` backend, then
    read every nonzero out of the compressed result: a banded Jacobian of size
    ``n`` costs about its bandwidth instead of ``n`` pushforwards. Every other
    operator is the dense backend's. The prep's ``sparsity`` (a boolean
    ``scipy.sparse.csr_array``), ``colors`` (their number) and ``info``
    (coloring, order, mode) show what was found. A prep serves the pattern it
    was made for: an ``x`` or context at which ``f`` has another pattern is the
    caller's responsibility (``python -m di check ... --sparse`` tests it).

    Args:
        dense: the backend computing the compressed products: an engine's
            selector, eager or compiled (not ``AutoSparse``; ``AutoFastest``,
            and ``SecondOrder`` for jacobians and hessians, are refused at
            preparation).
        sparsity: where the pattern comes from: :class:`di.TracerSparsity`
            (default: exact, read from ``f``'s structure: its JAX program, or
            traced arrays without JAX),
            :class:`di.LocalTracerSparsity` (at the preparation point),
            :class:`di.DenseSparsity` (nonzeros of dense matrices at random
            points) or :class:`di.KnownSparsity` (given, optionally with its coloring).
        coloring: ``"greedy"`` (default: structurally orthogonal columns or rows
            for Jacobians, a star coloring for Hessians, each nonzero read
            directly) or ``"acyclic"`` (Hessians: an acyclic coloring, fewer colors,
            nonzeros found by substitution; Jacobians as ``"greedy"``).
        order: the vertex order of the greedy coloring: ``"auto"`` (default: the
            fewest colors among ``natural``, ``largest_first``, ``smallest_last``,
            ``incidence_degree`` and ``dynamic_largest_first``, then recolored by
            color classes while that helps), one of those, or ``"random"``.
        seed: the seed of the ``"random"`` order.
        mode: Jacobians only: ``"auto"`` (default: the dense backend's ``mode``
            when it has one, else the fewest products among pushforwards by
            columns, pullbacks by rows, and both, among the primitives the dense
            backend implements itself), ``"forward"``, ``"reverse"`` or
            ``"bidirectional"`` (rows and columns colored together: an arrowhead
            takes three products instead of ``n``).
        chunk_size: at most this many colors per batched product (bounds the
            memory of the compressed matrix; ``None``: all at once).
        dense_result: return dense arrays of the caller's family (shaped
            ``f(x).shape + x.shape``) instead of sparse matrices. Sparse results
            are 2-D ``(f(x).size, x.size)``: ``scipy.sparse.csr_array`` for numpy
            callers, ``torch.sparse_csr`` tensors for torch callers,
            ``jax.experimental.sparse.BCOO`` for JAX callers.

    Raises:
        InvalidOptionTypeError: ``dense`` is not a selector, or is an
            ``AutoSparse``; a ``sparsity`` that is not a sparsity source (a
            ``TypeError``).
        InvalidOptionError: an unknown ``coloring``, ``order`` or ``mode``; a
            ``chunk_size`` below 1 (a ``ValueError``).

    Examples:
        >>> import numpy as np, di
        >>> backend = di.AutoSparse(di.AutoFiniteDiff(), sparsity=di.KnownSparsity(np.eye(3, dtype=bool)))
        >>> f = lambda x: x ** 2
        >>> prep = di.prepare_jacobian(f, backend, np.zeros(3))
        >>> prep.colors
        1
        >>> di.jacobian(f, prep, backend, np.array([1.0, 2.0, 3.0])).toarray().round(6)
        array([[2., 0., 0.],
               [0., 4., 0.],
               [0., 0., 6.]])
    """

    dense: AbstractBackend = field(default_factory=lambda: AutoJAX())
    strategy: ClassVar[str] = "di.sparse.strategy:SparseStrategy"
    sparsity: Any = field(default=None, kw_only=True)
    coloring: str = field(default="greedy", kw_only=True)
    order: str = field(default="auto", kw_only=True)
    dense_result: bool = field(default=False, kw_only=True)
    mode: str = field(default="auto", kw_only=True)
    seed: int = field(default=0, kw_only=True)
    chunk_size: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        from di.backends.sparsity import SparsitySource, TracerSparsity

        if not isinstance(self.dense, AbstractBackend) or isinstance(self.dense, AutoSparse):
            raise InvalidOptionTypeError(
                f"AutoSparse(dense=...) must be a dense backend selector such as di.AutoJAX(), not "
                f"{_not_a_selector(self.dense)}"
            )
        if self.sparsity is None:
            object.__setattr__(self, "sparsity", TracerSparsity())
        elif not isinstance(self.sparsity, SparsitySource):
            raise InvalidOptionTypeError(
                f"AutoSparse(sparsity=...) must be di.TracerSparsity(), di.LocalTracerSparsity(), "
                f"di.DenseSparsity(...) or di.KnownSparsity(pattern), not {type(self.sparsity).__name__}"
            )
        _check_flags(self, "dense_result")
        _check_choice("coloring", self.coloring, _SPARSE_COLORINGS)
        _check_choice("order", self.order, _SPARSE_ORDERS)
        _check_choice("mode", self.mode, _SPARSE_MODES)
        if self.chunk_size is not None and (not isinstance(self.chunk_size, int) or self.chunk_size < 1):
            raise InvalidOptionError(
                f"AutoSparse(chunk_size={self.chunk_size!r}): chunk_size must be a positive int or None"
            )

    @property
    def is_installed(self) -> bool:
        """Whether the dense engine and scipy are installed."""
        import importlib.util

        return self.dense.is_installed and importlib.util.find_spec("scipy") is not None

    @property  # type: ignore[misc]
    def engine_display(self) -> str:  # type: ignore[override]
        """What is missing when it is not installed: the dense engine, or scipy."""
        return self.dense.engine_display if not self.dense.is_installed else "scipy"

    @property  # type: ignore[misc]
    def extra(self) -> str:  # type: ignore[override]
        """The pip extra installing what is missing."""
        return self.dense.extra if not self.dense.is_installed else "sparse"


_SPARSE_COLORINGS = ("greedy", "acyclic")
_SPARSE_ORDERS = (
    "auto",
    "natural",
    "largest_first",
    "smallest_last",
    "incidence_degree",
    "dynamic_largest_first",
    "random",
)
_SPARSE_MODES = ("auto", "forward", "reverse", "bidirectional")


def _check_choice(argument: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidOptionError(
            f"AutoSparse({argument}={value!r}): {argument} must be one of {', '.join(map(repr, choices))}"
        )


def selector_classes() -> tuple[type[AbstractBackend], ...]:
    """Every selector class known by name (built in, or defined out of tree with a
    ``name``), in definition order.

    Examples:
        >>> import di
        >>> from di.backends.selectors import selector_classes
        >>> di.AutoFiniteDiff in selector_classes()
        True
    """
    return tuple(dict.fromkeys(_BY_NAME.values()))


def backend(name: str, **options: Any) -> AbstractBackend:
    """Build a backend selector from its name, for configuration files and CLIs.

    Args:
        name: a selector's ``name`` or one of its ``aliases``, case-insensitive:
            ``"jax"``, ``"torch"``, ``"autograd"``, ``"finitediff"``, or the
            name of a selector defined out of tree.
        **options: the selector's options, for example ``jit=True``.

    Returns:
        The selector, e.g. ``AutoJAX(jit=True)``.

    Raises:
        InvalidOptionError: unknown name (a ``ValueError``).
        InvalidOptionTypeError: an option the selector does not have (a
            ``TypeError``); a value the selector refuses raises its own error.

    Examples:
        >>> import di
        >>> di.backend("jax", jit=True)
        AutoJAX(jit=True, mode=None)
    """
    cls = _BY_NAME.get(name.lower()) if isinstance(name, str) else None
    if cls is None:
        known = ", ".join(repr(known.name) for known in selector_classes())
        raise InvalidOptionError(f"unknown backend {name!r}; known backends: {known}")
    accepted = [f.name for f in fields(cls) if f.init] if hasattr(cls, "__dataclass_fields__") else None
    unknown = [option for option in options if accepted is not None and option not in accepted]
    if unknown:
        takes = f"its options are {', '.join(accepted)}" if accepted else "it takes no options"
        raise InvalidOptionTypeError(f"di.backend({name!r}): {cls.__name__} has no option {unknown[0]!r}; {takes}")
    return cls(**options)


def available_backends() -> list[AbstractBackend]:
    """The default selector of every engine that is installed, importing none.

    Returns:
        A list such as ``[AutoJAX(), AutoTorch(), AutoAutograd(), AutoFiniteDiff()]``,
        in that order, with the selectors whose engine is missing left out.

    Raises:
        Nothing: a missing engine is left out, not an error.

    Examples:
        >>> import di
        >>> di.AutoFiniteDiff() in di.available_backends()
        True
    """
    candidates: list[AbstractBackend] = [AutoJAX(), AutoTorch(), AutoAutograd(), AutoFiniteDiff()]
    return [candidate for candidate in candidates if candidate.is_installed]
