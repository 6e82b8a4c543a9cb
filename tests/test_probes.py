"""Built-in probes: each answers {"title", "lines"}; missing tools and permissions give a clear line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.actions import probes
from console.agent.ops import OPS
from console.agent.wire import config as agent_config


def make_config(tmp_path: Path) -> Dict[str, Any]:
    return agent_config._merge(agent_config.DEFAULTS, {"watch_dirs": [str(tmp_path)]})


class FakeAgent:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config


def test_probes_op_lists_the_builtins(tmp_path: Path) -> None:
    data = OPS["probes"](FakeAgent(make_config(tmp_path)), {})
    names = [p["name"] for p in data["probes"]]
    assert names == ["tree", "recent_files", "resources", "dmesg", "nvidia_smi"]
    assert all(p["title"] for p in data["probes"])


@pytest.mark.parametrize("name", ["tree", "recent_files", "resources", "dmesg", "nvidia_smi"])
def test_every_builtin_answers_title_and_lines(tmp_path: Path, name: str) -> None:
    data = OPS["probe"](FakeAgent(make_config(tmp_path)), {"name": name})
    assert set(data) == {"title", "lines"}
    assert isinstance(data["title"], str) and data["title"]
    assert data["lines"] and all(isinstance(line, str) for line in data["lines"])


def test_tree_shows_this_process_with_state(tmp_path: Path) -> None:
    lines = probes.run_probe(make_config(tmp_path), "tree")["lines"]
    mine = [line for line in lines if line.lstrip().startswith("%d " % os.getpid())]
    assert mine, lines[:20]
    assert "pytest" in mine[0] or "python" in mine[0]
    assert " S " in mine[0] or " R " in mine[0]
    assert any(line.startswith("  ") for line in lines)  # indented children


def test_recent_files_newest_first(tmp_path: Path) -> None:
    old, new = tmp_path / "old.log", tmp_path / "new.log"
    old.write_text("x" * 2048)
    new.write_text("y")
    os.utime(str(old), (1, 1000))
    lines = probes.run_probe(make_config(tmp_path), "recent_files")["lines"]
    assert lines[0].endswith(str(new)) and lines[1].endswith(str(old))
    assert "2.0K" in lines[1]


def test_recent_files_empty_dir(tmp_path: Path) -> None:
    lines = probes.run_probe(make_config(tmp_path), "recent_files")["lines"]
    assert lines == ["no files in %s" % tmp_path]


def test_resources_reports_disk_memory_load(tmp_path: Path) -> None:
    lines = probes.run_probe(make_config(tmp_path), "resources")["lines"]
    text = "\n".join(lines)
    assert "disk " in text and "memory:" in text and "load:" in text


def test_nvidia_smi_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probes.run_probe(make_config(tmp_path), "nvidia_smi")["lines"] == ["nvidia-smi not found"]


def test_nvidia_smi_runs_with_argv_and_reports_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver.'\n"
                    "exit 9\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    lines = probes.run_probe(make_config(tmp_path), "nvidia_smi")["lines"]
    assert lines[0].startswith("NVIDIA-SMI has failed")
    assert lines[-1] == "nvidia-smi exited with code 9"


def test_dmesg_not_permitted_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "dmesg"
    fake.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert probes.run_probe(make_config(tmp_path), "dmesg")["lines"] == ["dmesg: not permitted"]


def test_unknown_probe(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown probe 'nope'"):
        OPS["probe"](FakeAgent(make_config(tmp_path)), {"name": "nope"})


def test_resources_disk_percentage_agrees_with_df(tmp_path: Path) -> None:
    """The operator checks the probe against `df`: the same Use% (used / (used + available), rounded up)."""
    df = subprocess.run(["df", "-P", str(tmp_path)], capture_output=True, text=True, check=True)
    expected = df.stdout.splitlines()[-1].split()[4]
    lines = probes.run_probe(make_config(tmp_path), "resources")["lines"]
    line = next(line for line in lines if line.startswith("disk %s:" % tmp_path))
    assert "(%s)" % expected in line, (line, df.stdout)
