"""Secrets given by reference in the fleet file: ``env:NAME`` (an environment variable) or ``file:PATH`` (a file's
first line; relative paths are from the fleet file's folder). Anything else is the value itself.

The fleet's records keep the reference, never the value: ``check``, recordings, history and ``/metrics`` see
what the file says. Only the notifier resolves (``resolve``) when it starts, and registers each value with
``redact`` so that no log line it writes can carry one.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_SECRET_BYTES = 8192
_KNOWN: set[str] = set()


class SecretError(ValueError):
    """A reference that cannot be resolved: the reason is one line naming the reference, never a value."""


def is_reference(value: str) -> bool:
    return value.startswith(("env:", "file:"))


def resolve(value: str, base: Path | None = None) -> str:
    """The secret ``value`` stands for (itself unless ``env:``/``file:``); registered for ``redact``."""
    if value.startswith("env:"):
        name = value[4:]
        found = os.environ.get(name, "")
        if not name or not found.strip():
            raise SecretError(f"{value} is not set in the environment")
        secret = found.strip()
    elif value.startswith("file:"):
        path = Path(value[5:]).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            raise SecretError(f"{value}: cannot read {path}: {exc.strerror or type(exc).__name__}") from None
        lines = data.decode("utf-8", "replace").strip().splitlines()
        if len(data) > MAX_SECRET_BYTES or not lines or not lines[0].strip():
            raise SecretError(f"{value}: {path} must hold the secret on its first line")
        secret = lines[0].strip()
    else:
        secret = value
    if len(secret) >= 4:  # shorter is no secret worth hiding (and would blank out ordinary words)
        _KNOWN.add(secret)
    return secret


def redact(text: str) -> str:
    """``text`` with every resolved secret replaced by ``***``."""
    for secret in _KNOWN:
        if secret in text:
            text = text.replace(secret, "***")
    return text
