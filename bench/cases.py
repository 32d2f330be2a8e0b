"""Per-backend pairs of callables: the native engine call a user of that engine writes
for one operator, and the same operator through ``di``.

Every input is in the engine's own array family (JAX arrays for ``AutoJAX``,
torch tensors for ``AutoTorch``, numpy arrays for ``AutoAutograd`` and
``AutoFiniteDiff``), so neither side converts anything. The native side is what a
careful user of that engine writes by hand *for that operator* (``jit(grad)`` for
``gradient``, ``jit(value_and_grad)`` for ``value_and_gradient``, ``jvp``/``vjp``
for pushforward/pullback, ...); the ``di`` side is the public prepared call. JAX
results are waited for with ``block_until_ready()`` on both sides, and float64
JAX rows run inside ``jax.enable_x64(True)`` on both sides, as a JAX user
computing in float64 does.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import di

__all__ = ["ENGINES", "OPERATORS", "SPELLED_OPERATORS", "Case", "Engine", "to_numpy"]

Thunk = Callable[[], Any]
Scope = Callable[[], contextlib.AbstractContextManager[Any]]

GRADIENT = "gradient"
VALUE_AND_GRADIENT = "value_and_gradient"
JACOBIAN = "jacobian"
PUSHFORWARD = "pushforward"
PULLBACK = "pullback"
HVP = "hvp"
UNPREPARED = "gradient, unprepared"
HESSIAN = "hessian"
OPERATORS = (GRADIENT, VALUE_AND_GRADIENT, JACOBIAN, PUSHFORWARD, PULLBACK, HVP, UNPREPARED)
"""The operators of the per-call table (an engine's ``build`` is asked for a subset)."""
SPELLED_OPERATORS = (GRADIENT, VALUE_AND_GRADIENT, JACOBIAN, PUSHFORWARD, PULLBACK, HVP, HESSIAN)
"""The operators of the fastest-native-spelling table (``hessian`` only there)."""
SCALAR_OPERATORS = frozenset({GRADIENT, VALUE_AND_GRADIENT, HVP, HESSIAN, UNPREPARED})
"""Operators timed on the scalar function; the others on the vector function."""
MAX_N = {JACOBIAN: 1_000, HESSIAN: 1_000}
"""The largest n per operator (a dense jacobian at n = 1e5 has 1e10 entries)."""


@dataclass
class Case:
    """One backend, dtype and size.

    Attributes:
        pairs: operator -> ``(native, di)`` zero-argument callables.
        scope: the context both sides run in (``jax.enable_x64`` for float64 JAX).
        breakdown: layers of the prepared gradient (see :func:`_breakdown`).
        spellings: optional, operator -> ``{spelling: native}``: every native spelling an
            expert of the engine writes for the operator, the pair's native among them
            (the fastest-native-spelling table times ``di`` against each; an operator
            missing here has the pair's native alone).
    """

    pairs: dict[str, tuple[Thunk, Thunk]]
    scope: Scope = contextlib.nullcontext
    breakdown: dict[str, Thunk] = field(default_factory=dict, repr=False)
    spellings: dict[str, dict[str, Thunk]] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Engine:
    """A backend under test.

    Attributes:
        label: how the row names it, e.g. ``AutoJAX(jit=True)``.
        natives: operator -> the native call it is compared with.
        build: ``build(f, g, x_numpy_float64, dtype, operators) -> Case`` for the
            scalar ``f`` and the vector ``g``.
        requires: the module the engine needs.
        max_n: the largest size benchmarked (``None``: all).
        quick_operators: the operators of ``--quick`` runs (``None``: all).
        quick_sizes: the sizes of ``--quick`` runs (``None``: all).
        operators: the operators benchmarked.
        spelled: the operators of the fastest-native-spelling table that ``build`` offers
            beyond :attr:`operators` (``hessian``); ``()``: those of :attr:`operators`.
        min_pairs: pairs of blocks each row measures at least (``None``: the run's
            settings), for an engine whose calls are slow and noisy (eager TensorFlow).
    """

    label: str
    natives: dict[str, str]
    build: Callable[[Callable[..., Any], Callable[..., Any], np.ndarray, str, Sequence[str]], Case]
    requires: str | None = None
    max_n: int | None = None
    quick_operators: tuple[str, ...] | None = None
    quick_sizes: tuple[int, ...] | None = None
    operators: tuple[str, ...] = OPERATORS
    spelled: tuple[str, ...] = ()
    min_pairs: int | None = None

    @property
    def installed(self) -> bool:
        """Whether the engine this backend needs can be imported (checked without importing it)."""
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


def to_numpy(value: Any) -> np.ndarray:
    """Any family's array (or the first of a tuple of them) as numpy float64."""
    if isinstance(value, tuple):
        return np.concatenate([to_numpy(item).reshape(-1) for item in value])
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.asarray(value, dtype=np.float64)


# --- the di side, the same for every engine ------------------------------------------------


def _di_side(
    backend: Any,
    f: Callable[..., Any],
    g: Callable[..., Any],
    x: Any,
    v: Any,
    operators: Sequence[str],
    block: bool,
) -> dict[str, Thunk]:
    """The prepared ``di`` call of each operator (``block``: wait for JAX results)."""
    thunks: dict[str, Thunk] = {}
    tangents = (v,)
    if {GRADIENT, VALUE_AND_GRADIENT} & set(operators):
        gradient_prep = di.prepare_gradient(f, backend, x)
    preps = {
        JACOBIAN: lambda: di.prepare_jacobian(g, backend, x),
        PUSHFORWARD: lambda: di.prepare_pushforward(g, backend, x, tangents),
        PULLBACK: lambda: di.prepare_pullback(g, backend, x, tangents),
        HVP: lambda: di.prepare_hvp(f, backend, x, tangents),
        HESSIAN: lambda: di.prepare_hessian(f, backend, x),
    }
    prepared = {operator: make() for operator, make in preps.items() if operator in operators}
    gradient, value_and_gradient = di.gradient, di.value_and_gradient
    jacobian, pushforward, pullback, hvp, hessian = di.jacobian, di.pushforward, di.pullback, di.hvp, di.hessian
    if block:
        if GRADIENT in operators:
            thunks[GRADIENT] = lambda: gradient(f, gradient_prep, backend, x).block_until_ready()
        if VALUE_AND_GRADIENT in operators:

            def di_value_and_gradient() -> Any:
                y, grad = value_and_gradient(f, gradient_prep, backend, x)
                y.block_until_ready()
                return grad.block_until_ready()

            thunks[VALUE_AND_GRADIENT] = di_value_and_gradient
        if UNPREPARED in operators:
            thunks[UNPREPARED] = lambda: gradient(f, backend, x).block_until_ready()
        if JACOBIAN in operators:
            thunks[JACOBIAN] = lambda: jacobian(g, prepared[JACOBIAN], backend, x).block_until_ready()
        if PUSHFORWARD in operators:
            thunks[PUSHFORWARD] = lambda: pushforward(g, prepared[PUSHFORWARD], backend, x, tangents)[
                0
            ].block_until_ready()
        if PULLBACK in operators:
            thunks[PULLBACK] = lambda: pullback(g, prepared[PULLBACK], backend, x, tangents)[0].block_until_ready()
        if HVP in operators:
            thunks[HVP] = lambda: hvp(f, prepared[HVP], backend, x, tangents)[0].block_until_ready()
        if HESSIAN in operators:
            thunks[HESSIAN] = lambda: hessian(f, prepared[HESSIAN], backend, x).block_until_ready()
        return thunks
    if GRADIENT in operators:
        thunks[GRADIENT] = lambda: gradient(f, gradient_prep, backend, x)
    if VALUE_AND_GRADIENT in operators:
        thunks[VALUE_AND_GRADIENT] = lambda: value_and_gradient(f, gradient_prep, backend, x)
    if UNPREPARED in operators:
        thunks[UNPREPARED] = lambda: gradient(f, backend, x)
    if JACOBIAN in operators:
        thunks[JACOBIAN] = lambda: jacobian(g, prepared[JACOBIAN], backend, x)
    if PUSHFORWARD in operators:
        thunks[PUSHFORWARD] = lambda: pushforward(g, prepared[PUSHFORWARD], backend, x, tangents)[0]
    if PULLBACK in operators:
        thunks[PULLBACK] = lambda: pullback(g, prepared[PULLBACK], backend, x, tangents)[0]
    if HVP in operators:
        thunks[HVP] = lambda: hvp(f, prepared[HVP], backend, x, tangents)[0]
    if HESSIAN in operators:
        thunks[HESSIAN] = lambda: hessian(f, prepared[HESSIAN], backend, x)
    return thunks


def _breakdown(f: Callable[..., Any], backend: Any, x: Any, block: bool) -> dict[str, Thunk]:
    """Thunks splitting a prepared ``di.gradient`` into its layers: the adapter's
    program alone (``prep.programs["gradient"]``, internal), and ``di.gradient``
    through a non-strict prep (the facade without the signature check)."""
    program = di.prepare_gradient(f, backend, x).programs[GRADIENT]
    loose = di.prepare_gradient(f, backend, x, strict=False)
    gradient = di.gradient
    if block:
        return {
            "adapter program alone": lambda: program(x).block_until_ready(),
            "di.gradient, strict=False prep": lambda: gradient(f, loose, backend, x).block_until_ready(),
        }
    return {
        "adapter program alone": lambda: program(x),
        "di.gradient, strict=False prep": lambda: gradient(f, loose, backend, x),
    }


def _pair(natives: dict[str, Thunk], through_di: dict[str, Thunk]) -> dict[str, tuple[Thunk, Thunk]]:
    native_of = {UNPREPARED: GRADIENT}
    return {operator: (natives[native_of.get(operator, operator)], thunk) for operator, thunk in through_di.items()}


def _spelled(
    spellings: dict[str, dict[str, Thunk]], through_di: dict[str, Thunk], scope: Scope = contextlib.nullcontext
) -> Case:
    """The case whose pairs take each operator's first spelling as the native call
    (the one the per-call table names), and whose spellings are all of them."""
    natives = {operator: next(iter(spelled.values())) for operator, spelled in spellings.items()}
    wanted = {operator for operator in through_di}
    return Case(
        _pair(natives, through_di),
        scope,
        spellings={operator: spelled for operator, spelled in spellings.items() if operator in wanted},
    )


# --- JAX --------------------------------------------------------------------------------------


def _jax(jit: bool) -> Callable[..., Case]:
    def build(
        f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
    ) -> Case:
        import jax
        import jax.numpy as jnp

        scope: Scope = (lambda: jax.enable_x64(True)) if dtype == "float64" else contextlib.nullcontext
        with scope():
            x = jnp.asarray(x_np, dtype=dtype)
            v = jnp.asarray(np.cos(x_np), dtype=dtype)
            backend = di.AutoJAX(jit=jit)
            wrap = jax.jit if jit else (lambda fn: fn)
            grad = wrap(jax.grad(f))
            value_and_grad = wrap(jax.value_and_grad(f))
            jvp = wrap(lambda x, v: jax.jvp(g, (x,), (v,))[1])
            linearized = wrap(lambda x, v: jax.linearize(g, x)[1](v))
            vjp = wrap(lambda x, v: jax.vjp(g, x)[1](v)[0])
            forward_over_reverse = wrap(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])
            reverse_over_reverse = wrap(lambda x, v: jax.grad(lambda x: jnp.vdot(jax.grad(f)(x), v))(x))
            vjp_of_grad = wrap(lambda x, v: jax.vjp(jax.grad(f), x)[1](v)[0])
            jacobians = {"jacfwd(g)": wrap(jax.jacfwd(g)), "jacrev(g)": wrap(jax.jacrev(g))}
            hessians = {
                "hessian(f)": wrap(jax.hessian(f)),
                "jacfwd(jacrev(f))": wrap(jax.jacfwd(jax.jacrev(f))),
                "jacrev(jacrev(f))": wrap(jax.jacrev(jax.jacrev(f))),
            }

            def native_value_and_gradient() -> Any:
                y, gradient = value_and_grad(x)
                y.block_until_ready()
                return gradient.block_until_ready()

            def ready(fn: Callable[..., Any], *args: Any) -> Thunk:
                return lambda: fn(*args).block_until_ready()

            spellings = {
                GRADIENT: {"grad(f)": ready(grad, x)},
                VALUE_AND_GRADIENT: {"value_and_grad(f)": native_value_and_gradient},
                JACOBIAN: {label: ready(fn, x) for label, fn in jacobians.items()},
                PUSHFORWARD: {"jvp(g)": ready(jvp, x, v), "linearize(g)": ready(linearized, x, v)},
                PULLBACK: {"vjp(g)": ready(vjp, x, v)},
                HVP: {
                    "jvp(grad(f)) (forward over reverse)": ready(forward_over_reverse, x, v),
                    "grad(vdot(grad(f), v)) (reverse over reverse)": ready(reverse_over_reverse, x, v),
                    "vjp(grad(f)) (reverse over reverse)": ready(vjp_of_grad, x, v),
                },
                HESSIAN: {label: ready(fn, x) for label, fn in hessians.items()},
            }
            if jit:
                spellings = {
                    operator: {f"jit({label})": thunk for label, thunk in spelled.items()}
                    for operator, spelled in spellings.items()
                }
            through_di = _di_side(backend, f, g, x, v, operators, block=True)
            case = _spelled(spellings, through_di, scope)
            case.breakdown = _breakdown(f, backend, x, block=True) if GRADIENT in operators else {}
        return case

    return build


# --- PyTorch ----------------------------------------------------------------------------------


def _torch(compiled: bool) -> Callable[..., Case]:
    def build(
        f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
    ) -> Case:
        import torch
        import torch.func as func

        x = torch.from_numpy(x_np.astype(dtype))
        v = torch.from_numpy(np.cos(x_np).astype(dtype))
        autograd_grad = torch.autograd.grad
        if compiled:
            # Each row compiles from scratch on both sides (dynamo caches per code object,
            # and func.grad's wrapper is one code object for every f).
            torch._dynamo.reset()
            backend = di.AutoTorch(compile=True)
            grad = torch.compile(func.grad(f), fullgraph=True)
            grad_and_value = torch.compile(func.grad_and_value(f), fullgraph=True)
            jacfwd = torch.compile(func.jacfwd(g), fullgraph=True)
            jvp = torch.compile(lambda x, v: func.jvp(g, (x,), (v,))[1], fullgraph=True)
            vjp = torch.compile(lambda x, v: func.vjp(g, x)[1](v)[0], fullgraph=True)
            hvp = torch.compile(lambda x, v: func.jvp(func.grad(f), (x,), (v,))[1], fullgraph=True)
            natives = {
                GRADIENT: lambda: grad(x),
                VALUE_AND_GRADIENT: lambda: grad_and_value(x)[::-1],  # (value, gradient), as di's
                JACOBIAN: lambda: jacfwd(x),
                PUSHFORWARD: lambda: jvp(x, v),
                PULLBACK: lambda: vjp(x, v),
                HVP: lambda: hvp(x, v),
            }
            if HESSIAN in operators:
                hessian = torch.compile(func.jacfwd(func.grad(f)), fullgraph=True)
                natives[HESSIAN] = lambda: hessian(x)
            through_di = _di_side(backend, f, g, x, v, operators, block=False)
            return Case(_pair(natives, through_di))

        backend = di.AutoTorch()

        def leaf() -> Any:
            return x.detach().requires_grad_()

        def native_gradient() -> Any:
            xr = leaf()
            return autograd_grad(f(xr), xr)[0]

        def native_value_and_gradient() -> Any:
            xr = leaf()
            y = f(xr)
            return y.detach(), autograd_grad(y, xr)[0]

        def native_pullback() -> Any:
            xr = leaf()
            return autograd_grad(g(xr), xr, grad_outputs=v)[0]

        def double_backward() -> Any:
            xr = leaf()
            (gradient,) = autograd_grad(f(xr), xr, create_graph=True)
            return autograd_grad(gradient, xr, v)[0]

        def forward_ad_pushforward() -> Any:
            import torch.autograd.forward_ad as forward_ad

            with forward_ad.dual_level():
                return forward_ad.unpack_dual(g(forward_ad.make_dual(x, v))).tangent

        def double_vjp() -> Any:
            xr = leaf()
            y = g(xr)
            u = torch.zeros_like(y, requires_grad=True)
            (pulled,) = autograd_grad(y, xr, u, create_graph=True)
            return autograd_grad(pulled, u, v)[0]

        grad_and_value = func.grad_and_value(f)

        def called(fn: Callable[[Any], Any]) -> Thunk:
            return lambda: fn(x)

        jacobians = {"torch.func.jacfwd(g)": func.jacfwd(g), "torch.func.jacrev(g)": func.jacrev(g)}
        hessians = {
            "torch.func.hessian(f)": func.hessian(f),
            "torch.func.jacrev(torch.func.jacrev(f))": func.jacrev(func.jacrev(f)),
        }
        spellings: dict[str, dict[str, Thunk]] = {
            GRADIENT: {
                "torch.autograd.grad(f(xr), xr)": native_gradient,
                "torch.func.grad(f)": lambda: func.grad(f)(x),
            },
            VALUE_AND_GRADIENT: {
                "torch.autograd.grad, f(xr).detach()": native_value_and_gradient,
                "torch.func.grad_and_value(f)": lambda: grad_and_value(x)[::-1],
            },
            JACOBIAN: {
                **{label: called(fn) for label, fn in jacobians.items()},
                "torch.autograd.functional.jacobian(g, x, vectorize=True)": lambda: torch.autograd.functional.jacobian(
                    g, x, vectorize=True
                ),
            },
            PUSHFORWARD: {
                "torch.func.jvp(g)": lambda: func.jvp(g, (x,), (v,))[1],
                "forward_ad.make_dual": forward_ad_pushforward,
                "double vjp (autograd.grad twice, a cotangent that requires grad)": double_vjp,
                "torch.autograd.functional.jvp(g, x, v)": lambda: torch.autograd.functional.jvp(g, x, v)[1],
            },
            PULLBACK: {
                "torch.autograd.grad(g(xr), xr, grad_outputs=v)": native_pullback,
                "torch.func.vjp(g)": lambda: func.vjp(g, x)[1](v)[0],
            },
            HVP: {
                "double backward (autograd.grad twice, create_graph=True)": double_backward,
                "torch.func.jvp(torch.func.grad(f))": lambda: func.jvp(func.grad(f), (x,), (v,))[1],
                "torch.func.vjp(torch.func.grad(f))": lambda: func.vjp(func.grad(f), x)[1](v)[0],
            },
            HESSIAN: {
                "torch.autograd.functional.hessian(f, x, vectorize=True)": lambda: torch.autograd.functional.hessian(
                    f, x, vectorize=True
                ),
                **{label: called(fn) for label, fn in hessians.items()},
                "torch.autograd.functional.hessian(f, x)": lambda: torch.autograd.functional.hessian(f, x),
            },
        }
        through_di = _di_side(backend, f, g, x, v, operators, block=False)
        case = _spelled(spellings, through_di)
        case.breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
        return case

    return build


# --- autograd ---------------------------------------------------------------------------------


def _autograd(
    f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
) -> Case:
    import autograd
    import autograd.numpy as anp
    from autograd.differential_operators import hessian_tensor_product, make_hvp, make_jvp, make_vjp

    x = x_np.astype(dtype)
    v = np.cos(x_np).astype(dtype)
    backend = di.AutoAutograd()
    grad, value_and_grad, jacobian = autograd.grad(f), autograd.value_and_grad(f), autograd.jacobian(g)
    jvp_maker, vjp_maker, hvp_maker = make_jvp(g), make_vjp(g), make_hvp(f)
    tensor_product = hessian_tensor_product(f)
    reverse_over_reverse = autograd.grad(lambda x, v: anp.dot(autograd.grad(f)(x), v))
    hessian, jacobian_of_grad = autograd.hessian(f), autograd.jacobian(autograd.grad(f))
    spellings: dict[str, dict[str, Thunk]] = {
        GRADIENT: {"autograd.grad(f)": lambda: grad(x)},
        VALUE_AND_GRADIENT: {"autograd.value_and_grad(f)": lambda: value_and_grad(x)},
        JACOBIAN: {"autograd.jacobian(g)": lambda: jacobian(x)},
        PUSHFORWARD: {"make_jvp(g)(x)(v)": lambda: jvp_maker(x)(v)[1]},
        PULLBACK: {"make_vjp(g)(x)[0](v)": lambda: vjp_maker(x)[0](v)},
        HVP: {
            "make_hvp(f)(x)[0](v)": lambda: hvp_maker(x)[0](v),
            "hessian_tensor_product(f)(x, v)": lambda: tensor_product(x, v),
            "grad(dot(grad(f), v))": lambda: reverse_over_reverse(x, v),
        },
        HESSIAN: {"autograd.hessian(f)": lambda: hessian(x), "jacobian(grad(f))": lambda: jacobian_of_grad(x)},
    }
    through_di = _di_side(backend, f, g, x, v, operators, block=False)
    case = _spelled(spellings, through_di)
    case.breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
    return case


# --- finite differences -------------------------------------------------------------------------

_STEP = float(np.finfo(np.float64).eps) ** (1 / 3)
_SECOND_ORDER_STEP = float(np.finfo(np.float64).eps) ** 0.25


def _steps(point: np.ndarray, step: float) -> np.ndarray:
    h = step * np.maximum(1.0, np.abs(point))
    return (point + h) - point  # exactly representable


def central_differences(f: Callable[..., Any], x: np.ndarray, with_value: bool = False) -> Any:
    """The hand-written central-difference gradient a numpy user would write:
    float64, step ``eps**(1/3) * max(1, |x_i|)`` made exactly representable, one
    pair of evaluations per coordinate."""
    point = np.array(x, dtype=np.float64)
    h = _steps(point, _STEP)
    g = np.empty_like(point)
    for i in range(point.size):
        xi = point[i]
        point[i] = xi + h[i]
        up = float(f(point))
        point[i] = xi - h[i]
        down = float(f(point))
        g[i] = (up - down) / (2 * h[i])
        point[i] = xi
    if with_value:
        return np.asarray(f(point)), g
    return g


def central_jacobian(g: Callable[..., Any], x: np.ndarray) -> np.ndarray:
    """The hand-written central-difference jacobian: one pair of evaluations per column."""
    point = np.array(x, dtype=np.float64)
    h = _steps(point, _STEP)
    columns = []
    for i in range(point.size):
        xi = point[i]
        point[i] = xi + h[i]
        up = np.array(g(point))
        point[i] = xi - h[i]
        columns.append((up - g(point)) / (2 * h[i]))
        point[i] = xi
    return np.stack(columns, axis=-1)


def _finitediff(
    f: Callable[..., Any], g: Callable[..., Any], x_np: np.ndarray, dtype: str, operators: Sequence[str]
) -> Case:
    x = x_np.astype(dtype)
    v = np.cos(x_np).astype(dtype)
    backend = di.AutoFiniteDiff()

    def step_along(t: np.ndarray, base: float) -> tuple[np.ndarray, np.ndarray, float]:
        """x and t in float64, and the step along t (scaled to x and t, each call)."""
        point, t = x.astype(np.float64), t.astype(np.float64)
        return point, t, base * max(1.0, float(np.max(np.abs(point)))) / float(np.max(np.abs(t)))

    def native_pushforward() -> Any:
        point, t, h = step_along(v, _STEP)
        return ((g(point + h * t) - g(point - h * t)) / (2 * h)).astype(x.dtype)

    def native_hvp() -> Any:
        point, t, h = step_along(v, _SECOND_ORDER_STEP)
        return ((central_differences(f, point + h * t) - central_differences(f, point - h * t)) / (2 * h)).astype(
            x.dtype
        )

    spellings: dict[str, dict[str, Thunk]] = {
        GRADIENT: {"central-difference loop": lambda: central_differences(f, x)},
        VALUE_AND_GRADIENT: {"the loop and f(x)": lambda: central_differences(f, x, with_value=True)},
        JACOBIAN: {"central-difference jacobian": lambda: central_jacobian(g, x)},
        PUSHFORWARD: {"(g(x + h v) - g(x - h v)) / 2h": native_pushforward},
        PULLBACK: {"v @ the jacobian": lambda: v @ central_jacobian(g, x)},
        HVP: {"central differences of the gradient along v": native_hvp},
    }
    through_di = _di_side(backend, f, g, x, v, operators, block=False)
    case = _spelled(spellings, through_di)
    case.breakdown = _breakdown(f, backend, x, block=False) if GRADIENT in operators else {}
    return case


_JAX_NATIVES = {
    GRADIENT: "jax.jit(jax.grad(f))(x)",
    VALUE_AND_GRADIENT: "jax.jit(jax.value_and_grad(f))(x)",
    JACOBIAN: "jax.jit(jax.jacfwd(g))(x)",
    PUSHFORWARD: "jax.jit(lambda x, v: jax.jvp(g, (x,), (v,))[1])(x, v)",
    PULLBACK: "jax.jit(lambda x, v: jax.vjp(g, x)[1](v)[0])(x, v)",
    HVP: "jax.jit(lambda x, v: jax.jvp(jax.grad(f), (x,), (v,))[1])(x, v)",
}

ENGINES = {
    "jax-jit": Engine("AutoJAX(jit=True)", _JAX_NATIVES, _jax(True), "jax", spelled=(HESSIAN,)),
    "jax": Engine(
        "AutoJAX()",
        {op: text.replace("jax.jit(", "(", 1) + " (eager)" for op, text in _JAX_NATIVES.items()},
        _jax(False),
        "jax",
        spelled=(HESSIAN,),
    ),
    "torch": Engine(
        "AutoTorch()",
        {
            GRADIENT: "xr = x.detach().requires_grad_(); torch.autograd.grad(f(xr), xr)",
            VALUE_AND_GRADIENT: "the same, returning f(xr).detach() too",
            JACOBIAN: "torch.func.jacfwd(g)(x)",
            PUSHFORWARD: "torch.func.jvp(g, (x,), (v,))",
            PULLBACK: "torch.autograd.grad(g(xr), xr, grad_outputs=v)",
            HVP: "double backward: g = torch.autograd.grad(f(xr), xr, create_graph=True)[0]; "
            "torch.autograd.grad(g, xr, v)",
        },
        _torch(False),
        "torch",
        spelled=(HESSIAN,),
    ),
    "torch-compile": Engine(
        "AutoTorch(compile=True)",
        {
            GRADIENT: "torch.compile(torch.func.grad(f), fullgraph=True)(x)",
            VALUE_AND_GRADIENT: "torch.compile(torch.func.grad_and_value(f), fullgraph=True)(x)",
            JACOBIAN: "torch.compile(torch.func.jacfwd(g), fullgraph=True)(x)",
            PUSHFORWARD: "torch.compile(lambda x, v: torch.func.jvp(g, (x,), (v,))[1], fullgraph=True)(x, v)",
            PULLBACK: "torch.compile(lambda x, v: torch.func.vjp(g, x)[1](v)[0], fullgraph=True)(x, v)",
            HVP: "torch.compile(lambda x, v: torch.func.jvp(torch.func.grad(f), (x,), (v,))[1], fullgraph=True)",
        },
        _torch(True),
        "torch",
        quick_operators=(GRADIENT, VALUE_AND_GRADIENT, PULLBACK),
        quick_sizes=(1_000,),
        operators=tuple(op for op in OPERATORS if op != UNPREPARED),  # unprepared: an inductor compile per call
    ),
    "autograd": Engine(
        "AutoAutograd()",
        {
            GRADIENT: "autograd.grad(f)(x)",
            VALUE_AND_GRADIENT: "autograd.value_and_grad(f)(x)",
            JACOBIAN: "autograd.jacobian(g)(x)",
            PUSHFORWARD: "make_jvp(g)(x)(v)",
            PULLBACK: "make_vjp(g)(x)[0](v)",
            HVP: "make_hvp(f)(x)[0](v)",
        },
        _autograd,
        "autograd",
        spelled=(HESSIAN,),
    ),
    "finitediff": Engine(
        "AutoFiniteDiff()",
        {
            GRADIENT: "a hand-written central-difference loop",
            VALUE_AND_GRADIENT: "the same loop and f(x)",
            JACOBIAN: "a hand-written central-difference jacobian",
            PUSHFORWARD: "(g(x + h v) - g(x - h v)) / 2h",
            PULLBACK: "v @ the hand-written jacobian",
            HVP: "central differences of the hand-written gradient along v",
        },
        _finitediff,
        max_n=1_000,
    ),
}
ENGINES.update(importlib.import_module("bench.cases_tensorflow").ENGINES)  # TensorFlow's rows, in a module of their own
ENGINES.update(importlib.import_module("bench.cases_mlx").ENGINES)  # MLX's rows, in a module of their own

from bench.cases_pytensor import ENGINE as _PYTENSOR  # noqa: E402 (its module builds on the helpers above)

ENGINES["pytensor"] = _PYTENSOR
