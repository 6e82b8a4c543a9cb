"""A hostile ``[[signature]]`` cannot hang a diagnosis: ``check`` refuses patterns that backtrack for ever, and
the agent runs custom patterns under a time budget (a real sshd, a real agent, a real log)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from console.core.controller import FleetController
from console.inventory import Fleet, SignatureSpec
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until
from tests.test_inventory_cli import run_cli

SLOW = r"(a+)+$"  # every split of a run of a's is tried before the line's end fails it: 2^n


def test_check_refuses_patterns_that_backtrack_for_ever_and_keeps_the_others(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    head = "[[instance]]\nname = 'a'\nhost = 'h'\n\n"
    for pattern in (SLOW, r"(\w+\s*)+$", r"(.*a){12}", r"(a|aa)+$"):
        fleet.write_text(head + f"[[signature]]\ncode = 'slow'\nseverity = 'error'\npattern = '{pattern}'\n"
                                "explanation = 'x'\n")
        result = run_cli("check", "--fleet", str(fleet))
        err = result.stderr.strip()
        assert result.returncode == 2 and "\n" not in err and "Traceback" not in err, err
        assert f"{fleet}:8: signature 'slow': pattern {pattern!r} has a repeat inside a repeat" in err
    safe = (r"(\d+\.){3}\d+", r"(\w+\s)+$", r"license (denied|expired)", r".*error.*")
    fleet.write_text(head + "".join(f"[[signature]]\ncode = 'c{i}'\nseverity = 'error'\npattern = '{p}'\n"
                                    "explanation = 'x'\n\n" for i, p in enumerate(safe)))
    result = run_cli("check", "--fleet", str(fleet))
    assert result.returncode == 0, result.stderr


def _pattern_children() -> list[int]:
    """Custom-pattern children still running on this machine (the agent's host)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"job = json.loads" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.timeout(120)
async def test_a_diagnosis_answers_in_bounded_time_with_a_hostile_custom_signature(sshd: Sshd, tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("starting\nFATAL: license denied by server\n" + "a" * 60 + "!\n" + "done\n")
    rows = (SignatureSpec("license_denied", "error", "license denied", "the license was refused"),
            SignatureSpec("slow", "error", SLOW, "a pattern the console would refuse, sent as is"))
    inst = ssh_instance(sshd, logs=(str(log),), signatures=rows)
    controller = FleetController(Fleet([inst], source="fleet.toml"))
    await controller.start()
    try:
        box = controller.state.instances["box1"]
        await until(lambda: box.link_status == "connected" and box.hello, what="the agent connected",
                    detail=lambda: box.link_detail)
        began = time.monotonic()
        result = await controller.diagnose("box1", timeout=60)
        took = time.monotonic() - began
        assert took < 12, f"the diagnosis took {took:.1f} s"  # a budget of 2 s, and the rest of the diagnosis
        assert result["verdict"]["code"] == "license_denied", result["verdict"]  # the lines before the slow one
        step = next(s for s in result["steps"] if s["name"] == "signatures")
        assert any(f"custom signatures stopped after 2 s at {log}:3" in line for line in step["lines"]), step
        assert _pattern_children() == []  # nothing left spinning on the host
        again = await controller.diagnose("box1", timeout=60)  # the agent still answers, as fast
        assert again["verdict"]["code"] == "license_denied"
    finally:
        await controller.stop()
