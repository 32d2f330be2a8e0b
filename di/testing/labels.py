"""Short labels for backend selectors (``jax-jit``, ``finitediff-forward``), and back.

An engine's record names the labelled selectors it offers
(:attr:`~di.backends.engine.Engine.labels`); each is built from what every
selector declares, so a selector defined out of tree gets labels by the same
rule as the built-in ones:

* the selector's ``name`` (the name :func:`di.backend` knows it by);
* then, in field order, ``-<option>`` for each boolean option set to ``True``
  whose default is ``False`` (``jax-jit``, ``torch-compile``), and ``-<value>``
  for each text option set to a word other than its text default
  (``finitediff-forward``);
* then every other option that differs from its default, spelled out:
  ``jax(mode='forward')``, ``finitediff(step=0.0001)``.

A selector class without a ``name`` of its own is labelled by its ``repr``.
:func:`parse_backend` reads every label back, and :func:`known_labels` lists the
short ones: the engines' labels, then those the rule gives besides.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import typing
from typing import Any

from di.backends.selectors import AbstractBackend, registered_for, selector_names

__all__ = ["backend_label", "known_labels", "parse_backend"]

_WORD = re.compile(r"[A-Za-z0-9_]+\Z")
_QUOTED = re.compile(r"'([A-Za-z0-9_]+)'")


def _own_name(cls: type) -> str:
    """The name a selector class has itself: its engine's, for the first selector
    class an engine's record names, or the ``name`` it declares (an inherited one
    would read back as the parent class)."""
    record = registered_for(cls)
    if record is not None and record.name and record.selectors[0] is cls:
        return record.name
    name = cls.__dict__.get("name", "")
    return name if isinstance(name, str) else ""


def _fields(cls: type) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(cls) if f.init] if dataclasses.is_dataclass(cls) else []


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _is_flag(field: dataclasses.Field[Any]) -> bool:
    """A boolean option that is off by default: shown as ``-<option>`` when on."""
    return field.default is False


def _is_choice(field: dataclasses.Field[Any]) -> bool:
    """A text option with a text default: shown as ``-<value>`` when changed."""
    return isinstance(field.default, str)


def backend_label(backend: Any) -> str:
    """A short, readable name for a backend selector, used in tables and test ids.

    The rule (the module documentation has it in full): the selector's ``name``,
    then ``-<option>`` for each boolean option turned on and ``-<value>`` for each
    text option changed, then the other changed options in parentheses. Built-in
    selectors get ``jax``, ``jax-jit``, ``torch``, ``torch-compile``,
    ``autograd``, ``finitediff``, ``finitediff-forward``, ``jax(mode='forward')``.
    :func:`parse_backend` reads every label back.

    Args:
        backend: a backend selector (or anything, which gets its ``repr``).

    Returns:
        The label.

    Examples:
        >>> import di
        >>> from di.testing import backend_label
        >>> backend_label(di.AutoJAX(jit=True)), backend_label(di.AutoFiniteDiff(method="forward"))
        ('jax-jit', 'finitediff-forward')
    """
    cls = type(backend)
    name = _own_name(cls)
    if not name or not dataclasses.is_dataclass(backend):
        return repr(backend)
    fields = _fields(cls)
    flags = {f.name for f in fields if _is_flag(f)}
    suffixes: list[str] = []
    options: list[str] = []
    for field in fields:
        value = getattr(backend, field.name)
        if value == _default(field):
            continue
        if _is_flag(field) and value is True:
            suffixes.append(field.name)
        elif _is_choice(field) and isinstance(value, str) and _WORD.match(value) and value not in flags:
            suffixes.append(value)
        else:
            options.append(f"{field.name}={value!r}")
    label = "-".join([name, *suffixes])
    return f"{label}({', '.join(options)})" if options else label


def _named_selectors() -> dict[str, type[AbstractBackend]]:
    """Every selector class with a name of its own, by name and alias (lower case),
    the built-in ones first."""
    return selector_names()


def _choices(cls: type, field: dataclasses.Field[Any]) -> list[str]:
    """The values a text option takes: from a ``Literal[...]`` annotation, or else
    from the selector's own refusal of a value it does not take (its message
    quotes the accepted ones), keeping those it builds with."""
    try:
        hint = typing.get_type_hints(cls).get(field.name)
    except Exception:  # an annotation that does not resolve here
        hint = None
    literal = [arg for arg in typing.get_args(hint) if isinstance(arg, str)]
    if typing.get_origin(hint) is typing.Literal and literal:
        return literal
    try:
        cls(**{field.name: "\0"})
    except Exception as err:
        candidates = _QUOTED.findall(str(err))
    else:
        return []
    accepted = []
    for candidate in dict.fromkeys(candidates):
        try:
            cls(**{field.name: candidate})
        except Exception:
            continue
        accepted.append(candidate)
    return accepted


def known_labels() -> list[str]:
    """The short labels of every named selector: its name, the name with each
    boolean option on, the name with each other value of a text option.

    Returns:
        The labels, built-in selectors first (``["jax", "jax-jit", "torch",
        "torch-compile", "autograd", "finitediff", "finitediff-forward"]``),
        then selectors defined out of tree.

    Examples:
        >>> from di.testing.labels import known_labels
        >>> "jax-jit" in known_labels() and "finitediff-forward" in known_labels()
        True
    """
    labels: list[str] = []
    for cls in dict.fromkeys(_named_selectors().values()):
        name = _own_name(cls)
        record = registered_for(cls)
        if record is not None and record.selectors[0] is cls:
            labels += record.labels
        labels.append(name)
        for field in _fields(cls):
            if _is_flag(field):
                labels.append(f"{name}-{field.name}")
            elif _is_choice(field):
                labels += [f"{name}-{value}" for value in _choices(cls, field) if value != field.default]
    return list(dict.fromkeys(labels))


def _aliases() -> list[str]:
    named = _named_selectors()
    return [f"{alias} ({_own_name(cls)})" for alias, cls in named.items() if alias != _own_name(cls).lower()]


def _unknown(text: str) -> ValueError:
    aliases = _aliases()
    alias_text = f"; aliases: {', '.join(aliases)}" if aliases else ""
    return ValueError(
        f"unknown backend {text!r}; known backends: {', '.join(known_labels())}{alias_text}; "
        f"other options as name(option=value, ...)"
    )


def _split_name(head: str) -> tuple[type[AbstractBackend], list[str]]:
    """The selector class a label's head names (the longest known name it starts
    with, so names may contain dashes) and the words after it."""
    named = _named_selectors()
    lowered = head.lower()
    for key in sorted(named, key=len, reverse=True):
        if lowered == key or lowered.startswith(key + "-"):
            words = head[len(key) + 1 :].split("-") if lowered != key else []
            return named[key], words
    raise _unknown(head)


def _apply_word(cls: type[AbstractBackend], word: str, options: dict[str, Any], text: str) -> None:
    """Set the option a label's ``-word`` stands for: a boolean option of that
    name, else the one text option that takes that value."""
    fields = _fields(cls)
    for field in fields:
        if _is_flag(field) and field.name == word.lower():
            options[field.name] = True
            return
    takers = []
    for field in fields:
        if _is_choice(field) and field.name not in options:
            try:
                cls(**{**options, field.name: word})
            except Exception:
                continue
            takers.append(field.name)
    if len(takers) != 1:
        name = _own_name(cls)
        reason = (
            f"{name} has no boolean option or option value {word!r}"
            if not takers
            else f"{word!r} is a value of several options of {name} ({', '.join(takers)}): spell it out"
        )
        raise ValueError(f"unknown backend {text!r}: {reason}; known backends: {', '.join(known_labels())}")
    options[takers[0]] = word


def parse_backend(text: str) -> AbstractBackend:
    """Build a selector from a label: ``"jax"``, ``"jax-jit"``, ``"torch(compile=True)"``.

    Args:
        text: a label as :func:`backend_label` writes it, or any name (or alias)
            :func:`di.backend` knows, optionally followed by ``-<option>`` words and
            ``(option=value, ...)`` with Python literals as values.

    Returns:
        The backend selector.

    Raises:
        ValueError: an unknown name (the message lists every known label), an
            unknown ``-word``, or a malformed option list.

    Examples:
        >>> from di.testing import parse_backend
        >>> parse_backend("jax(jit=True)") == parse_backend("jax-jit")
        True
        >>> parse_backend("finitediff-forward")
        AutoFiniteDiff(method='forward', step=None)
    """
    text = text.strip()
    head, _, rest = text.partition("(")
    options: dict[str, Any] = {}
    if rest:
        if not rest.endswith(")"):
            raise ValueError(f"malformed backend {text!r}: expected name(option=value, ...)")
        try:
            call = ast.parse(f"f({rest[:-1]})", mode="eval").body
            if not isinstance(call, ast.Call) or call.args:
                raise ValueError("positional options")
            options = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None}
        except (SyntaxError, ValueError) as err:
            raise ValueError(f"malformed backend options in {text!r}: use name(option=value, ...)") from err
    cls, words = _split_name(head.strip())
    for word in words:
        _apply_word(cls, word, options, text)
    try:
        return cls(**options)
    except TypeError as err:
        raise ValueError(f"bad option for backend {head.strip()!r}: {err}") from err
