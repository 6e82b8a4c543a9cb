"""``s`` (shell into an instance): the ssh argv built from the instance record, and a real login with it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from console.inventory import Instance
from console.ui.shell import ShellError, command_line, evidence_line, ssh_argv
from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until_sync


def test_plain_instance_carries_user_port_key_known_hosts() -> None:
    inst = Instance(name="a", host="ssh5.vast.ai", port=32710, user="root", key="/k/id", known_hosts="/k/kh")
    assert ssh_argv(inst) == [
        "ssh", "-l", "root", "-p", "32710", "-i", "/k/id", "-o", "UserKnownHostsFile=/k/kh",
        "-o", "StrictHostKeyChecking=yes", "-t", "--", "ssh5.vast.ai",
    ]


def test_jump_timeout_keepalive_and_a_command() -> None:
    inst = Instance(name="a", host="10.0.0.5", jump=("me@bastion:2222", "hop2"), connect_timeout=7.4, keepalive=15)
    argv = ssh_argv(inst, command=["echo", "hi there"])
    assert argv[argv.index("-J") + 1] == "me@bastion:2222,hop2"
    assert "ConnectTimeout=7" in argv and "ServerAliveInterval=15" in argv
    assert argv[-4:] == ["--", "10.0.0.5", "echo", "hi there"]
    assert "-t" not in argv


def test_ssh_config_alias_leaves_defaults_to_the_config() -> None:
    inst = Instance(name="a", host="vast-a", ssh_config="vast-a")
    argv = ssh_argv(inst)
    assert "-l" not in argv and "-p" not in argv and argv[-1] == "vast-a"
    argv = ssh_argv(Instance(name="a", host="vast-a", ssh_config="vast-a", user="me", port=2200))
    assert argv[1:5] == ["-l", "me", "-p", "2200"]


def test_paths_with_spaces_percent_and_tilde(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/op")
    inst = Instance(name="a", host="h", key="~/my keys/id%1", known_hosts="/x/known hosts")
    argv = ssh_argv(inst)
    assert argv[argv.index("-i") + 1] == '"/home/op/my keys/id%%1"'
    assert 'UserKnownHostsFile="/x/known hosts"' in argv


@pytest.mark.parametrize(
    "fields",
    [{"host": "-oProxyCommand=touch /tmp/x"}, {"host": "a b"}, {"host": "h", "user": "-x"},
     {"host": "h", "jump": ("-J evil",)}, {"host": "h\n"}, {"host": "h", "key": 'a"b'}],
)
def test_values_ssh_would_misread_are_refused(fields: dict) -> None:
    with pytest.raises(ShellError):
        ssh_argv(Instance(name="a", **fields))


def test_local_instance_is_the_users_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHELL", "/bin/zsh")
    assert ssh_argv(Instance(name="l", host="localhost", transport="local")) == ["/bin/zsh"]


def test_command_line_round_trips_through_a_shell() -> None:
    argv = ssh_argv(Instance(name="a", host="h", key="/k/my key"))
    assert shlex.split(command_line(argv)) == argv


def test_evidence_line() -> None:
    diag = {"findings": [{"evidence": []}, {"evidence": [{"path": "/tmp/b.log", "line": 12, "text": "OOM"}]}]}
    assert evidence_line(diag) == "/tmp/b.log:12: OOM"
    assert evidence_line(None) == ""


def test_the_argv_logs_in_to_a_real_sshd(sshd: Sshd) -> None:
    inst = Instance(name="box", host="127.0.0.1", port=sshd.port, user=sshd.user, key=str(sshd.client_key_path),
                    known_hosts=str(sshd.known_hosts))
    argv = ssh_argv(inst, command=["echo", "hello-from-shell"])
    out = subprocess.run([*argv[:1], "-o", "BatchMode=yes", *argv[1:]], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "hello-from-shell"


def test_an_unknown_host_key_is_refused(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    inst = Instance(name="box", host="127.0.0.1", port=sshd.port, user=sshd.user, key=str(sshd.client_key_path),
                    known_hosts=str(empty))
    argv = ssh_argv(inst, command=["true"])
    out = subprocess.run([*argv[:1], "-o", "BatchMode=yes", *argv[1:]], capture_output=True, text=True, timeout=30)
    assert out.returncode == 255
    assert "verification failed" in out.stderr or "No " in out.stderr
    assert empty.read_text() == ""  # nothing was added


def _tmux() -> Tmux:
    return Tmux(100, 30)


def test_a_failed_shell_keeps_its_reason_on_screen(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f"""\
[[instance]]
name = "box1"
host = "127.0.0.1"
port = {sshd.port}
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{empty}"
""")
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state")}
    term = _tmux()
    try:
        term.start([sys.executable, "-m", "console", "--fleet", str(fleet), "--theme", "dark"], env=env)
        term.wait_for(lambda s: "box1" in s and "Quit" in s, timeout=40, what="the grid")
        term.keys("s")  # ssh refuses the unknown host key, prints why, exits 255; the console repaints
        term.wait_for(lambda s: "box1: ssh failed: Host key verification failed." in s, timeout=30,
                      what="the reason ssh gave, on the console")
        records = [json.loads(x) for x in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
        ended = [r for r in records if r["action"] == "shell" and r["outcome"] == "ended"]
        assert ended and ended[-1]["result"]["reason"].startswith("Host key verification failed")
        term.keys("q")
        term.wait_dead(15)
    finally:
        term.close()


def test_the_demo_gives_a_shell_and_keeps_its_state_to_itself(tmp_path: Path) -> None:
    state, scratch = tmp_path / "state", tmp_path / "scratch"
    scratch.mkdir()
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(state),
           "TMPDIR": str(scratch), "PS1": "$ "}
    term = _tmux()
    try:
        term.start([sys.executable, "-m", "console", "demo", "--instances", "1", "--theme", "dark"], env=env)
        term.wait_for(lambda s: "healthy-01" in s and "Quit" in s, timeout=60, what="the demo's grid")
        demo_dirs = list(scratch.glob("fleet-demo-*"))
        assert len(demo_dirs) == 1
        until_sync(lambda: (demo_dirs[0] / "state" / "history.sqlite3").exists(), 20, "the demo's own history")
        term.keys("s")  # the demo's server grants the PTY: a real interactive shell on the demo instance
        term.wait_for(lambda s: "healthy-01" not in s, timeout=20, what="the console suspended")
        term.keys("tty; echo demo-shell-$((6*7))", "Enter")
        screen = term.wait_for(lambda s: "demo-shell-42" in s.replace("$((6*7))", ""), timeout=20,
                               what="the command's output")
        assert "/dev/pts/" in screen
        term.keys("exit", "Enter")
        term.wait_for(lambda s: "healthy-01" in s and "shell closed (exit 0)" in s, timeout=20,
                      what="back on the grid")
        term.keys("q")
        term.wait_dead(30, "q to quit the demo")
    finally:
        term.close()
    assert not (state / "history.sqlite3").exists() and not (state / "audit.jsonl").exists(), \
        "the demo wrote into the real history or audit"
    assert not list(scratch.glob("fleet-demo-*")), "the demo's directory (its state) outlived it"
