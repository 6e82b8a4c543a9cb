"""TERM or KILL to one process the operator picked, checked against pid reuse (op ``signal``).

The console names the process by pid and the start time it saw in a ``procs`` record; between that record
and the request the pid may have been reused, so the process's start time is read again from
``/proc/PID/stat`` (psutil without ``/proc``) and a mismatch is refused. Pid 1, the agent itself and its
ancestors (the SSH session that runs it) are never signalled. Stdlib only; the ops table calls ``send_signal``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Dict, Optional

from ..sample.procfs import boot_time
from ..wire.frames import parse_stat, start_epoch
from ..wire.protocol import SignalResult
from .restart import is_gone, protected_pids

try:  # optional
    import psutil
except Exception:  # ImportError or a broken install
    psutil = None

SIGNALS: Dict[str, int] = {"TERM": int(signal.SIGTERM), "KILL": int(signal.SIGKILL)}
START_TOLERANCE = 1.0  # seconds: boot time read at another moment may differ by a second (it is derived)
WAIT_SECONDS = {"TERM": 1.0, "KILL": 2.0}  # how long to watch for the process to go after the signal


class SignalRefused(ValueError):
    """The signal was not sent; the text says why (one line for the operator)."""


def process_start(pid: int, btime: Optional[float] = None) -> Optional[float]:
    """The start (epoch seconds) of process ``pid`` as the ``procs`` records give it; None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return None
    except OSError:
        data = b""
    stat = parse_stat(data, pid) if data else None
    if stat is not None:
        return start_epoch(boot_time() if btime is None else btime, stat[5])
    if psutil is not None:
        try:
            return round(float(psutil.Process(pid).create_time()), 2)
        except Exception:  # NoSuchProcess, AccessDenied
            return None
    return None


def send_signal(pid: int, name: str, start: Optional[float], wait: Optional[float] = None) -> SignalResult:
    """Send ``name`` ("TERM" | "KILL") to ``pid`` if it is still the process that started at ``start``.

    Refused (``SignalRefused``) for an unknown signal, a protected pid, a process that is gone or whose start
    time differs, and a missing ``start`` (without it pid reuse cannot be ruled out). Returns
    ``{pid, signal, sent, alive_after}`` after watching the process for up to ``wait`` seconds.
    """
    name = str(name).upper()
    if name.startswith("SIG"):
        name = name[3:]
    if name not in SIGNALS:
        raise SignalRefused("unsupported signal %r (TERM or KILL)" % name)
    if pid <= 1 or pid in protected_pids():
        raise SignalRefused("pid %d is protected (pid 1, the agent or its SSH session)" % pid)
    if start is None:
        raise SignalRefused("no start time given for pid %d: cannot rule out a reused pid" % pid)
    now_start = process_start(pid)
    if now_start is None or is_gone(pid):
        raise SignalRefused("pid %d is gone" % pid)
    if abs(now_start - float(start)) > START_TOLERANCE:
        raise SignalRefused("pid %d is another process now (started %.2f, not %.2f): not signalled"
                            % (pid, now_start, float(start)))
    try:
        os.kill(pid, SIGNALS[name])
    except ProcessLookupError:
        raise SignalRefused("pid %d is gone" % pid) from None
    except PermissionError:
        raise SignalRefused("pid %d: permission denied (another user's process)" % pid) from None
    deadline = time.monotonic() + (WAIT_SECONDS[name] if wait is None else wait)
    alive = not is_gone(pid)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = not is_gone(pid)
    return {"pid": pid, "signal": name, "sent": True, "alive_after": alive}
