"""Where and how to connect, as ``ssh`` would: ``~/.ssh/config``, key files, ssh-agent, jump hosts.

``resolve(instance)`` asks asyncssh's own OpenSSH config support (``config=``) what ``~/.ssh/config``
says for the instance (its ``ssh_config`` alias, else its host), lays the fleet file's values over it,
and checks the local files first: a key file that is missing, unreadable or not a key, and an unusable
``~/.ssh/config``, are ``NeedsAction`` errors naming the file and saying what to do, before any
connection is tried. Passphrase-protected keys are never decrypted here: they are left to ssh-agent
(``SSH_AUTH_SOCK``, or the config's ``IdentityAgent``), as ``ssh`` does with ``AddKeysToAgent``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from console.inventory import Instance

DEFAULT_KEY_NAMES = ("id_ed25519_sk", "id_ecdsa_sk", "id_ed448", "id_ed25519", "id_ecdsa", "id_rsa")
DEFAULT_CONNECT_TIMEOUT = 15.0
DEFAULT_KEEPALIVE = 10.0
# AES-GCM first: one AEAD call per packet through OpenSSL (AES-NI), where asyncssh's chacha20-poly1305 makes
# several Python-level calls per packet (~17 % of the UI thread at 500 hosts). The rest of asyncssh's
# defaults follow, so a server without GCM still connects; a ``Ciphers`` line in ~/.ssh/config wins.
GCM_FIRST = (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com")


class NeedsAction(Exception):
    """A local configuration problem (a file to fix, a key to add): retrying will not help."""


@dataclass
class KeyFile:
    """A private key file offered to a host; ``encrypted`` ones only work through ssh-agent."""

    path: Path
    origin: str  # "fleet.toml", "~/.ssh/config" or "default"
    encrypted: bool = False

    def public_fingerprint(self) -> str | None:
        """SHA256 fingerprint from the ``.pub`` file beside it (an encrypted key's own is unreadable)."""
        try:
            return str(asyncssh.read_public_key(str(self.path) + ".pub").get_fingerprint("sha256"))
        except (OSError, ValueError):
            return None


@dataclass
class Target:
    """One SSH hop: the final host, or a jump host before it."""

    label: str  # how messages name it ("root@1.2.3.4:22", "jump host bastion")
    host: str  # what asyncssh is given (an ssh config alias resolves there)
    port: int
    user: str
    known_hosts: Path
    accept_new: bool
    keys: list[KeyFile] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # the other asyncssh.connect keywords


def preferred_ciphers() -> list[bytes]:
    """asyncssh's default ciphers with the AES-GCM ones (those this cryptography build has) moved first."""
    from asyncssh.encryption import get_default_encryption_algs, get_encryption_algs

    available = set(get_encryption_algs())
    first = [alg for alg in GCM_FIRST if alg in available]
    return first + [alg for alg in get_default_encryption_algs() if alg not in first]


def user_ssh_config() -> list[str]:
    """``~/.ssh/config`` when there is one to read (asyncssh's ``config=``)."""
    path = Path("~/.ssh/config").expanduser()
    return [str(path)] if path.is_file() else []


def _key_file(path: Path, origin: str, where: str) -> KeyFile:
    """Check one key file as ssh would read it; NeedsAction names it otherwise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NeedsAction(f"key file {path} not found ({where}): fix the path, or remove it to use "
                          "ssh-agent and the default keys") from None
    except OSError as exc:
        raise NeedsAction(f"cannot read key file {path}: {exc.strerror} ({where}): "
                          f"check its owner and mode (chmod 600 {path})") from None
    try:
        asyncssh.import_private_key(data)
    except asyncssh.KeyImportError as exc:
        if str(exc).startswith("Passphrase"):
            return KeyFile(path, origin, encrypted=True)
        raise NeedsAction(f"key file {path} is not a private key ssh can read ({exc}) ({where})") from None
    return KeyFile(path, origin)


def _key_files(inst: Instance, identity_files: list[str], where: str) -> list[KeyFile]:
    if inst.key:
        return [_key_file(Path(inst.key).expanduser(), "fleet.toml", f"key of instance {inst.name} in {where}")]
    found = []
    for name in identity_files:  # ssh warns about a missing IdentityFile and goes on: so does this
        path = Path(name).expanduser()
        if path.exists():
            found.append(_key_file(path, "~/.ssh/config", f"IdentityFile in {user_ssh_config()[0]}"))
    if not identity_files:
        for name in DEFAULT_KEY_NAMES:
            path = Path("~/.ssh", name).expanduser()
            if path.exists():
                found.append(_key_file(path, "default", "a default key"))
    return found


def _split_hop(hop: str) -> tuple[str | None, str, int | None]:
    """``user@host:port`` (user and port optional; ``[v6]:port`` allowed) -> parts."""
    user, _, rest = hop.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    elif rest.count(":") == 1:
        host, _, p = rest.partition(":")
        port = int(p) if p.isdigit() else None
    return user or None, host, port


async def _resolve_one(
    inst: Instance, host: str, port: int | None, user: str | None, label: str | None, cfg: list[str]
) -> tuple[Target, str | None]:
    """One hop over the user's ssh config; returns it and the config's ProxyJump for it (if any)."""
    try:
        opts = await asyncssh.SSHClientConnectionOptions.construct(
            config=cfg, host=host, port=port if port is not None else (), username=user if user else (),
            client_keys=None, known_hosts=(), tunnel=(),
        )
    except (OSError, ValueError) as exc:
        where = cfg[0] if cfg else "~/.ssh/config"
        raise NeedsAction(f"cannot use {where}: {exc}: fix it or move it aside") from None
    config = opts.config
    where = inst.source or "the fleet file"
    if inst.known_hosts:
        known_hosts = Path(inst.known_hosts).expanduser()
    elif opts.known_hosts:
        known_hosts = Path(str(opts.known_hosts[0])).expanduser()
    else:
        known_hosts = Path("~/.ssh/known_hosts").expanduser()
    identity = [str(p) for p in config.get("IdentityFile", ()) or ()]
    keys = _key_files(inst, identity, where)
    connect_timeout = inst.connect_timeout or opts.connect_timeout or DEFAULT_CONNECT_TIMEOUT
    keepalive = inst.keepalive if inst.keepalive is not None else (
        float(opts.keepalive_interval) if config.get("ServerAliveInterval") is not None else DEFAULT_KEEPALIVE)
    options: dict[str, Any] = {
        "config": cfg,
        "connect_timeout": connect_timeout,
        "keepalive_interval": keepalive,
        "keepalive_count_max": 3,
        "ignore_encrypted": True,  # left to ssh-agent; an unusable one is named when auth fails
        "client_keys": [str(k.path) for k in keys if not k.encrypted] if keys else (),
    }
    if not config.get("Ciphers"):  # the operator's choice, when there is one, is asyncssh's to apply
        options["encryption_algs"] = [alg.decode("ascii") for alg in preferred_ciphers()]
    if port is not None:
        options["port"] = port
    if user:
        options["username"] = user
    name = label or f"{opts.username}@{opts.host}:{opts.port}"
    target = Target(name, host, int(opts.port), str(opts.username), known_hosts, inst.accept_new_host_key,
                    keys, options)
    proxy = opts.tunnel if isinstance(opts.tunnel, str) and opts.tunnel.lower() != "none" else None
    return target, proxy


async def resolve(inst: Instance) -> list[Target]:
    """The hops to ``inst``: jump hosts first (``jump``, else the config's ProxyJump), the instance last."""
    cfg = user_ssh_config()
    alias = inst.ssh_config
    if alias:  # the config decides what the fleet file leaves at its default
        host, port, user = alias, (inst.port if inst.port != 22 else None), (inst.user if inst.user != "root" else None)
    else:
        host, port, user = inst.host, inst.port, inst.user
    final, proxy = await _resolve_one(inst, host, port, user, None, cfg)
    if alias:
        final.label = f"{alias} ({final.label})"
    hops = list(inst.jump) or ([h for h in proxy.split(",") if h] if proxy else [])
    targets = []
    for hop in hops:
        h_user, h_host, h_port = _split_hop(hop)
        target, _ = await _resolve_one(inst, h_host, h_port, h_user, f"jump host {hop}", cfg)
        targets.append(target)
    targets.append(final)
    return targets


async def agent_keys() -> tuple[str | None, list[tuple[str, str]]]:
    """The agent's socket and its keys as ``(comment, SHA256 fingerprint)``; [] when there is no agent."""
    path = os.environ.get("SSH_AUTH_SOCK") or None
    if not path:
        return None, []
    try:
        async with asyncssh.connect_agent(path) as agent:
            keys = await agent.get_keys()
    except (OSError, asyncssh.Error, ValueError):
        return path, []
    out = []
    for key in keys:
        comment = key.get_comment() or ""
        try:
            fp = str(asyncssh.import_public_key(key.public_data).get_fingerprint("sha256"))
        except (ValueError, asyncssh.KeyImportError):
            fp = "?"
        out.append((comment, fp))
    return path, out


async def explain_auth_failure(target: Target) -> tuple[str, str]:
    """``(status, detail)`` for a refused login: which keys were offered, and what to do.

    A passphrase-protected key that ssh-agent does not hold is a ``needs_action``; otherwise ``auth_failed``.
    """
    sock, held = await agent_keys()
    held_fps = {fp for _, fp in held}
    for key in target.keys:
        if key.encrypted and key.public_fingerprint() not in held_fps:
            agent = f"ssh-agent at {sock} does not hold it" if sock else "no ssh-agent is running (SSH_AUTH_SOCK unset)"
            return "needs_action", (f"key {key.path} is passphrase-protected and {agent}: run `ssh-add {key.path}` "
                                    "in the shell that starts fleet-console")
    tried = [f"{k.path}" + (" (passphrase, via agent)" if k.encrypted else "") for k in target.keys]
    if sock:
        names = ", ".join(c or fp for c, fp in held) or "none"
        tried.append(f"ssh-agent {len(held)} key(s): {names}")
    else:
        tried.append("no ssh-agent (SSH_AUTH_SOCK unset)")
    return "auth_failed", (f"{target.label}: permission denied; tried {'; '.join(tried)}: add one of "
                           f"these public keys to ~{target.user}/.ssh/authorized_keys on the host, or set key =")
