"""BigCodeBench-style ``unittest`` suites, run beside the candidate with layered tamper checks.

Unlike stdin or call tests, a unittest suite must share a process with the candidate: tests patch library
functions, pass DataFrames and inspect Axes objects, none of which survive a process boundary. So this harness
cannot keep expected values out of the candidate's reach; it closes the known ways of lying instead:

* program and test form one module, as BigCodeBench runs them, but the test reaches the program's callables only
  through guards; ``builtins`` is watched like every module the tests name (``builtins.isinstance = ...`` during a
  call is caught when the call returns);
* every call from the tests into candidate code is wrapped: on return the harness compares ``builtins``, the
  ``unittest`` classes, every module and class the tests name, ``sys.modules``, signal handlers, timers, trace
  hooks and live threads against a snapshot taken when the call started — any difference is tampering;
* values returned by the candidate may not be instances of candidate-made classes that override comparison,
  truth or container dunders (the ``__eq__`` that always says yes);
* an audit hook refuses trace/profile hooks, new audit hooks, gc object walks, raw memory through ctypes, and
  frame or code-object access made directly by candidate code;
* tests run through the harness's own result object; the report carries a per-run nonce and the supervisor
  accepts exactly one frame on the result pipe, so a candidate writing its own report is caught;
* ``sys.exit``/``os._exit``, crashes and timeouts leave tests unreported, and the host requires every expected
  test to be reported as passed.

What stays out of reach of any in-process check: a candidate that walks the interpreter by means this hook does
not see and rewrites the test's own local variables. This is documented in the verifier README.
"""

from __future__ import annotations

import ast
import builtins
import functools
import gc
import json
import operator
import os
import signal
import sys
import threading
import types
import unittest
import unittest.case
import unittest.loader
import unittest.mock
import unittest.result
import unittest.suite
from collections.abc import Callable

import frames
import provenance
import values
from provenance import (
    GUARD_CODE,
    TEST_MOCKS,
    Tampered,
    call_guarded,
    candidate_running,
    check_value,
    is_candidate_code,
    is_trusted_file,
)

RES_FD = 4
TestCase = unittest.case.TestCase
TestResult = unittest.result.TestResult
TestLoader = unittest.loader.TestLoader
_write = frames.write
_dumps = json.dumps
_getframe = sys._getframe


# Kinds by ``type``, never ``isinstance``, on objects the harness did not make: ``isinstance`` asks an object for
# its ``__class__``, which a lazy proxy (django's ``settings``) answers by loading itself (and raising).
def _is_module(obj: object) -> bool:
    return issubclass(type(obj), types.ModuleType)


def _is_class(obj: object) -> bool:
    return issubclass(type(obj), type)


_enumerate_threads = threading.enumerate

HARNESS_FILE = __file__
JUDGE_FILES = frozenset({__file__, call_guarded.__code__.co_filename})
CODE_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__"})
FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "__code__", "f_back"})
ALWAYS_BLOCKED = frozenset(
    {
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "ctypes.cdata",
        "ctypes.string_at",
        "ctypes.wstring_at",
        "sys._current_frames",
    }
)
DIRECT_BLOCKED = frozenset({"sys._getframe", "code.__new__"})
LIBRARY_LOADING = frozenset({"ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle"})
IMPORTLIB_FILE = "<frozen importlib._bootstrap>"


def _direct_candidate_caller(depth: int = 3) -> bool:
    """True when one of the innermost Python frames under the hook belongs to candidate code."""
    frame = _getframe(2)  # 0: this function, 1: the hook, 2: the code that raised the audited event
    if frame is not None and frame.f_code.co_filename in JUDGE_FILES:
        return False  # the harness itself asking (mock provenance); candidate code cannot run harness code
    for _ in range(depth):
        if frame is None:
            return False
        if is_candidate_code(frame.f_code):
            return True
        frame = frame.f_back
    return False


def _process_memory(path: object) -> bool:
    if not isinstance(path, str | bytes):
        return False
    name = os.fsdecode(path)
    return name.startswith("/proc/") and name.rstrip("/").endswith("/mem")


def _candidate_own(target: object) -> bool:
    """A function the candidate made (or a library made for it, like ``namedtuple``'s ``__new__``): code from no
    trusted file, globals that are no trusted module's. A library's functions, including the methods
    ``dataclasses`` compiles from strings into the library's own module, are not."""
    if type(target) is not types.FunctionType or not is_candidate_code(target.__code__):
        return False
    name = target.__globals__.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    owner = getattr(module, "__file__", None) if module is not None else None
    return not (module is not None and module.__dict__ is target.__globals__ and is_trusted_file(owner or ""))


def _library_importing() -> bool:
    """Is the innermost activity a library being imported (the import machinery is on the stack nearer than any
    candidate frame)? pyparsing sets keyword defaults and ``types.coroutine`` flags generators at import time."""
    frame = _getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == IMPORTLIB_FILE:
            return True
        if is_candidate_code(code) or code is GUARD_CODE:
            return False
        frame = frame.f_back
    return False


def make_audit_hook():
    """The hook keeps its state in a closure: once installed, candidate code has no name to reach or disarm it.

    Who is refused what (the threat model is in the verifier README): raw-memory reads, trace hooks, audit hooks and
    gc walks always; every other ``ctypes`` operation whenever candidate code is on the stack, except loading a
    library or looking up a symbol, which is refused only when candidate code itself asks — libraries that load
    their native parts through ``ctypes`` (numpy at import, threadpoolctl inside scikit-learn's ``fit``) are not
    candidate code, even when the candidate imported or called them; writes of a function's code, defaults or
    globals while candidate code is on the stack, unless the function is the candidate's own (``namedtuple``'s
    generated ``__new__`` included) or a library being imported makes them (pyparsing sets keyword defaults,
    ``types.coroutine`` flags a generator).
    """
    busy = [False]

    def audit(event: str, args: tuple) -> None:
        if busy[0] or event == "builtins.id":
            return
        if event == "object.__getattr__" and (
            args[1] not in FRAME_ATTRS or _getframe(1).f_code.co_filename in JUDGE_FILES
        ):
            return  # the commonest event by far: the judge's own snapshots read every function's ``__code__``
        if event in ALWAYS_BLOCKED:
            raise PermissionError(f"{event} is not allowed while tests run")
        if event == "ctypes.dlsym" and str(args[1]).startswith(("Py", "_Py")):
            raise PermissionError("the Python C API is not reachable through ctypes here")
        if event == "open" and _process_memory(args[0]):
            raise PermissionError("process memory files are not readable while tests run")
        if event.startswith("ctypes.") and event not in LIBRARY_LOADING:
            busy[0] = True  # raw memory through ctypes: refused whenever candidate code is on the stack
            try:
                running = candidate_running()
            finally:
                busy[0] = False
            if running:
                raise PermissionError(f"{event} (ctypes) while candidate code runs is not allowed")
            return
        if event == "object.__setattr__" and args[1] in CODE_ATTRS:
            busy[0] = True
            try:
                refused = not _candidate_own(args[0]) and candidate_running() and not _library_importing()
            finally:
                busy[0] = False
            if refused:
                raise PermissionError(
                    f"object.__setattr__ ({args[1]}) of {getattr(args[0], '__qualname__', 'a function')}"
                    " while candidate code runs is not allowed"
                )
            return
        sensitive = (
            event in LIBRARY_LOADING
            or event in DIRECT_BLOCKED
            or (event == "object.__getattr__" and args[1] in FRAME_ATTRS)
        )
        if event == "compile" and isinstance(args[1], str) and is_trusted_file(args[1]):
            sensitive = True
        if not sensitive:
            return
        busy[0] = True
        try:
            # ``sys._getframe`` on the program's behalf is how ``namedtuple``, ``typing`` and ``enum`` name the
            # module a class is made in: only the candidate's own call is refused (the frame it would get).
            blocked = _direct_candidate_caller(1 if event == "sys._getframe" else 3)
        finally:
            busy[0] = False
        if blocked:
            raise PermissionError(f"{event} from candidate code is not allowed")

    return audit


# The judge's own machinery: any change here is tampering. Elsewhere lazily filled caches are tolerated.
STRICT_LABELS = (
    "builtins",
    "unittest",
    "json",
    "frames",
    "values",
    "provenance",
    __name__,
    "sys.modules",
    "the running test",
    "the test class",
    "the test module",
)
# Of those, where functions are also compared by content (their code object and bytecode): the assertions the
# tests call and the judge itself. Elsewhere a function's code cannot be swapped while candidate code runs (the
# audit hook refuses the write), and reading ``__code__`` is itself an audited event the hook pays for.
CONTENT_LABELS = ("unittest.case", "frames", "values", "provenance", __name__, "the running test", "the test")


class Snapshot:
    """Identity snapshots of the namespaces the tests rely on; ``diff`` re-reads the *same* objects later.

    Keys that appear later are allowed (modules fill lazily-imported attributes on first use; everything the tests
    name was resolved before the snapshot); keys that disappear or point to a different object are tampering.
    """

    def __init__(
        self,
        watched: list[tuple[str, object]],
        extra: list[tuple[str, Callable[[], dict]]],
        watch_mocks: bool = True,
    ) -> None:
        self.parts: list[tuple] = []
        for label, obj in watched:
            self._add(label, functools.partial(_namespace, obj))
        for label, read in extra:
            self._add(label, read)
        self.signals = _signal_state()
        self.trace = (sys.gettrace(), sys.getprofile(), threading._trace_hook, threading._profile_hook)  # type: ignore[attr-defined]
        self.gc_callbacks = list(gc.callbacks)
        self.threads = set(_enumerate_threads())
        # Only tests register mocks, and tests do not run inside a candidate call: growth there is forgery.
        self.test_mocks = frozenset(TEST_MOCKS) if watch_mocks else None

    def _add(self, label: str, read: Callable[[], dict]) -> None:
        mapping = read()  # kept: holding the objects keeps their identities unique until the comparison
        strict = label.startswith(STRICT_LABELS)
        ident = _ident if label.startswith(CONTENT_LABELS) else _held
        idents = {k: ident(v) for k, v in mapping.items()} if strict else {}
        self.parts.append((label, read, mapping, idents, strict, tuple(mapping), list(mapping.values())))

    def diff(self) -> str | None:
        # Identity by ``is``, never ``id()``: ``id`` is an audited event in 3.11, and the audit hook would run for
        # each of the thousands of names every guarded call compares (30 ms a call instead of 5).
        for label, read, before, idents, strict, keys, held in self.parts:
            mapping = read()
            if not strict:
                # The libraries the tests name, by identity only (every guarded call pays for this, so it is the
                # fast path: thousands of names). Code swapped inside a library function is refused by the audit
                # hook; the judge's own namespaces below also compare functions by content.
                if tuple(mapping) == keys and all(map(operator.is_, mapping.values(), held)):
                    continue
                for key, value in before.items():
                    if key in mapping and mapping[key] is value:
                        continue
                    if key in mapping and (value is None or key.startswith("_")):
                        continue  # library caches filled lazily (``_opener``, ``_cache = None`` -> value)
                    return f"{label}.{key} was {'removed' if key not in mapping else 'changed'}"
                continue
            ident = _ident if label.startswith(CONTENT_LABELS) else _held
            for key, then in idents.items():
                if key not in mapping or not _same(ident(mapping[key]), then):
                    return f"{label}.{key} was {'removed' if key not in mapping else 'changed'}"
        if self.test_mocks is not None and frozenset(TEST_MOCKS) != self.test_mocks:
            return "the registry of the test's mocks was changed"
        if _signal_state() != self.signals:
            return "signal handlers or timers were changed"
        if (sys.gettrace(), sys.getprofile(), threading._trace_hook, threading._profile_hook) != self.trace:  # type: ignore[attr-defined]
            return "a trace or profile hook was installed"
        callbacks = list(gc.callbacks)
        if len(callbacks) != len(self.gc_callbacks) or any(
            a is not b for a, b in zip(callbacks, self.gc_callbacks, strict=True)
        ):
            return "gc callbacks were changed"
        return self._lingering_threads()

    def _lingering_threads(self) -> str | None:
        for thread in set(_enumerate_threads()) - self.threads:
            thread.join(0.5)
            if thread.is_alive():
                return "a background thread was left running"
        return None


def _ident(value: object) -> tuple:
    """The object, and for functions their content too: a method rewritten in place (its code object swapped, or
    its code pointer overwritten in memory) keeps its identity but not its code."""
    if type(value) is types.FunctionType:
        code = value.__code__
        return (value, code, code.co_code, value.__defaults__, value.__kwdefaults__)
    return (value,)


def _held(value: object) -> tuple:
    return (value,)


def _same(now: tuple, then: tuple) -> bool:
    if len(now) != len(then) or now[0] is not then[0]:
        return False
    return len(now) == 1 or (
        now[1] is then[1] and now[2] == then[2] and now[3] is then[3] and now[4] is then[4]
    )


def _namespace(obj: object) -> dict:
    return dict(obj.__dict__)  # type: ignore[attr-defined]


_diff = Snapshot.diff


def _signal_state() -> tuple:
    handlers = []
    for sig in signal.valid_signals():
        try:
            handlers.append(signal.getsignal(sig))
        except (OSError, ValueError):
            continue
    return (
        *handlers,
        signal.getitimer(signal.ITIMER_REAL),
        signal.getitimer(signal.ITIMER_VIRTUAL),
        signal.getitimer(signal.ITIMER_PROF),
    )


class Judge:
    """Everything the harness watches, and the guard that wraps candidate callables handed to the tests."""

    def __init__(self, watched_modules: list[types.ModuleType]) -> None:
        self.watched: list[tuple[str, object]] = []
        self.extra: list[tuple[str, Callable[[], dict]]] = []
        self.tampered: str | None = None
        self.current_test: object | None = None
        for module in watched_modules:
            self.watch_module(module)

    def watch_module(self, module: types.ModuleType) -> None:
        self.watched.append((module.__name__, module))
        for name, obj in list(module.__dict__.items()):
            if _is_class(obj) and not obj.__flags__ & (1 << 8):  # skip immutable (C static) types
                self.watched.append((f"{module.__name__}.{name}", obj))
        name = module.__name__
        self.extra.append((f"sys.modules[{name}]", lambda: {name: sys.modules.get(name)}))

    def scope(self) -> tuple[list[tuple[str, object]], list[tuple[str, Callable[[], dict]]]]:
        watched = list(self.watched)
        test = self.current_test
        if test is not None:
            watched.append(("the running test", test))
            watched.append(("the test class", type(test)))
        return watched, self.extra

    def snapshot(self) -> Snapshot:
        return Snapshot(*self.scope())

    def verify(self, before: Snapshot) -> None:
        problem = _diff(before)
        if problem:
            self.tampered = self.tampered or problem
            raise Tampered(problem)

    def guard(self, func: Callable) -> types.FunctionType:
        judge = self

        def guarded(*args: object, **kwargs: object) -> object:
            before = judge.snapshot()
            try:
                result = call_guarded(func, args, kwargs)
            except Tampered:
                raise
            except BaseException:
                judge.verify(before)
                raise
            try:  # before the snapshot check: probing the value may run code that must not change anything either
                check_value(result)
            except Tampered as exc:
                judge.tampered = judge.tampered or str(exc)
                raise
            judge.verify(before)
            return judge.wrap(result)

        guarded.__name__ = getattr(func, "__name__", "task_func")
        guarded.__doc__ = getattr(func, "__doc__", None)
        return guarded  # type: ignore[return-value]

    def wrap(self, value: object) -> object:
        """Functions and generators made of candidate code stay guarded after they are returned."""
        if type(value) is types.FunctionType and is_candidate_code(value.__code__):
            return self.guard(value)
        if type(value) is types.GeneratorType and is_candidate_code(value.gi_code):
            return self._guarded_iter(value)
        return value

    def _guarded_iter(self, gen: types.GeneratorType):
        step = self.guard(gen.__next__)  # type: ignore[arg-type]
        while True:
            try:
                yield step()
            except StopIteration:
                return


class Recorder(TestResult):
    """Our own result object (defined before any candidate code runs): per-test outcome by id."""

    def __init__(self, judge: Judge) -> None:
        super().__init__()
        self.judge = judge
        self.outcomes: dict[str, str] = {}

    def startTest(self, test: unittest.TestCase) -> None:  # unittest's API
        super().startTest(test)
        self.judge.current_test = test
        self.outcomes[_test_id(test)] = "pass"

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        self.judge.current_test = None

    def addFailure(self, test, err) -> None:
        super().addFailure(test, err)
        self.outcomes[_test_id(test)] = "fail: " + _short(err)

    def addError(self, test, err) -> None:
        super().addError(test, err)
        self.outcomes[_test_id(test)] = "error: " + _short(err)

    def addSkip(self, test, reason) -> None:
        super().addSkip(test, reason)
        self.outcomes[_test_id(test)] = f"skip: {reason}"[:300]

    def addExpectedFailure(self, test, err) -> None:
        super().addExpectedFailure(test, err)
        self.outcomes[_test_id(test)] = "expected failure"

    def addUnexpectedSuccess(self, test) -> None:
        super().addUnexpectedSuccess(test)
        self.outcomes[_test_id(test)] = "unexpected success"

    def addSubTest(self, test, subtest, err) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.outcomes[_test_id(test)] = "fail: " + _short(err)


def _test_id(test: object) -> str:
    return f"{type(test).__name__}.{getattr(test, '_testMethodName', '?')}"


def _short(err: tuple) -> str:
    kind, exc, _ = err
    return f"{getattr(kind, '__name__', kind)}: {exc}"[:300]


def defined_classes(source: str) -> set[str]:
    """Names of the classes the test source defines at its top level."""
    try:
        return {node.name for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    except SyntaxError:
        return set()


def imported_modules(source: str) -> list[str]:
    """Top-level module names a piece of source imports (trusted test code or the dataset's code prompt)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def preload(names: list[str]) -> list[types.ModuleType]:
    """Import what the tests use before any candidate code runs, so the snapshot sees the pristine modules."""
    loaded = []
    for name in dict.fromkeys(names):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            try:
                __import__(".".join(parts[:i]))
            except BaseException:  # a missing library is reported by the host's library check
                break
            loaded.append(sys.modules[".".join(parts[:i])])
    return loaded


def attribute_modules(source: str) -> list[types.ModuleType]:
    """Modules the tests reach through names and attributes, e.g. ``pd.testing`` in ``pd.testing.assert_frame_equal``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found: dict[str, types.ModuleType] = {}
    for node in ast.walk(tree):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in aliases:
            continue
        dotted = [*aliases[node.id].split("."), *reversed(chain)]
        obj: object = sys.modules.get(dotted[0])
        # getattr, not sys.modules: lazily-loaded submodules get loaded now, pre-snapshot. Kinds by ``type``:
        # ``isinstance`` asks a lazy proxy (django's ``settings``) for its ``__class__``, which loads it.
        for part in dotted[1:]:
            if _is_module(obj):
                found[obj.__name__] = obj  # type: ignore[attr-defined]
            try:
                obj = getattr(obj, part)
            except Exception:
                break
        if _is_module(obj):
            found[obj.__name__] = obj  # type: ignore[attr-defined]
    return list(found.values())


def run(
    program: str, test: str, extra_preload: list[str], nonce: str, entry_point: str = "task_func"
) -> None:
    """Load the candidate, then the tests, run every test, report once; never returns."""
    wanted = ["unittest", "unittest.mock", *imported_modules(test), *extra_preload]
    modules = preload(wanted)
    modules += attribute_modules(test)
    core = [
        builtins,
        unittest,
        unittest.case,
        unittest.result,
        unittest.loader,
        unittest.suite,
        unittest.mock,
        sys.modules[__name__],
        provenance,
        frames,
        values,
        json,
        json.encoder,
    ]
    judge = Judge(list({id(m): m for m in core + modules}.values()))
    results: dict[str, str] = {}
    reporting = Judge([frames, values, json, json.encoder, provenance, sys.modules[__name__]])
    final = Snapshot(
        *reporting.scope(), watch_mocks=False
    )  # the report's own path; tests add mocks meanwhile
    sys.addaudithook(make_audit_hook())
    try:
        results = _run_armed(program, test, judge, entry_point)
    except Tampered as exc:
        judge.tampered = judge.tampered or str(exc)
    except BaseException as exc:  # reported below; the host turns a broken load into a failed verdict
        results = {"<load>": f"error: {type(exc).__name__}: {exc}"[:300]}
    if not judge.tampered:
        problem = _diff(final)
        judge.tampered = problem and f"after the tests: {problem}"
    report = {"nonce": nonce, "results": results, "tampered": judge.tampered}
    try:
        _write(RES_FD, report)
    finally:
        os._exit(0)


def _guarded_kind(obj: object) -> bool:
    """Every callable the program defines is called through the guard, not only plain functions: a callable
    object or a partial would otherwise run candidate code with no snapshot check and no value check."""
    kind = type(
        obj
    )  # never ``isinstance``: a lazy proxy (django's ``settings``) answers ``__class__`` by loading
    if kind is types.FunctionType:
        return True
    return callable(obj) and not issubclass(kind, type | types.ModuleType | types.BuiltinFunctionType)


def _run_armed(program: str, test: str, judge: Judge, entry_point: str) -> dict[str, str]:
    start = judge.snapshot()
    candidate_ns: dict = {"__name__": "__main__", "__builtins__": builtins}
    sys.modules["__main__"] = types.ModuleType("__main__")
    sys.modules["__main__"].__dict__.update(candidate_ns)
    candidate_ns = sys.modules["__main__"].__dict__
    try:
        exec(compile(program, "<candidate>", "exec"), candidate_ns)
    except Tampered:
        raise
    except BaseException as exc:  # the program failed to load: every test fails
        judge.verify(start)
        return {"<load>": f"error: {type(exc).__name__}: {exc}"[:300]}
    judge.verify(start)
    entry = candidate_ns.get(entry_point)
    if entry is not None and not (type(entry) is types.FunctionType and is_candidate_code(entry.__code__)):
        raise Tampered(
            f"the entry point {entry_point} is a {type(entry).__name__}, not a function of the program"
        )
    # BigCodeBench runs program and test as ONE module (``__main__`` here): the test resolves names and patches
    # through it (``patch(__name__ + '.choice')``, ``patch('builtins.open')`` reaching the program). The test keeps
    # a namespace of its own only so that the program's callables it reaches are the guarded ones.
    test_ns: dict = {"__name__": "__main__", "__builtins__": builtins}
    for name, obj in candidate_ns.items():
        if name.startswith("__"):
            continue
        test_ns[name] = judge.guard(obj) if _guarded_kind(obj) else obj
    given = dict(test_ns)
    exec(compile(test, "<test>", "exec"), test_ns)
    # Names the test's module level adds (its imports above all: a solution may use the ``pd`` only the test
    # imports) are the program's globals too; the program's own definitions are never replaced.
    for name, obj in list(test_ns.items()):
        if not name.startswith("__") and name not in candidate_ns:
            candidate_ns[name] = obj
    judge.extra.append(("the test module", lambda: test_ns))
    own = defined_classes(test)
    cases = [
        obj
        for name, obj in test_ns.items()
        if name in own
        and _is_class(obj)
        and issubclass(obj, TestCase)
        and given.get(name) is not obj  # defined by the test itself, not a class the program handed over
    ]
    recorder = Recorder(judge)
    loader = TestLoader()
    for case in cases:
        loader.loadTestsFromTestCase(case)(recorder)
    return recorder.outcomes
