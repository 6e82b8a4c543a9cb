"""``s`` (shell into an instance): the ssh argv built from the instance record, and a real login with it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from console.inventory import Instance
from console.ui.shell import ShellError, command_line, evidence_line, ssh_argv
from tests.support.sshd import Sshd


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
