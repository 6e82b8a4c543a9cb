"""`fleet-console demo`: a local demo fleet reached through the real code path.

``start_demo()`` lays out one directory per demo instance (see ``scenarios.py``), starts each
instance's init (which starts its entrypoint), and serves every instance over SSH on 127.0.0.1 with
throwaway keys; the returned :class:`DemoFleet` has a :class:`console.inventory.Fleet` whose records
point there (host key checked against the demo's own known_hosts), so the console connects, uploads
its agent and runs it exactly as on a real fleet.  ``DemoFleet.stop()`` kills every process it
started and removes the directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from console.agent.wire.frames import subtree
from console.demo.scenarios import instance_name, layout, process_env, scenario_for
from console.demo.server import DemoHost, DemoSshServer, InitClient
from console.inventory import BenchmarkSpec, Fleet, Instance

MAX_INSTANCES = 64
DEMO_STALL_SECONDS = 60.0  # diagnosis calls a progress bar stalled after this long (default 120)


@dataclass
class DemoFleet:
    fleet: Fleet
    dir: Path
    server: DemoSshServer
    hosts: dict[str, DemoHost] = field(default_factory=dict)
    _stopped: bool = False

    @property
    def state_dir(self) -> Path:
        """The demo's own history, audit log and any state: inside its directory, removed by ``stop()``."""
        return self.dir / "state"

    def root(self, name: str) -> Path:
        return self.hosts[name].root

    def init_pid(self, name: str) -> int:
        return self.hosts[name].init.pid

    def scenario_pids(self) -> list[int]:
        """Every live process of every demo instance (the inits and all below them)."""
        live = {h.init.pid for h in self.hosts.values() if h.init.proc is not None and h.init.proc.poll() is None}
        return sorted(_descendants(live))

    async def take_down(self, name: str) -> None:
        await self.server.take_down(name)

    async def bring_up(self, name: str) -> None:
        await self.server.bring_up(name)

    async def stop(self) -> None:
        """Stop the server, kill every scenario process and agent, remove the directory."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            await self.server.close()
        await asyncio.gather(*(h.init.stop() for h in self.hosts.values()), return_exceptions=True)
        # belt and braces: anything still alive below an init, or running from the demo directory
        leftovers = set(self.scenario_pids()) | _pids_under(self.dir)
        leftovers -= _ancestors()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for h in self.hosts.values():
            if h.init.proc is not None and h.init.proc.poll() is None:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(h.init.proc.wait, 5)
        shutil.rmtree(self.dir, ignore_errors=True)


def _proc_table() -> dict[int, int]:
    """pid -> ppid for every process."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        out[int(name)] = int(data[data.rfind(b")") + 2 :].split()[1])
    return out


def _descendants(roots: set[int]) -> set[int]:
    """``roots`` that are alive and every process under them."""
    table = _proc_table()
    return subtree(table.items(), (r for r in roots if r in table))


def _ancestors() -> set[int]:
    """This process and its ancestors (never to be killed by the clean-up)."""
    table = _proc_table()
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        pid = table.get(pid, 1)
    return out


def _pids_under(directory: Path) -> set[int]:
    """Processes whose working directory or executable script lives under ``directory``."""
    prefix = str(directory.resolve()) + os.sep
    out: set[int] = set()
    for pid in _proc_table():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            cmd = ""
        if (cwd + os.sep).startswith(prefix) or prefix in cmd:
            out.add(pid)
    return out


async def start_demo(
    instances: int = 6,
    base_dir: Path | None = None,
    *,
    flap_up: tuple[float, float] = (20.0, 40.0),
    flap_down: tuple[float, float] = (3.0, 6.0),
) -> DemoFleet:
    """Start the demo fleet: ``instances`` (1..64) hosts cycling through the scenarios."""
    if not 1 <= instances <= MAX_INSTANCES:
        raise ValueError(f"demo instances must be from 1 to {MAX_INSTANCES}, not {instances}")
    if base_dir is not None:
        Path(base_dir).mkdir(parents=True, exist_ok=True)
    top = Path(tempfile.mkdtemp(prefix="fleet-demo-", dir=str(base_dir) if base_dir else None)).resolve()
    try:
        keys = top / "keys"
        keys.mkdir()
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519", comment="fleet-console-demo")
        client_key_path = keys / "id_ed25519"
        client_key.write_private_key(str(client_key_path))
        client_key_path.chmod(0o600)
        client_key.write_public_key(str(keys / "id_ed25519.pub"))
        host_key.write_private_key(str(keys / "ssh_host_ed25519_key"))
        server = DemoSshServer(host_key, client_key.export_public_key())
    except BaseException:
        shutil.rmtree(top, ignore_errors=True)
        raise
    demo = DemoFleet(fleet=Fleet(instances=[], source="demo"), dir=top, server=server)
    try:
        token = secrets.token_hex(4)
        host_line = host_key.export_public_key().decode().strip()
        known_hosts = keys / "known_hosts"
        records: list[Instance] = []
        for index in range(instances):
            scenario = scenario_for(index)
            name = instance_name(index)
            root = top / name
            simulate = layout(root, index, scenario)
            init = InitClient(root, f"fleet-demo-{token}-{name}")
            host = DemoHost(name=name, root=root, init=init, flapping=scenario.flapping,
                            flap_up=flap_up, flap_down=flap_down)
            demo.hosts[name] = host
            await init.start(process_env(root, scenario))
            port = await server.add_host(host)
            with known_hosts.open("a", encoding="utf-8") as fh:
                fh.write(f"[127.0.0.1]:{port} {host_line}\n")
            logs = tuple(str(root / "tmp" / f) for f in ("setup.log", "benchmark-full.log", "cuzk-bench-daemon.log"))
            records.append(
                Instance(
                    name=name,
                    host="127.0.0.1",
                    port=port,
                    user="root",
                    key=str(client_key_path),
                    tags=("demo", scenario.key),
                    known_hosts=str(known_hosts),
                    python=sys.executable,
                    logs=logs,
                    watch_dirs=(str(root / "tmp"),),
                    benchmark=BenchmarkSpec(
                        start=(str(root / "bin" / "entrypoint.sh"),),
                        match=(r"cuzk-daemon", r"cuzk-bench(?!-)", r"benchmark\.sh"),
                        entrypoint=(r"entrypoint\.sh",),
                        log=str(root / "tmp" / "benchmark-full.log"),
                        cwd=str(root),
                        stop_timeout=10.0,
                    ),
                    agent_extra={
                        "gpu": {"simulate": simulate},
                        "proc_root": init.pid,
                        "stall_seconds": DEMO_STALL_SECONDS,
                    },
                    source=f"demo:{scenario.key}",
                )
            )
        demo.fleet = Fleet(instances=records, source=f"demo ({top})")
    except BaseException:
        await demo.stop()
        raise
    return demo
