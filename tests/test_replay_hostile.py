"""Hostile and broken recordings: ``fleet-console replay`` says what is wrong in one line naming the file and the
record, never a traceback; the replay console shows the good part and the error, and no escape sequence of the
file reaches the screen."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from console.monitor.replay import ReplaySource
from console.ui.replay import make_replay_app
from tests.test_inventory_cli import run_cli

T0 = 1_700_000_000.0
INST = {"name": "box1", "host": "10.0.0.1", "port": 22, "user": "root", "tags": ["gpu"], "transport": "ssh",
        "gpus": 1, "source": "fleet.toml:1", "benchmark": {"match": [], "entrypoint": [], "log": None}}
HEADER = {"k": "header", "format": "fleet-console-record", "v": 1, "t": T0, "fleet": "fleet.toml",
          "instances": [INST]}
GPU = {"type": "gpu", "ts": T0 + 1, "state": "ok", "full": True, "devices": [{"index": 0, "util": 50, "name": "H100"}]}
GOOD: list[Any] = [
    {"t": T0 + 0.5, "k": "link", "n": "box1", "s": "connected", "d": ""},
    {"t": T0 + 1, "k": "frame", "n": "box1", "f": GPU},
    {"t": T0 + 2, "k": "tick"},
]


def lines(*records: Any) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def gz(data: bytes) -> bytes:
    return gzip.compress(data)


def bad_tail(record: Any) -> bytes:
    """A good start, then ``record`` as record 5."""
    return gz(lines(HEADER, *GOOD, record))


DEEP = b'{"t": 1, "k": "diag", "n": "box1", "d": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"

# name -> (file bytes, what the one line names, a word of the reason)
HOSTILE: dict[str, tuple[bytes, str, str]] = {
    "empty file": (b"", ":", "empty or cut before its header"),
    "binary garbage": (bytes(range(256)) * 4, ":", "not gzip"),
    "cut inside the header": (gz(lines(HEADER, *GOOD))[:30], ":", "empty or cut before its header"),
    "header a list": (gz(lines([HEADER], *GOOD)), "the header", "not a fleet-console recording"),
    "missing header": (gz(lines(*GOOD)), "the header", "not a fleet-console recording"),
    "header time a string": (gz(lines({**HEADER, "t": "yesterday"})), "the header", "is not a number"),
    "instances not a list": (gz(lines({**HEADER, "instances": {"box1": INST}})), "the header", "not a list"),
    "instance port a string": (gz(lines({**HEADER, "instances": [{**INST, "port": "22"}]})), "the header",
                               "instance: Expected `int`"),
    "escape in an instance name": (gz(lines({**HEADER, "instances": [{**INST, "name": "\x1b]0;owned\x07box"}]})),
                                   "the header", "not one printable line"),
    "record a list": (bad_tail([1, 2]), "record 5", "not an object but list"),
    "record a string": (bad_tail("tick"), "record 5", "not an object but str"),
    "string time": (bad_tail({"t": "later", "k": "tick"}), "record 5", "is not a number"),
    "NaN time": (gz(lines(HEADER, *GOOD) + b'{"t": NaN, "k": "tick"}\n'), "record 5", "is not a number"),
    "unknown kind": (bad_tail({"t": T0 + 3, "k": "exec", "n": "box1"}), "record 5", "unknown record kind"),
    "frame of the wrong shape": (bad_tail({"t": T0 + 3, "k": "frame", "n": "box1",
                                           "f": {**GPU, "devices": "all of them"}}), "record 5", "gpu frame"),
    "frame a string": (bad_tail({"t": T0 + 3, "k": "frame", "n": "box1", "f": "gpu"}), "record 5", "not a JSON"),
    "escape in a record's name": (bad_tail({"t": T0 + 3, "k": "link", "n": "\x1b[2Jbox1", "s": "connected"}),
                                  "record 5", "not one printable line"),
    "diagnosis of the wrong shape": (bad_tail({"t": T0 + 3, "k": "diag", "n": "box1", "d": {"verdict": 5}}),
                                     "record 5", "diagnose result"),
    "added instance of the wrong type": (bad_tail({"t": T0 + 3, "k": "inst", "i": "box2"}), "record 5", "instance"),
    "deep JSON": (gz(lines(HEADER, *GOOD) + DEEP), "record 5", "nested too deep"),
    "not UTF-8": (gz(lines(HEADER, *GOOD) + b'{"t": 1, "k": "\xff\xfe"}\n'), "record 5", "not JSON"),
    "huge line": (gz(lines(HEADER, *GOOD) + b'{"t": 1, "k": "tick", "x": "' + b"a" * (5 << 20) + b'"}\n'),
                  "record 5", "longer than"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_replay_check_names_the_file_and_the_record_in_one_line(tmp_path: Path, name: str) -> None:
    data, where, reason = HOSTILE[name]
    path = tmp_path / "rec.jsonl.gz"
    path.write_bytes(data)
    result = run_cli("replay", "--check", str(path))
    err = result.stderr.strip()
    assert result.returncode == 2, (result.stdout, err)
    assert "\n" not in err and "Traceback" not in err and "\x1b" not in err + result.stdout, err
    assert err.startswith(f"fleet-console: {path}{where}" if where == ":" else f"fleet-console: {path}: {where}: ")
    assert reason in err, err


def test_what_a_recording_may_hold_replays(tmp_path: Path) -> None:
    """Times that go back a little, escape sequences in host text, a file cut mid-stream: replayed, no error."""
    log = {"type": "log", "ts": T0 + 3, "path": "/w/\x1b]52;c;cm0gLXJmIH4=\x07b.log", "lines": ["\x1b[31mred\x1b[0m"],
           "first_line": 1, "backlog": False, "event": None}
    ticks = [{"t": T0 + 4 + i, "k": "tick"} for i in range(500)]
    records = [HEADER, *GOOD, {"t": T0 + 1.5, "k": "link", "n": "box1", "s": "connected", "d": "\x1b[2Jhi"},
               {"t": T0 + 3, "k": "frame", "n": "box1", "f": log}, *ticks]
    path = tmp_path / "rec.jsonl.gz"
    data = gz(lines(*records))
    path.write_bytes(data[: len(data) - 40])  # cut in the ticks
    result = run_cli("replay", "--check", str(path))
    assert result.returncode != 2 and not result.stderr and "transitions; recorded 0" in result.stdout, result.stderr
    source = ReplaySource(path)
    source.run_to_end()
    box = source.state.instances["box1"]
    assert source.error is None and box.link_detail == "hi" and "\x1b" not in "".join(box.logs)


async def test_the_replay_console_shows_the_good_part_and_the_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    log = {"type": "log", "ts": T0 + 1, "path": "/w/b.log", "lines": ["\x1b]0;owned\x07step 1"], "first_line": 1,
           "backlog": False, "event": None}
    path.write_bytes(gz(lines(HEADER, *GOOD, {"t": T0 + 2.5, "k": "frame", "n": "box1", "f": log},
                              {"t": T0 + 3, "k": "frame", "n": "box1", "f": {**GPU, "devices": [{"index": "x"}]}},
                              {"t": T0 + 4, "k": "tick"})))
    app = make_replay_app(ReplaySource(path, speed=64.0))
    async with app.run_test(size=(140, 40)) as pilot:
        src = app.source
        await pilot.pause(0.5)
        for _ in range(40):
            if src.finished:
                break
            await pilot.pause(0.1)
        await pilot.pause(0.3)
        assert src.finished and src.error is not None and f"{path}: record 6: gpu frame" in src.error
        assert "STOPPED AT A BAD RECORD" in app.header_text().plain
        box = src.state.instances["box1"]
        assert box.gpus and box.gpus[0].sample.get("util") == 50  # the good part was replayed
        assert any(src.error in str(n.message) for n in app._notifications)
        screen = app.export_screenshot()
        assert "box1" in screen and "\x1b" not in screen and "owned" not in screen
        await pilot.press("left_curly_bracket")  # seek back: replayed again up to the bad record, no crash
        await pilot.pause(0.3)
        await pilot.press("q")
