"""Which files the agent trusts as logs (issue 36.2): a file it finds in a watch dir must be a regular file, not a
symlink, really inside that dir (``O_NOFOLLOW``); a path the operator named (``logs``, ``[benchmark] log``) may be
a link. Real files and symlinks, the real follower and on-demand reader, and the real agent behind the MCP server
over a real sshd."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from console.agent.sample import logread
from console.agent.sample import logs as logs_mod
from console.agent.sample.logs import LogFollower
from tests.fixtures.chains.harness import Harness
from tests.support.sshd import Sshd
from tests.test_cli_over_sshd import instance_table, write_fleet
from tests.test_mcp import call, call_error, mcp_session

SECRET = "TOP SECRET root:$6$hash"


def planted(tmp_path: Path) -> Dict[str, Path]:
    """A watch dir with a real log, a link out of it (to a secret), a link to a file inside it, a log in a
    subdirectory and a symlinked subdirectory; a named log outside it that is a link."""
    watch, outside = tmp_path / "watch", tmp_path / "outside"
    (watch / "sub").mkdir(parents=True)
    outside.mkdir()
    secret = outside / "shadow"
    secret.write_text(SECRET + "\n")
    (outside / "more.log").write_text(SECRET + " via a linked dir\n")
    (outside / "target.txt").write_text("named through a link\n")
    paths = {"watch": watch, "secret": secret, "real": watch / "real.log", "planted": watch / "planted.log",
             "inside": watch / "inside.log", "deep": watch / "sub" / "deep.log", "linkdir": watch / "linkdir",
             "named": outside / "named.log"}
    paths["real"].write_text("mine\n")
    paths["deep"].write_text("another program's\n")
    paths["planted"].symlink_to(secret)
    paths["inside"].symlink_to(paths["real"])
    paths["linkdir"].symlink_to(outside, target_is_directory=True)
    paths["named"].symlink_to(outside / "target.txt")
    return paths


def config(p: Dict[str, Path], watch: str = "") -> Dict[str, Any]:
    return {"logs": [str(p["named"])], "watch_dirs": [watch or str(p["watch"])], "backlog_lines": 50,
            "max_line_chars": 4096, "discover_max_age": 3600.0}


def followed(frames: List[Dict[str, Any]]) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for frame in frames:
        out.setdefault(frame["path"], []).extend(frame["lines"])
    return out


def test_the_follower_never_follows_a_symlink_planted_in_a_watch_dir(tmp_path: Path) -> None:
    p = planted(tmp_path)
    follower = LogFollower(config(p))
    try:
        got = followed(follower.poll())
    finally:
        follower.close()
    assert got == {str(p["real"]): ["mine"], str(p["named"]): ["named through a link"]}
    assert SECRET not in json.dumps(got)


def test_a_recursive_watch_dir_finds_logs_below_but_never_through_a_symlinked_dir(tmp_path: Path) -> None:
    p = planted(tmp_path)
    follower = LogFollower(config(p, watch=str(p["watch"]) + "/**"))
    try:
        got = followed(follower.poll())
    finally:
        follower.close()
    assert set(got) == {str(p["real"]), str(p["deep"]), str(p["named"])}
    assert SECRET not in json.dumps(got)


def test_a_followed_log_swapped_for_a_symlink_is_missing_not_read(tmp_path: Path, monkeypatch: Any) -> None:
    p = planted(tmp_path)
    follower = LogFollower(config(p))
    try:
        follower.poll()
        p["real"].unlink()
        p["real"].symlink_to(p["secret"])
        monkeypatch.setattr(logs_mod, "DISCOVER_EVERY", 0.0)
        frames = [f for f in follower.poll() if f["path"] == str(p["real"])]
    finally:
        follower.close()
    assert [f.get("event") for f in frames] == ["missing"]
    assert SECRET not in json.dumps(frames)


def test_on_demand_reads_take_named_links_and_refuse_planted_ones(tmp_path: Path) -> None:
    p = planted(tmp_path)
    cfg = config(p)
    assert logread.read_lines(cfg, str(p["named"]), None, 5)["lines"] == [[1, "named through a link"]]
    assert logread.grep(cfg, str(p["real"]), "mine")["hits"] == [[1, "mine"]]
    for name in ("planted", "inside"):  # out of the dir, or to a file inside it: a link nobody named
        with pytest.raises(PermissionError, match="not a log this agent follows"):
            logread.read_lines(cfg, str(p[name]), None, 5)
        with pytest.raises(PermissionError, match="not a log this agent follows"):
            logread.grep(cfg, str(p[name]), "SECRET")
    with pytest.raises(PermissionError, match="not a log this agent follows"):
        logread.read_lines(cfg, str(p["linkdir"] / "more.log"), None, 5)


@pytest.mark.timeout(240)
async def test_mcp_never_shows_or_reads_a_planted_symlink_on_a_real_host(
    sshd: Sshd, chains: Harness, tmp_path: Path
) -> None:
    chains.start("run")
    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    plant = chains.logdir / "planted.log"
    plant.symlink_to(secret)
    os.utime(plant, follow_symlinks=False)
    bench_log = chains.logdir / "benchmark-full.log"
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains, logs=[str(bench_log)]))
    async with mcp_session(tmp_path, fleet, "--timeout", "15") as session:
        deadline = time.monotonic() + 60
        while True:  # the follower's first scan finds setup.log and planted.log together
            detail, _ = await call(session, "instance_detail", name="box1")
            paths = {log["path"] for log in detail.get("logs") or []}
            if str(chains.logdir / "setup.log") in paths or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        assert str(chains.logdir / "setup.log") in paths, detail
        assert str(plant) not in paths
        assert SECRET not in json.dumps(detail)
        refused = await call_error(session, "read_log", name="box1", path=str(plant))
        assert "not a log this instance follows" in refused and SECRET not in refused
        assert (await call(session, "read_log", name="box1", path=str(bench_log)))[0]["lines"]
