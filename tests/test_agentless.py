"""Agentless mode: nvidia-smi / /proc / ps / log parsing on real-looking text and real files, and an SSH link
to a host whose python3 is missing (real sshd on loopback) that still shows GPUs, processes and logs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from console import agentless as al
from console.core.state import FleetState
from console.inventory import Instance
from console.link import SshLink
from tests.recorder import Recorder, watched_link
from tests.support.sshd import Sshd, ssh_instance

MIB = 1024 * 1024
NONCE = "0123456789abcdef"

# `nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits 2>&1` on a box with one device that fell
# off the bus (no row, a message in its place) and one whose readings turned to errors.
GPU_CSV = """\
0, NVIDIA GeForce RTX 3090, GPU-5a3c0f2e-9d1b-4c3e-8f7a-1b2c3d4e5f60, 97, 41, 20312, 24576, 71, 331.52, 350.00, \
1890, 9751, 78, 550.54.15
1, NVIDIA A100-SXM4-80GB, GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718, 0, 0, 4, 81920, 34, 61.27, 400.00, 210, 1593, \
[N/A], 550.54.15
2, Tesla T4, GPU-99aa88bb-77cc-66dd-55ee-44ff33001122, [Not Supported], [Not Supported], 0, 15360, 40, [N/A], 70.00, \
300, 5000, [N/A], 550.54.15
Unable to determine the device handle for GPU0000:C1:00.0: Unknown Error
4, NVIDIA H100 80GB HBM3, GPU-0badc0de-0000-1111-2222-333344445555, [Unknown Error], [Unknown Error], \
[Unknown Error], 81559, ERR!, [Unknown Error], 700.00, [Unknown Error], [Unknown Error], ERR!, 550.54.15
"""
APPS_CSV = """\
GPU-5a3c0f2e-9d1b-4c3e-8f7a-1b2c3d4e5f60, 4242, 20000
GPU-5a3c0f2e-9d1b-4c3e-8f7a-1b2c3d4e5f60, 4243, [N/A]
GPU-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718, 4242, 2
"""


def _gpu_output(gpu: str, apps: str = "", rc: int = 0) -> bytes:
    text = f"\n@@{NONCE} gpu\n{gpu}\n@@{NONCE} rc {rc}\n@@{NONCE} apps\n{apps}\n@@{NONCE} rc 0\n@@{NONCE} end\n"
    return text.encode()


# -- nvidia-smi ---------------------------------------------------------------------------------------------


def test_nvidia_smi_csv_fields_units_and_nulls() -> None:
    reading = al.parse_gpu_output(_gpu_output(GPU_CSV, APPS_CSV, rc=15), NONCE)
    assert reading.state == "ok" and reading.driver == "550.54.15"
    by_index = {d["index"]: d for d in reading.devices}
    assert sorted(by_index) == [0, 1, 2, 3, 4]
    d0 = by_index[0]
    assert d0 == {
        "index": 0, "lost": False, "error": None, "util": 97, "mem_util": 41, "mem_used": 20312 * MIB, "temp": 71,
        "power": 331.5, "sm_clock": 1890, "mem_clock": 9751, "fan": 78,
        "procs": [{"pid": 4242, "mem": 20000 * MIB}, {"pid": 4243, "mem": None}],
        "name": "NVIDIA GeForce RTX 3090", "uuid": "GPU-5a3c0f2e-9d1b-4c3e-8f7a-1b2c3d4e5f60",
        "mem_total": 24576 * MIB, "power_limit": 350.0,
    }
    assert by_index[1]["fan"] is None and by_index[1]["procs"] == [{"pid": 4242, "mem": 2 * MIB}]
    t4 = by_index[2]
    assert t4["util"] is None and t4["mem_util"] is None and t4["power"] is None and t4["mem_used"] == 0
    assert not t4["lost"] and t4["procs"] == []
    assert by_index[3]["lost"] and "Unable to determine the device handle" in by_index[3]["error"]
    h100 = by_index[4]
    assert h100["lost"] and "Unknown Error" in h100["error"] and h100["util"] is None and h100["procs"] == []
    assert h100["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("text", "rc", "state"),
    [
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
         "latest NVIDIA driver is installed and running.", 9, "no_gpu"),
        ("No devices were found", 6, "no_gpu"),
        ("Failed to initialize NVML: Driver/library version mismatch", 18, "error"),
        ("Failed to initialize NVML: Unknown Error", 255, "error"),
    ],
)
def test_nvidia_smi_failures_are_a_state_not_devices(text: str, rc: int, state: str) -> None:
    reading = al.parse_gpu_output(_gpu_output(text, text, rc=rc), NONCE)
    assert (reading.state, reading.devices) == (state, [])
    assert reading.message and reading.message.startswith(text[:20])


def test_no_nvidia_smi_is_no_gpu() -> None:
    out = subprocess.run(["/bin/sh", "-c", al.gpu_command(NONCE)], capture_output=True, env={"PATH": "/nonexistent"},
                         check=True).stdout
    reading = al.parse_gpu_output(out, NONCE)
    assert reading.state == "no_gpu" and "nvidia-smi not found" in (reading.message or "")


def test_fake_nvidia_smi_run_by_the_command_gives_lost_gpu_flags(tmp_path: Path) -> None:
    (tmp_path / "gpu.csv").write_text(GPU_CSV)
    (tmp_path / "apps.csv").write_text(APPS_CSV)
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --query-gpu=*) cat {tmp_path}/gpu.csv; exit 15;; *) cat {tmp_path}/apps.csv;; esac\n'
    )
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    out = subprocess.run(["/bin/sh", "-c", al.gpu_command(NONCE)], capture_output=True, env=env, check=True).stdout
    frame = al.GpuFrames().feed(al.parse_gpu_output(out, NONCE), 0.0)
    assert frame is not None and frame["state"] == "ok" and len(frame["devices"]) == 5
    state = FleetState(clock=lambda: 1000.0)
    state.add_instance(Instance(name="box", host="10.0.0.2"))
    state.set_link_status("box", "connected", "agentless: no python3 on the host (nvidia-smi and /proc over SSH)")
    state.apply_frame("box", {"type": "hello", "ts": 0, "v": 1, "features": {"agentless": True, "gpu": "ok"}})
    state.apply_frame("box", {"type": "gpu", "ts": 0, **frame})
    inst = state.get("box")
    assert inst.flags() == ["agentless", "lost GPU 3,4"]
    assert inst.gpus[0].static["name"] == "NVIDIA GeForce RTX 3090" and inst.gpus[0].util == 97


def test_gpu_frames_full_then_slim_lost_complete_and_no_gpu_once_a_minute() -> None:
    frames = al.GpuFrames()
    reading = al.parse_gpu_output(_gpu_output(GPU_CSV, APPS_CSV), NONCE)
    first = frames.feed(reading, 100.0)
    assert first is not None and first["full"] and first["driver"] == "550.54.15" and first["simulated"] is False
    assert all({"name", "uuid", "mem_total", "power_limit"} <= set(d) for d in first["devices"])
    assert frames.mem_by_pid == {4242: 20002 * MIB, 4243: None}
    second = frames.feed(al.parse_gpu_output(_gpu_output(GPU_CSV, APPS_CSV), NONCE), 102.0)
    assert second is not None and not second["full"] and set(second) == {"state", "full", "devices"}
    slim = {d["index"]: d for d in second["devices"]}
    assert "procs" not in slim[0] and "lost" not in slim[0] and "fan" not in slim[1] and "name" not in slim[0]
    assert slim[3]["lost"] and slim[3]["procs"] == [] and slim[3]["util"] is None  # lost: always complete
    # the lost device is back: the frame is full again
    healed = GPU_CSV.replace("Unable to determine the device handle for GPU0000:C1:00.0: Unknown Error",
                             "3, Tesla T4, GPU-33, 5, 1, 10, 15360, 30, 20.0, 70.00, 300, 5000, [N/A], 550.54.15")
    back = frames.feed(al.parse_gpu_output(_gpu_output(healed), NONCE), 104.0)
    assert back is not None and back["full"] and not {d["index"]: d for d in back["devices"]}[3]["lost"]

    gone = al.GpuFrames()
    no_gpu = al.GpuReading("no_gpu", "nvidia-smi not found on the host", None, [])
    frame = gone.feed(no_gpu, 0.0)
    assert frame is not None and frame["state"] == "no_gpu" and frame["devices"] == [] and frame["message"]
    assert not gone.due(1.0) and gone.due(61.0)
    assert gone.feed(no_gpu, 30.0) is None
    assert gone.feed(no_gpu, 61.0) is not None


# -- processes ------------------------------------------------------------------------------------------------


def _stat(pid: int, comm: str, state: str, ppid: int, utime: int, start: int, rss_pages: int, flags: int = 0) -> str:
    rest = [state, ppid, pid, pid, 0, -1, flags, 0, 0, 0, 0, utime, 0, 0, 0, 20, 0, 1, 0, start, 1000, rss_pages]
    return f"{pid} ({comm}) " + " ".join(str(x) for x in rest) + " 0 0 0"


def test_proc_snapshot_parsing() -> None:
    facts = al.HostFacts(clk_tck=100.0, page_size=4096, have_proc=True, btime=1_700_000_000.0)
    stats = "\n".join([
        _stat(1, "init", "S", 0, 0, 10, 300),
        _stat(2, "kthreadd", "S", 0, 0, 1, 0, flags=al.PF_KTHREAD),
        _stat(40, "tmux: server (x)", "S", 1, 50, 500, 100),
        _stat(41, "cuzk-bench-work", "R", 40, 3000, 600, 2048),
        _stat(50, "sh", "S", 1, 0, 900, 10),
        _stat(51, "cat", "R", 50, 0, 901, 10),
    ])
    cmdlines = (
        "==> 1/cmdline <==\n/sbin/init\0\n==> 2/cmdline <==\n\n==> 40/cmdline <==\ntmux\0new\0-d\0"
        "\n==> 41/cmdline <==\n/opt/bin/cuzk-bench-worker\0--gpu\0" + "0\0"
        f"\n==> 50/cmdline <==\n/bin/sh\0-c\0: {al.MARK}; cat\0\n==> 51/cmdline <==\ncat\0"
    )
    wchans = "==> 1/wchan <==\ndo_epoll_wait\n==> 40/wchan <==\n0\n==> 41/wchan <==\n0"
    out = (f"\n@@{NONCE} uptime\n1000.00 3000.00\n@@{NONCE} stat\n{stats}\n@@{NONCE} cmdline\n{cmdlines}"
           f"\n@@{NONCE} wchan\n{wchans}\n@@{NONCE} end\n").encode()
    uptime, rows = al.parse_proc_snapshot(out, NONCE, facts)
    assert uptime == 1000.0 and [r.pid for r in rows] == [1, 2, 40, 41, 50, 51]
    tmux = rows[2]
    assert tmux.comm == "tmux: server (x)" and tmux.cmdline == "tmux new -d" and tmux.ppid == 1
    assert tmux.rss == 100 * 4096 and tmux.start == 1_700_000_005.0 and tmux.wchan is None
    assert rows[3].comm == "cuzk-bench-worker" and rows[3].cmdline == "/opt/bin/cuzk-bench-worker --gpu 0"
    assert rows[0].wchan == "do_epoll_wait" and rows[1].kthread

    procs = al.ProcFrames()
    records = procs.records(uptime, rows, {41: 8 * MIB}, boot=facts.btime)
    assert sorted(records) == [1, 40, 41]  # no kernel threads, not the poll command (MARK) nor its children
    bench = records[41]
    assert set(bench) == {"pid", "ppid", "name", "cmdline", "state", "wchan", "cpu", "rss", "start", "gpu_mem"}
    assert bench["gpu_mem"] == 8 * MIB and bench["cpu"] == pytest.approx(3000 / 100 / (1000 - 6) * 100, abs=0.1)
    full = procs.frame(records, 0.0)
    assert full is not None and full["full"] and [r["pid"] for r in full["procs"]] == [1, 40, 41]

    # 2 s later: the benchmark used one core; a new process; tmux exited
    later = [r for r in rows if r.pid != 40]
    later[2] = al.ProcRow(**{**later[2].__dict__, "cpu_seconds": later[2].cpu_seconds + 2.0})
    later.append(al.ProcRow(77, 1, "sleep", "S", 0.0, None, 4096, 1_700_000_900.0, "sleep 99", None, False))
    records = procs.records(1002.0, later, {41: 8 * MIB}, boot=facts.btime)
    assert records[41]["cpu"] == 100.0
    delta = procs.frame(records, 2.0)
    assert delta == {"full": False, "upsert": [records[77]], "gone": [40]}  # cpu change held back (RESEND)
    delta = procs.frame(records, 2.0 + al.RESEND)
    assert delta is not None and [r["pid"] for r in delta["upsert"]] == [41] and delta["gone"] == []
    assert procs.frame(records, 20.0) is None


def test_ps_snapshot_parsing() -> None:
    table = (
        "    1     0 Ss    0.0  11040     12377 /sbin/init splash\n"
        "    2     0 S     0.0      0  3-04:05:06 [kthreadd]\n"
        "  812     1 Sl   12.5 204800     01:02 /usr/bin/tmux new -s bench\n"
        "  900   812 R+   99.0  51200        00:07 ./cuzk-bench --gpus 0,1\n"
        "  950     1 S     0.0   1000        00:01 /bin/sh -c : fleet-console-agentless; ps\n"
        "garbage line\n"
    )
    comms = "    1 init\n    2 kthreadd\n  812 tmux: server\n  900 cuzk-bench\n"
    out = (f"\n@@{NONCE} now\n1700000000\n@@{NONCE} ps\n{table}\n@@{NONCE} comm\n{comms}\n@@{NONCE} end\n").encode()
    now, rows = al.parse_ps_snapshot(out, NONCE)
    assert now == 1_700_000_000.0 and [r.pid for r in rows] == [1, 2, 812, 900, 950]
    assert al.parse_etime("3-04:05:06") == 3 * 86400 + 4 * 3600 + 5 * 60 + 6 and al.parse_etime("bad") is None
    tmux = rows[2]
    assert (tmux.comm, tmux.ppid, tmux.state, tmux.rss, tmux.start) == ("tmux: server", 1, "S", 204800 * 1024,
                                                                      1_700_000_000.0 - 62)
    assert rows[1].kthread and rows[3].cmdline == "./cuzk-bench --gpus 0,1" and rows[3].pcpu == 99.0
    records = al.ProcFrames().records(None, rows, {})
    assert sorted(records) == [1, 812, 900] and records[900]["cpu"] == 99.0 and records[900]["wchan"] is None


def test_the_commands_run_here_and_find_this_process() -> None:
    facts = al.parse_facts(subprocess.run(["/bin/sh", "-c", al.FACTS_COMMAND], capture_output=True, text=True,
                                          check=True).stdout)
    assert facts.have_proc and facts.btime > 0 and facts.clk_tck > 0
    for have_proc in (True, False) if shutil.which("ps") else (True,):
        out = subprocess.run(["/bin/sh", "-c", al.procs_command(NONCE, have_proc)], capture_output=True,
                             check=True).stdout
        if have_proc:
            clock, rows = al.parse_proc_snapshot(out, NONCE, facts)
        else:
            clock, rows = al.parse_ps_snapshot(out, NONCE)
        records = al.ProcFrames().records(clock if have_proc else None, rows, {}, boot=facts.btime)
        me = records[os.getpid()]
        assert me["ppid"] == os.getppid() and abs(me["start"] - _my_start(facts)) < 2.0, have_proc
        assert not any(al.MARK in r["cmdline"] for r in records.values())


def _my_start(facts: al.HostFacts) -> float:
    stat = Path("/proc/self/stat").read_text()
    return facts.btime + float(stat.rsplit(")", 1)[1].split()[19]) / facts.clk_tck


# -- logs -----------------------------------------------------------------------------------------------------


class _Logs:
    """RemoteLogs driven by /bin/sh here (the same text the link runs over SSH)."""

    def __init__(self, paths: list[Path], **cfg: object) -> None:
        self.logs = al.RemoteLogs({"logs": [str(p) for p in paths], "backlog_lines": 3, "max_line_chars": 60, **cfg})
        self.now = 100.0

    def poll(self, advance: float = 2.0) -> list[dict]:
        self.now += advance
        nonce = al.new_nonce()
        command = self.logs.command(nonce)
        assert command is not None
        out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True).stdout
        return self.logs.parse(out, nonce, self.now)


def test_logs_backlog_appends_progress_partial_and_quoting(tmp_path: Path) -> None:
    log = tmp_path / "it's a \"bench\" $(touch pwned) log.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    logs = _Logs([log])
    (frame,) = logs.poll()
    assert frame == {"path": str(log), "lines": ["line 8", "line 9", "line 10"], "first_line": 8, "backlog": True,
                     "event": None}
    assert logs.poll() == []
    with log.open("ab") as fh:
        fh.write(b"step 1\rstep 2\rstep 3\ncaf\xc3\xa9 \xff\n" + b"x" * 100 + b"\npart")
    (frame,) = logs.poll()
    assert frame["first_line"] == 11 and frame["lines"][:2] == ["step 3", "caf\u00e9 \ufffd"]
    assert frame["lines"][2] == "x" * 59 + "\u2026" and "partial" not in frame
    (frame,) = logs.poll()  # the unfinished line, once it waited PARTIAL_AFTER
    assert frame["lines"] == ["part"] and frame["partial"] and frame["first_line"] == 14
    with log.open("ab") as fh:
        fh.write(b"ial done\n")
    (frame,) = logs.poll()
    assert frame["lines"] == ["partial done"] and frame["first_line"] == 14 and "partial" not in frame
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_logs_missing_created_truncated_rotated(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    logs = _Logs([log])
    assert logs.poll() == [{"path": str(log), "lines": [], "first_line": 1, "backlog": False, "event": "missing"}]
    assert logs.poll() == []
    log.write_text("a\nb\n")
    (frame,) = logs.poll()
    assert (frame["event"], frame["lines"], frame["first_line"]) == ("created", ["a", "b"], 1)
    log.write_text("c\n")  # same inode, shorter
    (frame,) = logs.poll()
    assert (frame["event"], frame["lines"], frame["first_line"]) == ("truncated", ["c"], 1)
    log.rename(tmp_path / "bench.log.1")
    log.write_text("d\ne\nf\n")
    (frame,) = logs.poll()
    assert (frame["event"], frame["lines"], frame["first_line"]) == ("rotated", ["d", "e", "f"], 1)
    log.unlink()
    (frame,) = logs.poll()
    assert (frame["event"], frame["lines"]) == ("missing", [])
    log.write_text("g\n")
    (frame,) = logs.poll()
    assert (frame["event"], frame["lines"], frame["first_line"]) == ("created", ["g"], 1)


def test_probe_reads_python_versions() -> None:
    for text, state in (("@@fleet python 3.11.7", "ok"), ("@@fleet python 3.6.9", "old"),
                        ("@@fleet python 2.7.18", "old"), ("@@fleet python none", "none"),
                        ("@@fleet python broken", "broken"), ("Welcome to the box!", "unknown")):
        assert al.parse_probe(text + "\n@@fleet host gpu-7\n").python == state, text
    probe = al.parse_probe("@@fleet python 3.6.9\n@@fleet agent present\n@@fleet host gpu-7\n")
    assert probe.agent_present and probe.host == "gpu-7"
    assert al.agentless_reason(probe, "python3") == "python3 on the host is 3.6.9, the agent needs 3.8+"
    assert al.poll_interval({"interval": 0.5}) == al.MIN_INTERVAL and al.poll_interval({"interval": 5}) == 5.0


# -- the link, over a real sshd ---------------------------------------------------------------------------------


async def test_host_without_python_is_served_agentless(sshd: Sshd, tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("booting\n")
    tag = f"{time.time() % 1000:.4f}{os.getpid() % 97}"
    sleeper = subprocess.Popen(["sleep", f"{600}.{tag.replace('.', '')}"])
    inst = ssh_instance(sshd, python="/nonexistent/bin/python3", logs=(str(log),), interval=0.5)
    link, rec, state = watched_link(inst)
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected")
        hello = rec.of_type("hello")[0]
        assert hello["features"]["agentless"] is True and hello["features"]["gpu"] == "no_gpu"
        assert hello["features"]["psutil"] is False and hello["agent_version"] == "agentless" and hello["v"] == 1
        _status, detail = rec.status_of("box1")
        assert detail.startswith("agentless: no python3 on the host") and "nvidia-smi" in detail

        def sleeper_rec() -> dict | None:
            return state.get("box1").procs.get(sleeper.pid)

        found = await rec.wait_for(sleeper_rec, what="the test's sleep in procs")
        assert found["ppid"] == os.getpid() and found["name"] == "sleep" and found["state"] == "S"
        assert found["cmdline"] == f"sleep 600.{tag.replace('.', '')}" and found["rss"] > 0
        assert abs(found["start"] - time.time()) < 60 and found["gpu_mem"] is None
        assert not any(al.MARK in r["cmdline"] for r in state.get("box1").procs.values())

        await rec.wait_for(lambda: rec.of_type("log"), what="log backlog")
        line = f"appended {uuid.uuid4().hex}"
        with log.open("a") as fh:
            fh.write(line + "\n")
        await rec.wait_for(lambda: any(line in f["lines"] for f in rec.of_type("log")), what="appended log line")
        assert state.get("box1").last_log == (str(log), 2, line)

        gpu = rec.of_type("gpu")
        assert gpu and gpu[0]["state"] == "no_gpu" and gpu[0]["devices"] == [] and "nvidia-smi" in gpu[0]["message"]
        assert state.get("box1").flags() == ["agentless", "no GPU"] and state.get("box1").status == "ok"

        t0 = time.monotonic()
        answer = await link.request("diagnose", timeout=30)
        assert answer["ok"] is False and al.NEEDS_PYTHON in answer["error"]
        assert time.monotonic() - t0 < 2.0
        assert (await link.request("ping", timeout=5))["ok"]
        result = await link.run_command("echo custom-probe-ok", timeout=10)  # custom probes still work
        assert result.exit_status == 0 and result.stdout.strip() == "custom-probe-ok"

        sleeper.kill()
        sleeper.wait()
        await rec.wait_for(lambda: sleeper_rec() is None, what="the sleep gone from procs")
        beats = len(rec.of_type("heartbeat"))
        await rec.wait_for(lambda: len(rec.of_type("heartbeat")) > beats, what="heartbeats keep coming")
        assert len(rec.of_type("gpu")) == 1  # no_gpu: one frame (then one a minute), not one per poll
    finally:
        sleeper.kill()
        await link.stop()


async def test_agentless_session_fails_and_recovers_like_an_agent(sshd: Sshd) -> None:
    rec = Recorder()
    link = SshLink(ssh_instance(sshd, python="/nonexistent/python3"), rec.on_frame, rec.on_status)
    link.backoff.base, link.backoff.cap = 0.2, 1.0
    link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("heartbeat"), what="first heartbeat")
        sshd.stop()
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "unreachable", what="unreachable after kill")
        hellos = len(rec.of_type("hello"))
        sshd.start()
        await rec.wait_for(lambda: len(rec.of_type("hello")) > hellos, timeout=40, what="hello after restart")
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "connected", what="connected again")
        assert rec.status_of("box1")[1].startswith("agentless:")
    finally:
        await link.stop()


async def test_too_old_python_is_agentless_too(sshd: Sshd, tmp_path: Path) -> None:
    fake = tmp_path / "python3.6"
    fake.write_text("#!/bin/sh\nprintf 3.6.9\n")
    fake.chmod(0o755)
    rec = Recorder()
    link = SshLink(ssh_instance(sshd, python=str(fake)), rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected")
        assert f"{fake} on the host is 3.6.9, the agent needs 3.8+" in link.detail
        assert rec.of_type("hello")[0]["python"] == "3.6.9"
    finally:
        await link.stop()


def test_state_shows_agentless_and_no_gpu_flags() -> None:
    state = FleetState(clock=lambda: 1000.0)
    state.add_instance(Instance(name="bare", host="10.0.0.9"))
    state.apply_frame("bare", {"type": "hello", "ts": 0, "v": 1, "agent_version": "agentless", "pid": None,
                               "features": {"agentless": True, "gpu": "no_gpu", "psutil": False, "ops": []}})
    state.set_link_status("bare", "connected", "agentless: no python3 on the host (nvidia-smi and /proc over SSH)")
    state.apply_frame("bare", {"type": "gpu", "ts": 0, "state": "no_gpu", "simulated": False, "driver": None,
                               "message": "nvidia-smi not found on the host", "full": False, "devices": []})
    inst = state.get("bare")
    assert inst.flags() == ["agentless", "no GPU"] and inst.status == "ok"
    # python3 installed since: the next session runs the agent, and the flag goes
    state.set_link_status("bare", "connecting", "10.0.0.9")
    state.apply_frame("bare", {"type": "hello", "ts": 0, "v": 1, "agent_version": "0.1.0", "pid": 7,
                               "features": {"gpu": "no_gpu", "psutil": True, "ops": ["ping"]}})
    state.set_link_status("bare", "connected", "agent 0.1.0 pid 7")
    assert state.get("bare").flags() == ["no GPU"]
