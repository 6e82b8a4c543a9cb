"""Scale benchmark: the console against N SSH instances served by one replay host, driven by real keys.

Why a replay host: a thousand real agents do not fit on one box, but the console's cost is in what it
receives (SSH packets, JSON lines, state updates, paints), not in who produced them.  So:

1. **Record** (once per run, ``--record-seconds``, default 30): the real agent (``python -m console.agent``)
   runs here with 8 simulated GPUs (``gpu.simulate``, ``console/agent/sample/nvml_sim.py``) over a small workload
   (a log that grows, short-lived child processes: churn in the process table); its stdout lines are kept:
   that long at detail "full", then as long at "summary" (op ``detail``, what the console asks of a host out
   of view: GPU frames on change, the benchmark's processes every 5 s, log lines held).
2. **Replay host** (``scale.py serve``, a separate process): ONE asyncssh process listening on N ports of
   127.0.0.1.  It answers the link's probe ("python 3.x, agent present"), and for the agent's start command
   replays the recording in a loop with fresh ``ts`` (log line numbers carried on, the hello/backlog/full
   process table only on the first pass); op ``detail`` switches a session between the two phases as the
   agent would (held log lines and the whole process table sent back at "full"; ``--no-detail``: refused,
   every host sends everything, the worst case of an agent without the op); ``ping`` is answered as the
   agent, anything else ``ok: false``.  One timer (20 Hz) writes every session's due frames.
3. **Console**: ``FleetApp`` on a real ``FleetController`` and a fleet.toml of N instances, in this process,
   headless (``App.run_test``), keys sent through the driver as a terminal would.  Key latency is from the
   key event to the first refresh after its effect (the cursor moved / the screen changed).

One line per figure: time until all N hosts' GPUs are in the fleet state (what the header counts), until the
hosts out of view are at "summary", steady console CPU (% of one core, over ``--steady`` s once they are: the
UI process plus its link workers, each also on its own line; ``FLEET_CONSOLE_LINK_WORKERS=0`` keeps the links
in the UI process for a side-by-side), the replay host's CPU over the same window, console RSS (UI process;
the workers' on their own line), down-arrow latency p50/max, open an instance / back (the first of the session,
then 5 more instances: the p50 of those, the max of all), and ``fleet-console status --json`` wall time.  Each
size runs in a process of its own.

    .venv/bin/python bench/scale.py --hosts 100,500,1000 [--record-seconds 30] [--recording FILE] [--no-detail]
                                    [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    MB,
    ROOT,
    bench_parser,
    console_env,
    grid_key_figures,
    link_workers,
    print_json,
    print_lines,
    raise_nofile,
    replay_fleet,
    rss_mb,
    sizes,
    steady_cpu,
    visit_figures,
    wait_all_gpus,
)

import console  # noqa: F401  (first: its filter keeps asyncssh's import quiet on recent cryptography)

GPUS = 8
TICK = 0.05  # seconds between the replay host's writes
LOOP_GAP = 1.0  # seconds between the recording's last frame and its next pass
BACKLOG_LINES = 200  # lines held per log at detail "summary" (the agent's ``backlog_lines``)

# -- 1. the recording ----------------------------------------------------------------------------------------

_WORKLOAD = r'''
import os, subprocess, sys, time
log = open(sys.argv[1], "a", buffering=1)
kids, step, t0 = [], 0, time.time()
for _ in range(3):
    kids.append(subprocess.Popen(["sleep", "3600"]))
while True:
    step += 1
    log.write("step %d loss %.4f throughput %.1f samples/s elapsed %.1fs\n"
              % (step, 2.0 / step ** 0.3, 380 + (step % 17), time.time() - t0))
    if step % 3 == 0:
        kids.append(subprocess.Popen(["sleep", "2"]))  # churn: a worker that comes and goes
    kids = [k for k in kids if k.poll() is None]
    time.sleep(0.3)
'''


def agent_config(workload_pid: int, log: str) -> dict[str, Any]:
    gpus = [{"load": 92, "mem_used_mib": 61000, "processes": [{"pid": workload_pid, "mem_mib": 60000}]}
            for _ in range(GPUS)]
    return {
        "gpu": {"simulate": {"gpus": GPUS, "name": "NVIDIA H100 80GB HBM3", "mem_total_mib": 81559,
                             "power_limit_w": 700, "driver": "550.54.15", "uuid_seed": "scale-bench",
                             "jitter": True, "state": {"gpus": gpus}}},
        "logs": [log],
        "watch_dirs": [],
        "proc_root": workload_pid,
    }


def record(seconds: float, out: Path) -> list[dict[str, Any]]:
    """Run the real agent here on simulated GPUs and a busy workload: ``seconds`` at detail "full", then (asked
    by op ``detail``, as the console asks for a host it does not show) ``seconds`` at "summary".  Its frames,
    in order, each with ``phase`` ("full" | "summary") and ``t`` (seconds from the phase's start) added;
    written to ``out`` as JSON lines."""
    work = Path(tempfile.mkdtemp(prefix="fleet-scale-rec-"))
    log = work / "train.log"
    workload = subprocess.Popen([sys.executable, "-c", _WORKLOAD, str(log)], start_new_session=True)
    try:
        cfg = work / "agent.json"
        cfg.write_text(json.dumps(agent_config(workload.pid, str(log))))
        agent = subprocess.Popen(
            [sys.executable, "-m", "console.agent", "--config-file", str(cfg), "--max-seconds", str(2 * seconds)],
            cwd=str(ROOT), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert agent.stdin is not None
        time.sleep(seconds)
        agent.stdin.write(json.dumps({"id": "bench-summary", "op": "detail", "args": {"level": "summary"}}).encode()
                          + b"\n")
        agent.stdin.flush()
        stdout, stderr = agent.communicate(timeout=seconds + 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(workload.pid, signal.SIGKILL)
        workload.wait()
        shutil.rmtree(work, ignore_errors=True)
    frames = [json.loads(line) for line in stdout.splitlines() if line.startswith(b"{")]
    if not frames or frames[0].get("type") != "hello":
        raise RuntimeError(f"the agent recorded nothing usable: {stderr.decode()[-500:]}")
    switch = next((f for f in frames if f.get("id") == "bench-summary"), None)
    if switch is None or not switch.get("ok"):
        raise RuntimeError(f"the agent did not take detail summary: {switch}")
    kept = []
    for f in frames:
        if f is switch:
            continue
        phase = "full" if f["ts"] < switch["ts"] else "summary"
        f["phase"] = phase
        f["t"] = round(f["ts"] - (frames[0]["ts"] if phase == "full" else switch["ts"]), 3)
        kept.append(f)
    out.write_text("".join(json.dumps(f) + "\n" for f in kept))
    return kept


def load_recording(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- 2. the replay host --------------------------------------------------------------------------------------

class Replay:
    """One phase of the recording turned into cheap writes: every frame's JSON split around its ``ts``.

    ``repeat_all``: every frame comes again on every pass (the summary phase); otherwise the hello, the log
    backlog and the full process table come on the first pass only."""

    def __init__(self, frames: list[dict[str, Any]], repeat_all: bool = False) -> None:
        self.parts: list[tuple[bytes, bytes] | dict[str, Any]] = []  # (before ts, after ts), or a log frame
        self.first_only: list[bool] = []
        self.full_procs: tuple[bytes, bytes] | None = None  # the whole process table (sent again back at "full")
        span = 0
        for f in frames:
            f = {k: v for k, v in f.items() if k not in ("t", "phase")}
            kind = f.get("type")
            first = kind == "hello" or bool(f.get("backlog")) or (kind == "procs" and f.get("full"))
            if kind == "log":
                n = (f.get("first_line") or 1) + len(f.get("lines") or ())
                span = max(span, n)
                self.parts.append(f)
            else:
                f["ts"] = "@@TS@@"
                before, after = json.dumps(f).encode().split(b'"@@TS@@"')
                self.parts.append((before, after))
                if kind == "procs" and f.get("full") and not f.get("subset") and self.full_procs is None:
                    self.full_procs = (before, after)
            self.first_only.append(first and not repeat_all)
        self.times = [f["t"] for f in frames]
        self.duration = self.times[-1] + LOOP_GAP
        self.log_span = span

    def is_log(self, i: int) -> bool:
        return isinstance(self.parts[i], dict)

    def log_frame(self, i: int, now: float, loop: int) -> dict[str, Any]:
        part = self.parts[i]
        assert isinstance(part, dict)
        f = dict(part, ts=round(now, 3))
        if loop and f.get("first_line") is not None and f.get("event") is None:
            f["first_line"] = f["first_line"] + loop * self.log_span
        return f

    def line(self, i: int, now: float, loop: int) -> bytes:
        part = self.parts[i]
        if isinstance(part, tuple):
            return part[0] + b"%.3f" % now + part[1] + b"\n"
        return json.dumps(self.log_frame(i, now, loop)).encode() + b"\n"


def load_replays(path: Path) -> tuple[Replay, Replay | None]:
    """The recording's full phase and its summary phase (None in a recording made without one)."""
    frames = load_recording(path)
    full = [f for f in frames if f.get("phase", "full") == "full"]
    summary = [f for f in frames if f.get("phase") == "summary"]
    return Replay(full), (Replay(summary, repeat_all=True) if summary else None)


class _Stream:
    """Where a session is in one phase's replay."""

    def __init__(self, t0: float) -> None:
        self.t0, self.i, self.loop = t0, 0, 0

    def due(self, r: Replay, now: float) -> list[tuple[int, int]]:
        """``(frame index, pass)`` of the frames due by ``now``, the stream moved past them."""
        out = []
        while now - self.t0 >= r.times[self.i]:
            if not (self.loop and r.first_only[self.i]):
                out.append((self.i, self.loop))
            self.i += 1
            if self.i >= len(r.times):
                self.i, self.loop, self.t0 = 0, self.loop + 1, self.t0 + r.duration
        return out


class _Session:
    def __init__(self, process: Any, t0: float) -> None:
        self.process, self.t0 = process, t0
        self.sent_at = 0.0  # time.monotonic() of the last write
        self.full = _Stream(t0)  # runs on at "summary" too: its log lines are held, as the agent holds them
        self.summary: _Stream | None = None  # at detail "summary"
        self.held: dict[str, list[dict[str, Any]]] = {}


class ReplayHost:
    """N asyncssh listeners in one process; every agent session replays the recording.

    Op ``detail`` is taken as the agent takes it (when the recording has a summary phase and ``detail`` is on):
    at "summary" the session replays the summary phase while the full phase runs on unsent, its log frames
    held (``hold_frames``, the agent's own); back at "full" the held lines and the whole process table come
    first.  Without it the answer is ``ok: false`` and every session sends everything (an agent without the op:
    the console's worst case)."""

    def __init__(self, replay: Replay, host_key: Any, client_public: bytes, summary: Replay | None = None) -> None:
        import asyncssh

        self.asyncssh = asyncssh
        self.replay = replay
        self.summary = summary
        self.host_key = host_key
        self.authorized = asyncssh.import_authorized_keys(client_public.decode())
        self.listeners: list[Any] = []
        self.sessions: set[_Session] = set()
        self._ticker: asyncio.Task[None] | None = None

    async def listen(self, count: int) -> list[int]:
        ports = []
        for i in range(count):
            name = "replay-%04d" % i
            acceptor = await self.asyncssh.listen(
                host="127.0.0.1", port=0, reuse_address=True, server_host_keys=[self.host_key],
                authorized_client_keys=self.authorized, encoding=None, allow_pty=False,
                agent_forwarding=False, x11_forwarding=False, allow_scp=False, sftp_factory=None,
                keepalive_interval=0, login_timeout=120,
                process_factory=lambda process, name=name: self._session(name, process))
            self.listeners.append(acceptor)
            ports.append(acceptor.get_port())
        self._ticker = asyncio.create_task(self._tick())
        return ports

    async def _session(self, name: str, process: Any) -> None:
        command = process.command or ""
        try:
            if "fleet-console-agentless" in command:  # the link's probe
                process.stdout.write(f"@@fleet python 3.11.2\n@@fleet agent present\n@@fleet host {name}\n".encode())
                process.exit(0)
            elif "fleet_agent.main" in command:
                await self._agent(process)
            elif "uploaded" in command:  # not asked (the probe says present), answered anyway
                await process.stdin.read()
                process.stdout.write(b"uploaded\n")
                process.exit(0)
            else:
                process.stderr.write(b"replay host: only the agent runs here\n")
                process.exit(127)
        except (self.asyncssh.Error, OSError, ConnectionError):
            pass

    async def _agent(self, process: Any) -> None:
        session = _Session(process, time.time() - random.random() * 0.9)
        self.sessions.add(session)
        try:
            first = True
            while True:
                line = await process.stdin.readline()
                if not line:
                    break
                if first:  # the config line
                    first = False
                    continue
                try:
                    req = json.loads(line)
                except ValueError:
                    continue
                now = time.time()
                if req.get("op") == "stop":  # as the agent: answer, then end the session
                    answer = {"type": "result", "ts": now, "id": req.get("id"), "ok": True,
                              "data": {"stopping": True}}
                    process.stdout.write(json.dumps(answer).encode() + b"\n")
                    break
                if req.get("op") == "ping" and req.get("id") == 0 and time.monotonic() - session.sent_at < 5.0:
                    continue  # the watchdog's: the agent answers it only when it sent nothing for 5 s
                if req.get("op") == "ping":
                    answer = {"type": "result", "ts": now, "id": req.get("id"), "ok": True,
                              "data": {"pong": True, "time": now, "uptime": now - session.t0}}
                elif req.get("op") == "detail" and self.summary is not None:
                    level = (req.get("args") or {}).get("level")
                    answer = {"type": "result", "ts": now, "id": req.get("id"), "ok": level in ("full", "summary"),
                              "data": {"level": level}}
                    process.stdout.write(json.dumps(answer).encode() + b"\n" + self._set_level(session, level, now))
                    session.sent_at = time.monotonic()
                    continue
                else:
                    answer = {"type": "result", "ts": now, "id": req.get("id"), "ok": False,
                              "error": f"replay host: {req.get('op')} is not replayed"}
                process.stdout.write(json.dumps(answer).encode() + b"\n")
                session.sent_at = time.monotonic()
        except (self.asyncssh.Error, OSError, ConnectionError):
            pass
        finally:
            self.sessions.discard(session)
            with contextlib.suppress(Exception):
                process.exit(0)

    def _set_level(self, s: _Session, level: str, now: float) -> bytes:
        """Switch ``s`` to ``level``; what the agent sends at once (back at "full": held lines, whole table)."""
        if level == "summary" and s.summary is None:
            s.summary = _Stream(now)
        if level != "full" or s.summary is None:
            return b""
        s.summary = None
        held = [f for frames in s.held.values() for f in frames]
        s.held = {}
        out = [json.dumps(dict(f, ts=round(now, 3))).encode() + b"\n" for f in held]
        if self.replay.full_procs is not None:
            out.append(self.replay.full_procs[0] + b"%.3f" % now + self.replay.full_procs[1] + b"\n")
        return b"".join(out)

    async def _tick(self) -> None:
        from console.agent.wire.loglines import hold_frames

        r, rs = self.replay, self.summary
        while True:
            await asyncio.sleep(TICK)
            now = time.time()
            for s in list(self.sessions):
                out = []
                if s.summary is None:
                    out = [r.line(i, now, loop) for i, loop in s.full.due(r, now)]
                else:
                    held = [r.log_frame(i, now, loop) for i, loop in s.full.due(r, now) if r.is_log(i)]
                    hold_frames(s.held, held, BACKLOG_LINES)
                    if rs is not None:
                        out = [rs.line(i, now, loop) for i, loop in s.summary.due(rs, now)]
                if out:
                    s.sent_at = time.monotonic()
                    try:
                        s.process.stdout.write(b"".join(out))
                    except Exception:  # a closing channel: its reader ends the session
                        self.sessions.discard(s)

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for acceptor in self.listeners:
            acceptor.close()


def serve_main(args: argparse.Namespace) -> int:
    """``scale.py serve``: the replay host process. Prints one JSON line (its ports), then serves until killed."""
    import asyncssh

    raise_nofile()
    work = Path(args.dir)
    replay, summary = load_replays(Path(args.recording))
    host_key = asyncssh.read_private_key(str(work / "host_key"))
    client_public = (work / "client_key.pub").read_bytes()

    async def main() -> None:
        host = ReplayHost(replay, host_key, client_public, None if args.no_detail else summary)
        ports = await host.listen(args.hosts)
        print(json.dumps({"ports": ports}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await host.close()

    asyncio.run(main())
    return 0


# -- 3. the console, driven by keys ---------------------------------------------------------------------------

async def settle_detail(app: Any, hosts: int, timeout: float) -> int:
    """Wait until every instance out of view is at detail "summary" (or ``timeout``); how many are."""
    tracker = app.detail
    t0 = time.monotonic()
    summary = 0
    while tracker is not None and time.monotonic() - t0 < timeout:
        shown = len(app.grid.on_screen_names())
        summary = sum(tracker.level(name) == "summary" for name in app.state.instances)
        if summary + shown >= hosts:
            break
        await asyncio.sleep(0.25)
    return summary


async def drive_console(fleet_path: Path, hosts: int, replay_pid: int | None, *, steady: float = 10.0,
                        presses: int = 30, all_timeout: float = 300.0, key_timeout: float = 3.0,
                        size: tuple[int, int] = (200, 60), detail: bool = True, visits: int = 6) -> dict[str, Any]:
    """Run the console on ``fleet_path`` and measure; the replay host's CPU from ``replay_pid``."""
    import psutil

    from console.core.controller import FleetController
    from console.inventory import load_fleet
    from console.ui.app import FleetApp

    out: dict[str, Any] = {"hosts": hosts}
    fleet = load_fleet(fleet_path)
    controller = FleetController(fleet, read_only=True)
    app = FleetApp(controller)
    me = psutil.Process()
    replay = psutil.Process(replay_pid) if replay_pid else None
    t_start = time.monotonic()
    async with app.run_test(size=size):
        out["gpus"], out["all_gpus_s"] = await wait_all_gpus(controller.state, hosts * GPUS, t_start, all_timeout)
        await asyncio.sleep(2.0)  # past the connect storm
        if detail:  # the hosts out of view at "summary" (console/core/detail.py), the steady state of a big fleet
            out["summary_hosts"] = await settle_detail(app, hosts, timeout=60.0)
            out["detail_settled_s"] = round(time.monotonic() - t_start, 1)
        workers = link_workers(controller)
        out["link_workers"] = len(workers)
        gc_before = (app.idle_gc.collections, app.idle_gc.pause_total_ms)
        _wall, ui, linked, others = await steady_cpu(steady, me, workers, {"replay": replay} if replay else {})
        out["ui_cpu_pct"] = round(ui, 1)
        out["gc_full"] = app.idle_gc.collections - gc_before[0]  # the UI's full collections in the steady window
        out["gc_ms_per_s"] = round((app.idle_gc.pause_total_ms - gc_before[1]) / steady, 2)
        out["workers_cpu_pct"] = round(linked, 1) if workers else None
        out["console_cpu_pct"] = round(ui + linked, 1)
        if "replay" in others:
            out["replay_cpu_pct"] = round(others["replay"], 1)
        out.update(await grid_key_figures(app, presses, key_timeout))
        out.update(await visit_figures(app, visits, key_timeout))
        out["rss_mb"] = round(rss_mb(me))
        out["workers_rss_mb"] = round(sum(w.memory_info().rss for w in workers) / MB) if workers else None
    await controller.stop()  # the app stops it on unmount too; stopping it under a live app races its paint timer
    return out


def status_wall(fleet_path: Path, timeout: float = 300.0) -> float | None:
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "console", "status", "--json", "--fleet", str(fleet_path)],
                              cwd=str(ROOT), capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if not proc.stdout.strip().startswith(b"{"):
        return None
    return round(time.monotonic() - t0, 1)


LINES = [
    ("all_gpus_s", "all {hosts} hosts' GPUs in the header", "s"),
    ("link_workers", "link worker processes", ""),
    ("detail_settled_s", "hosts out of view at detail summary by", "s"),
    ("summary_hosts", "  hosts at summary", ""),
    ("console_cpu_pct", "steady console CPU (UI process + link workers)", "% of a core"),
    ("ui_cpu_pct", "  of which the UI process", "% of a core"),
    ("workers_cpu_pct", "  of which the link workers", "% of a core"),
    ("gc_full", "  the UI's full collections in that window", ""),
    ("gc_ms_per_s", "  their pauses", "ms a second"),
    ("replay_cpu_pct", "replay host CPU", "% of a core"),
    ("rss_mb", "console RSS (UI process)", "MB"),
    ("workers_rss_mb", "link workers' RSS (all)", "MB"),
    ("key_p50_ms", "down-arrow latency p50", "ms"),
    ("key_max_ms", "down-arrow latency max", "ms"),
    ("open_ms", "open an instance: the first", "ms"),
    ("open_p50_ms", "  the next ones p50", "ms"),
    ("open_max_ms", "  all, max", "ms"),
    ("back_ms", "back to the grid: the first", "ms"),
    ("back_p50_ms", "  the next ones p50", "ms"),
    ("back_max_ms", "  all, max", "ms"),
    ("status_json_s", "status --json wall time", "s"),
]


def note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def bench_main(args: argparse.Namespace) -> int:
    raise_nofile()
    console_env()
    top = Path(tempfile.mkdtemp(prefix="fleet-scale-"))
    try:
        if args.recording:
            recording = Path(args.recording)
        else:
            recording = top / "recording.jsonl"
            print(f"recording the agent for {args.record_seconds:g} s ...", file=sys.stderr, flush=True)
            frames = record(args.record_seconds, recording)
            size = recording.stat().st_size
            print(f"recorded {len(frames)} frames, {size / args.record_seconds / 1024:.1f} KB/s, "
                  f"{len(frames) / args.record_seconds:.1f} frames/s per host", file=sys.stderr, flush=True)
        if len(args.hosts) > 1:  # each size in a fresh process: RSS and the collector's work are that size's alone
            for hosts in args.hosts:
                argv = [sys.executable, str(Path(__file__).resolve()), "--hosts", str(hosts), "--recording",
                        str(recording), "--steady", str(args.steady), "--presses", str(args.presses),
                        "--all-timeout", str(args.all_timeout)] + (["--no-detail"] * args.no_detail) + (
                        ["--json"] * args.json)
                if subprocess.run(argv, check=False).returncode != 0:
                    return 1
            return 0
        for hosts in args.hosts:
            work = top / f"h{hosts}"
            work.mkdir()
            t0 = time.monotonic()
            with replay_fleet(hosts, recording, work, detail=not args.no_detail) as fleet:
                note(f"{hosts} hosts: replay host up in {time.monotonic() - t0:.1f} s")
                r = asyncio.run(drive_console(fleet.fleet_path, hosts, fleet.pid, steady=args.steady,
                                              presses=args.presses, all_timeout=args.all_timeout,
                                              detail=not args.no_detail))
                note(f"{hosts} hosts: console done at {time.monotonic() - t0:.1f} s")
                r["status_json_s"] = status_wall(fleet.fleet_path)
            if args.json:
                print_json(r)
            else:
                print_lines(r, LINES)
        return 0
    finally:
        shutil.rmtree(top, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        p = argparse.ArgumentParser(prog="scale.py serve")
        p.add_argument("--hosts", type=int, required=True)
        p.add_argument("--recording", required=True)
        p.add_argument("--dir", required=True)
        p.add_argument("--no-detail", action="store_true", help="do not take op detail (an agent without it)")
        return serve_main(p.parse_args(argv[1:]))
    p = bench_parser(__doc__)
    p.add_argument("--hosts", type=sizes, default="100,500,1000", help="comma-separated fleet sizes")
    p.add_argument("--record-seconds", type=float, default=30.0)
    p.add_argument("--recording", help="reuse this recording (JSON lines from a previous run) instead of recording")
    p.add_argument("--steady", type=float, default=10.0, help="seconds of steady CPU measurement")
    p.add_argument("--presses", type=int, default=30, help="down-arrow presses measured")
    p.add_argument("--all-timeout", type=float, default=300.0, help="seconds to wait for every host's GPUs")
    p.add_argument("--no-detail", action="store_true",
                   help="the replay host does not take op detail: every host sends everything (an agent without "
                        "detail on demand; the console's worst case)")
    p.add_argument("--json", action="store_true", help="one JSON object per size instead of lines")
    return bench_main(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
