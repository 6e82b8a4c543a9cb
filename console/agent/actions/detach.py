"""Start a program detached from the agent: its own session, and not the agent's child.

A benchmark the agent restarts must outlive the agent (a console that disconnects, an agent replaced) and must
not show up in the process tree as the console's child. So a short-lived interpreter forks it (the program
then leads its own session and group), reports its pid on a pipe, watches it for ``check_seconds`` (a start
that dies at once reports its exit status) and exits: the program is re-parented to init (or the nearest
subreaper). The wrapper is a constant script; the program's argv is passed as JSON on its stdin (never as shell
text, and not on the wrapper's own command line, where it would look like the benchmark).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

# Run by a fresh interpreter (no threads: fork is safe there). The program leads its own session and group
# (pgid == pid, so a restart stops it by group); the report pipe is closed before it execs; a program that
# cannot be executed exits 127, as a shell's does.
WRAPPER = """
import json, os, sys, time
fd, ticks, argv = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.stdin.read())
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write("%s: %s\\n" % (argv[0], exc.strerror))
    finally:
        os._exit(127)
os.write(fd, b"%d\\n" % pid)
for _ in range(ticks):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        os.write(fd, b"rc %d\\n" % (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)))
        break
    time.sleep(0.1)
"""


def spawn_detached(argv: List[str], cwd: Optional[str], env: Dict[str, str], out_fd: int,
                   check_seconds: float) -> Tuple[int, Optional[int]]:
    """Start ``argv`` detached; ``(pid, exit status or None while it runs)`` after ``check_seconds``.

    OSError when the program cannot be started at all (the wrapper reports exit status 127, as a shell does)."""
    read_end, write_end = os.pipe()
    ticks = max(1, math.ceil(check_seconds / 0.1))
    try:
        # the program's argv goes on stdin, not on the wrapper's command line: for its second of life the
        # wrapper must not look like the benchmark to anything that matches command lines
        wrapper = subprocess.Popen(
            [sys.executable, "-I", "-c", WRAPPER, str(write_end), str(ticks)], cwd=cwd, env=env,
            stdin=subprocess.PIPE, stdout=out_fd, stderr=out_fd, pass_fds=(write_end,), close_fds=True,
        )
    finally:
        os.close(write_end)
    assert wrapper.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        wrapper.stdin.write(json.dumps(list(argv)).encode())
    wrapper.stdin.close()
    report = _read_all(read_end, check_seconds + 10.0)
    try:
        wrapper.wait(timeout=check_seconds + 10.0)
    except subprocess.TimeoutExpired:
        wrapper.kill()
        wrapper.wait()
    lines = report.split()
    if not lines or not lines[0].isdigit():
        raise OSError("the start wrapper reported nothing (exit status %s)" % wrapper.returncode)
    pid = int(lines[0])
    rc = int(lines[2]) if len(lines) >= 3 and lines[1] == "rc" and lines[2].lstrip("-").isdigit() else None
    return pid, rc


def _read_all(fd: int, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    chunks: List[bytes] = []
    try:
        os.set_blocking(fd, True)
        while time.monotonic() < deadline:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")
