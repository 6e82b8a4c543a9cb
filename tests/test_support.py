"""The tests' own helpers: ``until`` / ``until_sync`` (tests/support/wait.py) and the markers tests/conftest.py
puts on (a test that starts an Sshd is ``sshd``, a Tmux ``tmux``, the app through Pilot ``slow``)."""

from __future__ import annotations

import time

import pytest

from tests.conftest import _needs
from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until, until_sync


async def test_until_returns_the_first_truthy_value_and_says_what_timed_out() -> None:
    calls = []

    def third_time() -> list[int] | None:
        calls.append(1)
        return calls if len(calls) == 3 else None

    assert await until(third_time, 5, "three calls", interval=0.01) == [1, 1, 1]
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0.2 s waiting for the moon\nit was: cheese"):
        await until(lambda: False, 0.2, "the moon", interval=0.05, detail=lambda: "it was: cheese")
    assert 0.2 <= time.monotonic() - t0 < 2


def test_until_sync_checks_at_once_then_at_its_pace() -> None:
    assert until_sync(lambda: "now", 0) == "now"  # checked before any wait, even with no time to wait
    with pytest.raises(AssertionError, match="waiting for condition"):
        until_sync(lambda: 0, 0.1, interval=0.02)


def _starts_sshd(tmp_path):
    return Sshd(tmp_path)


def _calls_a_helper_that_starts_tmux():
    return _helper_with_tmux()


def _helper_with_tmux():
    return Tmux()


class _NamespacedSshd(Sshd):
    pass


async def _drives_the_app(app):
    async with app.run_test():
        pass


# (in a dict: a test that named these functions would itself be marked, called or not)
SAMPLES = {"sshd": _starts_sshd, "tmux": _calls_a_helper_that_starts_tmux, "subclass": _NamespacedSshd,
           "pilot": _drives_the_app, "none": test_until_sync_checks_at_once_then_at_its_pace}


def test_markers_follow_what_a_test_and_its_helpers_start() -> None:
    assert _needs(SAMPLES["sshd"], set()) == {"sshd"}
    assert _needs(SAMPLES["tmux"], set()) == {"tmux"}
    assert _needs(SAMPLES["subclass"], set()) == {"sshd"}
    assert _needs(SAMPLES["pilot"], set()) == {"slow"}
    assert _needs(SAMPLES["none"], set()) == set()


def test_this_test_is_not_marked(request: pytest.FixtureRequest) -> None:
    assert not [m.name for m in request.node.iter_markers() if m.name in ("sshd", "tmux", "slow")]
