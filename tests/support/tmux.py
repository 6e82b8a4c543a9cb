"""Drive a real terminal program in tmux: start it in a private tmux server, type, read the screen."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Mapping

from tests.support.wait import until_sync


class Tmux:
    """One detached session on a private tmux server (``-L``), killed by ``close()``."""

    def __init__(self, width: int = 80, height: int = 24) -> None:
        if shutil.which("tmux") is None:
            raise RuntimeError("tmux not installed: run `make test` (installs it); `make test-quick` needs none")
        self.socket = f"fleet-test-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = ["tmux", "-L", self.socket, *args]
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=20)

    def start(self, command: list[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> None:
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("TERM", "xterm-256color")
        full_env.pop("TMUX", None)
        subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", "new-session", "-d", "-x", str(self.width),
             "-y", str(self.height), "-s", "main", *command],
            env=full_env, cwd=cwd, check=True, timeout=20, capture_output=True,
        )
        self._tmux("set-option", "-t", "main", "remain-on-exit", "on", check=False)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "main", check=False).stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "main", *keys)

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 30.0, what: str = "screen") -> str:
        """The screen, once ``predicate(screen)`` holds; ``AssertionError`` with the last screen after ``timeout``."""
        seen = [""]

        def shown() -> str | None:
            seen[0] = self.screen()
            return seen[0] if predicate(seen[0]) else None

        return until_sync(shown, timeout, what, interval=0.2, detail=lambda: f"screen was:\n{seen[0]}")

    def wait_dead(self, timeout: float = 15.0, what: str = "the program to exit") -> None:
        """Until the program in the pane has exited (the pane stays, dead: ``remain-on-exit``)."""
        until_sync(self.pane_dead, timeout, what, interval=0.2)

    def pane_dead(self) -> bool:
        out = self._tmux("display-message", "-p", "-t", "main", "#{pane_dead}", check=False).stdout.strip()
        return out in ("1", "")

    def close(self) -> None:
        self._tmux("kill-server", check=False)
