"""One agent per console link, and no pile of pid files on the host: one per console start would grow forever."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from console.agent import pidlock

ROOT = Path(__file__).resolve().parent.parent


def _agent(state: Path, console_id: str, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "console.agent", "--no-stdin", "--state-dir", str(state), "--console-id", console_id,
         "--max-seconds", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )


def _until(check, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_an_agent_replaces_its_links_old_one_and_leaves_no_pid_file(tmp_path: Path) -> None:
    pid_file = tmp_path / "agent-link1.pid"
    old = _agent(tmp_path, "link1", 60)
    new = None
    try:
        _until(lambda: pid_file.exists() and pid_file.read_text().strip() == str(old.pid))
        new = _agent(tmp_path, "link1", 1.5)
        assert old.wait(timeout=20) == 0  # SIGTERM from the new one: it stops as asked
        assert new.wait(timeout=30) == 0
        assert not pid_file.exists()
        assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".pid") == []
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_sweep_removes_only_what_links_and_versions_gone_for_a_day_left(tmp_path: Path) -> None:
    now = time.time()
    old = ("agent-gone1.pid", "agent-gone2.pid", "agent-live.pid", "journal-x.jsonl", "agent-0ld.pyz", "agent-mine.pyz")
    for name in (*old, "agent-recent.pid", "agent-new.pyz"):
        (tmp_path / name).write_text("1234\n")
    for name in old:
        os.utime(tmp_path / name, (now - 3 * 86400, now - 3 * 86400))
    held = os.open(tmp_path / "agent-live.pid", os.O_RDWR)  # an agent that runs (days old file, lock held)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert pidlock.sweep(str(tmp_path), now=now, keep="agent-mine.pyz") == 3
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "agent-live.pid", "agent-mine.pyz", "agent-new.pyz", "agent-recent.pid", "journal-x.jsonl"]


def test_a_take_over_whose_file_was_removed_by_the_leaving_agent_locks_the_file_at_the_path(tmp_path: Path) -> None:
    path = tmp_path / "agent-link2.pid"
    path.write_text("")  # no pid in it: nothing to signal
    leaving = os.open(path, os.O_RDWR)
    fcntl.flock(leaving, fcntl.LOCK_EX)
    got: list[int | None] = []
    waiter = threading.Thread(target=lambda: got.append(pidlock.take_over(str(tmp_path), "link2", grace=20)))
    waiter.start()
    time.sleep(0.3)  # the new agent waits for the lock
    path.unlink()  # the old agent's release(): the file goes while its lock is held ...
    os.close(leaving)  # ... then the lock
    waiter.join(timeout=20)
    try:
        assert got and got[0] is not None
        assert path.read_text().strip() == str(os.getpid())
        assert os.fstat(got[0]).st_ino == path.stat().st_ino
    finally:
        pidlock.release()
    assert not path.exists()
