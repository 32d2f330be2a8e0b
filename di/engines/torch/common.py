"""What every torch program shares: grad modes, leaves, tangents, output rules."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.autograd.forward_ad as forward_ad
import torch.utils._pytree as torch_pytree

from di.backends.compile import counting_static_values, static_positions
from di.backends.outputs import OutputRules
from di.backends.protocol import Adapter, Program
from di.backends.selectors import AbstractBackend
from di.contexts import Context
from di.engines.torch.compile import TorchCompiler
from di.engines.torch.family import innermost_transform
from di.engines.torch.selector import AutoTorch
from di.errors import InvalidInputError, UnsupportedContextError, UnsupportedOperatorError
from di.families import converter, family_of
from di.pytrees import is_pytree, tree_leaves, tree_map

__all__ = [
    "FORWARD_RULES",
    "REVERSE_RULES",
    "RULES",
    "CACHE_INSIDE_TRANSFORMS",
    "TorchBase",
    "active_transform",
    "addresses",
    "as_dtype",
    "custom_function_error",
    "dispatching",
    "forward_level",
    "inside_transform",
    "leaf",
    "like",
    "normal_tensors",
    "overwritten_error",
    "refusing_writes",
    "owned_aux",
    "owning",
    "recording",
    "refusing_caches_inside_transforms",
    "requires_grad",
    "scalar_to_tensor",
    "storage_address",
    "unshared",
    "version_of",
    "without_overlap",
    "write_error",
]

_functorch_active = torch._C._are_functorch_transforms_active
# Whether dynamo traces the call: False eagerly (about 30 ns), True while dynamo traces
# (it answers the call itself). torch.compiler.is_compiling says the same at three times the cost.
_is_compiling: Callable[[], bool] = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)
dynamo_compiling = _is_compiling
"""Whether ``torch.compile`` (dynamo) is tracing the call."""


def inside_transform() -> bool:
    """Whether the call runs inside a ``torch.func`` transform (``vmap``, ``grad``,
    ``jvp``, ``jacrev``, ...) or is being traced by ``torch.compile``: eager
    autograd (``requires_grad_()``, ``torch.autograd.grad``) cannot run there, and
    the ``torch.func`` programs, which compose with both, run instead. A level of
    ``torch.autograd.forward_ad`` (``dual_level()``) counts too: ``x`` may carry a
    tangent there, which a detached alias would drop. Costs about 0.1 us on the
    eager hot path."""
    return _is_compiling() or _functorch_active() or forward_level() >= 0


def forward_level() -> int:
    """The active ``torch.autograd.forward_ad`` level, -1 outside ``dual_level()``
    (a module attribute read: about 20 ns)."""
    return int(forward_ad._current_level)


def dispatching(program: Program, traced: Program, name: str, backend: Any) -> Program:
    """``program``, or ``traced`` inside a ``torch.func`` transform, a
    ``torch.compile`` trace of the caller's code or a ``forward_ad`` level (decided
    at each call). In a ``forward_ad`` level torch cannot nest the forward mode of
    ``name``'s program: that is said, naming what works there.

    Raises:
        UnsupportedOperatorError: a forward-mode program inside ``dual_level()``."""

    def run(*args: Any) -> Any:
        if inside_transform():
            try:
                return traced(*args)
            except RuntimeError as err:
                if forward_level() < 0 or "forward mode" not in str(err):
                    raise
                raise UnsupportedOperatorError(
                    f"{backend!r}: {name} runs torch's forward mode, which torch cannot nest inside "
                    f"torch.autograd.forward_ad.dual_level(). Call it outside the dual level, take the outer "
                    f"derivative with torch.func.jvp around the di call instead of forward_ad, or use a "
                    f"reverse-mode operator there (gradient, pullback), which keep x's tangent."
                ) from err
        return program(*args)

    return run


def active_transform() -> str:
    """The innermost active transform, as a user writes it (``"torch.func.vmap"``;
    ``jacrev`` and ``vjp`` are ``grad`` levels, ``jacfwd`` ``jvp`` ones), or
    ``"torch.compile"`` while dynamo traces; ``""`` outside both."""
    return "torch.compile" if _is_compiling() else innermost_transform()


CACHE_INSIDE_TRANSFORMS = (
    "cannot use Cache contexts inside {transform}: f would write values the transform traces into the "
    "buffer, which torch.func cannot do. Pass the buffer as a Constant and build new tensors in f, or call "
    "di outside the transform."
)
"""The refusal of ``Cache`` contexts inside ``torch.func`` transforms (the transforms
table of :class:`TorchAdapter` shows it)."""


def refusing_caches_inside_transforms(program: Program, backend: AutoTorch) -> Program:
    """``program`` (one writing into a ``Cache``), refusing to run inside a
    ``torch.func`` transform with :class:`di.UnsupportedContextError`. Under a
    ``torch.compile`` trace of the caller's code it runs (dynamo breaks the
    graph around its eager autograd)."""

    def refusing(*args: Any) -> Any:
        if _functorch_active():
            message = CACHE_INSIDE_TRANSFORMS.format(transform=innermost_transform() or "a torch.func transform")
            raise UnsupportedContextError(f"{backend!r} {message}")
        return program(*args)

    return refusing


_WRITE = "leaf Variable that requires grad is being used in an in-place operation"
"""torch's refusal of a write into the tensor it differentiates (``x[0] = 0``,
``x += 1``; "a view of a ..." for an indexed write)."""


_CAPTURED = "that would mutate a captured Tensor"
"""torch.func's refusal of a write, inside a transform, into a tensor made outside
it (``x`` under a second derivative's nested ``jvp``, a ``Constant``)."""
_RULE = (
    "x and every Constant are read only (the mutation rule, docs/preparation.md): build a new tensor instead "
    "(x + 1, xp.where(mask, 0.0, x)), or write into a di.Cache passed as scratch space."
)


def write_error(error: BaseException, backend: AbstractBackend, operator: str) -> InvalidInputError | None:
    """The :class:`di.InvalidInputError` for torch's ``error`` when it says ``f``
    wrote into ``x`` (or, for ``torch.func``, a tensor it did not make) in place,
    else ``None``. torch refused the write: nothing was written."""
    text = str(error) if isinstance(error, RuntimeError) else ""
    if _WRITE in text:
        what = "x"
    elif _CAPTURED in text:
        what = "x (or a Constant, or a tensor it closes over)"
    else:
        return None
    return InvalidInputError(
        f"{operator} with {backend!r}: f wrote into {what} in place (x[i] = ..., x += ...), which torch cannot "
        f"differentiate. {_RULE}"
    )


_SETUP_CONTEXT = "it must override the setup_context staticmethod"
"""torch.func's refusal of a ``torch.autograd.Function`` written in the classic
style, ``forward(ctx, x)``, inside any of its transforms."""
_NO_JVP = "You must implement the jvp function for custom autograd.Function"
"""torch's refusal of a ``torch.autograd.Function`` without ``jvp`` in forward mode."""
_NO_VMAP = "but it does not have vmap support"
"""torch.func's refusal of a ``torch.autograd.Function`` without a vmap rule under ``vmap``
("You tried to vmap over Name, but it does not have vmap support ...")."""
_EXTENDING = "https://pytorch.org/docs/stable/notes/extending.func.html"
_UNBATCHED = {
    "jacobian": "or use AutoTorch(mode='reverse'), whose jacobian batches only the Function's backward",
    "hessian": "or compute hvp with one tangent per call",
    "pushforward": "or pass one tangent per call",
    "pullback": "or pass one cotangent per call",
    "hvp": "or pass one tangent per call",
}
"""What computes without batching the Function, per operator."""


def custom_function_error(
    error: BaseException, backend: AbstractBackend, operator: str
) -> UnsupportedOperatorError | None:
    """The :class:`di.UnsupportedOperatorError` for torch's refusal of a
    ``torch.autograd.Function`` in ``f`` that ``operator``'s ``torch.func``
    program cannot run (no ``setup_context``, no ``jvp``, no vmap rule), saying
    what to add to it and what works as it is; ``None`` for any other error.

    Examples:
        >>> import di
        >>> from di.engines.torch.common import custom_function_error
        >>> error = NotImplementedError("You must implement the jvp function for custom autograd.Function to use it")
        >>> message = str(custom_function_error(error, di.AutoTorch(), "pushforward"))
        >>> message.startswith("pushforward with AutoTorch("), "Add a jvp staticmethod" in message
        (True, True)
        >>> custom_function_error(NotImplementedError("my own"), di.AutoTorch(), "pushforward") is None
        True
    """
    if not isinstance(error, RuntimeError):  # (NotImplementedError is one)
        return None
    text = str(error)
    where = f"{operator} with {backend!r}"
    if _SETUP_CONTEXT in text:
        return UnsupportedOperatorError(
            f"{where} runs f inside torch.func transforms, which cannot run a torch.autograd.Function written "
            f"in the classic style, forward(ctx, ...). Write forward without ctx and add a setup_context "
            f"staticmethod (setup_context(ctx, inputs, output) saving what backward needs; see {_EXTENDING}), "
            f"or use gradient or pullback (and their value_* forms), whose eager reverse mode runs it as it is."
        )
    if _NO_JVP in text:
        instead = (
            "or use reverse mode: pullback, or jacobian with AutoTorch(mode='reverse')"
            if operator in ("pushforward", "derivative", "jacobian")
            else f"{operator} differentiates forward over reverse and has no other path"
        )
        return UnsupportedOperatorError(
            f"{where} runs f in forward mode, and a torch.autograd.Function in f has no jvp. Add a jvp "
            f"staticmethod (jvp(ctx, *tangents), from what setup_context saved on ctx; see {_EXTENDING}), "
            f"{instead}."
        )
    if _NO_VMAP in text:
        name = text.split("vmap over ", 1)[1].split(",", 1)[0] if "vmap over " in text else ""
        function = f"torch.autograd.Function {name}" if name else "a torch.autograd.Function in f"
        instead = f", {_UNBATCHED[operator]}" if operator in _UNBATCHED else ""
        return UnsupportedOperatorError(
            f"{where} batches f with torch.func.vmap, and {function} has no vmap rule. Set "
            f"generate_vmap_rule = True on it (or define its vmap staticmethod; see {_EXTENDING}){instead}."
        )
    return None


def version_of(tensor: Any) -> int | None:
    """The version counter of a plain tensor (bumped by every write into its
    memory, through any view: about 60 ns), ``None`` for anything else and for
    an inference tensor, which keeps none."""
    if tensor.__class__ is not torch.Tensor:
        return None
    try:
        return int(tensor._version)
    except RuntimeError:
        return None


def refusing_writes(call: Callable[[], Any], tensors: Sequence[Any], error: Callable[[Any], Exception]) -> Any:
    """``call()``, refusing a write it made into one of ``tensors`` (its version
    counter moved) with ``error(tensor)``: chained to the ``Exception`` the call
    raised after the write, or instead of its result. A ``KeyboardInterrupt`` (a
    ``BaseException`` that is no ``Exception``) passes unchanged, whatever was
    written. For the untraced evaluations of ``f`` a preparation makes; the
    per-call runners (:mod:`.running`) inline the same check.

    Examples:
        >>> import torch
        >>> from di.engines.torch.common import refusing_writes
        >>> t = torch.zeros(2)
        >>> refusing_writes(lambda: t.add_(1), [t], lambda written: ValueError("written"))
        Traceback (most recent call last):
        ...
        ValueError: written
    """
    versions = [version_of(t) for t in tensors]

    def written() -> Any:
        for tensor, version in zip(tensors, versions):
            if version is not None and tensor._version != version:
                return tensor
        return None

    try:
        result = call()
    except Exception as err:
        tensor = written()
        if tensor is not None:
            raise error(tensor) from err
        raise
    tensor = written()
    if tensor is not None:
        raise error(tensor)
    return result


def overwritten_error(
    backend: AbstractBackend, operator: str, x: Any, tensor: Any, *, untraced: bool = False
) -> InvalidInputError:
    """The :class:`di.InvalidInputError` for an ``f`` found, after it ran, to have
    written into ``tensor``, the torch ``x`` it received for the caller's ``x``
    (torch's forward mode, and ``f`` run untraced, let it write). ``untraced``:
    ``f`` was evaluated untraced for ``operator`` (an output's shape at
    preparation, a value); ``operator`` ``""`` where no operator is known (a
    strategy asked for ``f``'s value). It says whether the caller's ``x`` now
    holds the writes: it does where the two share memory.

    Examples:
        >>> import torch, di
        >>> from di.engines.torch.common import overwritten_error
        >>> x = torch.zeros(2)
        >>> message = str(overwritten_error(di.AutoTorch(), "jacobian", x, x, untraced=True))
        >>> message.startswith("jacobian with AutoTorch("), message.split(": ")[0].endswith("(evaluating f untraced)")
        (True, True)
    """
    if x is tensor:
        shared: bool | None = True
    elif isinstance(x, (torch.Tensor, np.ndarray)):
        shared = storage_address(x) == storage_address(tensor) != 0
    else:
        shared = False if isinstance(x, (float, int)) else None  # (another family's memory: unknown)
    if shared:
        fate = "The caller's x already holds what f wrote (it shares memory with the tensor f received)"
        if getattr(x, "ndim", None) == 0 and isinstance(x, np.ndarray):  # (di's own array for a Python float x)
            fate = f"{fate}, unless x is a Python float"
    elif shared is None:
        fate = "The caller's x may already hold what f wrote, where it shares memory with the tensor f received"
    else:
        fate = "The caller's x is unchanged (f received a copy)"
    if not operator:
        where = f"evaluating f untraced with {backend!r}"
    else:
        where = f"{operator} with {backend!r}" + (" (evaluating f untraced)" if untraced else "")
    return InvalidInputError(
        f"{where}: f wrote into x in place (x[i] = ..., x += ...), found after f ran. {fate}. {_RULE}"
    )


_PLAIN_VALUES = frozenset({float, int, bool, str, type(None)})


def requires_grad(value: Any) -> bool:
    """Whether ``value`` (a tensor, a pytree of them such as a dict ``Constant``
    of parameters, or anything else) requires grad."""
    found = getattr(value, "requires_grad", None)  # (isinstance of torch.Tensor costs more)
    if found is not None:
        return found is True
    if value.__class__ in _PLAIN_VALUES or not is_pytree(value):
        return False
    return any(getattr(leaf, "requires_grad", False) is True for leaf in tree_leaves(value))


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """Record ``f`` for autograd whatever the caller's grad mode: ``no_grad`` and
    ``inference_mode`` around a di call never change a derivative (under them
    ``f`` would run unrecorded and its gradient would read as zero)."""
    with torch.inference_mode(False), torch.enable_grad():
        yield


def leaf(tensor: Any) -> Any:
    """A detached alias of ``tensor`` that requires grad: the input autograd
    differentiates with respect to. An inference tensor (made under
    ``inference_mode``) cannot require grad, so it is cloned into a normal one."""
    try:
        return tensor.detach().requires_grad_()
    except RuntimeError:
        if not tensor.is_inference():
            raise
        return tensor.clone().requires_grad_()


def normal_tensors(values: Sequence[Any]) -> tuple[Any, ...]:
    """Context values with inference tensors cloned into normal ones, which
    autograd can save for the backward pass (``Cache`` buffers made under
    ``inference_mode`` cannot be written outside it either way)."""
    return tuple(v.clone() if isinstance(v, torch.Tensor) and v.is_inference() else v for v in values)


def as_dtype(tangent: Any, primal: Any) -> Any:
    """torch.func.jvp can promote the tangent of a 0-d computation with a Python
    float to float64 while the primal stays float32: give the tangent the
    primal's dtype, as eager autograd would."""
    return tangent if tangent.dtype == primal.dtype else tangent.to(primal.dtype)


def like(tangent: Any, reference: Any) -> Any:
    """A tangent of any family as a tensor of ``reference``'s dtype and device. A
    pytree (the cotangent of an ``f`` that returns one) is left as it is: the
    check of ``f``'s output refuses such an ``f`` with the remedy."""
    if (
        tangent.__class__ is torch.Tensor
        and tangent.dtype is reference.dtype
        and tangent.get_device() == reference.get_device()  # an int: cheaper than comparing devices
    ):
        return tangent  # the common case
    family = family_of(tangent)
    if not family and is_pytree(tangent):
        return tangent
    tensor = converter(family, "torch")(tangent) if family else torch.tensor(tangent)
    if tensor.dtype != reference.dtype or tensor.device != reference.device:
        tensor = tensor.to(dtype=reference.dtype, device=reference.device)
    return tensor


def without_overlap(tensor: Any) -> Any:
    """``tensor``, or a contiguous copy of it where its elements share memory (an
    expanded tensor: a stride of 0 along a dimension longer than 1). Forward mode
    (``torch.func.jvp``'s ``make_dual``) refuses such an input; every other engine
    copies it on conversion, and the copy is differentiable like the original.

    Examples:
        >>> import torch
        >>> from di.engines.torch.common import without_overlap
        >>> without_overlap(torch.ones(1).expand(3)).stride(), without_overlap(torch.ones(2, 3).t()).stride()
        ((1,), (1, 3))
    """
    if any(stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape)):
        return tensor.contiguous()
    return tensor


def storage_address(value: Any) -> int:
    """Where the memory of an array ``value`` starts: a tensor's storage (which its
    views share), a NumPy array's data (``torch.from_numpy`` of it starts there);
    0 for anything else, and for memory that cannot be read (a tensor of a
    ``torch.func`` transform, a sparse one).

    Examples:
        >>> import numpy as np, torch
        >>> from di.engines.torch.common import storage_address
        >>> a = np.zeros(3)
        >>> storage_address(torch.from_numpy(a)[1:]) == storage_address(a), storage_address("a")
        (True, 0)
    """
    if isinstance(value, torch.Tensor):
        try:
            return value.untyped_storage().data_ptr()  # type: ignore[no-any-return]
        except (RuntimeError, NotImplementedError):
            return 0
    if isinstance(value, np.ndarray):
        return value.__array_interface__["data"][0]  # type: ignore[no-any-return]
    return 0


def addresses(*groups: Any) -> set[int]:
    """The :func:`storage_address` of every array in ``groups`` (each an array, or
    a sequence of them: a pytree ``x``'s leaves, the context values), 0 left out."""
    found = set()
    for group in groups:
        for value in group if isinstance(group, (list, tuple)) else (group,):
            address = storage_address(value)
            if address:
                found.add(address)
    return found


def unshared(tensor: Any, taken: set[int]) -> Any:
    """``tensor``, or a copy of it where its memory is one of ``taken`` (the
    memory of ``x``, a ``Constant`` or a ``Cache``): a result never shares memory
    with an input, so the caller may write into it, and the next call cannot
    overwrite it. The copy is differentiable like ``tensor`` (``clone``)."""
    address = storage_address(tensor)
    return tensor.clone() if address and address in taken else tensor


def owned_aux(aux: Any, taken: Callable[[], set[int]], detach: bool) -> Any:
    """``aux`` as a call returns it: each tensor detached from the call's graph
    (``detach``; a call that keeps the caller's graph returns differentiable
    ones) and copied where it shares memory with an input (:func:`unshared`;
    ``taken()`` gives the inputs' memory, read once and only for a tensor)."""
    found: list[set[int]] = []

    def own(item: Any) -> Any:
        if not isinstance(item, torch.Tensor):
            return item
        if detach:
            item = item.detach()
        if not found:
            found.append(taken())
        return unshared(item, found[0])

    return torch_pytree.tree_map(own, aux)


def owning(program: Program, lead: int, with_value: bool, has_aux: bool, products_at: int | None = None) -> Program:
    """``program`` (arguments ``x``, ``lead - 1`` tangent arguments, the context
    values) whose value (``with_value``: the first of its results) and ``aux``
    tensors are copied where they share an input's memory (:func:`unshared`):
    ``torch.func`` returns an output that is ``f``'s input, or a view of it, as it
    is. A result ``f`` computed costs a look at its base and its graph; ``aux``
    (already a walk through a pytree) costs a look at its memory. With tangents,
    the products (the result itself, or its element ``products_at``) are copied
    where they share a tangent's memory: the product of a linear ``f`` (the
    identity, a reshape) is its tangent, or a view of it, as ``torch.func`` gives
    it. Inside a ``torch.func`` transform or a ``torch.compile`` trace the
    results are the transform's values, returned as they are."""
    tensor = torch.Tensor

    def taken(args: tuple[Any, ...]) -> set[int]:
        x = args[0]
        return addresses(tree_leaves(x) if is_pytree(x) else x, args[lead:])

    def owned_products(products: tuple[Any, ...], tangents: Sequence[Any]) -> tuple[Any, ...]:
        for p, t in zip(products, tangents):
            if p.__class__ is tensor and (p is t or p._base is not None or t.__class__ is not tensor):
                break  # a product that may be its tangent: compared by memory
        else:
            return products
        memory = addresses(list(tangents))
        return tuple([unshared(p, memory) if p.__class__ is tensor else p for p in products])

    def run(*args: Any) -> Any:
        output = program(*args)
        if _is_compiling() or _functorch_active():
            return output
        result, aux = output if has_aux else (output, None)
        if lead == 2 and args[1]:
            products = result if products_at is None else result[products_at]
            owned = owned_products(products, args[1])
            if owned is not products:
                result = owned if products_at is None else (*result[:products_at], owned)
        if with_value:
            y, values = result[0], args[lead:]
            if y.__class__ is tensor and (
                y._base is not None or y.grad_fn is None or (values and any(y is v for v in values))
            ):
                result = (unshared(y, taken(args)), *result[1:])
        if has_aux:
            return result, owned_aux(aux, lambda: taken(args), False)
        return result

    if getattr(program, "keeps_x_structure", False):
        run.keeps_x_structure = True  # type: ignore[attr-defined]
    return run


def scalar_to_tensor(dtype: Any) -> Callable[[Any], Any]:
    """Python scalars become 0-d tensors, so torch.compile traces instead of
    guarding on (and recompiling for) each value. Floats take ``x``'s dtype so the
    result's dtype is what eager code would give."""

    def to_tensor(value: Any) -> Any:
        return torch.tensor(value, dtype=dtype)

    return to_tensor


def float_leaves_to_tensors(convert: Callable[[Any], Any], dtype: Any) -> Callable[[Any], Any]:
    """``convert``, then the Python float leaves of the pytree it returns as 0-d
    tensors of ``dtype``: dynamo would guard on each float and compile again for
    each new value, as it would for a float context of its own."""

    to_tensor = scalar_to_tensor(dtype)

    def to_tensors(value: Any) -> Any:
        return tree_map(lambda leaf: to_tensor(leaf) if type(leaf) is float else leaf, convert(value))

    return to_tensors


def python_scalar(value: Any) -> Any:
    """A NumPy integer or bool scalar as the Python int or bool of its value (what
    dynamo compiles in as a constant); anything else as it is."""
    return value.item() if isinstance(value, (np.integer, np.bool_)) else value


_FOREIGN = (
    ("Concatenation operation is not implemented for NumPy arrays", "closure"),  # data + x
    ("'numpy.ndarray' and 'Tensor'", "closure"),  # data * x, data @ x, data - x: "unsupported operand type(s)"
    ("Can't call numpy() on Tensor that requires grad", "either"),  # np.sin(x), x * data
    ("Cannot access data pointer of Tensor that doesn't have storage", "either"),  # the same in torch.func
)
"""torch's refusals of NumPy inside ``f``, and what each says ``f`` did."""


class _Rules(OutputRules):
    """torch outputs: tensors; traced from ``x`` as the transform records it."""

    traces = True
    conversion_errors = (RuntimeError, TypeError)  # torch's refusals of NumPy (_FOREIGN)

    def accepts_array(self, y: Any) -> bool:
        return isinstance(y, torch.Tensor) and y.is_floating_point()

    def translate(
        self, error: BaseException, backend: AbstractBackend, operator: str, values: Sequence[Any]
    ) -> BaseException | None:
        # torch refused a write into x, or a torch.autograd.Function its torch.func program cannot run
        return write_error(error, backend, operator) or custom_function_error(error, backend, operator)

    def foreign_cause(self, error: BaseException) -> str:
        text = str(error)
        return next((cause for marker, cause in _FOREIGN if marker in text), "")

    def foreign_output(self, y: Any) -> str:
        # np.asarray(x) on a tensor torch.func traces gives NumPy's array, not a tensor
        return "numpy" if isinstance(y, np.ndarray) else ""


class _ReverseRules(_Rules):
    """Reverse mode (``torch.autograd.grad``, ``torch.func.grad``/``vjp``): an
    output computed from ``x`` requires grad."""

    def is_traced(self, y: Any, x: Any) -> bool:
        first = x[0] if isinstance(x, (list, tuple)) and x else x  # the leaves of a pytree x
        return not (isinstance(first, torch.Tensor) and first.requires_grad) or bool(getattr(y, "requires_grad", False))


class _ForwardRules(_Rules):
    """Forward mode (``torch.func.jvp``, eager): an output computed from ``x``
    carries a tangent."""

    def is_traced(self, y: Any, x: Any) -> bool:
        if _is_compiling():  # dynamo's fake tensors cannot unpack duals (and say nothing of f)
            return True
        try:
            if forward_ad.unpack_dual(x).tangent is None:
                return True  # x is not being differentiated here
            return forward_ad.unpack_dual(y).tangent is not None
        except RuntimeError:  # a level or wrapper it cannot read: do not refuse
            return True


RULES = _Rules()
"""Outputs of programs whose tracing ``di`` cannot inspect (compiled forward mode)."""
REVERSE_RULES = _ReverseRules()
FORWARD_RULES = _ForwardRules()


class TorchBase(Adapter):
    """What the torch adapter's programs ask of it (its selector, compiler and
    argument conversions), apart from the operators it assembles."""

    selector: AutoTorch
    compiler: TorchCompiler

    def compiles_now(self) -> bool:
        """Whether programs prepared now are compiled: on a compiled backend, unless
        the preparation runs inside a ``torch.func`` transform or a ``torch.compile``
        trace (an unprepared call there), where compiled code cannot run; those
        programs run uncompiled, as the transform's own code does."""
        return self.compiled and not inside_transform()

    def torch_context_converters(self, x: Any, contexts: Sequence[Context]) -> list[Callable[[Any], Any]]:
        """Converters of the context values; on compiled backends Python scalars
        that are traced become 0-d tensors (floats in ``x``'s dtype), as do the
        Python float leaves of a list or dict context (only where the prepared
        value had one: nothing is added for array contexts), and static
        NumPy integer and bool scalars Python ints and bools (compiled in as
        constants, as Python ones are, rather than 0-d tensors)."""
        converters = self.input_converters([c.value for c in contexts])
        if self.compiled:
            statics = static_positions(contexts, self.backend)
            sample = tree_leaves(x)[0] if is_pytree(x) else x  # (a pytree's first leaf gives the dtype)
            x_dtype = self.input_converters([sample])[0](
                np.asarray(sample) if isinstance(sample, float) else sample
            ).dtype
            for i, context in enumerate(contexts):
                if i in statics:
                    if isinstance(context.value, (np.integer, np.bool_)):
                        converters[i] = python_scalar
                elif isinstance(context.value, (int, float)):
                    converters[i] = scalar_to_tensor(x_dtype if isinstance(context.value, float) else None)
                elif any(type(leaf) is float for leaf in tree_leaves(context.value)):
                    converters[i] = float_leaves_to_tensors(converters[i], x_dtype)
        return converters

    def counted(self, program: Program, contexts: Sequence[Context], lead: int) -> Program:
        """``program`` (arguments ``x``, then ``lead - 1`` tangent arguments, then the
        context values), counting the static values it meets when compiled: the
        prepared ones from the start (the preparation compiled them), numbered
        among the contexts (tangents come first with ``lead`` 2)."""
        if not self.compiled:
            return program
        statics = static_positions(contexts, self.backend)
        return counting_static_values(
            program,
            tuple(lead - 1 + i for i in statics),
            self.backend,
            prepared=[contexts[i].value for i in statics],
            first_context=lead - 1,
        )
