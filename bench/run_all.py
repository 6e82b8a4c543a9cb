"""Every benchmark in bench/ at a small, quick size, one after another (``make bench``): a smoke run, not figures.

Each bench runs as its own process (this interpreter, the repository root as working directory) with the smallest
arguments that still exercise all of it (``--list`` shows them), and gets one summary line: its name, ok / missed /
FAILED / skipped, seconds, and its headline figure where it prints one. A bench that needs a program this machine
lacks (sshd, prometheus) is skipped with a line that says so; a failed bench's last lines of output follow its
summary line; a script in bench/ with no entry in ``BENCHES`` fails the run. "missed": the bench ran to its end but
said a goal was not met (its goal exit status, no traceback), which a toy size on a loaded box may do: reported, not
a failure unless ``--strict``. Exits 1 when any bench failed (a non-zero exit, a traceback, or past ``--timeout``).
About 2 minutes on the 2-core dev VM. The figures of docs/benchmarks.md come from the full sizes: the commands
there.

    .venv/bin/python bench/run_all.py [--only NAME ...] [--list] [--verbose] [--timeout S] [--logs DIR] [--strict]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import BENCH, ROOT, bench_parser, find_program

TAIL_LINES = 15  # of a failed bench's output, printed under its summary line


def _have(program: str) -> bool:
    return find_program(program) is not None


def _find(pattern: str, text: str, fmt: str) -> str:
    """``fmt`` filled with the groups of the last match of ``pattern`` in ``text``; "" when none."""
    matches = list(re.finditer(pattern, text, re.MULTILINE))
    return fmt.format(*matches[-1].groups()) if matches else ""


def _join(*parts: str) -> str:
    return ", ".join(p for p in parts if p)


def _agent(out: str) -> str:
    rows = re.findall(r"^\| agent, (\w+) backend \| ([\d.]+) ", out, re.MULTILINE)
    return ("agent CPU " + ", ".join(f"{b} {ms} ms" for b, ms in rows) + " a sample") if rows else ""


def _cipher(out: str) -> str:
    return _find(r"^(\S+)\s+bulk\s+([\d.]+) CPU s per 100 MB", out, "{0} bulk {1} CPU s per 100 MB")


@dataclass
class Bench:
    name: str  # the script's file name without .py
    args: list[str]
    headline: Callable[[str], str] = lambda out: ""
    needs: tuple[str, ...] = ()  # programs without which the bench is skipped
    without: dict[str, list[str]] = field(default_factory=dict)  # program -> extra args when it is missing
    goal_exit: int | None = None  # the exit status by which the bench says it ran but missed a goal

    def argv(self) -> list[str]:
        extra = [a for program, more in self.without.items() if not _have(program) for a in more]
        return [sys.executable, str(BENCH / f"{self.name}.py"), *self.args, *extra]

    def missing(self) -> list[str]:
        return [p for p in self.needs if not _have(p)]


BENCHES = [
    Bench("agent_bench", ["--samples", "3", "--warmup", "3", "--extra", "20", "--sim-samples", "2",
                          "--ssh-polls", "2"], _agent, without={"sshd": ["--no-over-ssh"]}),
    Bench("cipher_bench", ["--mb", "4", "--lines", "2000", "--rounds", "1", "--ciphers", "aes128-gcm@openssh.com"],
          _cipher, needs=("sshd",)),
    Bench("diagnose_bench", ["--mb", "2", "--runs", "2"],
          lambda out: _find(r"first ([\d.]+ s), then median ([\d.]+ s)", out, "diagnose 2 MB log: {0}, then {1}"),
          goal_exit=1),  # 1: slower than 3 s
    Bench("header_bench", ["--hosts", "100,500", "--paints", "20"],
          lambda out: _find(r"^hosts=(\d+)\s+totals\(\) per paint\s+(\d+) us", out, "totals() at {0} hosts {1} us")),
    Bench("incidents", ["--only", "finished-hf-training", "cuda-driver-too-old", "--workers", "1"],
          lambda out: _find(r"^right: (\S+ \([\d.]+ %\))", out, "right {0}"), needs=("sshd",),
          goal_exit=1),  # 1: an incident answered wrong
    Bench("inventory_bench", ["--sizes", "100,1000", "--repeat", "1"],
          lambda out: _find(r"^load_fleet\s+(\d+) instances .*?:\s+([\d.]+) s wall", out,
                            "load_fleet {0} instances {1} s")),
    Bench("notify_latency", ["--min-duration", "1s", "--group-wait", "1s"],
          lambda out: _find(r"^\s*slowest_s: (\S+)", out, "kill to message {0} s"), needs=("sshd",), goal_exit=3),
    Bench("open_bench", [],
          lambda out: _join(_find(r"^open ms .* median of 3-8 (\d+)", out, "open {0} ms"),
                            _find(r"^back ms .* median of 3-8 (\d+)", out, "back {0} ms"))),
    Bench("prom_bench", ["--hosts", "20", "--polls", "2", "--interval", "1"],
          lambda out: _find(r"^console CPU per poll p50 (\d+ ms)", out, "console CPU per poll p50 {0}"),
          needs=("prometheus",)),
    Bench("report_bench", ["--instances", "20", "--days", "1", "--repeat", "1"],
          lambda out: _find(r"^command_s: (\S+)", out, "report {0} s"), goal_exit=1),
    Bench("scale", ["--hosts", "10", "--record-seconds", "4", "--steady", "2", "--presses", "5",
                    "--all-timeout", "60"],
          lambda out: _join(_find(r"steady console CPU .*?\s(\S+) % of a core$", out, "console {0} %"),
                            _find(r"down-arrow latency p50\s+(\S+) ms$", out, "keys p50 {0} ms"))),
    Bench("serve_scale", ["--hosts", "10", "--record-seconds", "4", "--every", "1", "--scrapes", "2",
                          "--all-timeout", "60"],
          lambda out: _join(_find(r"serve CPU .*?\s(\S+) % of a core$", out, "serve {0} %"),
                            _find(r"/metrics scrape max\s+(\S+) ms$", out, "scrape max {0} ms"))),
    Bench("serve_bench", ["--seconds", "3", "--instances", "10", "--history-minutes", "2"],
          lambda out: _join(_find(r"^\s*cpu_percent: (\S+)", out, "CPU {0} %"),
                            _find(r"^\s*scrape_ms_p50: (\S+)", out, "scrape p50 {0} ms"))),
    Bench("soak", ["--minutes", "0.2", "--instances", "3", "--visits", "3"],
          lambda out: _find(r"^RSS start .*?: ([-+][\d.]+ MB) over", out, "RSS {0}"), goal_exit=1),
    Bench("ui_bench", ["--seconds", "3", "--instances", "20"],
          lambda out: _join(_find(r"^cpu_percent_one_core\s+(\S+)", out, "CPU {0} %"),
                            _find(r"^loop_lag_ms\s+.*'p99': ([\d.]+)", out, "lag p99 {0} ms")), goal_exit=1),
]


def run(bench: Bench, timeout: float, log: Path | None, verbose: bool) -> tuple[str, float, str, str]:
    """("ok" | "FAILED" | "skipped: needs X", seconds, headline or why it failed, its output)."""
    missing = bench.missing()
    if missing:
        return "skipped: needs " + ", ".join(missing), 0.0, "", ""
    t0 = time.monotonic()
    proc = subprocess.Popen(bench.argv(), cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True, errors="replace")
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = t0 + timeout
    timed_out = False

    def stop() -> None:  # SIGINT first: the benches' finally blocks stop their sshd, Prometheus, children
        for sig, wait in ((signal.SIGINT, 15), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait)
                return

    def reader() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if verbose:
                print("    " + line, end="", flush=True)

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                timed_out = True
                stop()
                break
            time.sleep(0.2)
    except KeyboardInterrupt:
        stop()
        raise
    thread.join(5)
    seconds = time.monotonic() - t0
    out = "".join(lines)
    if log is not None:
        (log / f"{bench.name}.log").write_text(out)
    if timed_out:
        return "FAILED", seconds, f"timed out after {timeout:g} s", out
    if proc.returncode == bench.goal_exit and "Traceback (most recent call last)" not in out:
        return "missed", seconds, _join("goal missed", _headline(bench, out)), out
    if proc.returncode != 0:
        return "FAILED", seconds, f"exit {proc.returncode}", out
    return "ok", seconds, _headline(bench, out), out


def _headline(bench: Bench, out: str) -> str:
    try:
        return bench.headline(out)
    except (IndexError, ValueError, KeyError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these benches (e.g. ui_bench scale)")
    parser.add_argument("--list", action="store_true", help="list the benches and their commands, run nothing")
    parser.add_argument("--verbose", action="store_true", help="print each bench's output as it runs")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a bench may take (default 240)")
    parser.add_argument("--logs", metavar="DIR", help="write each bench's whole output to DIR/NAME.log")
    parser.add_argument("--strict", action="store_true", help="a missed goal fails the run too")
    args = parser.parse_args(argv)
    benches = BENCHES
    if args.only:
        wanted = {Path(n).name.removesuffix(".py") for n in args.only}
        unknown = wanted - {b.name for b in BENCHES}
        if unknown:
            parser.error("no such bench: %s (--list shows them)" % ", ".join(sorted(unknown)))
        benches = [b for b in BENCHES if b.name in wanted]
    if args.list:
        for b in benches:
            notes = ["needs %s" % p for p in b.needs]
            notes += ["without %s: %s" % (p, " ".join(more)) for p, more in b.without.items()]
            print(f"{b.name:<16} {' '.join(['bench/%s.py' % b.name, *b.args])}"
                  + ("  (%s)" % "; ".join(notes) if notes else ""))
        return 0
    log = Path(args.logs) if args.logs else None
    if log is not None:
        log.mkdir(parents=True, exist_ok=True)
    width = max(len(b.name) for b in benches)
    started = time.monotonic()
    counts = {"ok": 0, "missed": 0, "FAILED": 0, "skipped": 0}
    for bench in benches:
        result, seconds, detail, out = run(bench, args.timeout, log, args.verbose)
        counts[result.split(":")[0]] += 1
        if result.startswith("skipped"):
            print(f"{bench.name:<{width}}  {result}", flush=True)
        else:
            print(f"{bench.name:<{width}}  {result:<8} {seconds:6.1f} s  {detail}".rstrip(), flush=True)
        if (result == "FAILED" or (result == "missed" and args.strict)) and not args.verbose:
            for line in out.splitlines()[-TAIL_LINES:]:
                print("    | " + line, flush=True)
    if not args.only:  # a script added to bench/ without its small arguments here is not run: say so
        known = {b.name for b in BENCHES} | {"common", "run_all"}
        for script in sorted(BENCH.glob("*.py")):
            if script.stem not in known:
                counts["FAILED"] += 1
                why = "not in bench/run_all.py's BENCHES (its small arguments go there)"
                print(f"{script.stem:<{width}}  FAILED   {why}", flush=True)
    total = time.monotonic() - started
    print(f"{len(benches)} benches in {total:.0f} s: {counts['ok']} ok, {counts['missed']} missed a goal, "
          f"{counts['FAILED']} failed, {counts['skipped']} skipped", flush=True)
    return 1 if counts["FAILED"] or (args.strict and counts["missed"]) else 0


if __name__ == "__main__":
    sys.exit(main())
