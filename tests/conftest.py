"""Shared fixtures (a real sshd on loopback, the fake benchmark chains) and the markers ``sshd``, ``tmux``, ``slow``.

What tests share besides fixtures is in ``tests/support/``. The markers are put on by
``pytest_collection_modifyitems`` below, so that a new test needs no mark of its own: a test is ``sshd``
(needs the OpenSSH server) when it, one of its fixtures, or a test-suite function they call constructs an
``Sshd``; ``tmux`` when one constructs a ``Tmux``; ``slow`` when it drives the app through Pilot. Other slow
tests carry ``@pytest.mark.slow`` themselves. ``make test-quick`` deselects all three. The look is at the names
the code uses (called or not): in doubt, a test is marked, so the quick run never needs sshd or tmux.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.chains.harness import Harness
from tests.support.sshd import Sshd


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = Sshd(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The console's config and state directories under the test's own tmp_path (never the user's): what a
    console test saves (settings, history, the audit log) stays there. Console test modules use it for every test
    (``pytestmark = pytest.mark.usefixtures("config_dir")``)."""
    path = tmp_path / "config"
    monkeypatch.setenv("FLEET_CONSOLE_CONFIG_DIR", str(path))
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    return path


@pytest.fixture
def chains(tmp_path: Path) -> Iterator[Harness]:
    """Fake benchmark chains (entrypoint.sh -> benchmark.sh -> cuzk-daemon + cuzk-bench); all killed after."""
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


# -- markers ---------------------------------------------------------------------------------------------------
# The names whose use gets a test its mark, when it, one of its fixtures or a test-suite function they call
# names one: Sshd / Tmux start that program; the app driven through Textual's Pilot (``run_test``), with the
# local agents it starts, takes seconds a test (2 to 35 s on 2 cores: ``slow``, out of ``make test-quick``).
NEEDS = {"Sshd": "sshd", "Tmux": "tmux", "run_test": "slow"}


def _names(code: types.CodeType) -> set[str]:
    """Every global, attribute and imported name a function's code uses, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _ours(obj: Any) -> bool:
    """Test-suite code (followed into), not the product's or a library's; tests/support is the helpers."""
    module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    return module.startswith("tests.") and not module.startswith("tests.support.")


def _needs(obj: Any, seen: set[int]) -> set[str]:
    """The marks that ``obj`` (a function or class of the test suite) needs, following what it calls."""
    if id(obj) in seen:
        return set()
    seen.add(id(obj))
    if inspect.isclass(obj):  # a subclass of Sshd, or a class whose methods construct one
        found = {NEEDS[base.__name__] for base in obj.__mro__ if base.__name__ in NEEDS}
        for member in vars(obj).values():
            func = getattr(member, "__func__", member)
            if inspect.isfunction(func):
                found |= _needs(func, seen)
        return found
    func = inspect.unwrap(obj)
    code = getattr(func, "__code__", None)
    if code is None:
        return set()
    names = _names(code)
    found = {NEEDS[n] for n in names & NEEDS.keys()}
    scope = func.__globals__
    for name in names:
        target = scope.get(name)
        if isinstance(target, types.ModuleType):
            targets = [getattr(target, n, None) for n in names] if _ours(target) else []
        else:
            targets = [target]
        for t in targets:
            if (inspect.isfunction(t) or inspect.isclass(t)) and _ours(t):
                found |= _needs(t, seen)
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cache: dict[Any, set[str]] = {}

    def needs(obj: Any) -> set[str]:
        if obj not in cache:
            cache[obj] = _needs(obj, set())
        return cache[obj]

    for item in items:
        function = getattr(item, "function", None)
        if function is None:
            continue
        marks = set(needs(function))
        info = getattr(item, "_fixtureinfo", None)
        for name in getattr(item, "fixturenames", ()):
            for fixturedef in (info.name2fixturedefs.get(name, ()) if info else ()):
                if _ours(fixturedef.func):  # the suite's own fixtures (pytest's and plugins' start nothing of these)
                    marks |= needs(fixturedef.func)
        for mark in sorted(marks):
            item.add_marker(mark)
