"""Host keys as ``ssh`` handles them: known_hosts lookups, fingerprints, and writing an accepted key.

The link connects with a ``HostKeyClient``: asyncssh asks it about every key known_hosts does not trust,
so the link learns the key the host offered (for "unknown host key" with its SHA256 fingerprint, and
"host key changed" with both fingerprints) and can trust a new host on first use when the fleet allows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh


def fingerprint(key: Any) -> str:
    """``ED25519 SHA256:...`` as ``ssh`` prints it (key type, then the SHA256 fingerprint)."""
    algorithm = key.get_algorithm()
    kind = algorithm.removeprefix("ssh-").split("-")[0].upper()
    if algorithm.startswith("ecdsa-"):
        kind = "ECDSA"
    return f"{kind} {key.get_fingerprint('sha256')}"


def known_host_name(host: str, port: int) -> str:
    """The name a known_hosts line uses: ``host`` on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


_parsed: dict[str, tuple[tuple[int, int, int], asyncssh.SSHKnownHosts]] = {}


def read_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """``path`` parsed, once per version of the file (inode, size, mtime) in this process.

    A fleet of N hosts shares one known_hosts of ~N lines: asyncssh parsing it again for every connection
    made the connect storm cost N x N key decodes (1000 hosts: a million, ~45 s of CPU). OSError or
    ValueError as asyncssh's own reading raises them.
    """
    key = str(path)
    st = os.stat(key)
    version = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _parsed.get(key)
    if cached is not None and cached[0] == version:
        return cached[1]
    known = asyncssh.read_known_hosts(key)
    _parsed[key] = (version, known)
    return known


def listed_keys(path: Path, host: str, addr: str, port: int) -> list[Any]:
    """Keys known_hosts lists for this host (trusted and CA keys); [] when the file is missing or unreadable."""
    try:
        known = read_known_hosts(path)
    except (OSError, ValueError):
        return []
    keys: list[Any] = []
    for part in known.match(host, addr, port)[:2]:
        keys.extend(k for k in part if k not in keys)  # a host listed by name and by address: once
    return keys


def append_known_host(path: Path, host: str, port: int, key: Any) -> str:
    """Add ``key`` for ``host:port`` to ``path``, creating the file (0600) and its directory (0700) if missing.

    Returns the line written. Raises OSError when the file cannot be written.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{known_host_name(host, port)} {key.export_public_key().decode().strip()}\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        if fh.tell() > 0 and not path.read_bytes().endswith(b"\n"):
            fh.write("\n")
        fh.write(line)
    return line


@dataclass
class HostKeyOffer:
    """What a host offered that known_hosts did not trust: ``changed`` when it lists another key."""

    host: str
    port: int
    key: Any
    known_hosts: Path
    listed: list[Any]

    @property
    def changed(self) -> bool:
        return bool(self.listed)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    def describe(self) -> str:
        """One line naming the host, the key(s) and the file, and saying what to do."""
        name = known_host_name(self.host, self.port)
        if self.changed:
            was = ", ".join(fingerprint(k) for k in self.listed)
            return (f"HOST KEY MISMATCH for {name}: the key changed: it offers {self.fingerprint}, "
                    f"{self.known_hosts} lists {was}; "
                    f"refused (if the host was rebuilt, remove the old line: ssh-keygen -R '{name}' "
                    f"-f {self.known_hosts})")
        return (f"unknown host key for {name}: {self.fingerprint}, not in {self.known_hosts} "
                "(verify it, then accept it in the instance screen, or set accept_new_host_key = true)")


class HostKeyClient(asyncssh.SSHClient):
    """Records the key a host offers when known_hosts does not trust it; accepts new hosts when told to.

    A changed key (known_hosts lists this host with another key) is never accepted here.
    """

    def __init__(self, known_hosts: Path, accept_new: bool) -> None:
        self.known_hosts, self.accept_new = known_hosts, accept_new
        self.offer: HostKeyOffer | None = None
        self.accepted: str | None = None  # the line written on first use

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        listed = listed_keys(self.known_hosts, host, addr, port)
        self.offer = HostKeyOffer(host, port, key, self.known_hosts, listed)
        if listed or not self.accept_new:
            return False
        try:
            self.accepted = append_known_host(self.known_hosts, host, port, key)
        except OSError:
            return False  # the link reports the file as the problem
        return True
