"""Who made a value, and can it lie? The value checks of the same-process unittest harness.

A BigCodeBench suite runs in the candidate's process, so the harness must tell the test's objects from the
candidate's and refuse returned values that can lie to an assertion:

* **who is running**: candidate code is running whenever a frame of candidate code, or of the harness's guarded
  call, is on the stack. Read from the interpreter's own frames, it cannot be reset from Python (a counter could);
* **mocks**: a mock is the test's only if it was built while no candidate code was running; any other mock,
  however built (around ``__init__``, by ``copy``, through library helpers) is the candidate's and is refused;
* **equal to anything**: every object a returned value reaches is probed with a fresh object it cannot know; one
  that says it is equal (``mock.ANY``, a rigged test mock, a candidate class) is refused. Candidate classes that
  override comparison, truth or container dunders are refused before any of their code runs;
* **containers**: every list, tuple, set, deque and mapping, subclasses included, is walked through the base
  type's own iteration (a subclass's ``__iter__`` is never trusted), as is every object's instance ``__dict__``.
"""

from __future__ import annotations

import builtins
import collections
import os
import sys
import types
import unittest.mock

TRUSTED_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(__file__)}
)
SENSITIVE_DUNDERS = frozenset(
    "__eq__ __ne__ __lt__ __le__ __gt__ __ge__ __bool__ __len__ __hash__ __contains__ __iter__ __getitem__ "
    "__getattr__ __getattribute__ __instancecheck__ __subclasscheck__ __array_ufunc__ __array_function__ "
    "__float__ __int__ __index__ __str__ __repr__ __format__".split()
)
PLAIN = (int, float, str, bool, bytes, complex, type(None))
SEQUENCES = (list, tuple, set, frozenset, collections.deque)
NOT_WALKED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)
_getframe = sys._getframe


class Tampered(BaseException):
    """Raised into the test when candidate code changed the judge; BaseException so ``except Exception`` misses it."""


def is_trusted_file(filename: str) -> bool:
    return (
        filename.startswith(TRUSTED_ROOTS)
        or filename in ("<test>", "<harness>")
        or filename.startswith("<frozen")
    )


def is_candidate_code(code: types.CodeType) -> bool:
    return not is_trusted_file(code.co_filename)


def call_guarded(func, args: tuple, kwargs: dict) -> object:
    """Every call from the tests into candidate code goes through here: its frame marks candidate time."""
    return func(*args, **kwargs)


GUARD_CODE = call_guarded.__code__


def candidate_running(skip: int = 2) -> bool:
    """Is candidate code (or a guarded call into it) anywhere on the stack?"""
    frame = _getframe(skip)
    while frame is not None and frame.f_back is not None:  # the outermost frame is the sandbox's boot command
        code = frame.f_code
        if code is GUARD_CODE or is_candidate_code(code):
            return True
        frame = frame.f_back
    return False


def _trusted_class(cls: type) -> bool:
    module = sys.modules.get(getattr(cls, "__module__", None) or "")
    if module is None:
        return False
    if module is builtins:
        return getattr(builtins, cls.__qualname__, None) is cls
    filename = getattr(module, "__file__", None) or ""
    if not filename.startswith(TRUSTED_ROOTS):
        return False
    obj: object = module
    for part in cls.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is cls


HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: classes made by a class statement or type(); C types are static
C_CALLABLES = (
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.BuiltinFunctionType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.MethodWrapperType,
)


def _candidate_member(value: object) -> bool:
    """Does this class attribute run candidate code when the dunder it implements is used?"""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    if isinstance(value, property):
        return any(_candidate_member(f) for f in (value.fget, value.fset, value.fdel) if f is not None)
    if value is None or isinstance(value, C_CALLABLES):
        return False  # ``__hash__ = None``; a C implementation (``object.__eq__``, ``int.__lt__``)
    if isinstance(value, types.FunctionType):
        return is_candidate_code(value.__code__)
    return True  # a callable object or a partial standing in for a dunder: its code is whoever made it


def _generated_for(func: types.FunctionType, klass: type) -> bool:
    """A method ``dataclasses`` generated for a library class: compiled from a string, with the class's own module as
    its globals. (A candidate could compile such a function itself and plant it in a library class — Python 3.11
    raises no audit event for a class attribute write; that residual is in the verifier README.)"""
    module = sys.modules.get(getattr(klass, "__module__", None) or "")
    return (
        func.__code__.co_filename == "<string>" and module is not None and func.__globals__ is module.__dict__
    )


def suspicious_type(cls: type) -> str | None:
    """Name the dunder a candidate-made class overrides, or None when the type is harmless.

    Only candidate code is distrusted: a C type (``itertools.count``, a lock, a builtin method) or a library class
    (matplotlib's ``Axes``, a pandas ``DataFrame``) whose dunders are library functions is the library's, however
    many dunders it overrides; the probe with a fresh object (``equals_anything``) still runs on every value."""
    for klass in cls.__mro__:
        if klass is object or not klass.__flags__ & HEAPTYPE:
            continue
        trusted = _trusted_class(klass)
        for name in SENSITIVE_DUNDERS.intersection(klass.__dict__):
            value = klass.__dict__[name]
            if trusted and (not isinstance(value, types.FunctionType) or _generated_for(value, klass)):
                continue  # a library's own class: its members are the library's (swapping them is refused)
            if _candidate_member(value):
                return f"{klass.__qualname__} overrides {name}"
    return None


# ---- mocks ------------------------------------------------------------------------------------------------------
TEST_MOCKS: dict[int, object] = {}  # id -> the mock itself (held, so an id is never reused by another object)
_mock_init = unittest.mock.NonCallableMock.__init__


def _tracked_mock_init(self, *args, **kwargs) -> None:
    """Root mocks built while no candidate code runs are the test's; nothing else is."""
    _mock_init(self, *args, **kwargs)
    if mock_root(self) is self and not candidate_running():
        TEST_MOCKS[id(self)] = self


def mock_root(mock: object) -> object:
    seen = 0
    while seen < 100:
        state = mock.__dict__  # never truth-test a mock: that calls its (configurable) __bool__
        parent = state.get("_mock_new_parent")
        if parent is None:
            parent = state.get("_mock_parent")
        if parent is None:
            return mock
        mock, seen = parent, seen + 1
    return mock


unittest.mock.NonCallableMock.__init__ = _tracked_mock_init  # installed at import, before any snapshot


# ---- returned values --------------------------------------------------------------------------------------------
class _Stranger:
    """A fresh object nothing can legitimately be equal to (identity equality only)."""

    __slots__ = ()


def equals_anything(obj: object) -> bool:
    try:
        return (obj == _Stranger()) is True
    except Exception:  # a comparison that raises is not a comparison that lies
        return False


def _children(obj: object, cls: type, budget: int) -> list[object]:
    for base in SEQUENCES:  # by type, never ``isinstance``: a proxy's ``__class__`` is its own code
        if issubclass(cls, base):
            return list(base.__iter__(obj))  # type: ignore[attr-defined]
    if issubclass(cls, dict):
        return [*dict.keys(obj), *dict.values(obj)]
    if getattr(getattr(obj, "dtype", None), "kind", None) == "O" and hasattr(obj, "ravel"):
        return list(obj.ravel()[:budget])  # type: ignore[attr-defined]
    if cls.__module__.startswith("pandas") and hasattr(obj, "to_numpy"):
        try:
            return [obj.to_numpy(dtype=object)]  # type: ignore[attr-defined]
        except Exception:  # not every pandas object converts; its own type was already checked
            return []
    if issubclass(cls, NOT_WALKED):
        return []
    try:
        state = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return []
    return list(dict.values(state)) if type(state) is dict else []


def check_value(value: object, budget: int = 200_000) -> None:
    """Walk a returned value and refuse what can lie to an assertion (see the module docstring)."""
    stack = [value]
    seen: set[int] = set()
    while stack and budget > 0:
        budget -= 1
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        cls = type(obj)
        if cls in PLAIN:
            continue
        if issubclass(cls, unittest.mock.NonCallableMock):
            if id(mock_root(obj)) not in TEST_MOCKS:
                raise Tampered("returned a mock object the test did not build")
            if equals_anything(obj):
                raise Tampered("returned a test mock rigged to equal anything")
            continue  # the test's own mock: its attributes are the test's business
        problem = suspicious_type(cls)
        if problem:
            raise Tampered(f"returned an instance of {problem}")
        if equals_anything(obj):
            raise Tampered(f"returned a {cls.__module__}.{cls.__qualname__} that equals anything")
        stack.extend(_children(obj, cls, budget))
