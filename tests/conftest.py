"""Shared fixtures: a real sshd on loopback, and instance records pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from console.inventory import BenchmarkSpec, Instance
from tests.fixtures.chains.harness import Harness
from tests.sshd import Sshd


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = Sshd(tmp_path / "sshd")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def chains(tmp_path: Path) -> Iterator[Harness]:
    """Fake benchmark chains (entrypoint.sh -> benchmark.sh -> cuzk-daemon + cuzk-bench); all killed after."""
    harness = Harness(tmp_path)
    try:
        yield harness
    finally:
        harness.cleanup()


def ssh_instance(server: Sshd, name: str = "box1", **extra: object) -> Instance:
    """An instance record that reaches ``server`` with its own keys and known_hosts."""
    fields: dict[str, object] = {
        "name": name,
        "host": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "key": str(server.client_key_path),
        "known_hosts": str(server.known_hosts),
        "watch_dirs": (),
        "benchmark": BenchmarkSpec(),
    }
    fields.update(extra)
    return Instance(**fields)  # type: ignore[arg-type]
