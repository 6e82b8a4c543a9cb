"""Issue 15, what the host can do to the console: a planted upload directory, secrets in argv, bad frames.

Every test goes through a real OpenSSH sshd on loopback; a host's hostile behaviour is a fake ``python3``
(``tests/hostile.py``) or files planted in the login's home (``$HOME`` set per sshd session).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from console.core.state import FleetState
from console.inventory import BenchmarkSpec
from console.link import SshLink
from console.link.bundle import agent_bundle
from tests.hostile import fake_python
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

FAST = {"heartbeat_interval": 0.5, "interval": 0.5}
NOBODY = 65534


def home_sshd(tmp_path: Path) -> tuple[Sshd, Path]:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    server = Sshd(tmp_path / "sshd", env={"HOME": str(home)})
    server.start()
    return server, home


async def run_link(inst: object, until: object, what: str, timeout: float = 40.0) -> Recorder:
    rec = Recorder()
    link = SshLink(inst, rec.on_frame, rec.on_status)  # type: ignore[arg-type]
    link.backoff.base, link.backoff.cap = 0.2, 1.0
    link.start()
    try:
        await rec.wait_for(lambda: until(rec), timeout=timeout, what=what)  # type: ignore[operator]
    finally:
        await link.stop()
    return rec


def failure(rec: Recorder) -> str:
    """The detail of the last agent_failed status."""
    return next(d for _, s, d in reversed(rec.statuses) if s == "agent_failed")


# -- 2: the upload directory ----------------------------------------------------------------------------------
async def test_a_symlinked_upload_dir_into_another_users_dir_is_refused(tmp_path: Path) -> None:
    server, home = home_sshd(tmp_path)
    try:
        other = tmp_path / "other-user"
        other.mkdir()
        os.chown(other, NOBODY, NOBODY)
        (home / ".cache").mkdir(mode=0o700)
        (home / ".cache" / "fleet-console").symlink_to(other)
        rec = await run_link(ssh_instance(server, agent_extra=FAST),
                             lambda r: r.status_of("box1")[0] == "agent_failed", "a refusal")
        assert "refusing" in failure(rec) and "symlink" in failure(rec), failure(rec)
        assert not rec.of_type("hello"), "no agent may run from a directory another user can write"
        assert list(other.iterdir()) == [], "nothing written through the link"

        (home / ".cache" / "fleet-console").unlink()
        theirs = home / ".cache" / "fleet-console"
        theirs.mkdir(mode=0o777)
        os.chown(theirs, NOBODY, NOBODY)
        rec = await run_link(ssh_instance(server, agent_extra=FAST),
                             lambda r: r.status_of("box1")[0] == "agent_failed", "a refusal")
        assert f"owned by uid {NOBODY}" in failure(rec), failure(rec)
        assert list(theirs.iterdir()) == []
    finally:
        server.stop()


async def test_the_upload_dir_is_0700_and_a_swapped_agent_is_never_run(tmp_path: Path) -> None:
    server, home = home_sshd(tmp_path)
    try:
        rec = await run_link(ssh_instance(server, agent_extra=FAST), lambda r: r.of_type("heartbeat"), "heartbeat")
        updir = home / ".cache" / "fleet-console"
        assert updir.stat().st_mode & 0o777 == 0o700
        bundle = agent_bundle()
        uploaded = updir / bundle.remote_name
        assert uploaded.read_bytes() == bundle.data
        assert not [p for p in updir.iterdir() if p.name.endswith(".tmp")]

        # someone replaced the zipapp (same name): the start checks its hash, refuses it, and uploads again
        marker = tmp_path / "pwned"
        payload = f"open({str(marker)!r}, 'w').write('x')\n"
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("__main__.py", payload)
            zf.writestr("fleet_agent/__init__.py", "")
            zf.writestr("fleet_agent/main.py", "def main(argv):\n    " + payload)
        uploaded.write_bytes(buf.getvalue())
        rec = await run_link(ssh_instance(server, agent_extra=FAST), lambda r: r.of_type("heartbeat"),
                             "heartbeat after re-upload")
        assert not marker.exists(), "the swapped zipapp ran"
        assert any("upload needed" in d for _, s, d in rec.statuses if s == "agent_failed")
        assert uploaded.read_bytes() == bundle.data
    finally:
        server.stop()


# -- 4: secrets in argv ---------------------------------------------------------------------------------------
async def test_the_agent_config_is_not_in_its_command_line(sshd: Sshd) -> None:
    secret = "hf_s3cr3t_token_value_42"
    inst = ssh_instance(sshd, agent_extra=FAST, benchmark=BenchmarkSpec(env=(("HF_TOKEN", secret),)))
    assert secret in json.dumps(inst.agent_config())
    rec = Recorder()
    link = SshLink(inst, rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("heartbeat"), what="heartbeat")
        pid = rec.of_type("hello")[0]["pid"]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        decoded = []
        for arg in argv:
            try:
                decoded.append(base64.b64decode(arg, validate=True))
            except (binascii.Error, ValueError):
                pass
        assert not any(secret.encode() in a for a in argv + decoded), argv
        assert b"--config" not in argv
    finally:
        await link.stop()


def test_fleet_console_agent_config_still_works_by_hand() -> None:
    from console.agent.wire import config as agent_config

    encoded = agent_config.encode({"interval": 0.2, "heartbeat_interval": 0.2, "watch_dirs": []})
    out = subprocess.run([sys.executable, "-m", "console", "agent", "--config", encoded, "--max-seconds", "1"],
                         capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    frames = [json.loads(x) for x in out.stdout.splitlines()]
    assert out.returncode == 0 and frames[0]["type"] == "hello"
    assert any(f["type"] == "heartbeat" for f in frames)


# -- 6: frames that do not fit the contract -------------------------------------------------------------------
BAD_FRAMES = r'''
hello()
bad = [
    {"type": "gpu", "ts": 1, "state": "ok", "full": True, "devices": [{"index": 0, "util": 55.5}]},
    {"type": "gpu", "ts": 1, "state": "ok", "full": True, "devices": [{"index": "0", "name": ["x"]}]},
    {"type": "procs", "ts": 1, "full": True, "procs": [{"pid": "1", "name": 5}]},
    {"type": "procs", "ts": 1, "full": True, "procs": "everything"},
    {"type": "log", "ts": 1, "path": "/tmp/x.log", "lines": [1, None, {"a": 1}], "first_line": 1,
     "backlog": False, "event": None},
    {"type": "log", "ts": 1, "path": ["/tmp"], "lines": "abc", "first_line": "1", "backlog": 0, "event": 3},
    {"type": "error", "ts": 1, "message": {"[link=evil]": 1}},
    {"type": "heartbeat", "ts": "soon", "seq": "x"},
    {"type": "nonsense", "ts": 1},
    [1, 2, 3],
    "\"just a string\"",
    "{not json",
]
for frame in bad:
    send(frame)
seq = 0
def answer():
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "diagnose":
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": "not a dict"})
threading.Thread(target=answer, daemon=True).start()
while True:
    seq += 1
    send({"type": "heartbeat", "ts": time.time(), "seq": seq, "samples": seq, "sent": 0})
    send({"type": "gpu", "ts": time.time(), "state": "ok", "full": True, "simulated": False, "driver": None,
          "devices": [{"index": 0, "util": 40, "name": "GPU"}]})
    time.sleep(0.3)
'''


async def test_bad_frames_are_dropped_with_one_error_and_the_link_lives(sshd: Sshd, tmp_path: Path) -> None:
    python = fake_python(tmp_path, BAD_FRAMES)
    inst = ssh_instance(sshd, python=python, agent_extra=FAST)
    state = FleetState()
    state.add_instance(inst)
    rec = Recorder()

    def on_frame(name: str, frame: dict) -> None:  # type: ignore[type-arg]
        rec.on_frame(name, frame)
        state.apply_frame(name, frame)

    def on_status(name: str, status: str, detail: str) -> None:
        rec.on_status(name, status, detail)
        state.set_link_status(name, status, detail)

    link = SshLink(inst, on_frame, on_status)
    link.start()
    try:
        await rec.wait_for(lambda: len(rec.of_type("heartbeat")) >= 4, what="heartbeats after the bad frames")
        answer = None
        with pytest.raises(Exception) as err:
            answer = await link.request("diagnose", timeout=20)
        assert "bad answer to diagnose" in str(err.value), answer
        state.tick()
        box = state.get("box1")
        assert box is not None
        assert [s for _, s, _ in rec.statuses] == ["connecting", "connected"], "the session never broke"
        errors = [m for _, m in box.errors]
        assert len(errors) == 1 and errors[0].startswith("bad frame dropped: gpu frame"), errors
        assert box.gpus[0].util == 40 and box.procs == {} and "/tmp/x.log" not in box.logs
    finally:
        await link.stop()
