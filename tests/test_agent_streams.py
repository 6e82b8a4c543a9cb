"""The real agent process: hello first, simulated GPU frames, process tree, log lines, requests."""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.agent.sample import nvml_sim
from console.agent.wire import config as agent_config

ROOT = Path(__file__).resolve().parent.parent


class AgentProc:
    def __init__(self, cfg):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "console.agent", "--config", agent_config.encode(cfg)],
            cwd=str(ROOT),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.frames: queue.Queue = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.frames.put(json.loads(line))
        self.frames.put(None)

    def next(self, pred, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                frame = self.frames.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if frame is None:
                raise AssertionError("agent exited: %s" % self.proc.stderr.read().decode())
            self.seen.append(frame)
            if pred(frame):
                return frame
        raise AssertionError("no matching frame within %.0f s; last: %r" % (timeout, self.seen[-3:]))

    def request(self, req):
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def sleeper():
    procs = []
    yield lambda: procs.append(subprocess.Popen(["sleep", "300"])) or procs[-1]
    for p in procs:
        p.kill()
        p.wait()


def test_agent_streams(tmp_path, sleeper):
    state = tmp_path / "gpu.json"
    log = tmp_path / "bench.log"
    log.write_text("boot 1\nboot 2\n")
    gpu_child = sleeper()
    nvml_sim.write_state(
        str(state), {"gpus": [{"load": 90, "processes": [{"pid": gpu_child.pid, "mem_mib": 512}]}, {"load": 0}]}
    )
    cfg = {
        "interval": 0.5,
        "log_interval": 0.25,
        "heartbeat_interval": 1.0,
        "logs": [str(log)],
        "watch_dirs": [],
        "proc_root": os.getpid(),
        "gpu": {"simulate": {"gpus": 2, "state_file": str(state)}},
    }
    agent = AgentProc(cfg)
    try:
        hello = agent.next(lambda f: True)
        assert hello["type"] == "hello" and hello["v"] == 1 and hello["pid"] == agent.proc.pid
        assert hello["features"]["gpu"] == "ok" and hello["features"]["simulated_gpu"] is True
        gpu = agent.next(lambda f: f["type"] == "gpu")
        assert gpu["full"] and len(gpu["devices"]) == 2 and gpu["devices"][0]["name"]
        assert gpu["devices"][0]["procs"] == [{"pid": gpu_child.pid, "mem": 512 * 1024 * 1024}]
        procs = agent.next(lambda f: f["type"] == "procs")
        assert procs["full"]
        table = {r["pid"]: r for r in procs["procs"]}
        assert agent.proc.pid in table and table[agent.proc.pid]["ppid"] == os.getpid()
        assert table[gpu_child.pid]["gpu_mem"] == 512 * 1024 * 1024
        backlog = agent.next(lambda f: f["type"] == "log")
        assert backlog["backlog"] and backlog["lines"] == ["boot 1", "boot 2"] and backlog["first_line"] == 1
        # a new child of ours shows up as a change
        child = sleeper()
        agent.next(lambda f: f["type"] == "procs" and any(r["pid"] == child.pid for r in f.get("upsert", [])))
        agent.next(lambda f: f["type"] == "gpu" and not f["full"] and "name" not in f["devices"][0])
        # appended lines arrive as one log frame with the right numbers
        with open(log, "a") as fh:
            fh.write("step 3\nstep 4\n")
        frame = agent.next(lambda f: f["type"] == "log" and not f["backlog"])
        assert frame["lines"] == ["step 3", "step 4"] and frame["first_line"] == 3
        # GPU 1 is lost mid-run; GPU 0 goes on
        nvml_sim.write_state(str(state), {"gpus": [{"load": 90}, {"load": 0}], "failures": {"lost": [1]}})
        lost = agent.next(lambda f: f["type"] == "gpu" and f["devices"][1].get("lost"))
        assert not lost["devices"][0].get("lost") and lost["devices"][0]["util"] > 50
        agent.next(lambda f: f["type"] == "heartbeat")
        agent.request({"id": 7, "op": "backlog", "args": {"lines": 1}})
        again = agent.next(lambda f: f["type"] == "log" and f["backlog"])
        assert again["lines"] == ["step 4"] and again["first_line"] == 4
        agent.request({"id": 8, "op": "stop"})
        agent.next(lambda f: f["type"] == "result" and f["id"] == 8)
        agent.proc.wait(15)
    finally:
        agent.stop()


@pytest.mark.slow
def test_agent_without_driver_says_no_gpu_once(tmp_path):
    state = tmp_path / "gpu.json"
    nvml_sim.write_state(str(state), {"no_driver": True})
    cfg = {
        "interval": 0.2,
        "watch_dirs": [],
        "proc_root": os.getpid(),
        "gpu": {"simulate": {"gpus": 1, "state_file": str(state)}},
    }
    agent = AgentProc(cfg)
    try:
        hello = agent.next(lambda f: True)
        assert hello["features"]["gpu"] == "no_gpu"
        agent.next(lambda f: f["type"] == "gpu" and f["state"] == "no_gpu")
        agent.next(lambda f: f["type"] == "heartbeat" and f["samples"] >= 10, timeout=40)
        assert sum(1 for f in agent.seen if f["type"] == "gpu") == 1
        assert not any(f["type"] == "error" for f in agent.seen)
    finally:
        agent.stop()


@pytest.mark.slow
def test_the_watchdog_ping_is_answered_only_when_the_agent_was_quiet(tmp_path):
    """The console pings every 5 s (id 0) so that an agent it left exits; while frames flow they already say
    the agent lives and an answer per host every 5 s is only load. A quiet agent answers, so the console's
    silence watchdog still hears from it; a ping with any other id is always answered."""
    state = tmp_path / "gpu.json"
    nvml_sim.write_state(str(state), {"gpus": [{"load": 50}]})
    cfg = {
        "interval": 0.5,
        "watch_dirs": [],
        "proc_root": os.getpid(),
        "gpu": {"simulate": {"gpus": 1, "state_file": str(state), "jitter": True}},
    }
    agent = AgentProc(cfg)
    try:
        agent.next(lambda f: f["type"] == "gpu")
        agent.request({"id": 0, "op": "ping", "args": {}})
        agent.request({"id": 7, "op": "ping", "args": {}})
        agent.next(lambda f: f["type"] == "result" and f["id"] == 7)
        agent.next(lambda f: f["type"] == "gpu" and f is not agent.seen[0], timeout=5)
        assert not any(f["type"] == "result" and f["id"] == 0 for f in agent.seen), "frames flow: no answer"
    finally:
        agent.stop()

    quiet = dict(cfg, interval=60.0, log_interval=60.0, heartbeat_interval=60.0)
    agent = AgentProc(quiet)
    try:
        agent.next(lambda f: f["type"] == "gpu")
        time.sleep(5.5)  # nothing sent since the first sample
        agent.request({"id": 0, "op": "ping", "args": {}})
        answer = agent.next(lambda f: f["type"] == "result", timeout=5)
        assert answer["id"] == 0 and answer["ok"], answer
    finally:
        agent.stop()


def _frames_for(agent: AgentProc, seconds: float, during=None) -> list:
    """Every frame the agent sends in the next ``seconds`` (``during()`` called between reads)."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if during is not None:
            during()
        try:
            frame = agent.frames.get(timeout=0.05)
        except queue.Empty:
            continue
        assert frame is not None, "agent exited: %s" % agent.proc.stderr.read().decode()
        out.append(frame)
    return out


@pytest.mark.slow
def test_at_summary_a_heartbeat_goes_out_only_when_nothing_else_did(tmp_path):
    """A host out of view whose GPU summaries flow sends no heartbeats besides the one that says its new level; a
    quiet one still does (the console's stale check); back at "full" the heartbeat comes at once, every interval."""
    state = tmp_path / "gpu.json"
    nvml_sim.write_state(str(state), {"gpus": [{"load": 10}]})
    cfg = {"interval": 0.2, "log_interval": 0.2, "heartbeat_interval": 0.5, "logs": [], "watch_dirs": [],
           "proc_root": os.getpid(), "gpu": {"simulate": {"gpus": 1, "state_file": str(state), "jitter": False}}}
    agent = AgentProc(cfg)
    try:
        agent.next(lambda f: f["type"] == "heartbeat")
        agent.request({"id": 1, "op": "detail", "args": {"level": "summary"}})
        agent.next(lambda f: f["type"] == "result" and f["id"] == 1)
        load, t0 = [10], time.monotonic()

        def swing() -> None:  # the GPU moves beyond the summary threshold every 0.4 s (two samples)
            now = 10 if int((time.monotonic() - t0) / 0.4) % 2 else 90
            if now != load[0]:
                load[0] = now
                nvml_sim.write_state(str(state), {"gpus": [{"load": now}]})

        busy = _frames_for(agent, 3.0, swing)
        beats = [f for f in busy if f["type"] == "heartbeat"]
        assert len([f for f in busy if f["type"] == "gpu"]) >= 5
        assert len(beats) == 1 and beats[0]["level"] == "summary", beats  # the level, then nothing more
        quiet = _frames_for(agent, 3.0)  # the GPU holds still: a summary every 5 s only
        assert len([f for f in quiet if f["type"] == "heartbeat" and f.get("level") == "summary"]) >= 3
        seen = [f["ts"] for f in quiet if not (f["type"] == "result" and f.get("id") == 0)]  # what the console counts
        gaps = [b - a for a, b in itertools.pairwise(seen)]
        assert max(gaps) < 0.5 * 1.5, gaps  # never near the console's stale limit (two heartbeat intervals)
        agent.request({"id": 2, "op": "detail", "args": {"level": "full"}})
        agent.next(lambda f: f["type"] == "result" and f["id"] == 2)
        agent.next(lambda f: f["type"] == "heartbeat" and "level" not in f, timeout=1.0)
    finally:
        agent.stop()


def test_the_answer_to_a_ping_is_not_a_sign_of_life_the_console_counts():
    """The console drops the answers to its id-0 pings before its state sees them, so they must not put off a
    heartbeat at "summary" (a quiet host would go STALE): the writer notes them apart."""
    import io

    from console.agent.wire.protocol import FrameWriter

    writer = FrameWriter(io.BytesIO())
    writer.send("heartbeat", seq=1, samples=1, sent=0)
    counted = writer.delivered_at
    time.sleep(0.01)
    writer.send("result", id=0, ok=True, data={"pong": True})
    assert writer.sent_at > counted and writer.delivered_at == counted
    writer.send("result", id=7, ok=True, data={})
    assert writer.delivered_at == writer.sent_at
