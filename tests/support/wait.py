"""Wait until something is true, or fail saying what was awaited: the one polling loop of the tests.

``until`` for async tests (asyncio, or a Textual Pilot: pass ``sleep=pilot.pause`` so the app repaints
between checks), ``until_sync`` for plain ones. Both check at once, then every ``interval`` seconds, return
the predicate's first truthy value, and past ``timeout`` seconds raise ``AssertionError``::

    timed out after 30 s waiting for three live agents
    <detail(), when given: what was seen instead>
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _timed_out(timeout: float, what: str, detail: Callable[[], object] | None) -> AssertionError:
    message = f"timed out after {timeout:g} s waiting for {what}"
    if detail is not None:
        message += f"\n{detail()}"
    return AssertionError(message)


async def until(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
    detail: Callable[[], object] | None = None,
) -> T:
    """Await until ``predicate()`` is truthy and return that value; ``AssertionError`` after ``timeout`` s."""
    pause = sleep or asyncio.sleep
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what, detail)
        await pause(interval)


def until_sync(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    what: str = "condition",
    *,
    interval: float = 0.1,
    detail: Callable[[], object] | None = None,
) -> T:
    """``until`` for code without an event loop: blocks in ``time.sleep`` between checks."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what, detail)
        time.sleep(interval)
