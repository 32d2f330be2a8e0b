"""What the transform tests share: the ``di`` side of each aspect of a composition.

Each engine's test module (``test_transforms_jax.py``, ``..._torch.py``,
``..._autograd.py``) brings the engine's side: how to apply each of its
transforms to a function of ``x``, and the native composition each ``di`` call
must agree with. The matrix they run is the adapters' declared
:class:`di.backends.transforms.Composition` records, the same records the
documentation's table is generated from.

Functions: ``scalar`` (for gradient, hvp, hessian), ``vector`` (jacobian,
pushforward, pullback), ``curve`` (a scalar input: derivative, second
derivative). ``x`` is a vector of three; the scalar operators take ``x[0]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import di
from di.backends.registry import get_adapter, get_strategy
from di.backends.transforms import Composition

X = np.array([0.5, 1.0, 2.0])
T = np.array([1.0, -1.0, 0.5])


def scalar(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sum(xp.sin(x) * x)


def vector(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.sin(x) * x


def curve(x: Any) -> Any:
    xp = di.array_namespace(x)
    return xp.stack([xp.sin(x) * x, x**3])


# operator family -> (f, the point's slice, prepare(backend, f, x, t), call(f, prep args, backend, x, t))
Call = Callable[[Callable[..., Any], tuple[Any, ...], Any, Any, Any], Any]
OPERATORS: dict[str, tuple[Callable[..., Any], bool, Callable[..., Any], Call]] = {
    "gradient": (
        scalar,
        False,
        lambda b, f, x, t: di.prepare_gradient(f, b, x),
        lambda f, p, b, x, t: di.gradient(f, *p, b, x),
    ),
    "derivative": (
        curve,
        True,
        lambda b, f, x, t: di.prepare_derivative(f, b, x),
        lambda f, p, b, x, t: di.derivative(f, *p, b, x),
    ),
    "jacobian": (
        vector,
        False,
        lambda b, f, x, t: di.prepare_jacobian(f, b, x),
        lambda f, p, b, x, t: di.jacobian(f, *p, b, x),
    ),
    "pushforward": (
        vector,
        False,
        lambda b, f, x, t: di.prepare_pushforward(f, b, x, (t,)),
        lambda f, p, b, x, t: di.pushforward(f, *p, b, x, (t,))[0],
    ),
    "pullback": (
        vector,
        False,
        lambda b, f, x, t: di.prepare_pullback(f, b, x, (t,)),
        lambda f, p, b, x, t: di.pullback(f, *p, b, x, (t,))[0],
    ),
    "hvp": (
        scalar,
        False,
        lambda b, f, x, t: di.prepare_hvp(f, b, x, (t,)),
        lambda f, p, b, x, t: di.hvp(f, *p, b, x, (t,))[0],
    ),
    "hessian": (
        scalar,
        False,
        lambda b, f, x, t: di.prepare_hessian(f, b, x),
        lambda f, p, b, x, t: di.hessian(f, *p, b, x),
    ),
    "second_derivative": (
        curve,
        True,
        lambda b, f, x, t: di.prepare_second_derivative(f, b, x),
        lambda f, p, b, x, t: di.second_derivative(f, *p, b, x),
    ),
}


# --- each declared transform, applied to a function of x as a user would ------------------------

Apply = Callable[[Callable[[Any], Any], Any], Any]


def applier(transform: str, fullgraph: bool = True) -> Apply:
    """``apply(fn, x)``: ``fn`` run inside ``transform`` at ``x`` (an array of the
    engine's family), its result a plain array. ``vmap`` maps over ``[x, 2 x]``,
    ``grad`` and the modes that differentiate take the sum of ``fn``'s output, and
    a compiler compiles ``fn`` (``fullgraph``: one graph or an error)."""
    engine = transform.split(".")[0]
    tables = {
        "jax": _jax_appliers,
        "torch": _torch_appliers,
        "autograd": _autograd_appliers,
        "tf": _tf_appliers,
        "mx": _mlx_appliers,
    }
    if engine == "torch" and transform == "torch.compile":
        return _torch_compile(fullgraph)
    return tables[engine]()[transform]


def _torch_compile(fullgraph: bool) -> Apply:
    import torch

    def apply(fn: Callable[[Any], Any], x: Any) -> Any:
        # The tests compile closures of one code object, which dynamo counts
        # against one recompile limit: start each from a fresh cache.
        torch._dynamo.reset()
        return torch.compile(fn, fullgraph=fullgraph, backend="eager")(x)

    return apply


def appliers(engine: str) -> dict[str, Apply]:
    """Every transform of ``engine`` the tests know how to apply."""
    tables = {
        "jax": _jax_appliers,
        "torch": _torch_appliers,
        "autograd": _autograd_appliers,
        "tf": _tf_appliers,
        "mx": _mlx_appliers,
    }
    return tables[engine]()


def _jax_appliers() -> dict[str, Apply]:
    import jax
    import jax.numpy as jnp

    def shard_map(fn: Callable[[Any], Any], x: Any) -> Any:
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",))
        spec = jax.sharding.PartitionSpec()
        return jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec)(x)

    def while_loop(fn: Callable[[Any], Any], x: Any) -> Any:
        out = jax.eval_shape(fn, x)

        def body(carry: Any) -> Any:
            i, _ = carry
            return i + 1, fn(x + 0.0 * i)

        return jax.lax.while_loop(lambda carry: carry[0] < 2, body, (0, jnp.zeros(out.shape, out.dtype)))[1]

    return {
        "jax.jit": lambda fn, x: jax.jit(fn)(x),
        "jax.vmap": lambda fn, x: jax.vmap(fn)(jnp.stack([x, 2 * x])),
        "jax.grad": lambda fn, x: jax.grad(lambda x: jnp.sum(fn(x)))(x),
        "jax.jacfwd": lambda fn, x: jax.jacfwd(fn)(x),
        "jax.jacrev": lambda fn, x: jax.jacrev(fn)(x),
        "jax.lax.scan": lambda fn, x: jax.lax.scan(lambda c, _: (c * 1.5, fn(c)), x, None, length=2)[1],
        "jax.lax.while_loop": while_loop,
        "jax.shard_map": shard_map,
    }


def _torch_appliers() -> dict[str, Apply]:
    import torch

    func = torch.func

    def through_autograd(fn: Callable[[Any], Any], x: Any) -> Any:
        leaf = x.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(fn(leaf).sum(), leaf)
        return g

    def in_mode(mode: Callable[[], Any]) -> Apply:
        def apply(fn: Callable[[Any], Any], x: Any) -> Any:
            with mode():
                return fn(x.clone())  # under inference_mode: an inference tensor

        return apply

    return {
        "torch.func.vmap": lambda fn, x: func.vmap(fn)(torch.stack([x, 2 * x])),
        "torch.func.grad": lambda fn, x: func.grad(lambda x: fn(x).sum())(x),
        "torch.func.jacrev": lambda fn, x: func.jacrev(fn)(x),
        "torch.func.jvp": lambda fn, x: func.jvp(fn, (x,), (torch.ones_like(x),))[1],
        "torch.func.jacfwd": lambda fn, x: func.jacfwd(fn)(x),
        "torch.autograd.grad": through_autograd,
        "torch.no_grad": in_mode(torch.no_grad),
        "torch.inference_mode": in_mode(torch.inference_mode),
        "torch.compile": _torch_compile(fullgraph=True),
    }


def _autograd_appliers() -> dict[str, Apply]:
    import autograd
    import autograd.numpy as anp

    return {"autograd.grad": lambda fn, x: autograd.grad(lambda x: anp.sum(fn(x)))(x)}


def _tf_appliers() -> dict[str, Apply]:
    import tensorflow as tf

    def outer_tape(fn: Callable[[Any], Any], x: Any) -> Any:
        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(fn(x))
        return tape.gradient(y, x)

    return {
        "tf.function": lambda fn, x: tf.function(fn)(tf.convert_to_tensor(x)),
        "tf.GradientTape": outer_tape,
        "tf.vectorized_map": lambda fn, x: tf.vectorized_map(fn, tf.stack([x, 2 * x])),
    }


def _mlx_appliers() -> dict[str, Apply]:
    import mlx.core as mx

    return {
        "mx.grad": lambda fn, x: mx.grad(lambda x: mx.sum(fn(x)))(x),
        "mx.vmap": lambda fn, x: mx.vmap(fn)(mx.stack([x, 2 * x])),
        "mx.compile": lambda fn, x: mx.compile(fn)(x),
    }


# --- the di side of each operator --------------------------------------------------------------


def di_function(operator: str, backend: Any, prepared: Any, t: Any) -> Callable[[Any], Any]:
    """The function of ``x`` (a vector) that calls the operator, with ``prepared``
    (a prep) or unprepared (``None``); scalar-input operators take ``x[0]``.
    Sparse results are made dense (as a caller differentiating them would)."""
    f, scalar_input, _, call = OPERATORS[operator]
    prep_args = () if prepared is None else (prepared,)

    def run(x: Any) -> Any:
        result = call(f, prep_args, backend, x[0] if scalar_input else x, t)
        return result.todense() if hasattr(result, "todense") else result

    return run


def prepare(operator: str, backend: Any, x: Any, t: Any) -> Any:
    """A strict prep of the operator made outside any transform, at ``x``."""
    f, scalar_input, make, _ = OPERATORS[operator]
    return make(backend, f, x[0] if scalar_input else x, t)


def compositions(backend: Any) -> tuple[Composition, ...]:
    """The declared compositions of a selector (a strategy's: its engine's)."""
    strategy = get_strategy(backend)
    engine = backend if strategy is None else strategy.engine(backend)
    return get_adapter(engine).capabilities.compositions


def operators_of(backend: Any) -> list[str]:
    """The operator families a selector is tested for inside transforms: a strategy's
    own operators (AutoSparse: jacobian, hessian; SecondOrder: the second-order
    ones), every family otherwise."""
    if isinstance(backend, di.AutoSparse):
        return ["jacobian", "hessian"]
    if isinstance(backend, di.SecondOrder):
        return ["hvp", "hessian", "second_derivative"]
    return list(OPERATORS)
