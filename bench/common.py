"""What the benchmarks in bench/ share: the import path, argument parsing, CPU time and percentiles, the hosts
they start (a real OpenSSH sshd, the replay host of bench/scale.py), driving the headless console by keys, and
printing results.

A bench run as ``python bench/NAME.py`` has bench/ on ``sys.path``, so ``from common import ...`` comes first
in its imports; importing this module puts the repository root first on ``sys.path`` (before any ``console``
import; ``cipher_bench.py --root DIR`` puts another checkout before it). Nothing here imports ``console``,
``asyncssh``, ``psutil`` or ``textual`` at import time: the benches that need them pay for them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))

MB = 2**20


# -- arguments -----------------------------------------------------------------------------------------------

def bench_parser(doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` described by the first line of the bench's docstring."""
    return argparse.ArgumentParser(description=(doc or "").split("\n")[0], **kwargs)


def sizes(text: str) -> list[int]:
    """``"100,500,1000"`` -> ``[100, 500, 1000]`` (an argparse ``type``: fleet sizes, host counts)."""
    return [int(x) for x in text.split(",")]


def names(text: str) -> list[str]:
    """``"psutil,proc"`` -> ``["psutil", "proc"]`` (an argparse ``type``)."""
    return text.split(",")


def private_dir(variable: str, prefix: str) -> None:
    """Point the environment ``variable`` (e.g. ``FLEET_CONSOLE_CONFIG_DIR``) at a fresh temp directory, unless
    it is set already: the bench does not read or write the user's own."""
    if variable not in os.environ:
        os.environ[variable] = tempfile.mkdtemp(prefix=prefix)


def find_program(name: str) -> str | None:
    """The path of ``name`` on PATH; for sshd also where distributions put it outside a user's PATH."""
    found = shutil.which(name)
    if found is None and name == "sshd":
        found = next((p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.path.exists(p)), None)
    return found


# -- CPU time --------------------------------------------------------------------------------------------------

class Stopwatch:
    """This process's CPU time (``process_time``: all threads) and the wall time since it was made."""

    def __init__(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()

    def cpu(self) -> float:
        return time.process_time() - self.cpu0

    def wall(self) -> float:
        return time.perf_counter() - self.wall0


def cpu_clock(pid: int) -> tuple[Callable[[], float], str]:
    """A reader of a process's CPU time in seconds: its CPU-time clock (Linux: ns, all threads), else psutil's
    10 ms ticks; and which one it is."""
    clock_id = ((~pid) << 3) | 2  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), as glibc's clock_getcpuclockid
    try:
        time.clock_gettime(clock_id)
        return (lambda: time.clock_gettime(clock_id)), "CPU-time clock (ns)"
    except (AttributeError, OSError):
        import psutil

        proc = psutil.Process(pid)

        def ticks() -> float:
            times = proc.cpu_times()
            return times.user + times.system

        return ticks, "psutil cpu_times (10 ms ticks)"


def cpu_seconds(before: Any, after: Any) -> float:
    """User + system seconds between two ``psutil`` ``cpu_times()`` of one process."""
    return after.user + after.system - before.user - before.system


def cpu_pct(before: Any, after: Any, wall: float) -> float:
    """% of one core between two ``psutil`` ``cpu_times()`` taken ``wall`` seconds apart."""
    return 100 * cpu_seconds(before, after) / wall


def children_cpu_ms(argv: list[str], **kwargs: Any) -> float:
    """CPU ms of one local command (``RUSAGE_CHILDREN``: it and everything it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) * 1000.0


def rss_mb(process: Any = None) -> float:
    """Resident memory of ``process`` (a ``psutil.Process``; this one by default) in MB (2**20 bytes)."""
    if process is None:
        import psutil

        process = psutil.Process()
    return process.memory_info().rss / MB


async def steady_cpu(seconds: float, me: Any, workers: Sequence[Any] = (),
                     others: dict[str, Any] | None = None) -> tuple[float, float, float, dict[str, float]]:
    """CPU of ``me``, its ``workers`` (summed) and ``others`` (name -> process), each in % of one core, over
    ``seconds`` of this event loop's sleep: ``(wall, me %, workers %, {name: %})`` (``psutil`` processes)."""
    others = others or {}
    c0, o0, w0 = me.cpu_times(), {name: p.cpu_times() for name, p in others.items()}, time.monotonic()
    k0 = [w.cpu_times() for w in workers]
    await asyncio.sleep(seconds)
    wall = time.monotonic() - w0
    c1 = me.cpu_times()
    k1 = [w.cpu_times() for w in workers]
    o1 = {name: p.cpu_times() for name, p in others.items()}
    linked = sum(cpu_pct(a, b, wall) for a, b in zip(k0, k1, strict=True))
    return wall, cpu_pct(c0, c1, wall), linked, {name: cpu_pct(o0[name], o1[name], wall) for name in others}


# -- percentiles -----------------------------------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, nearest rank rounded: ``sorted(values)[round(q / 100 * (n - 1))]``; 0.0 if none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def rank(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile as ``sorted(values)[n * q // 100]`` (50: the upper median, 100: the max)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, len(ordered) * q // 100)]


def ms(seconds: float, digits: int = 1) -> float:
    return round(1000 * seconds, digits)


def median_ms(values: Sequence[float], empty: Any = None) -> Any:
    """The median of ``values`` (seconds) in ms, rounded to 0.1; ``empty`` when there are none."""
    return ms(statistics.median(values)) if values else empty


def max_ms(values: Sequence[float], empty: Any = None) -> Any:
    return ms(max(values)) if values else empty


# -- results ---------------------------------------------------------------------------------------------------

def print_json(result: Any, indent: int | None = None) -> None:
    print(json.dumps(result, indent=indent), flush=True)


def print_result(result: dict[str, Any], as_json: bool, line: str, indent: int | None = None) -> None:
    """``result`` as JSON, or one ``line.format(key=..., value=...)`` per item."""
    if as_json:
        print_json(result, indent)
        return
    for key, value in result.items():
        print(line.format(key=key, value=value))


def print_goals(goals: str, ok: bool, missed: str = "NOT met") -> None:
    print(f"goals ({goals}):", "met" if ok else missed)


def print_lines(r: dict[str, Any], lines: list[tuple[str, str, str]], optional: tuple[str, ...] = ()) -> None:
    """One line per figure of ``lines`` (key, label, unit) prefixed with ``hosts=N``; the ``optional`` ones
    left out when absent."""
    for key, label, unit in lines:
        value = r.get(key)
        if value is None and key in optional:
            continue
        text = "no answer" if value is None else f"{value} {unit}".rstrip()
        print(f"hosts={r['hosts']:<5} {label.format(**r):<48} {text}", flush=True)


# -- hosts: a real sshd, the replay host -----------------------------------------------------------------------

def _asyncssh() -> Any:
    import console  # noqa: F401,I001  (first: its filter keeps asyncssh's import quiet on recent cryptography)
    import asyncssh

    return asyncssh


def _sshd_helper() -> Any:
    _asyncssh()  # the helper imports asyncssh
    try:
        from tests.support import sshd
    except ImportError:  # the tests' helpers before they moved to tests/support
        from tests import sshd  # type: ignore[no-redef]
    return sshd


@contextlib.contextmanager
def sshd_server(workdir: Path) -> Iterator[Any]:
    """The tests' real OpenSSH sshd on 127.0.0.1 (``tests/support/sshd.py``), set up in ``workdir``; it and its
    sessions are stopped on the way out, even on error."""
    if find_program("sshd") is None:
        raise RuntimeError("no sshd installed (`make sshd-deps` installs openssh-server)")
    server = _sshd_helper().Sshd(workdir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def ssh_connect(server: Any, **options: Any) -> Any:
    """``asyncssh.connect`` to ``server`` (from ``sshd_server``) with its client key and known_hosts, no
    ~/.ssh/config; ``options`` added (await it, or ``async with`` it)."""
    return _asyncssh().connect("127.0.0.1", port=server.port, username=server.user,
                            client_keys=[str(server.client_key_path)], known_hosts=str(server.known_hosts),
                            config=[], **options)


def raise_nofile() -> None:
    """The open-files limit up to its hard limit (a thousand SSH sessions in one process)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class ReplayFleet:
    """bench/scale.py's replay host (``scale.py serve``) as a child process, with the keys, known_hosts and
    fleet.toml (``fleet_path``) that reach it: ``hosts`` SSH instances on 127.0.0.1 replaying ``recording``."""

    def __init__(self, hosts: int, recording: Path, work: Path, detail: bool = True) -> None:
        self.hosts, self.recording, self.work, self.detail = hosts, recording, work, detail
        self.proc: subprocess.Popen[bytes] | None = None
        self.fleet_path = work / "fleet.toml"
        self.ports: list[int] = []

    def start(self, timeout: float = 120.0) -> None:
        asyncssh = _asyncssh()
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519")
        host_key.write_private_key(str(self.work / "host_key"))
        client_key.write_private_key(str(self.work / "client_key"))
        (self.work / "client_key").chmod(0o600)
        client_key.write_public_key(str(self.work / "client_key.pub"))
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "scale.py"), "serve", "--hosts", str(self.hosts),
             "--recording", str(self.recording), "--dir", str(self.work)] + ([] if self.detail else ["--no-detail"]),
            stdout=subprocess.PIPE, start_new_session=True)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = b""
        while not line.startswith(b"{"):
            line = self.proc.stdout.readline()
            if not line or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the replay host did not start")
        self.ports = json.loads(line)["ports"]
        key_line = host_key.export_public_key().decode().strip()
        known = self.work / "known_hosts"
        known.write_text("".join(f"[127.0.0.1]:{p} {key_line}\n" for p in self.ports))
        rows = [f'[defaults]\nuser = "bench"\nkey = "{self.work / "client_key"}"\nknown_hosts = "{known}"\n'
                f'python = "python3"\nconnect_timeout = 60\n']
        for i, port in enumerate(self.ports):
            rows.append(f'[[instance]]\nname = "replay-{i:04d}"\nhost = "127.0.0.1"\nport = {port}\n')
        self.fleet_path.write_text("\n".join(rows))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@contextlib.contextmanager
def replay_fleet(hosts: int, recording: Path, work: Path, detail: bool = True) -> Iterator[ReplayFleet]:
    """A started ``ReplayFleet``, stopped on the way out."""
    fleet = ReplayFleet(hosts, recording, work, detail=detail)
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


# -- the headless console, driven by keys ----------------------------------------------------------------------

def console_env() -> Path:
    """This process as a console with nothing of the user's: no ssh-agent, no ~/.ssh/config, own state dir.
    Returns the temp home it set (the caller may remove it at the end)."""
    os.environ.pop("SSH_AUTH_SOCK", None)
    home = Path(tempfile.mkdtemp(prefix="fleet-scale-home-"))
    os.environ["HOME"] = str(home)
    os.environ["FLEET_CONSOLE_STATE_DIR"] = str(home / "state")
    return home


def gpus_in(state: Any) -> int:
    return sum(len(inst.gpus) for inst in state.instances.values())


async def wait_all_gpus(state: Any, want: int, t_start: float, timeout: float) -> tuple[int, float | None]:
    """Wait until the fleet state holds ``want`` GPUs (or ``timeout`` from ``t_start``, a ``time.monotonic()``):
    how many it holds, and the seconds from ``t_start`` until all were in (None when not within ``timeout``)."""
    while gpus_in(state) < want and time.monotonic() - t_start < timeout:
        await asyncio.sleep(0.1)
    got = gpus_in(state)
    return got, (round(time.monotonic() - t_start, 1) if got >= want else None)


def link_workers(controller: Any) -> list[Any]:
    """The controller's link worker processes (``psutil``); none when the links run in this process."""
    import psutil

    return [psutil.Process(pid) for pid in (controller.shards.pids if controller.shards else [])]


async def _after_refresh(app: Any) -> None:
    fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    app.call_after_refresh(lambda: fut.done() or fut.set_result(None))
    await fut


async def key_latency(app: Any, key: str, changed: Any, timeout: float = 15.0) -> float | None:
    """Seconds from the key event (sent through the driver, as a terminal's) to the first refresh after
    ``changed()`` holds; None when it did not within ``timeout``."""
    from textual import events

    t0 = time.perf_counter()
    app._driver.send_message(events.Key(key, None))
    while not changed():
        if time.perf_counter() - t0 > timeout:
            return None
        await asyncio.sleep(0.001)
    await _after_refresh(app)
    return time.perf_counter() - t0


async def grid_key_figures(app: Any, presses: int, key_timeout: float) -> dict[str, Any]:
    """Down-arrow latency on the grid over ``presses`` presses (back to the top from the last row)."""
    grid = app.grid
    lat: list[float] = []
    misses = 0
    while len(lat) + misses < presses:
        before = grid.cursor_name
        t = await key_latency(app, "down", lambda b=before: grid.cursor_name != b, timeout=key_timeout)
        if t is None:  # the last row (a small fleet), or no answer within key_timeout: back to the top
            misses += 1
            await key_latency(app, "home", lambda b=before: grid.cursor_name != b, timeout=key_timeout)
        else:
            lat.append(t)
        await asyncio.sleep(0.15)
    return {"key_n": len(lat), "key_misses": misses, "key_p50_ms": median_ms(lat), "key_max_ms": max_ms(lat)}


async def visit_figures(app: Any, visits: int, key_timeout: float) -> dict[str, Any]:
    """Open an instance and go back, ``visits`` times on the next instances: ``open_ms`` / ``back_ms`` (the
    first of the session), ``*_p50_ms`` (the others), ``*_max_ms`` (all; None when one got no answer)."""
    from widgets.instance_screen import InstanceScreen

    grid, main = app.grid, app.screen
    opens: list[float | None] = []
    backs: list[float | None] = []
    for visit in range(visits):
        if visit:
            before = grid.cursor_name
            await key_latency(app, "down", lambda b=before: grid.cursor_name != b, timeout=key_timeout)
            await asyncio.sleep(0.5)
        opens.append(await key_latency(app, "enter", lambda: isinstance(app.screen, InstanceScreen)))
        await asyncio.sleep(1.0)
        backs.append(await key_latency(app, "escape", lambda: app.screen is main))
        await asyncio.sleep(0.5)
    out: dict[str, Any] = {}
    for what, took in (("open", opens), ("back", backs)):
        took_ms = [ms(t) for t in took if t is not None]
        out[f"{what}_ms"] = took_ms[0] if took[0] is not None else None
        out[f"{what}_p50_ms"] = round(statistics.median(took_ms[1:]), 1) if len(took_ms) > 1 else None
        out[f"{what}_max_ms"] = max(took_ms) if len(took_ms) == len(took) else None
    return out
