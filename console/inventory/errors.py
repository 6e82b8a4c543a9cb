"""One error type for every bad input, and the capped file read every input goes through."""

from __future__ import annotations

from pathlib import Path

# A fleet of 20000 instances is about 2 MB of TOML; past this a file is a mistake (or an attack), and
# refusing it at once beats parsing it for seconds.
MAX_FILE_BYTES = 4 * 1024 * 1024


class ConfigError(Exception):
    """A bad inventory: ``str(err)`` is ``path:line: reason``, always one line."""

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        reason = " ".join(str(reason).split())  # one line, whatever a library's message held
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {reason}")


def read_capped(path: Path, what: str) -> str:
    """The text of ``path``, or a one-line :class:`ConfigError` if it is missing, unreadable or too big."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(path, None, f"cannot read {what}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(path, None, f"cannot read {what}: it is a directory") from None
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        limit = MAX_FILE_BYTES // (1024 * 1024)
        raise ConfigError(path, None, f"{what} is larger than {limit} MiB; refusing to parse it")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(path, line, f"{what} is not UTF-8 text (byte {exc.start})") from None
