"""/proc reading for the process sampler: small generated files read whole, the boot time, the pid list.

``PROC`` is read at call time (tests point it elsewhere); a file that cannot be read is None (or empty), never
an error. ``psutil`` stands in where there is no ``/proc`` (not Linux). The sampler's per-process readings, with
files held open between them, are ``procreader.py``'s.
"""

from __future__ import annotations

import os
import time
from typing import List, Optional

from ..wire.frames import Stat, parse_stat, wchan_text

try:  # optional: the fallback without /proc
    import psutil
except Exception:  # ImportError or a broken install
    psutil = None

PROC = "/proc"


def read_bytes(path: str, size: int = 4096) -> Optional[bytes]:
    """The first ``size`` bytes of a (small, generated) file; None when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_all(path: str, size: int = 1 << 22) -> Optional[bytes]:
    """Up to ``size`` bytes of a generated file that the kernel hands out a page per read (``/proc/net/tcp``:
    one ``read`` returns about 4 KB, the first ~26 sockets); None when unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    parts: list[bytes] = []
    got = 0
    try:
        while got < size:
            chunk = os.read(fd, min(1 << 16, size - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(parts)


def boot_time() -> float:
    """When this host booted (epoch seconds, to 0.01 s): now minus ``/proc/uptime``.

    ``/proc/stat``'s ``btime`` is whole seconds (truncated), which put a process's start up to a second before
    it began: before a diagnosis that never saw it (a verdict read just before a restart then kept counting).
    ``btime`` is the answer where ``/proc/uptime`` disagrees with it by more than that second (an uptime
    virtualised for a container, as LXCFS does, while process start ticks count from the host's boot)."""
    btime: Optional[float] = None
    for line in (read_bytes(PROC + "/stat", 1 << 16) or b"").splitlines():
        if line.startswith(b"btime "):
            btime = float(line.split()[1])
            break
    uptime = read_bytes(PROC + "/uptime", 128)
    if uptime:
        try:
            precise = time.time() - float(uptime.split()[0])
        except (IndexError, ValueError):
            precise = None
        if precise is not None and (btime is None or -0.05 <= precise - btime < 1.05):
            return round(precise, 2)
    if btime is not None:
        return btime
    if psutil is not None:
        return float(psutil.boot_time())
    return 0.0


def read_stat(pid: int) -> Optional[Stat]:
    """(comm, state, ppid, flags, cpu_ticks, start_ticks, rss_bytes, pid) from /proc/PID/stat."""
    data = read_bytes("%s/%d/stat" % (PROC, pid))
    return parse_stat(data, pid) if data else None


def thread_count(data: bytes) -> int:
    """num_threads (field 20) of a /proc/PID/stat; 0 when unreadable."""
    try:
        return int(data[data.rfind(b")") + 2 :].split()[17])
    except (IndexError, ValueError):
        return 0


def task_signature() -> Optional[bytes]:
    """``nr_threads last_pid`` from /proc/loadavg; None when unreadable.

    Unchanged between two readings means no task was created in this pid namespace (a new pid would
    change last_pid) and, then, none was reaped either (nr_threads would drop): the set of processes is
    the same, so ``/proc`` need not be listed again.  Tasks created in another namespace while ours
    exit could cancel out in nr_threads; the periodic listing and the failed reads of the dead cover it.
    """
    data = read_bytes(PROC + "/loadavg", 128)
    if not data:
        return None
    parts = data.split()
    if len(parts) < 5 or b"/" not in parts[3]:
        return None
    return parts[3].partition(b"/")[2] + b" " + parts[4]


def read_wchan(pid: int) -> Optional[str]:
    """The kernel function a sleeping process waits in; None when unknown ("0", empty, unreadable)."""
    return wchan_text(read_bytes("%s/%d/wchan" % (PROC, pid), 256))


def read_cmdline(pid: int) -> List[str]:
    """A process's argv from /proc/PID/cmdline; [] when unreadable (a kernel thread, a zombie, gone)."""
    data = read_bytes("%s/%d/cmdline" % (PROC, pid), 1 << 16) or b""
    parts = data.rstrip(b"\0").split(b"\0") if data else []
    return [p.decode("utf-8", "replace") for p in parts]


def list_pids() -> List[int]:
    """Every pid in /proc (through psutil where there is no /proc)."""
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return [int(p) for p in psutil.pids()] if psutil is not None else []
