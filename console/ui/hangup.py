"""The terminal went away: the TUI ends, as a terminal program does.

When the SSH session to the ops box drops or the tmux pane is killed, the kernel hangs the terminal up: the
foreground processes get SIGHUP and the tty reads as EOF from then on. A TUI that outlives its terminal keeps its
links and remote agents alive for nobody (and Textual's input thread spins on the EOF). So the app quits on
SIGHUP, and also when a once-a-second look at its terminal (``tcgetattr`` fails with EIO after a hang-up) finds
it gone while SIGHUP was blocked or ignored. Quitting stops the controller first (links closed, so the agents
stop); a last-resort timer ends the process if that clean-up itself hangs on the dead terminal.

Reloading the fleet file stays on ``R``, the file watch and SIGUSR1 (console/core/fleet_watch.py); ``serve``, a
daemon without a terminal, keeps SIGHUP = reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import threading
from collections.abc import Callable, Coroutine
from typing import Any

HANGUP_EXIT_CODE = 129  # 128 + SIGHUP, what a shell reports for a process ended by a hang-up
LAST_RESORT_SECONDS = 10.0  # the clean quit has this long before the process ends regardless
CHECK_SECONDS = 1.0


def terminal_gone(fd: int) -> bool:
    """True when ``fd`` was a terminal that has been hung up (EIO); a pipe or a file is never 'gone'."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args) and exc.args[0] == 5  # EIO: hung up (ENOTTY: not a terminal at all)
    except (OSError, ValueError):
        return False
    return False


class HangupWatch:
    """Calls ``quit`` once when the terminal hangs up (SIGHUP, or the tty found dead by ``check``)."""

    def __init__(self, quit_app: Callable[[], Coroutine[Any, Any, None]], fd: int | None = None) -> None:
        self._quit = quit_app
        self._fd = fd if fd is not None else _stdin_fd()
        self._was_tty = self._fd is not None and os.isatty(self._fd)
        self._installed = False
        self.hung_up = False
        self.why = ""

    def install(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self.hang_up, "SIGHUP")
            self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._installed = False

    def check(self) -> None:
        """The once-a-second look: a terminal that reads EIO is gone."""
        if self._was_tty and self._fd is not None and terminal_gone(self._fd):
            self.hang_up("terminal gone")

    def hang_up(self, why: str) -> None:
        if self.hung_up:
            return
        self.hung_up, self.why = True, why
        timer = threading.Timer(LAST_RESORT_SECONDS, os._exit, args=(HANGUP_EXIT_CODE,))
        timer.daemon = True
        timer.start()
        asyncio.get_running_loop().create_task(self._quit(), name="hang-up quit")


def _stdin_fd() -> int | None:
    try:
        return sys.__stdin__.fileno() if sys.__stdin__ is not None else None
    except (OSError, ValueError):
        return None
