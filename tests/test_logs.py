"""LogFollower on real files: backlog, appends, \\r progress, partial lines, rotation, truncation, discovery."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from console.agent.sample import logs as logs_mod
from console.agent.sample.logs import LogFollower
from console.agent.wire import loglines
from tests.support.wait import until_sync

FIXTURE = Path("/work/shared/fixtures/seed-warmup-broken-pipe/tmp")
if not FIXTURE.exists():
    FIXTURE = Path(__file__).parent / "fixtures" / "seed-warmup-broken-pipe" / "tmp"


def _cfg(logs=(), watch_dirs=(), **extra):
    cfg = {
        "logs": [str(p) for p in logs],
        "watch_dirs": [str(d) for d in watch_dirs],
        "backlog_lines": 200,
        "max_line_chars": 4096,
        "discover_max_age": 3600.0,
    }
    cfg.update(extra)
    return cfg


def _append(path, data):
    with open(path, "ab") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode())


def _numbered(frames, path=None):
    """{line number: text} for the frames' lines (later frames overwrite earlier numbers)."""
    out = {}
    for f in frames:
        if path is not None and f["path"] != str(path):
            continue
        for i, line in enumerate(f["lines"]):
            out[f["first_line"] + i] = line
    return out


@pytest.mark.skipif(not (FIXTURE / "benchmark-full.log").exists(), reason="fixture not present")
def test_fixture_curl_progress_comes_out_clean(tmp_path):
    log = tmp_path / "benchmark-full.log"
    shutil.copy(FIXTURE / "benchmark-full.log", log)
    follower = LogFollower(_cfg([log]))
    (frame,) = follower.poll()
    assert frame["backlog"] and frame["event"] is None and frame["first_line"] == 1
    assert frame["lines"] == [
        "C1 output not found at /data/32gbench/c1.json",
        "Downloading from https://example-bucket.r2.dev/c1.json ...",
        "#" * 72 + " 100.0%",
        "Running warmup proof...",
        'Error: status: Unavailable, message: "error sending request: broken pipe", details: [], '
        "metadata: MetadataMap { headers: {} }",
        "Caused by:",
        "    0: transport error",
        "    1: Broken pipe (os error 32)",
        "warmup proof failed, aborting benchmark",
    ]
    assert not any("\r" in line for line in frame["lines"])
    # a console that reconnects asks again: same lines, same numbers
    (again,) = follower.backlog(3)
    assert again["first_line"] == 7 and again["lines"][-1] == "warmup proof failed, aborting benchmark"
    _append(log, "next line\n")
    (new,) = follower.poll()
    assert new["first_line"] == 10 and new["lines"] == ["next line"] and not new["backlog"]


def test_appends_come_as_one_batch_with_numbers(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("".join("old %d\n" % i for i in range(1, 301)))
    follower = LogFollower(_cfg([log], backlog_lines=5))
    (frame,) = follower.poll()
    assert frame["lines"] == ["old %d" % i for i in range(296, 301)] and frame["first_line"] == 296
    assert follower.poll() == []
    _append(log, "one\ntwo\r\nthree\n")
    (frame,) = follower.poll()
    assert frame["lines"] == ["one", "two", "three"] and frame["first_line"] == 301
    _append(log, "x" * 5000 + "\n" + "bad \xff\xfe utf8\n".encode("latin-1").decode("latin-1"))
    _append(log, b"raw \xff\xfe bytes\n")
    (frame,) = follower.poll()
    assert len(frame["lines"][0]) == 4096 and frame["lines"][0].endswith("\u2026")
    assert "\ufffd" in frame["lines"][-1]
    assert frame["first_line"] == 304


def test_progress_and_partial_lines(tmp_path, monkeypatch):
    log = tmp_path / "dl.log"
    log.write_text("start\n")
    follower = LogFollower(_cfg([log]))
    follower.poll()
    _append(log, "\r  5.0%\r 10.0%")
    assert follower.poll() == []  # held: no newline yet
    monkeypatch.setattr(loglines, "PARTIAL_AFTER", 0.0)
    (frame,) = follower.poll()
    assert frame["partial"] and frame["lines"] == [" 10.0%"] and frame["first_line"] == 2
    assert follower.poll() == []  # unchanged: not sent again
    _append(log, "\r###### 100.0%\ndone\n")
    (frame,) = follower.poll()
    assert frame["lines"] == ["###### 100.0%", "done"] and frame["first_line"] == 2
    assert "partial" not in frame


def test_partial_waits_two_seconds(tmp_path):
    log = tmp_path / "p.log"
    log.write_text("")
    follower = LogFollower(_cfg([log]))
    follower.poll()
    _append(log, "no newline yet")
    assert follower.poll() == []
    frames = until_sync(follower.poll, 15, "the held partial line sent", interval=0.3)
    assert frames and frames[0]["partial"] and frames[0]["lines"] == ["no newline yet"]


def test_burst_is_capped_with_marker(tmp_path):
    log = tmp_path / "burst.log"
    log.write_text("first\n")
    follower = LogFollower(_cfg([log]))
    follower.poll()
    _append(log, "".join("line %d\n" % i for i in range(2, 2002)))
    (frame,) = follower.poll()
    assert frame["skipped"] == 1500 and frame["lines"][0] == "[... 1500 lines skipped ...]"
    assert len(frame["lines"]) == 501
    numbered = _numbered([frame])
    assert numbered[1502] == "line 1502" and numbered[2001] == "line 2001"


def test_truncation_rotation_missing_created(tmp_path):
    log = tmp_path / "r.log"
    log.write_text("a\nb\n")
    follower = LogFollower(_cfg([log]))
    follower.poll()
    # truncation (copytruncate)
    with open(log, "w") as fh:
        fh.write("c\n")
    (frame,) = follower.poll()
    assert frame["event"] == "truncated" and frame["lines"] == ["c"] and frame["first_line"] == 1
    # rotation: the old file's last line is drained, then the new file from its start
    _append(log, "d\n")
    os.rename(log, tmp_path / "r.log.1")
    _append(tmp_path / "r.log.1", "e\n")
    log.write_text("new 1\n")
    frames = follower.poll()
    assert [f["event"] for f in frames] == [None, "rotated"]
    assert frames[0]["lines"] == ["d", "e"] and frames[0]["first_line"] == 2
    assert frames[1]["lines"] == ["new 1"] and frames[1]["first_line"] == 1
    # missing, then created again
    log.unlink()
    (frame,) = follower.poll()
    assert frame["event"] == "missing" and frame["lines"] == []
    assert follower.poll() == []
    log.write_text("back\n")
    (frame,) = follower.poll()
    assert frame["event"] == "created" and frame["lines"] == ["back"] and frame["first_line"] == 1


def test_waits_for_file_that_does_not_exist_yet(tmp_path):
    log = tmp_path / "later.log"
    follower = LogFollower(_cfg([log]))
    (frame,) = follower.poll()
    assert frame["event"] == "missing"
    assert follower.poll() == []
    assert follower.backlog(10) == []
    log.write_text("hello\n")
    (frame,) = follower.poll()
    assert frame["event"] == "created" and frame["lines"] == ["hello"] and frame["first_line"] == 1


def test_discovery_in_watch_dirs(tmp_path, monkeypatch):
    old = tmp_path / "old.log"
    old.write_text("ancient\n")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    recent = tmp_path / "recent.log"
    recent.write_text("r1\nr2\n")
    (tmp_path / "notes.txt").write_text("not a log\n")
    follower = LogFollower(_cfg(watch_dirs=[tmp_path], discover_max_age=3600.0))
    frames = follower.poll()
    assert [(f["path"], f["backlog"], f["lines"]) for f in frames] == [(str(recent), True, ["r1", "r2"])]
    monkeypatch.setattr(logs_mod, "DISCOVER_EVERY", 0.0)
    follower._next_discover = 0.0
    fresh = tmp_path / "benchmark-full.log"
    fresh.write_text("appeared\n")
    frames = follower.poll()
    assert [(f["path"], f["event"], f["lines"]) for f in frames] == [(str(fresh), "created", ["appeared"])]


def test_large_file_backlog_numbers(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "w") as fh:
        for block in range(100):
            fh.write("".join("row %d\n" % (block * 2000 + i + 1) for i in range(2000)))
    follower = LogFollower(_cfg([log], backlog_lines=50))
    (frame,) = follower.poll()
    assert frame["first_line"] == 199951 and frame["lines"][0] == "row 199951"
    assert frame["lines"][-1] == "row 200000" and len(frame["lines"]) == 50
