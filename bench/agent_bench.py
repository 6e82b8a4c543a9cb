"""Agent cost benchmark: CPU per sample, RSS and wire bytes with 500 extra idle processes and 8 simulated GPUs.

Runs the real agent (``python -m console.agent``) at 1 Hz against the whole host's process table, once per
process backend (psutil, /proc), after a warm-up of 130 samples (idle processes settle into their slowest reading
period), and compares with the per-poll way: one agent sample done by a fresh ``python3 -c`` per sample (the
agent's own GPU and process samplers run once, frames written to stdout: ``same_work_poll``); a psutil snapshot of
the process table alone (less work: no GPUs, no wchan) is measured as a reference too.  Takes about 6 min, plus
~15 s for the over-SSH part.

The per-poll way is measured twice.  Locally: the ``python3 -c`` run here, with no SSH (its CPU from
``RUSAGE_CHILDREN``).  Over SSH, as the console would poll: a real OpenSSH sshd on 127.0.0.1 (the tests'
``tests.support.sshd.Sshd``), one persistent asyncssh connection to it, and per poll one ``conn.run`` of the same
poll (the interpreter running this benchmark, by its absolute path, which has psutil); its cost is the
CPU on the host side: every process in sshd's tree (``/proc/PID/stat`` fields 14-17: utime + stime of the
per-connection sshd, plus cutime + cstime of what it reaped, i.e. the shell and the python it ran), read before
and after each poll.  The client's (asyncssh's) CPU is not counted: the agent's figure is host-side too.
``true`` is run over SSH the same way: the fixed cost of one SSH exec (sshd's session setup, the user's shell
and its rc files).  The rc files' part is measured apart, locally: the user's shell running ``-c true`` with
``SSH_CLIENT`` set (bash then reads ``~/.bashrc``, as under sshd) minus without it; the "without this host's
rc" baseline is the over-SSH poll less that.  Each round runs ``true`` and the poll over SSH, then these two
shells and the local ``python3 -c`` poll, so the host's drift hits all alike.  ``--no-over-ssh`` skips it.

The agent's CPU time is read from its process CPU clock (``clock_gettime`` on the pid's CPU-time clock:
nanoseconds, all threads), not from the 10 ms ticks of ``/proc/PID/stat``; psutil ``cpu_times`` is the
fallback.  The simulated NVML is pure Python and re-reads its state file, which a real driver call does
not, so its own cost is measured apart (the GPU sampler over the sim against the same sampler over a
constant stub, both in this process at the agent's pace) and reported next to the agent's figure; it is
included in the agent's figure, never subtracted from it silently.

    .venv/bin/python bench/agent_bench.py [--samples 30] [--warmup 30] [--extra 500] [--ssh-polls 20] [--no-over-ssh]
                                          [--isolate] [--json]

``--isolate`` re-runs it in a new PID namespace (``unshare``), so that a shared machine's other processes
(their churn, their busy readings) stay out of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import queue
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from common import (
    ROOT,
    bench_parser,
    children_cpu_ms,
    cpu_clock,
    find_program,
    names,
    rank,
    ssh_connect,
    sshd_server,
)

from console.agent.sample import nvml_sim
from console.agent.wire import config as agent_config

# A reference that does less than one sample's work: the process table through psutil, no GPUs, no wchan.
PSUTIL_SNAPSHOT = (
    "import psutil; "
    "[p.info for p in psutil.process_iter(['pid','ppid','name','cmdline','status','cpu_times',"
    "'memory_info','create_time'])]"
)


def same_work_poll(state_file: str) -> str:
    """``python3 -c`` code doing one agent sample the per-poll way: a fresh interpreter runs the agent's own GPU
    and process samplers once (the same NVML module and GPUs, the same /proc reads, wchan included; every
    process read in full, as any first sample must) and writes the two frames to stdout, as the agent would."""
    return (
        "import sys; sys.path.insert(0, %r); "
        "from console.agent.sample.gpu import GpuSampler; from console.agent.sample.procs import ProcSampler; "
        "from console.agent.wire.protocol import FrameWriter; "
        "c = {'gpu': {'simulate': {'gpus': 8, 'state_file': %r}}}; g = GpuSampler(c); p = ProcSampler(c); "
        "w = FrameWriter(); w.send('gpu', **g.sample()); w.send('procs', **p.sample(g.memory_by_pid()))"
    ) % (str(ROOT), state_file)


def run_agent(backend: str, samples: int, warmup: int, state_file: str, env: dict | None = None) -> dict:
    """The agent's cost; with ``env`` (``fake_gpus.fake_host``) over the fake libnvidia-ml.so.1, not the sim."""
    cfg = {
        "interval": 1.0,
        "heartbeat_interval": 5.0,
        "watch_dirs": [],
        "logs": [],
        "proc_backend": backend,
        "gpu": {"simulate": {"gpus": 8, "state_file": state_file}} if env is None else {},
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.agent", "--config", agent_config.encode(cfg), "--no-stdin"],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        env=env,
    )
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put((time.monotonic(), len(line), json.loads(line)["type"]))
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    ps = psutil.Process(proc.pid)
    cpu, cpu_source = cpu_clock(proc.pid)
    gpu_frames = 0
    window_bytes = 0
    by_type: dict = {}
    t0 = cpu0 = last_cpu = None
    steps = []  # CPU between gpu frames: one loop turn (GPU, procs every procs_interval, logs, heartbeat)
    try:
        while True:
            item = lines.get(timeout=30)
            if item is None:
                raise RuntimeError("agent exited")
            when, size, kind = item
            if t0 is not None:
                window_bytes += size
                by_type[kind] = by_type.get(kind, 0) + size
            if kind != "gpu":
                continue
            gpu_frames += 1
            now_cpu = cpu()
            if gpu_frames == 1:
                first_cpu = now_cpu
            if gpu_frames > warmup and last_cpu is not None:
                steps.append(now_cpu - last_cpu)
            last_cpu = now_cpu
            if gpu_frames == warmup:
                t0, window_bytes, by_type = when, 0, {}
                cpu0 = now_cpu
                warmup_ms = (now_cpu - first_cpu) / max(1, warmup - 1) * 1000.0
            elif gpu_frames == warmup + samples:
                cpu1 = now_cpu
                elapsed = when - t0
                rss = ps.memory_info().rss
                break
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "backend": backend,
        "cpu_ms_per_sample": (cpu1 - cpu0) / samples * 1000.0,
        "warmup_cpu_ms_per_sample": warmup_ms,
        "cpu_ms_median": rank(steps, 50) * 1000.0,
        "cpu_ms_max": rank(steps, 100) * 1000.0,
        "cpu_source": cpu_source,
        "rss_mb": rss / 1e6,
        "bytes_per_s": window_bytes / elapsed,
        "bytes_per_s_by_type": {k: v / elapsed for k, v in sorted(by_type.items())},
    }


class _StubNvml:
    """Constant answers with pynvml's names: what the GPU sampler costs with the NVML calls themselves ~free."""

    class NVMLError(Exception):
        pass

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self, gpus: int, pids: list) -> None:
        self.gpus = gpus
        self.util = type("U", (), {"gpu": 95, "memory": 57})()
        self.mem = type("M", (), {"total": 24 << 30, "used": 20 << 30, "free": 4 << 30})()
        self.procs = [[type("P", (), {"pid": pid, "usedGpuMemory": 20000 << 20})()] for pid in pids]
        for name, value in (
            ("nvmlInit", None),
            ("nvmlSystemGetDriverVersion", "550.54.15"),
            ("nvmlDeviceGetCount", gpus),
            ("nvmlDeviceGetName", "stub"),
            ("nvmlDeviceGetUUID", "GPU-stub"),
            ("nvmlDeviceGetEnforcedPowerLimit", 350000),
        ):
            setattr(self, name, (lambda v: lambda *a: v)(value))

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        return self.util

    def nvmlDeviceGetMemoryInfo(self, handle):
        return self.mem

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1695 if kind == 1 else 9751

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle):
        return self.procs[handle]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        return 74

    def nvmlDeviceGetPowerUsage(self, handle):
        return 311200

    def nvmlDeviceGetFanSpeed(self, handle):
        return 78


def sim_overhead(state_file: str, pids: list, samples: int, pace: float = 0.5) -> dict:
    """CPU ms per 8-GPU sample of the GPU sampler over nvml_sim and over a constant stub, here, at a slow pace
    (as in the agent: caches go cold between samples); their difference is the simulator's own cost."""
    from console.agent.sample.gpu import GpuSampler

    sim = GpuSampler({"gpu": {"simulate": {"gpus": 8, "state_file": state_file}}})
    stub = GpuSampler({}, module=_StubNvml(8, pids))
    totals = {"sim": 0.0, "stub": 0.0}
    for sampler in (sim, stub):
        sampler.sample()
    for _ in range(samples):
        for name, sampler in (("sim", sim), ("stub", stub)):
            time.sleep(pace)
            t = time.thread_time()
            sampler.sample()
            totals[name] += time.thread_time() - t
    sim.close()
    out = {k: v / samples * 1000.0 for k, v in totals.items()}
    out["overhead"] = max(0.0, out["sim"] - out["stub"])
    return out


def per_poll_cost(runs: int, code: str) -> float:
    """CPU ms of one fresh ``python3 -c code`` (its output discarded), averaged over ``runs``."""
    argv = [sys.executable, "-c", code]
    return sum(children_cpu_ms(argv, stdout=subprocess.DEVNULL) for _ in range(runs)) / runs


def _tree_ticks(pids: list) -> dict:
    """utime + stime + cutime + cstime (``/proc/PID/stat`` fields 14-17, clock ticks) of each pid still there."""
    out = {}
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        out[pid] = sum(int(x) for x in fields[11:15])  # fields[0] is field 3 (state)
    return out


def _local_steps(poll: str) -> tuple:
    """The local components measured next to the SSH polls: the user's shell running ``-c true`` as sshd
    starts it (``SSH_CLIENT`` set, so bash reads ``~/.bashrc``) and without ``SSH_CLIENT`` (no rc file), in
    sshd's environment otherwise; and the local ``python3 -c`` poll."""
    user = pwd.getpwuid(os.getuid())
    env = {
        "HOME": user.pw_dir,
        "USER": user.pw_name,
        "LOGNAME": user.pw_name,
        "SHELL": user.pw_shell,
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",  # sshd's default
    }
    steps = {
        "shell_with_rc": lambda: children_cpu_ms(
            [user.pw_shell, "-c", "true"], env=dict(env, SSH_CLIENT="127.0.0.1 50000 22"), cwd=user.pw_dir
        ),
        "shell_without_rc": lambda: children_cpu_ms([user.pw_shell, "-c", "true"], env=env, cwd=user.pw_dir),
        "local_poll": lambda: per_poll_cost(1, poll),
    }
    return user.pw_shell, steps


async def _ssh_polls(server, polls: int, poll: str) -> dict:
    conn = await ssh_connect(server, agent_path=None, connect_timeout=15)
    commands = {"true": "true", "poll": "%s -c %s" % (shlex.quote(sys.executable), shlex.quote(poll))}
    shell, local = _local_steps(poll)
    ticks = dict.fromkeys(commands, 0)
    local_ms = dict.fromkeys(local, 0.0)
    lost = 0  # processes of sshd's tree that were gone after a command (their CPU then is not counted)
    async with conn:
        for command in commands.values():  # warm-up: the first exec of each pays cold caches
            await conn.run(command, check=True, timeout=60)
        tree = [server.proc.pid, *server.session_pids()]
        for _ in range(polls):  # all interleaved, so the host's drift hits each figure alike
            for name, command in commands.items():
                before = _tree_ticks([server.proc.pid, *server.session_pids()])
                await conn.run(command, check=True, timeout=60)
                after = _tree_ticks([server.proc.pid, *server.session_pids()])
                ticks[name] += sum(t - before.get(pid, 0) for pid, t in after.items())
                lost += len(before.keys() - after.keys())
            for name, step in local.items():
                local_ms[name] += step()
    hz = os.sysconf("SC_CLK_TCK")
    out: dict = {name: t / hz / polls * 1000.0 for name, t in ticks.items()}
    out.update({name: t / polls for name, t in local_ms.items()})
    out.update(polls=polls, clk_tck=hz, sshd_processes=len(tree), lost_processes=lost, shell=shell)
    return out


def over_ssh_cost(polls: int, workdir: str, poll: str) -> dict:
    """The per-poll way over SSH (see the module's doc); sshd and its sessions are stopped, even on error."""
    with sshd_server(Path(workdir) / "sshd") as server:
        out = asyncio.run(_ssh_polls(server, polls, poll))
    sshd = find_program("sshd")
    assert sshd is not None
    out["sshd"] = subprocess.run([sshd, "-V"], capture_output=True, text=True).stderr.strip()
    out["rc_excess"] = max(0.0, out["shell_with_rc"] - out["shell_without_rc"])
    out["poll_without_rc"] = max(0.01, out["poll"] - out["rc_excess"])
    out["true_without_rc"] = max(0.0, out["true"] - out["rc_excess"])
    return out


ISOLATED_ENV = "FLEET_AGENT_BENCH_ISOLATED"


def isolate() -> int:
    """Run this same benchmark again inside a new PID namespace with its own /proc (util-linux ``unshare``)."""
    argv = [a for a in sys.argv[1:] if a != "--isolate"]
    unshare = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        unshare[1:1] = ["--user", "--map-root-user"]
    env = dict(os.environ, **{ISOLATED_ENV: "1"})
    return subprocess.call([*unshare, sys.executable, os.path.abspath(__file__), *argv], env=env)


def fake_nvml_run(args: argparse.Namespace, sleepers: list) -> int:
    """``--fake-nvml``: the whole agent (GPU sampler with the health path, Xid poll, processes) per sample."""
    from fake_gpus import fake_host

    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = fake_host(tmp, [p.pid for p in sleepers])
            nprocs = len(psutil.pids())
            load_before = os.getloadavg()
            results = [run_agent(b, args.samples, args.warmup, "", env=env) for b in args.backends]
            load_after = os.getloadavg()
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
    print("fake libnvidia-ml.so.1 (real pynvml path), 8 GPUs reporting every health field; %d processes (%d extra "
          "idle sleeps); %d samples at 1 Hz after %d; %d CPUs; load average %.2f before, %.2f after; agent CPU from "
          "the %s\n" % (nprocs, args.extra, args.samples, args.warmup, os.cpu_count() or 0, load_before[0],
                        load_after[0], results[0]["cpu_source"]))
    print("| what | CPU ms/sample (median, max) | first %d s | RSS MB | wire B/s |" % args.warmup)
    print("|---|---|---|---|---|")
    for r in results:
        print("| agent, %s backend | %.2f (%.2f, %.2f) | %.2f | %.1f | %.0f |" % (
            r["backend"], r["cpu_ms_per_sample"], r["cpu_ms_median"], r["cpu_ms_max"], r["warmup_cpu_ms_per_sample"],
            r["rss_mb"], r["bytes_per_s"]))
    if args.json:
        print(json.dumps({"results": results, "load": [load_before, load_after]}, indent=2))
    return 0


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument(
        "--warmup",
        type=int,
        default=130,
        help="samples before the measured ones: an idle process is read every ~10 s after ~15 s and every ~20 s "
        "after ~2 min (its slowest period)",
    )
    parser.add_argument("--extra", type=int, default=500, help="idle sleep processes to add to the host")
    parser.add_argument("--backends", type=names, default="psutil,proc")
    parser.add_argument("--sim-samples", type=int, default=10, help="samples for the simulator's own cost")
    parser.add_argument(
        "--over-ssh",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also measure the per-poll way over SSH to a local OpenSSH sshd (default: on; ~10-15 s)",
    )
    parser.add_argument("--ssh-polls", type=int, default=20, help="polls (and `true`s) over SSH")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument(
        "--fake-nvml",
        action="store_true",
        help="the agent alone over the fake libnvidia-ml.so.1 (8 GPUs, every health field): bench/fake_gpus.py",
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run in a new PID namespace (unshare): the agent sees the sleeps and itself, not a busy host's churn",
    )
    args = parser.parse_args()
    if args.isolate and not os.environ.get(ISOLATED_ENV):
        return isolate()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(args.extra)]
    if args.fake_nvml:
        return fake_nvml_run(args, sleepers)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state_file = os.path.join(tmp, "gpus.json")
            # 8 busy GPUs, one benchmark process each (some of the sleepers stand in for them)
            gpus = [{"load": 95, "processes": [{"pid": sleepers[i].pid, "mem_mib": 20000 + i}]} for i in range(8)]
            nvml_sim.write_state(state_file, {"gpus": gpus})
            nprocs = len(psutil.pids())
            poll = same_work_poll(state_file)
            per_poll_before = per_poll_cost(4, poll)  # before and after the agent runs: the host's load drifts
            snapshot_before = per_poll_cost(4, PSUTIL_SNAPSHOT)
            results = [run_agent(b, args.samples, args.warmup, state_file) for b in args.backends]
            per_poll_after = per_poll_cost(4, poll)
            snapshot_after = per_poll_cost(4, PSUTIL_SNAPSHOT)
            per_poll = (per_poll_before + per_poll_after) / 2
            snapshot = (snapshot_before + snapshot_after) / 2
            ssh: dict | None = None
            ssh_error = ""
            if args.over_ssh:
                try:
                    ssh = over_ssh_cost(args.ssh_polls, tmp, poll)
                except Exception as exc:  # reported below; the rest of the figures stand
                    ssh_error = "%s: %s" % (type(exc).__name__, exc)
            sim = sim_overhead(state_file, [p.pid for p in sleepers[:8]], args.sim_samples)
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
    print(
        "%s processes during the run: %d (%d extra idle sleeps); %d samples at 1 Hz; 8 simulated GPUs; %d CPUs; "
        "Python %s; agent CPU from the %s"
        % (
            "PID namespace (--isolate)" if os.environ.get(ISOLATED_ENV) else "host",
            nprocs,
            args.extra,
            args.samples,
            os.cpu_count() or 0,
            sys.version.split()[0],
            results[0]["cpu_source"],
        )
    )
    print()
    # the baselines the agent's CPU per sample is compared with: (label, CPU ms per poll)
    baselines = [
        (
            "local per-poll",
            "per-poll: one agent sample in a fresh `python3 -c`, local (no SSH)",
            per_poll,
            "%.1f before, %.1f after the agents" % (per_poll_before, per_poll_after),
        ),
        (
            "local psutil-only snapshot",
            "less work: a psutil snapshot of the process table only (no GPUs, no wchan), local",
            snapshot,
            "%.1f before, %.1f after the agents" % (snapshot_before, snapshot_after),
        ),
    ]
    if ssh is not None:
        baselines += [
            (
                "over SSH",
                "the per-poll sample over SSH, one open connection (host side: sshd + shell + python)",
                ssh["poll"],
                "",
            ),
            (
                "over SSH without this host's rc",
                "the same, less this host's shell rc files (%.1f ms)" % ssh["rc_excess"],
                ssh["poll_without_rc"],
                "",
            ),
        ]
    print(
        "| what | CPU ms/sample (median, max) | first %d s | without the sim's own cost | RSS MB | wire B/s | %s |"
        % (args.warmup, " | ".join("vs %s" % b[0] for b in baselines))
    )
    print("|---|---|---|---|---|---|%s" % ("---|" * len(baselines)))
    for r in results:
        print(
            "| agent, %s backend | %.2f (%.2f, %.2f) | %.2f | %.2f | %.1f | %.0f | %s |"
            % (
                r["backend"],
                r["cpu_ms_per_sample"],
                r["cpu_ms_median"],
                r["cpu_ms_max"],
                r["warmup_cpu_ms_per_sample"],
                max(0.01, r["cpu_ms_per_sample"] - sim["overhead"]),
                r["rss_mb"],
                r["bytes_per_s"],
                " | ".join("%.0fx cheaper" % (b[2] / r["cpu_ms_per_sample"]) for b in baselines),
            )
        )
    for index, (_, label, cost, detail) in enumerate(baselines):
        cells = ["1x" if i == index else "-" for i in range(len(baselines))]
        print(
            "| %s | %.1f%s | - | - | - | - | %s |"
            % (label, cost, " (%s)" % detail if detail else "", " | ".join(cells))
        )
    print(
        "\nper-poll sample: a fresh interpreter runs the agent's GPU and process samplers once (same NVML module and"
        " GPUs, every process read in full with its wchan) and writes both frames to stdout (`same_work_poll`)"
    )
    print()
    if ssh is not None:
        print(
            "over SSH (%s; %d rounds of: `true` over SSH, the poll over SSH, then locally `%s -c true` with and"
            " without its rc files and the local `python3 -c` poll; one asyncssh connection; CPU of sshd's %d"
            " process(es) incl. what they reaped, /proc ticks at %d Hz; client side not counted%s):"
            % (
                ssh["sshd"],
                ssh["polls"],
                ssh["shell"],
                ssh["sshd_processes"],
                ssh["clk_tck"],
                "; %d process(es) of sshd's tree vanished mid-run, their CPU NOT counted" % ssh["lost_processes"]
                if ssh["lost_processes"]
                else "",
            )
        )
        print(
            "  per-poll sample over SSH %.1f ms = `true` over SSH %.1f ms (sshd's session + %s + its rc files)"
            " + the rest %.1f ms (the local `python3 -c` poll in the same rounds: %.1f ms)"
            % (ssh["poll"], ssh["true"], ssh["shell"], ssh["poll"] - ssh["true"], ssh["local_poll"])
        )
        print(
            "  this host's shell rc files: %.1f ms (`%s -c true` as sshd starts it %.1f ms, without reading rc"
            " files %.1f ms); `true` over SSH without them: %.1f ms; poll over SSH without them: %.1f ms"
            % (
                ssh["rc_excess"],
                ssh["shell"],
                ssh["shell_with_rc"],
                ssh["shell_without_rc"],
                ssh["true_without_rc"],
                ssh["poll_without_rc"],
            )
        )
    elif args.over_ssh:
        print("over SSH: NOT measured (%s)" % ssh_error)
    else:
        print("over SSH: not measured (--no-over-ssh)")
    for r in results:
        print(
            "wire B/s by frame type, %s backend: %s"
            % (r["backend"], ", ".join("%s %.0f" % kv for kv in r["bytes_per_s_by_type"].items()))
        )
    print(
        "simulated NVML's own cost: %.2f ms/sample (8-GPU sample over nvml_sim %.2f ms, over a constant stub %.2f ms;"
        " a real driver's calls cost what they cost instead, not measured here)"
        % (sim["overhead"], sim["sim"], sim["stub"])
    )
    print()
    print("goals: < 5 ms CPU/sample, RSS < 60 MB, < 2048 B/s, >= 50x cheaper than per-poll")
    for name, _, cost, _ in baselines:
        ratios = [cost / r["cpu_ms_per_sample"] for r in results]
        print(
            "  >= 50x vs %s (%.1f ms): %s (%s)"
            % (
                name,
                cost,
                "met" if min(ratios) >= 50 else "NOT met",
                ", ".join("%s %.0fx" % (r["backend"], x) for r, x in zip(results, ratios, strict=True)),
            )
        )
    if args.json:
        print(
            json.dumps(
                {
                    "results": results,
                    "per_poll_ms": per_poll,
                    "psutil_snapshot_ms": snapshot,
                    "over_ssh": ssh,
                    "over_ssh_error": ssh_error or None,
                    "sim": sim,
                    "host_processes": nprocs,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
