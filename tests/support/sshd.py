"""A real OpenSSH ``sshd`` on 127.0.0.1 for tests: its own host key, authorized_keys, config and port."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import asyncssh

from console.inventory import BenchmarkSpec, Instance
from tests.support.wait import until_sync


def find_sshd() -> str | None:
    candidates = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
    return shutil.which("sshd") or next((p for p in candidates if os.path.exists(p)), None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _setenv_lines(env: dict[str, str]) -> list[str]:
    """One ``SetEnv "NAME=value" ...`` line (sshd keeps only the first SetEnv line it reads).

    sshd_config quoting has no escapes, so values holding quotes or newlines are refused.
    """
    words = []
    for name, value in env.items():
        if not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"bad environment variable name: {name!r}")
        if any(c in value for c in '"\n\r'):
            raise ValueError(f"{name}: a value for sshd_config SetEnv cannot hold quotes or newlines")
        words.append(f'"{name}={value}"')
    return ["SetEnv " + " ".join(words)] if words else []


def _banner_lines(banner: str | None) -> list[str]:
    """A ``ForceCommand`` that prints ``banner`` on stdout (and a line on stderr) before every command, as a
    ``~/.bashrc`` with an ``echo`` (a welcome text, conda's activation) does in the shell sshd starts."""
    if banner is None:
        return []
    if any(c in banner for c in "'\"\\\n$`"):
        raise ValueError("a login banner for the test sshd is plain text")
    return [f"ForceCommand echo '{banner}'; echo '(base) activated' >&2; eval \"$SSH_ORIGINAL_COMMAND\""]


# A login shell's init (root's ~/.bashrc running `pyenv init`) can wait up to 60 s on a lock that a killed
# session left behind: every remote command then stalls. Sessions of these sshds wait at most ~1 s for it.
HOST_SHELL_ENV = {"PYENV_REHASH_TIMEOUT": "0"}


def full_home(home: Path, size_kb: int | None = None) -> tuple[list[str], dict[str, str]]:
    """A ``launcher`` and ``env`` for an sshd whose sessions see ``home`` as their HOME on a full filesystem: a
    ``size_kb`` tmpfs, mounted in a mount namespace of the sshd's own and filled (``~/fill``) before it starts.
    By default twice the agent's zipapp: room for it once ``~/fill`` is gone (a fixed 256 KB stopped holding it
    when the zipapp grew past that)."""
    if size_kb is None:
        from console.link.bundle import agent_bundle

        size_kb = 2 * len(agent_bundle().data) // 1024 + 64
    script = 'mount -t tmpfs -o size="$1"k tmpfs "$2" && (dd if=/dev/zero of="$2/fill" bs=1k 2>/dev/null; true) ' \
             '&& shift 2 && exec "$@"'
    home.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(size_kb), str(home)], \
        {"HOME": str(home)}


class Sshd:
    """One sshd: ``start()``, ``stop()`` (kills it and every session it forked), ``restart()``.

    ``env`` is set in every session the server starts (``SetEnv`` in sshd_config, OpenSSH >= 8.7), after
    sshd's own defaults, so a ``PATH`` or ``LD_LIBRARY_PATH`` given here is what remote commands see: this
    is how tests put a fake ``libnvidia-ml.so.1`` or fake binaries in front of an agent started over SSH.
    """

    def __init__(self, workdir: Path, env: dict[str, str] | None = None, login_banner: str | None = None,
                 launcher: list[str] | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.user = getpass.getuser()
        self.host_key = asyncssh.generate_private_key("ssh-ed25519")
        self.client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.client_key_path = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"
        self.host_key.write_private_key(str(self.host_key_path))
        self.client_key.write_private_key(str(self.client_key_path))
        for p in (self.host_key_path, self.client_key_path):
            p.chmod(0o600)
        (self.dir / "authorized_keys").write_bytes(self.client_key.export_public_key())
        self.write_known_hosts(self.host_key)
        self.config = self.dir / "sshd_config"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {self.host_key_path}",
                    f"PidFile {self.dir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "PermitRootLogin yes",
                    "UsePAM no",
                    "StrictModes no",
                    "LogLevel ERROR",
                    "MaxStartups 200",
                    "MaxSessions 50",
                    *_setenv_lines({**HOST_SHELL_ENV, **(env or {})}),
                    *_banner_lines(login_banner),
                ]
            )
            + "\n"
        )
        self.launcher = launcher or []  # runs sshd (e.g. in a mount namespace of its own: ``full_home``)
        self.proc: subprocess.Popen[bytes] | None = None

    def authorize(self, public_key: bytes) -> None:
        """Let one more key in (an OpenSSH public key line, e.g. a ``.pub`` file's bytes)."""
        with (self.dir / "authorized_keys").open("ab") as fh:
            fh.write(public_key.strip() + b"\n")

    def deauthorize_all(self) -> None:
        """Let no key in: every login is refused (an sshd whose authorized_keys lacks the client's key)."""
        (self.dir / "authorized_keys").write_bytes(b"")

    def known_hosts_line(self, key: asyncssh.SSHKey | None = None) -> str:
        return f"[127.0.0.1]:{self.port} {(key or self.host_key).export_public_key().decode().strip()}\n"

    def write_known_hosts(self, key: asyncssh.SSHKey) -> None:
        line = f"[127.0.0.1]:{self.port} {key.export_public_key().decode().strip()}\n"
        self.known_hosts.write_text(line)

    def start(self) -> None:
        sshd = find_sshd()
        if sshd is None:
            raise RuntimeError("sshd not installed: run `make test` (installs openssh-server); test-quick needs none")
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.proc = subprocess.Popen(
            [*self.launcher, sshd, "-D", "-e", "-f", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),  # noqa: SIM115 (closed by the child's exit)
            start_new_session=True,
        )
        self.wait_listening()

    def wait_listening(self, timeout: float = 15.0) -> None:
        """Until the started server accepts connections on its port; ``RuntimeError`` at once if it exited."""
        proc = self.proc
        assert proc is not None

        def listening() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.dir / 'sshd.log').read_text()[-500:]}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        until_sync(listening, timeout, f"sshd to listen on 127.0.0.1:{self.port}", interval=0.05)

    def stop(self) -> None:
        """Kill sshd and all the sessions it forked (as a host going down would)."""
        if self.proc is None:
            return
        for pid in self.session_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.proc = None

    def session_pids(self) -> list[int]:
        """sshd's forked children (per-connection processes), found through /proc."""
        assert self.proc is not None
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, []):
                found.append(child)
                todo.append(child)
        return found


def ssh_instance(server: Sshd, name: str = "box1", **extra: object) -> Instance:
    """An instance record that reaches ``server`` with its own keys and known_hosts."""
    fields: dict[str, object] = {
        "name": name,
        "host": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "key": str(server.client_key_path),
        "known_hosts": str(server.known_hosts),
        "watch_dirs": (),
        "benchmark": BenchmarkSpec(),
    }
    fields.update(extra)
    return Instance(**fields)  # type: ignore[arg-type]


class SshAgent:
    """A real ``ssh-agent`` on its own socket; keys go in with the real ``ssh-add``.

    ``env`` is what a shell that ran ``eval $(ssh-agent)`` would have (``SSH_AUTH_SOCK``).
    """

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.sock = self.dir / "agent.sock"
        self.proc = subprocess.Popen(
            ["ssh-agent", "-D", "-a", str(self.sock)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError("ssh-agent did not start (it exited)")
            return self.sock.exists()

        until_sync(listening, 10, "ssh-agent's socket", interval=0.02)
        self.env = {"SSH_AUTH_SOCK": str(self.sock)}

    def add(self, key_path: Path, passphrase: str | None = None) -> None:
        """``ssh-add KEY``; a passphrase is typed by an askpass script, as a desktop session would."""
        env = {**os.environ, **self.env}
        if passphrase is not None:
            askpass = self.dir / "askpass.sh"
            askpass.write_text(f"#!/bin/sh\necho '{passphrase}'\n")
            askpass.chmod(0o700)
            env.update(SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
        subprocess.run(["ssh-add", str(key_path)], env=env, check=True, capture_output=True,
                       stdin=subprocess.DEVNULL, start_new_session=True, timeout=20)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def keygen(path: Path, passphrase: str = "", comment: str = "test") -> bytes:
    """A new ed25519 key pair from the real ``ssh-keygen``; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return path.with_name(path.name + ".pub").read_bytes()
