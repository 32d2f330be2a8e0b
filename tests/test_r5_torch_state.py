"""What AutoTorch lets through and says: an interrupt inside ``f`` propagates
unchanged whatever ``f`` wrote, and a write into ``x`` found at an untraced
evaluation names the operator."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import backend_id

import di

torch = pytest.importorskip("torch")

COMPILED = di.AutoTorch(compile=True, compile_options={"backend": "aot_eager"})
EAGER_AND_COMPILED = [
    pytest.param(di.AutoTorch(), id=backend_id(di.AutoTorch())),
    pytest.param(COMPILED, id="torch-compile"),
]

S = 0.7

# --- an interrupt after a write into x ------------------------------------------------------


class _WritesThenInterrupts:
    """Writes into x (x * 1: the value is unchanged, torch counts the write), then
    raises a KeyboardInterrupt, once armed."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, x: Any) -> Any:
        xp = di.array_namespace(x)
        if self.armed:
            x *= 1.0
            raise KeyboardInterrupt("ctrl-c inside f")
        return xp.sin(x) * x


def _interrupted_call(operator: str, f: Any, backend: Any, x: Any, prep: Any = None) -> None:
    tangents = (torch.ones(2, dtype=torch.float64),)
    args = (x, tangents) if operator in ("pushforward", "pullback") else (x,)
    if prep is None:
        getattr(di, operator)(f, backend, *args)
    else:
        getattr(di, operator)(f, prep, backend, *args)


# (a prepared pullback runs reverse mode, where torch refuses the write before f
# reaches its interrupt; a compiled preparation's warm-up of forward mode is left out)
_INTERRUPTED = [
    pytest.param(backend, operator, prepared, id=f"{name}-{operator}-{'prepared' if prepared else 'unprepared'}")
    for backend, name in ((di.AutoTorch(), backend_id(di.AutoTorch())), (COMPILED, "torch-compile"))
    for operator in ("pushforward", "jacobian", "pullback", "derivative")
    for prepared in (False, True)
    if not (operator == "pullback" and prepared)
    and not (backend is COMPILED and not prepared and operator in ("pushforward", "derivative"))
]


@pytest.mark.parametrize(("backend", "operator", "prepared"), _INTERRUPTED)
def test_an_interrupt_after_a_write_into_x_propagates_unchanged(backend: Any, operator: str, prepared: bool) -> None:
    """A KeyboardInterrupt raised by f after it wrote into x became di's
    InvalidInputError (the check of x's version counter raised in a finally):
    forward mode's prepared programs, and the untraced evaluation a jacobian's or a
    pullback's preparation makes. docs/reliability.md: it propagates unchanged."""
    x = torch.tensor(S if operator == "derivative" else [1.0, 2.0], dtype=torch.float64)
    f = _WritesThenInterrupts()
    prep = None
    if prepared:
        args = (x, (torch.ones(2, dtype=torch.float64),)) if operator in ("pushforward", "pullback") else (x,)
        prep = getattr(di, f"prepare_{operator}")(f, backend, *args)
    f.armed = True
    with pytest.raises(KeyboardInterrupt) as info:
        _interrupted_call(operator, f, backend, x, prep)
    assert type(info.value) is KeyboardInterrupt and info.value.args == ("ctrl-c inside f",)


# --- the operator named for a write found at an untraced evaluation -------------------------


def _writes_into_x(x: Any, *values: Any) -> Any:
    x *= 1.0
    return x * 2.0


@pytest.mark.parametrize("cache", [False, True], ids=["no-cache", "cache"])
@pytest.mark.parametrize("operator", ["jacobian", "pullback", "pushforward", "derivative"])
def test_a_write_found_at_an_untraced_evaluation_names_the_operator(operator: str, cache: bool) -> None:
    """The refusal read 'InvalidInputError: AutoTorch(...), evaluating f untraced,:
    f wrote into x ...', naming no operator: the value program (a pullback's
    output shape, a jacobian's output; with a Cache, every forward-mode operator's)
    did not know which operator was being prepared."""
    if operator in ("pushforward", "derivative") and not cache:
        pytest.skip("without a Cache these run forward mode, whose program finds the write itself")
    x = torch.tensor(S if operator == "derivative" else [1.0, 2.0], dtype=torch.float64)
    contexts = (di.Cache(torch.zeros(x.shape, dtype=torch.float64)),) if cache else ()
    args = (x, (torch.ones(x.shape, dtype=torch.float64),)) if operator in ("pushforward", "pullback") else (x,)
    with pytest.raises(di.InvalidInputError) as info:
        getattr(di, f"prepare_{operator}")(_writes_into_x, di.AutoTorch(), *args, *contexts)
    message = str(info.value)
    assert message.startswith(f"{operator} with AutoTorch(compile=False"), message
    assert "(evaluating f untraced): f wrote into x in place" in message
    assert "already holds what f wrote" in message
