"""Line numbers indexed ahead, for an engine that reads them at every operation.

An engine whose eager operations record the Python stack (TensorFlow attaches up to
30 frames, each with its current line, to every eager operation) pays, at each
operation, for finding the line of every frame between its caller and the
operation: ``di``'s dispatcher, runner, program and ``f``'s wrapper among them.
CPython 3.11 finds a frame's line by reading its code's line table from the start
up to the frame's instruction (about 28 ns per byte per eager TensorFlow gradient
at n = 1e3, see ``docs/performance.md``), unless the code object holds an array of
its instructions' lines, which it builds once a trace or profile function has
seen one of its frames start, and keeps.

:func:`index_line_numbers` gives code objects that array without running any of
their code: each one's frame is started under a profile function that raises at
the frame's first event, before its first instruction, so the frame ends there;
the profile function is then gone. The lines Python reports are the same (the
array is made from the same table); what changes is the time to find them, and
the array's memory (two bytes per instruction). :func:`index_di_line_numbers`
does it for every code object of ``di``'s loaded modules, once each, for the
frames of ``di`` that may stand between a caller and an operation.

It is done only where it helps and cannot intrude: on CPython 3.11 (3.10 has no
such array; 3.12 and later look a line up differently), and in a thread with no
trace or profile function of its own (a debugger, coverage, a profiler: a tracer
would see the frames start, and tracing builds the arrays anyway). Elsewhere both
functions do nothing.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["index_di_line_numbers", "index_line_numbers"]

_SUPPORTED = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)
_SUSPENDED = 0x20 | 0x80 | 0x100 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR


class _Indexed(Exception):
    """Raised by the profile function at the first event of the frame being started:
    the frame ends there."""


_STARTING: list[types.CodeType | None] = [None]  # (the code whose frame is being started)
_STARTING_LOCK = threading.Lock()


def _stop_at_start(frame: Any, event: str, arg: Any) -> None:
    # Only the frame being started is stopped: a signal handler or a finalizer running meanwhile
    # runs as it would (its own code indexed on the way)
    if frame.f_code is _STARTING[0]:
        raise _Indexed


def index_line_numbers(codes: Iterable[types.CodeType]) -> int:
    """Give each code object its array of line numbers (see the module), without
    running any of its code.

    Args:
        codes: code objects; the functions nested in them are indexed too. Those of
            generators and coroutines are skipped (their frames start at their first
            resumption, not at the call).

    Returns:
        How many were indexed: 0 where indexing does not apply (not CPython 3.11,
        or this thread has a trace or profile function).

    Examples:
        >>> from di.prep.line_numbers import index_line_numbers
        >>> def shout():
        ...     print("ran")
        >>> index_line_numbers([shout.__code__]) in (0, 1)  # (0 off CPython 3.11)
        True
    """
    if not _applies():
        return 0
    count = 0
    with _STARTING_LOCK:  # (one code being started at a time: _STARTING names it to every thread)
        for code in _with_nested(codes):
            if not code.co_flags & _SUSPENDED and _start_frame(code):
                count += 1
    return count


def _applies() -> bool:
    """Whether indexing applies here: CPython 3.11, and no trace or profile function
    in this thread."""
    return _SUPPORTED and sys.getprofile() is None and sys.gettrace() is None


def _with_nested(codes: Iterable[types.CodeType]) -> Iterator[types.CodeType]:
    """``codes`` and the code objects nested in them, each once."""
    seen: set[int] = set()
    pending = list(codes)
    while pending:
        code = pending.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        yield code
        pending.extend(constant for constant in code.co_consts if isinstance(constant, types.CodeType))


def _start_frame(code: types.CodeType) -> bool:
    """Start a frame of ``code`` under :func:`_stop_at_start`; whether it stopped there.

    Its arguments are ``None`` and its globals and builtins empty: should the frame
    ever run past its start, it fails at its first name, and that failure is caught.
    """
    function = types.FunctionType(
        code, {"__builtins__": {}}, code.co_name, None, tuple(types.CellType() for _ in code.co_freevars)
    )
    positional = [None] * code.co_argcount
    keywords = dict.fromkeys(code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount])
    _STARTING[0] = code
    sys.setprofile(_stop_at_start)
    try:
        function(*positional, **keywords)
    except _Indexed:
        return True
    except Exception:  # (not expected: the frame ran past its start)
        return False
    finally:
        sys.setprofile(None)  # (cleared already when the profile function raised)
        _STARTING[0] = None
    return False


_INDEXED_MODULES: set[str] = set()
_SEEN_MODULE_COUNT = [0]
_LOCK = threading.Lock()


def index_di_line_numbers() -> int:
    """Index the line numbers of every code object of ``di``'s loaded modules not
    indexed yet (:func:`index_line_numbers`): their functions, their classes'
    methods and properties, and the functions nested in them.

    It costs a comparison when no module was loaded since the last call, and a few
    microseconds per code object once (about 4 ms for all of ``di``'s).

    Returns:
        How many code objects were indexed by this call.

    Examples:
        >>> from di.prep.line_numbers import index_di_line_numbers
        >>> index_di_line_numbers() >= 0
        True
    """
    if not _SUPPORTED or len(sys.modules) == _SEEN_MODULE_COUNT[0]:
        return 0
    if not _applies():
        return 0  # (tried again at the next call: the modules are not marked done)
    with _LOCK:
        _SEEN_MODULE_COUNT[0] = len(sys.modules)
        modules = [
            module
            for name, module in list(sys.modules.items())
            if (name == "di" or name.startswith("di.")) and name not in _INDEXED_MODULES and module is not None
        ]
        _INDEXED_MODULES.update(module.__name__ for module in modules)
    return index_line_numbers(_codes_of(modules))


def _codes_of(modules: Iterable[types.ModuleType]) -> Iterator[types.CodeType]:
    """The code objects of the functions and classes defined in ``modules``."""
    for module in modules:
        name = module.__name__
        for value in list(vars(module).values()):
            # (functions and classes only: reading an attribute of anything else, a lazily
            # loaded module say, could import or run code)
            if isinstance(value, types.FunctionType) and value.__module__ == name:
                yield value.__code__
            elif isinstance(value, type) and value.__module__ == name:
                for member in list(vars(value).values()):
                    yield from _member_codes(member)


def _member_codes(member: Any) -> list[types.CodeType]:
    """The code objects of a class's function, static or class method, or property."""
    if isinstance(member, property):
        return [c for part in (member.fget, member.fset, member.fdel) for c in _member_codes(part)]
    if isinstance(member, (staticmethod, classmethod)):
        member = member.__func__
    return [member.__code__] if isinstance(member, types.FunctionType) else []
