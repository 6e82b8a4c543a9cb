"""The agent's main loop: hello, then samples on a clock, and requests answered by id (``ops.OPS``).

The detail level (op ``detail``) is "full" unless the console asks for "summary" for a host it does not show:
then GPU frames on change, the benchmark's processes every 5 s, log lines held until "full" again."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

from . import AGENT_VERSION, pidlock
from .actions.journal import Journal
from .ops import OPS, Handler
from .sample.gpu import GpuSampler
from .sample.logs import LogFollower
from .sample.procfs import task_signature
from .sample.procs import ProcSampler
from .wire import config as agent_config
from .wire.config import AgentConfig, compile_patterns, plain
from .wire.frames import xid_frame
from .wire.protocol import PROTOCOL_VERSION, FrameWriter, ProtocolError, decode_request

LEVELS = ("full", "summary")  # op ``detail``: what the console wants of this host (see ``Agent.level``)
SUMMARY_PROCS_EVERY = 5.0  # seconds between process samples at "summary" (the benchmark-up check)
# At "summary" a heartbeat says only that the agent lives, which its GPU summaries (at least every 5 s) already do:
# it is sent when nothing else went out for a heartbeat interval, right after a level change (it says the level),
# and at least this often. 6 of a quiet host's 14 frames in 30 s were heartbeats (bench/scale.py's recording).
SUMMARY_HEARTBEAT_EVERY = 30.0
HEARTBEAT_SLACK = 0.05  # seconds: a heartbeat due this close to a heartbeat interval after the last frame goes now
PING_QUIET = 5.0  # the console's watchdog ping (id 0) is answered only after this long without a frame sent


class Agent:
    """Owns the samplers and the frame writer; one instance per agent process."""

    def __init__(self, config: AgentConfig, writer: FrameWriter, journal: Optional[Journal] = None,
                 watchdog: float = 0.0) -> None:
        self.config = config
        self.writer = writer
        self.stop_event = threading.Event()
        self.wake = threading.Event()  # the loop's sleep ends early: a stop, a fresh sample asked for
        self._fresh_lock = threading.Lock()
        self._fresh_waiters: List[threading.Event] = []  # request threads waiting for a fresh sample
        self.journal = journal or Journal()
        # Seconds without a line from the console after which the agent exits (0: never; the console pings
        # every heartbeat); stdin's end then stops it too. An orphan left by a lost connection goes away.
        self.watchdog = watchdog
        self.last_heard = time.monotonic()
        self.gpu = GpuSampler(plain(config))
        self.procs = ProcSampler(plain(config))
        self.logs = LogFollower(plain(config))
        self.started = time.time()
        self.samples = 0
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="request")
        self._error_quiet_until: Dict[str, float] = {}
        # Detail level: "full" (every stream, the default) or "summary" (the console does not show this host:
        # GPU frames on change or every 5 s, the benchmark's processes every 5 s, log lines held until "full").
        # The op sets ``wanted_level`` (a request thread); the loop applies it (``_apply_level``).
        self.level = "full"
        self.wanted_level = "full"
        bench = config.get("benchmark") or {}
        self._bench_patterns = compile_patterns(bench.get("match")) + compile_patterns(bench.get("entrypoint"))
        self._next_summary_procs = 0.0
        self._next_procs = 0.0  # monotonic time the process table is read again at "full" (``_procs_due``)
        self._procs_seen: tuple = ()  # what started that wait: the task signature and the GPUs' pids
        self._heartbeat_at = -1e9  # monotonic time of the last heartbeat sent
        self._heartbeat_level = ""  # the level it said

    # -- frames ---------------------------------------------------------------------------------
    def hello(self) -> None:
        self.writer.send(
            "hello",
            v=PROTOCOL_VERSION,
            agent_version=AGENT_VERSION,
            host=socket.gethostname(),
            pid=os.getpid(),
            python=".".join(str(x) for x in sys.version_info[:3]),
            features=self.features(),
        )

    def features(self) -> Dict[str, Any]:
        return {
            "psutil": self.procs.uses_psutil,
            "gpu": self.gpu.state,
            "simulated_gpu": self.gpu.simulated,
            "ops": sorted(OPS),
            **self.gpu.features(),  # pid_ns, gpu_mapping: is this a container, how GPU pids were mapped
        }

    def sample_once(self) -> None:
        """One GPU + process sample, each sent as a frame (processes only when changed).

        At "summary" the GPU sampler sends only what moved (``GpuSampler.summary``) and the processes are
        sampled every SUMMARY_PROCS_EVERY s, sending only the benchmark's and the GPU's when they changed."""
        gpu_frame = self._guarded("gpu", self.gpu.sample)
        for event in self.gpu.take_xids():  # before the gpu frame: a one-shot status has them with its first sample
            self.writer.send("xid", **xid_frame(event))
        if gpu_frame is not None:
            self.writer.send("gpu", **gpu_frame)
        if self.level == "full":
            procs_frame = None
            if self._procs_due():
                procs_frame = self._guarded("procs", lambda: self.procs.sample(self.gpu.memory_by_pid()))
        else:
            procs_frame = self._guarded("procs", self._summary_procs)
        if procs_frame is not None:
            self.writer.send("procs", **procs_frame)
        self.samples += 1

    def _procs_due(self) -> bool:
        """Whether this sample reads the process table: every ``procs_interval`` s (2 s by default; htop
        refreshes every 1.5 s, top every 3 s), and at once when a task was created or reaped (the kernel's
        task count or last pid moved: ``task_signature``), when the set of processes on a GPU changed, and for
        a fresh sample (a one-shot command, a diagnosis). The GPUs are sampled every ``interval`` regardless."""
        now = time.monotonic()
        seen = (task_signature(), frozenset(self.gpu.memory_by_pid()))
        if not (self.gpu.fresh or now >= self._next_procs or seen != self._procs_seen):
            return False
        interval = float(self.config["interval"])
        # (a quarter interval early: the loop's jitter must not push a 2 s pace to 3 s)
        self._next_procs = now + float(self.config.get("procs_interval") or interval) - interval / 4
        self._procs_seen = seen
        return True

    def _heartbeat_due(self, now: float, hb_interval: float) -> bool:
        """Always at "full"; at "summary" when the console saw no other frame for a heartbeat interval (its stale
        check), and at least every SUMMARY_HEARTBEAT_EVERY s."""
        if self.level == "full" or self._heartbeat_level != self.level:
            return True
        return (now - self.writer.delivered_at >= hb_interval - HEARTBEAT_SLACK
                or now - self._heartbeat_at >= SUMMARY_HEARTBEAT_EVERY)

    def _summary_procs(self) -> Optional[Dict[str, Any]]:
        now = time.monotonic()
        if now < self._next_summary_procs:
            return None
        self._next_summary_procs = now + SUMMARY_PROCS_EVERY
        mem = self.gpu.memory_by_pid()
        self.procs.sample(mem)  # keeps the sampler's picture current (its own frame is not sent)
        return self.procs.summary(self._bench_patterns, mem)

    def poll_logs(self) -> None:
        frames = self._guarded("logs", self.logs.poll) or []
        if self.level != "full":
            self.logs.hold(frames)  # followed as ever, sent when the console shows this host again
            return
        for frame in frames:
            self.writer.send("log", **frame)

    def set_level(self, level: str) -> str:
        """Op ``detail``: the level the console wants (applied by the loop within a log interval)."""
        if level not in LEVELS:
            raise ValueError("unknown detail level %r (one of %s)" % (level, ", ".join(LEVELS)))
        self.wanted_level = level
        return level

    def _apply_level(self) -> None:
        """Switch to ``wanted_level`` (the loop's thread: the samplers are not shared with request threads)."""
        level = self.wanted_level
        if level == self.level:
            return
        self.level = level
        self.gpu.summary = level == "summary"
        if level == "summary":
            self._next_summary_procs = 0.0
            return
        self._next_procs = 0.0  # back at "full": the whole tree at the next sample
        self.procs.reset()  # the console holds a subset: the whole tree again, at the next sample
        for frame in self.logs.release():  # the lines missed while at "summary", in order
            self.writer.send("log", **frame)

    def _guarded(self, what: str, sample: Any) -> Any:
        """Run one sampler; a bug in one stream becomes an ``error`` frame (once a minute), never a dead agent."""
        try:
            return sample()
        except Exception as exc:
            now = time.monotonic()
            if now >= self._error_quiet_until.get(what, 0.0):
                self._error_quiet_until[what] = now + 60.0
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                self.writer.send("error", message="%s sampler failed: %s" % (what, detail))
            return None

    def close(self) -> None:
        """Release NVML, open log files and the /proc files held between readings."""
        for sampler in (self.gpu, self.logs, self.procs):
            try:
                sampler.close()
            except Exception:
                pass

    # -- requests -------------------------------------------------------------------------------
    def handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            req = decode_request(line)
        except ProtocolError as exc:
            self.writer.send("error", message="bad request: %s" % exc)
            return
        if req["op"] == "ping" and req["id"] == 0 and time.monotonic() - self.writer.sent_at < PING_QUIET:
            return  # the console's watchdog ping, while frames flow: they tell the console this agent lives
        handler = OPS.get(req["op"])
        if handler is None:
            self.writer.send("result", id=req["id"], ok=False, error="unknown op %r" % req["op"])
            return
        self._pool.submit(self._run_request, handler, req)

    def _run_request(self, handler: Handler, req: Dict[str, Any]) -> None:
        action_id = req["args"].get("action_id")  # a destructive action: journaled, so a console that lost
        if not isinstance(action_id, str):  # the link can ask later what it did (op ``journal``)
            action_id = None
        try:
            if action_id is not None:
                self.journal.begin(action_id, req["op"])
            data = handler(self, req["args"])
        except Exception as exc:  # answer every request, whatever happened
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            if action_id is not None:
                self.journal.finish(action_id, req["op"], False, error=detail)
            self.writer.send("result", id=req["id"], ok=False, error=detail)
            return
        if action_id is not None:
            self.journal.finish(action_id, req["op"], True, data=data)
        self.writer.send("result", id=req["id"], ok=True, data=data)

    def read_requests(self, stream: Any) -> None:
        """Read requests until EOF.

        Without a watchdog EOF alone does not stop the agent (``fleet-console agent </dev/null`` keeps
        sampling; a console that goes away is noticed when writing to stdout fails). With one (the console's
        links), EOF stops it: the console's side is gone.
        """
        for line in iter(stream.readline, b""):
            self.last_heard = time.monotonic()
            self.handle_line(line)
        if self.watchdog > 0:
            self.stop()

    def stop(self) -> None:
        """End the loop (at once: it may be sleeping)."""
        self.stop_event.set()
        self.wake.set()

    def fresh_sample(self, timeout: float) -> bool:
        """Ask the loop for a sample now with the GPU health counters read again and NVML's events polled
        (the slow counters are otherwise up to ``SLOW_EVERY`` s old); wait for it, at most ``timeout`` s.
        A request thread's call (``diagnose``): the samplers stay the loop's."""
        done = threading.Event()
        with self._fresh_lock:
            self._fresh_waiters.append(done)
        self.wake.set()
        return done.wait(timeout)

    def _take_fresh(self) -> List[threading.Event]:
        with self._fresh_lock:
            waiters, self._fresh_waiters = self._fresh_waiters, []
        return waiters

    # -- loop -----------------------------------------------------------------------------------
    def run(self, max_seconds: Optional[float] = None) -> int:
        self.hello()
        interval = float(self.config["interval"])
        log_interval = min(float(self.config["log_interval"]), interval)
        hb_interval = float(self.config["heartbeat_interval"])
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        next_sample = next_log = time.monotonic()
        next_hb = next_sample + min(hb_interval, interval)
        seq = 0
        while not self.stop_event.is_set() and not self.writer.closed:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if self.wanted_level != self.level:
                self._apply_level()
                next_sample = now  # back at "full": the whole picture at once
                next_hb = now  # the new level in a heartbeat at once: the console checks it there
            fresh = self._take_fresh()
            if now >= next_sample or fresh:
                self.gpu.fresh = bool(fresh)
                try:
                    self.sample_once()
                finally:
                    self.gpu.fresh = False
                    for done in fresh:
                        done.set()
                if now >= next_sample:
                    next_sample = max(next_sample + interval, now + interval / 2)
            if now >= next_log:
                self.poll_logs()
                next_log = max(next_log + log_interval, now + log_interval / 2)
            if now >= next_hb:
                if self.watchdog > 0 and now - self.last_heard > self.watchdog:
                    self.writer.send("error", message="nothing heard from the console for %.0f s: exiting"
                                     % (now - self.last_heard))
                    break
                if self._heartbeat_due(now, hb_interval):
                    seq += 1
                    extra = {"level": self.level} if self.level != "full" else {}
                    self.writer.send("heartbeat", seq=seq, samples=self.samples, sent=self.writer.bytes_sent, **extra)
                    self._heartbeat_at, self._heartbeat_level = now, self.level
                    next_hb = now + hb_interval
                else:  # due a heartbeat interval after the last frame the console saw: no gap grows past one
                    next_hb = max(now, self.writer.delivered_at) + hb_interval
            wake = min(next_sample, next_log, next_hb)
            self.wake.wait(max(0.0, wake - time.monotonic()))
            self.wake.clear()
        self._pool.shutdown(wait=False)
        self.close()
        return 0


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fleet-agent", description="fleet-console agent: JSON lines on stdout")
    parser.add_argument("--config", help="base64 JSON config (as sent by the console)")
    parser.add_argument("--config-file", help="JSON config file")
    parser.add_argument("--config-stdin", action="store_true",
                        help="the first stdin line is the JSON config (how the console sends it: not in argv)")
    parser.add_argument("--state-dir", help="directory for the link's lock and the action journal")
    parser.add_argument("--console-id", help="the console link's id: a new agent for it replaces the old one")
    parser.add_argument("--journal", help="journal name (in --state-dir) of the actions run by request")
    parser.add_argument("--watchdog", type=float, default=0.0,
                        help="exit after this many seconds without a line on stdin, or at its end (0: never)")
    parser.add_argument("--interval", type=float, help="seconds between samples (default 1)")
    parser.add_argument("--max-seconds", type=float, help="exit after this many seconds")
    parser.add_argument("--no-stdin", action="store_true", help="do not read requests; run until killed")
    return parser.parse_args(argv)


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    try:
        config = _config_from_stdin() if args.config_stdin else agent_config.load(args.config, args.config_file)
    except (OSError, ValueError) as exc:
        sys.stderr.write("fleet-agent: bad config: %s\n" % exc)
        return 2
    if args.interval:
        config["interval"] = args.interval
    journal = Journal(_journal_path(args.state_dir, args.journal))
    agent = Agent(config, FrameWriter(), journal=journal, watchdog=max(0.0, args.watchdog))
    if args.state_dir:
        agent.gpu.set_xid_log(os.path.join(os.path.expanduser(args.state_dir), "xids.jsonl"))
    try:  # SIGTERM (a newer agent for the same link): finish the running request, then exit
        signal.signal(signal.SIGTERM, lambda signum, frame: agent.stop())
    except ValueError:  # not the main thread
        pass
    if args.state_dir and args.console_id:
        threading.Thread(target=_take_over, args=(os.path.expanduser(args.state_dir), args.console_id),
                         daemon=True, name="take-over").start()
    if not args.no_stdin:
        reader = threading.Thread(target=agent.read_requests, args=(sys.stdin.buffer,), daemon=True)
        reader.start()
    try:
        return agent.run(args.max_seconds)
    except KeyboardInterrupt:
        return 0
    finally:
        pidlock.release()


def _take_over(state_dir: str, console_id: str) -> None:
    """Replace the link's older agent, then clear the pid files of links gone for a day (in the background)."""
    pidlock.take_over(state_dir, console_id)
    pidlock.sweep(state_dir, keep=os.path.basename(sys.argv[0]))  # run from a bundle: argv[0] is its path


def _config_from_stdin() -> AgentConfig:
    """The config the console sends as the first stdin line (kept out of argv: ``/proc/PID/cmdline``)."""
    line = sys.stdin.buffer.readline()
    if not line.strip():
        raise ValueError("no config line on stdin")
    extra = json.loads(line.decode("utf-8"))
    if not isinstance(extra, dict):
        raise ValueError("agent config must be a JSON object")
    return agent_config.merged(extra)


def _journal_path(state_dir: Optional[str], name: Optional[str]) -> Optional[str]:
    if not state_dir or not name or not name.replace("-", "").replace("_", "").isalnum() or len(name) > 64:
        return None
    return os.path.join(os.path.expanduser(state_dir), "journal-%s.jsonl" % name)
