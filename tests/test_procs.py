"""ProcSampler and read_process_table against real processes, through psutil and through /proc."""

from __future__ import annotations

import errno
import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from console.agent.sample import procfs, procreader
from console.agent.sample import procs as procs_mod
from console.agent.sample.procfs import read_wchan
from console.agent.sample.procs import ProcSampler, read_process_table
from tests.support.procs import pid_namespace_argv
from tests.support.wait import until_sync

BACKENDS = ["psutil", "proc"]
FIELDS = {"pid", "ppid", "name", "cmdline", "state", "wchan", "cpu", "rss", "start", "gpu_mem"}


@pytest.fixture
def children():
    started = []

    def spawn(args, **kw):
        proc = subprocess.Popen(args, **kw)
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except OSError:
            pass
        proc.kill()
        proc.wait()


def _until(fn, timeout=20.0, step=0.2):
    """``until_sync`` at this file's pace (predicates here often sample, so the pace is part of the test)."""
    return until_sync(fn, timeout, interval=step)


def _apply(table, frame):
    if frame is None:
        return table
    if frame["full"]:
        return {r["pid"]: r for r in frame["procs"]}
    for pid in frame["gone"]:
        table.pop(pid, None)
    for rec in frame["upsert"]:
        table[rec["pid"]] = rec
    return table


@pytest.mark.parametrize("backend", BACKENDS)
def test_full_tree_then_changes(backend, children):
    root = children(["sh", "-c", "sleep 300 & sleep 301 & wait"])
    sampler = ProcSampler({"proc_root": root.pid}, backend=backend)
    assert sampler.uses_psutil == (backend == "psutil")

    def tree():
        return {r["pid"]: r for r in read_process_table({"proc_root": root.pid}, backend=backend)}

    _until(lambda: len(tree()) == 3)
    frame = sampler.sample({})
    assert frame["full"]
    table = _apply({}, frame)
    assert set(table) == set(tree())
    sh = table[root.pid]
    assert set(sh) == FIELDS and sh["name"] == "sh" and sh["ppid"] == os.getpid()
    sleeps = [r for r in table.values() if r["name"] == "sleep"]
    assert sorted(r["cmdline"] for r in sleeps) == ["sleep 300", "sleep 301"]
    for rec in sleeps:
        assert rec["ppid"] == root.pid and rec["state"] == "S" and rec["rss"] > 0
        assert abs(rec["start"] - time.time()) < 120
        assert rec["wchan"] is None or (isinstance(rec["wchan"], str) and rec["wchan"] not in ("", "0"))
        assert rec["cpu"] is not None and rec["cpu"] < 50
    # one sleep dies: it is reported gone, and nothing else changes
    victim = sleeps[0]["pid"]
    os.kill(victim, signal.SIGKILL)

    def gone():
        frame = sampler.sample({})
        _apply(table, frame)
        return frame is not None and victim in frame.get("gone", [])

    _until(gone)
    assert victim not in table and len(table) == 2
    # a sampled-but-unchanged tree sends nothing
    assert _until(lambda: sampler.sample({}) is None)
    sampler.reset()
    assert sampler.sample({})["full"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_stopped_state_and_gpu_mem(backend, children):
    child = children(["sleep", "300"])
    # past its start-up (a loaded CI read it running, still loading): asleep
    _until(lambda: [r for r in read_process_table({"proc_root": child.pid})
                    if r["name"] == "sleep" and r["state"] == "S"])
    sampler = ProcSampler({"proc_root": child.pid}, backend=backend)
    table = _apply({}, sampler.sample({}))
    assert table[child.pid]["state"] == "S" and table[child.pid]["gpu_mem"] is None
    os.kill(child.pid, signal.SIGSTOP)
    # an idle process is re-read within ~COLD_PERIOD seconds; one on a GPU every sample
    _until(lambda: _apply(table, sampler.sample({}))[child.pid]["state"] in ("T", "t"), step=0.5)
    frame = sampler.sample({child.pid: 123456})
    assert frame["upsert"][0]["gpu_mem"] == 123456


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_percent_from_deltas(backend, children):
    busy = children([sys.executable, "-c", "while True: pass"])
    sampler = ProcSampler({"proc_root": busy.pid}, backend=backend)
    sampler.sample({})
    readings = []

    def busy_enough():
        time.sleep(0.5)
        frame = sampler.sample({})
        for rec in (frame or {}).get("upsert", []):
            readings.append(rec["cpu"])
        return any(c > 20 for c in readings)

    _until(busy_enough)
    assert all(c <= 100 * os.cpu_count() + 5 for c in readings)


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_process_is_upserted(backend, children):
    root = children(["sh", "-c", "read x; sleep 300"], stdin=subprocess.PIPE)
    sampler = ProcSampler({"proc_root": root.pid}, backend=backend)
    assert set(_apply({}, sampler.sample({}))) == {root.pid}
    root.stdin.write(b"go\n")
    root.stdin.flush()

    def has_sleep():
        frame = sampler.sample({})
        return frame and any(r["name"] == "sleep" and r["ppid"] == root.pid for r in frame["upsert"])

    _until(has_sleep)


def test_read_process_table_snapshot(children):
    child = children(["sleep", "300"])
    for backend in BACKENDS:
        table = {r["pid"]: r for r in read_process_table({}, backend=backend)}
        assert os.getpid() in table and child.pid in table, backend
        assert table[child.pid]["cpu"] is None and table[child.pid]["cmdline"] == "sleep 300"
        assert set(table[child.pid]) == FIELDS
        assert all(r["ppid"] != 2 for r in table.values())  # no kernel threads


def test_wchan_unknown_values(tmp_path, monkeypatch):
    for pid, text in ((11, b"0"), (12, b""), (13, b"do_wait\n")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "wchan").write_bytes(text)
    monkeypatch.setattr(procfs, "PROC", str(tmp_path))
    assert read_wchan(11) is None and read_wchan(12) is None and read_wchan(14) is None
    assert read_wchan(13) == "do_wait"


def test_waiting_parent_wchan(children):
    root = children(["sh", "-c", "sleep 300; true"])
    time.sleep(0.3)
    wchan = read_wchan(root.pid)
    assert wchan is None or wchan in ("do_wait", "kernel_wait4", "do_sys_wait4") or "wait" in wchan


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_exec_updates_name_and_cmdline(backend, children):
    child = children(["sh", "-c", "read x; exec sleep 300"], stdin=subprocess.PIPE)
    sampler = ProcSampler({"proc_root": child.pid}, backend=backend)
    table = _apply({}, sampler.sample({}))
    assert table[child.pid]["name"] == "sh"
    child.stdin.write(b"go\n")
    child.stdin.flush()
    _until(lambda: _apply(table, sampler.sample({}))[child.pid]["cmdline"] == "sleep 300", step=0.5)
    assert table[child.pid]["name"] == "sleep"


def test_idle_processes_are_not_reread_every_sample(children):
    sleepers = [children(["sleep", "300"]) for _ in range(60)]
    sampler = ProcSampler({}, backend="proc")
    sampler.sample({})
    total = len(procfs.list_pids())
    before = sampler.reads
    for _ in range(3):
        sampler.sample({})
    per_sample = (sampler.reads - before) / 3
    assert per_sample < total * 0.7, (per_sample, total)
    assert len(sleepers) == 60


def test_task_signature_moves_with_new_processes(children):
    before = procfs.task_signature()
    assert before is not None and len(before.split()) == 2
    children(["sleep", "300"])
    assert procfs.task_signature() != before


LISTING_PROBE = """
import json, subprocess, sys, time
import console.agent.sample.procs as procs_mod
from console.agent.sample.procs import ProcSampler, read_process_table
signature = [b"1 100"]  # /proc/loadavg's running/last-pid pair, held still: only the test moves it
procs_mod.task_signature = lambda: signature[0]
root = subprocess.Popen(["sh", "-c", "read x; sleep 300"], stdin=subprocess.PIPE)
sampler = ProcSampler({"proc_root": root.pid}, backend="proc")
out = {}
for _ in range(4):
    sampler.sample({})
out["quiet"] = sampler.listings  # nothing created or reaped: the known pids are enough
root.stdin.write(b"go\\n")
root.stdin.flush()
deadline = time.monotonic() + 20
def has_sleep():  # the shell's child exists as "sh" between its fork and its exec of sleep: wait for the exec
    return any(r["name"] == "sleep" for r in read_process_table({"proc_root": root.pid}))
while not has_sleep() and time.monotonic() < deadline:
    time.sleep(0.05)
out["unseen_frame"] = sampler.sample({})
out["unseen"] = sampler.listings  # the signature did not move: not listed (a real loadavg would have moved)
signature[0] = b"2 101"
procs_mod.LIST_EVERY = 0.0
frame = sampler.sample({})
out["moved"] = sampler.listings
out["upsert"] = [(r["name"], r["ppid"] == root.pid) for r in frame["upsert"]]
sampler.sample({})
out["every"] = sampler.listings  # and at least every LIST_EVERY seconds whatever loadavg says
root.kill()
print(json.dumps(out))
"""


def _in_pid_namespace(script: str) -> dict:
    """Run ``script`` (Python, printing one JSON object) as pid 1's child in a new PID namespace with its own
    /proc: only the script's processes are there, whatever else runs on this machine (other test workers)."""
    try:
        out = subprocess.run(
            [*pid_namespace_argv(), sys.executable, "-c", script],
            capture_output=True,
            timeout=60,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )
    except FileNotFoundError:
        pytest.skip("no unshare (util-linux)")
    if out.returncode != 0 and b"unshare" in out.stderr:
        pytest.skip("cannot make a PID namespace here: %s" % out.stderr.decode().strip())
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def test_proc_is_listed_only_when_tasks_change():
    # in a PID namespace: on the host, any process of another test ending would (rightly) make it list again
    data = _in_pid_namespace(LISTING_PROBE)
    assert data["quiet"] == 1
    assert data["unseen_frame"] is None and data["unseen"] == 1
    assert data["moved"] == 2 and data["upsert"] == [["sleep", True]]
    assert data["every"] == 3


def test_unchanged_stat_is_not_parsed_and_gives_zero_cpu(children, monkeypatch):
    child = children(["sleep", "300"])
    # past its start-up (exec, dynamic loading): from then on its stat stays the same
    _until(lambda: [r for r in read_process_table({"proc_root": child.pid}) if r["name"] == "sleep"])
    time.sleep(0.2)
    sampler = ProcSampler({"proc_root": child.pid}, backend="proc")
    _until(lambda: sampler.sample({child.pid: None}) and child.pid in sampler._entries)
    parsed = []
    real = procreader._parse_stat
    monkeypatch.setattr(procreader, "_parse_stat", lambda data, pid: parsed.append(pid) or real(data, pid))
    for _ in range(3):
        time.sleep(0.05)
        sampler.sample({child.pid: None})  # on a GPU: read every sample
    assert child.pid not in parsed
    assert sampler._entries[child.pid].cpu == 0.0 and sampler._entries[child.pid].state == "S"
    os.kill(child.pid, signal.SIGSTOP)  # its stat changes: parsed now (the count above sees the parses)

    def parsed_again():
        sampler.sample({child.pid: None})
        return child.pid in parsed

    _until(parsed_again, timeout=5)


def test_held_files_go_with_their_process(children, monkeypatch):
    monkeypatch.setattr(procs_mod, "task_signature", lambda: b"1 1")  # only failed reads reveal the exit
    # files are held first come, first served: room for every process on a busy host, so ours get some
    monkeypatch.setattr(procreader, "_hold_limit", lambda: 1 << 16)
    root = children(["sh", "-c", "sleep 300 & wait"])
    _until(lambda: len(read_process_table({"proc_root": root.pid})) == 2)
    sampler = ProcSampler({"proc_root": root.pid}, backend="proc")
    table = _apply({}, sampler.sample({}))
    sleep_pid = next(pid for pid, r in table.items() if r["name"] == "sleep")
    entry = sampler._entries[sleep_pid]
    sampler.sample({sleep_pid: None})  # its second reading opens schedstat (single-threaded)
    assert entry.stat_fd in sampler._reader.held and entry.sched_fd in sampler._reader.held
    os.kill(sleep_pid, signal.SIGKILL)  # sh reaps it; the held schedstat and stat now answer ESRCH

    def gone():
        frame = sampler.sample({sleep_pid: None})
        return frame is not None and sleep_pid in frame["gone"]

    _until(gone)
    assert entry.stat_fd == -1 and entry.sched_fd == -1 and sleep_pid not in sampler._entries
    listings = sampler.listings
    sampler.sample({})
    assert sampler.listings == listings + 1  # its pid may be in use again: /proc is listed at once
    held = set(sampler._reader.held)
    assert held
    sampler.close()
    assert not sampler._reader.held
    for fd in held:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_out_of_descriptors_is_not_a_process_exit(children, monkeypatch):
    child = children(["sleep", "300"])
    sampler = ProcSampler({"proc_root": child.pid}, backend="proc")
    assert child.pid in _apply({}, sampler.sample({}))
    sampler.close()  # nothing held: every reading has to open its file

    class NoFds:
        def __getattr__(self, name):
            return getattr(os, name)

        def open(self, path, flags, *args, **kw):
            if str(path).startswith("/proc/"):
                raise OSError(errno.EMFILE, "Too many open files")
            return os.open(path, flags, *args, **kw)

    monkeypatch.setattr(procreader, "os", NoFds())
    monkeypatch.setattr(procfs, "os", NoFds())
    for _ in range(3):
        frame = sampler.sample({child.pid: None})
        assert frame is None or child.pid not in frame["gone"]
    assert sampler._reader.hold_limit == 0
    monkeypatch.undo()
    frame = sampler.sample({child.pid: 5})
    assert frame["upsert"][0]["pid"] == child.pid and frame["upsert"][0]["gpu_mem"] == 5


def test_a_change_held_back_by_resend_is_sent_later(children, monkeypatch):
    child = children(["sleep", "300"])
    # past its start-up (exec, dynamic loading): a reading then finds nothing new (a loaded CI read it mid-exec)
    _until(lambda: [r for r in read_process_table({"proc_root": child.pid}) if r["name"] == "sleep"])
    time.sleep(0.2)
    sampler = ProcSampler({"proc_root": child.pid}, backend="proc")
    assert child.pid in _apply({}, sampler.sample({}))
    entry = sampler._entries[child.pid]
    # as if its last record (sent just now) and reading said 50 % cpu; the next readings say 0
    entry.sent = dict(entry.sent, cpu=50.0)
    entry.sent_at = time.monotonic()
    entry.cpu = 50.0
    entry.next_read = 0.0
    assert sampler.sample({}) is None  # changed, but within RESEND of the last record
    entry.next_read = 0.0
    assert sampler.sample({}) is None and not entry.changed  # read again: nothing new since
    monkeypatch.setattr(procs_mod, "RESEND", 0.0)
    frame = sampler.sample({})  # not read this time, but still owed a record
    assert [(r["pid"], r["cpu"]) for r in frame["upsert"]] == [(child.pid, 0.0)]
    assert sampler.sample({}) is None


def test_a_signature_that_misses_new_processes_is_not_trusted(children, monkeypatch):
    monkeypatch.setattr(procs_mod, "task_signature", lambda: b"1 100")  # never moves, whatever happens
    root = children(["sh", "-c", "read x; sleep 300"], stdin=subprocess.PIPE)
    sampler = ProcSampler({"proc_root": root.pid}, backend="proc")
    sampler.sample({})
    root.stdin.write(b"go\n")
    root.stdin.flush()
    _until(lambda: len(read_process_table({"proc_root": root.pid})) == 2)
    sampler._next_list = 0.0  # the periodic listing is due
    frame = sampler.sample({})
    assert [r["name"] for r in frame["upsert"]] == ["sleep"]
    listings = sampler.listings
    for _ in range(3):
        sampler.sample({})
    assert sampler.listings == listings + 3  # from now on /proc is listed every sample


def _readings(sampler, pid, seconds, pace=0.02):
    """Sample for ``seconds``; -> (time, identical readings in a row) of each reading of ``pid``."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sampler.sample({})
        entry = sampler._entries[pid]
        if not out or entry.read_at != out[-1][0]:
            out.append((entry.read_at, entry.unchanged))
        time.sleep(pace)
    return out


@pytest.mark.slow
def test_a_process_idle_for_long_is_read_less_often(children, monkeypatch):
    monkeypatch.setattr(procs_mod, "HOT_NEW", 0.0)
    monkeypatch.setattr(procs_mod, "COLD_PERIOD", 0.25)
    monkeypatch.setattr(procs_mod, "DORMANT_PERIOD", 0.5)
    monkeypatch.setattr(procs_mod, "ASLEEP_AFTER", 6)
    monkeypatch.setattr(procs_mod, "ASLEEP_PERIOD", 1.25)
    child = children(["sleep", "300"])
    time.sleep(0.3)  # past its start-up
    sampler = ProcSampler({"proc_root": child.pid}, backend="proc")
    readings = _readings(sampler, child.pid, 6.5)
    gaps = [(a[1], b[0] - a[0]) for a, b in itertools.pairwise(readings)]
    cold = [gap for unchanged, gap in gaps if unchanged < procs_mod.DORMANT_AFTER]
    dormant = [gap for unchanged, gap in gaps if procs_mod.DORMANT_AFTER <= unchanged < procs_mod.ASLEEP_AFTER]
    asleep = [gap for unchanged, gap in gaps if unchanged >= procs_mod.ASLEEP_AFTER]
    assert cold and max(cold) < 0.45, readings  # ~0.25 s apart (0.15-0.35, staggered)
    assert dormant and min(dormant) > 0.25 and max(dormant) < 0.8, readings  # ~0.5 s apart (0.3-0.7)
    assert len(asleep) >= 2 and min(asleep) > 0.7, readings  # ~1.25 s apart (0.75-1.75) once idle for long


def test_a_dormant_parent_is_read_when_a_child_comes_and_goes(children, monkeypatch):
    monkeypatch.setattr(procs_mod, "HOT_NEW", 0.0)
    monkeypatch.setattr(procs_mod, "COLD_PERIOD", 100.0)
    monkeypatch.setattr(procs_mod, "DORMANT_PERIOD", 100.0)
    monkeypatch.setattr(procs_mod, "task_signature", lambda: None)  # list /proc every sample
    parent = children(["sh", "-c", "read x; sleep 2; read y"], stdin=subprocess.PIPE)
    sampler = ProcSampler({"proc_root": parent.pid}, backend="proc")
    sampler.sample({})
    entry = sampler._entries[parent.pid]
    # on a busy machine sh may still be starting (state R, or CPU since the last reading): hot, read each
    # sample until it sits in `read`, which a sample or two shows
    def settled():
        sampler.sample({})
        return entry.next_read > time.monotonic() + 10

    _until(settled, timeout=5, step=0.05)
    first = entry.read_at
    time.sleep(0.3)
    sampler.sample({})
    assert entry.read_at == first  # idle: next reading in ~100 s
    parent.stdin.write(b"go\n")
    parent.stdin.flush()
    _until(lambda: len(read_process_table({"proc_root": parent.pid})) == 2, timeout=5, step=0.05)
    sampler.sample({})  # the child's first reading
    sampler.sample({})
    forked = entry.read_at
    assert forked > first  # read at the sample after its child appeared
    wchan = read_wchan(parent.pid)
    if wchan is not None:  # where the kernel shows it: the fresh one (waiting for the child)
        assert entry.wchan == wchan
    _until(lambda: len(read_process_table({"proc_root": parent.pid})) == 1, timeout=5, step=0.05)
    sampler.sample({})
    sampler.sample({})
    assert entry.read_at > forked  # and again once the child went away


NAMESPACE_PROBE = """
import json, subprocess, sys, time
from console.agent.sample.procs import ProcSampler, read_process_table
first = subprocess.Popen(["sh", "-c", "sleep 300 & wait"])  # pid 2 in this namespace, its child pid 3
time.sleep(0.3)
frame = ProcSampler({}, backend="proc").sample({})
table = {r["pid"]: r for r in frame["procs"]}
print(json.dumps({"first": first.pid, "sampler": table, "snapshot": [r["pid"] for r in read_process_table({})]}))
first.kill()
"""


def test_pid_2_in_a_pid_namespace_is_a_process_not_a_kernel_thread():
    """In a container pid 2 (and its children) are the workload, not kthreadd's kernel threads."""
    data = _in_pid_namespace(NAMESPACE_PROBE)
    assert data["first"] == 2
    table = data["sampler"]
    assert table["2"]["name"] == "sh" and table["3"]["name"] == "sleep" and table["3"]["ppid"] == 2
    assert 2 in data["snapshot"] and 3 in data["snapshot"]


GROW_ON_INPUT = "import sys; sys.stdin.readline(); block = bytearray(64 << 20); sys.stdin.readline()"


@pytest.mark.slow
def test_a_process_that_did_not_run_is_read_through_schedstat_and_changes_still_show(children, monkeypatch):
    grower = children([sys.executable, "-c", GROW_ON_INPUT], stdin=subprocess.PIPE)
    sleeper = children(["sleep", "300"])
    time.sleep(0.5)  # both past their start-up, waiting
    sampler = ProcSampler({}, backend="proc")
    on_gpu = {sleeper.pid: None, grower.pid: None}  # read every sample
    table = _apply({}, sampler.sample(on_gpu))
    parsed = []
    real = procreader._parse_stat
    monkeypatch.setattr(procreader, "_parse_stat", lambda data, pid: parsed.append(pid) or real(data, pid))
    for _ in range(3):
        time.sleep(0.1)
        table = _apply(table, sampler.sample(on_gpu))
    entry = sampler._entries[sleeper.pid]
    assert entry.threads == 1 and entry.sched and entry.unchanged >= 2  # idle: schedstat said so
    assert sleeper.pid not in parsed
    os.kill(sleeper.pid, signal.SIGSTOP)  # the kernel runs it to stop it: schedstat moves
    _until(lambda: _apply(table, sampler.sample(on_gpu))[sleeper.pid]["state"] in ("T", "t"), timeout=5)
    assert sleeper.pid in parsed  # a changed stat is parsed: the count above sees the parses
    rss = table[grower.pid]["rss"]
    grower.stdin.write(b"grow\n")
    grower.stdin.flush()
    _until(lambda: _apply(table, sampler.sample(on_gpu))[grower.pid]["rss"] > rss + (32 << 20), timeout=10)


def test_an_idle_orphan_shows_its_new_parent(children, monkeypatch):
    monkeypatch.setattr(procs_mod, "COLD_PERIOD", 100.0)
    monkeypatch.setattr(procs_mod, "HOT_NEW", 0.0)
    parent = children(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE)
    orphan = int(parent.stdout.readline())
    time.sleep(0.3)
    sampler = ProcSampler({}, backend="proc")
    table = _apply({}, sampler.sample({}))
    for _ in range(3):  # read through schedstat (on a GPU: every sample), then left alone (not on it)
        table = _apply(table, sampler.sample({orphan: None}))
    assert table[orphan]["ppid"] == parent.pid and sampler._entries[orphan].sched
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    try:
        _until(lambda: _apply(table, sampler.sample({})).get(orphan, {}).get("ppid") != parent.pid, timeout=5)
        assert parent.pid not in table
    finally:
        os.kill(orphan, signal.SIGKILL)


def test_without_schedstat_every_reading_reads_stat(children, monkeypatch):
    """A kernel without CONFIG_SCHED_INFO has no /proc/PID/schedstat: the stat alone tells what changed."""
    child = children(["sleep", "300"])
    time.sleep(0.3)
    sampler = ProcSampler({"proc_root": child.pid}, backend="proc")
    sampler._reader.have_schedstat = False
    on_gpu = {child.pid: None}
    table = _apply({}, sampler.sample(on_gpu))
    for _ in range(3):
        table = _apply(table, sampler.sample(on_gpu))
    entry = sampler._entries[child.pid]
    assert entry.sched_fd == -1 and entry.unchanged >= 2 and table[child.pid]["cpu"] == 0.0
    os.kill(child.pid, signal.SIGSTOP)
    _until(lambda: _apply(table, sampler.sample(on_gpu))[child.pid]["state"] in ("T", "t"), timeout=5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("period", [0.3, 2.6])
def test_a_child_seen_before_its_exec_into_the_same_program_gets_its_own_cmdline(backend, period, children):
    """Between fork and exec a child shows its parent's cmdline; exec into the same program (python -> python
    bench.py, bash -> bash benchmark.sh) leaves its name as it was. Seen in that window, it must still get the
    cmdline it exec'd (a benchmark restarted by a wrapper would otherwise never match its pattern), also when
    the next sample comes after EXEC_SETTLE (an instance off screen samples its processes every 5 s)."""
    token = "fleet-exec-probe-%d" % os.getpid()
    script = ("import os, sys, time\nsys.stdin.readline()\npid = os.fork()\nif pid == 0:\n"
              "    time.sleep(0.6)\n"
              "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', %r[::-1]])\n"
              "time.sleep(300)\n" % token[::-1])  # (the token is not in the parent's own cmdline)
    root = children([sys.executable, "-c", script], stdin=subprocess.PIPE)
    sampler = ProcSampler({"proc_root": root.pid}, backend=backend)
    table = _apply({}, sampler.sample({}))
    root.stdin.write(b"go\n")
    root.stdin.flush()
    child = _until(lambda: next((p for p, r in _apply(table, sampler.sample({})).items() if r["ppid"] == root.pid),
                                None), step=0.05)
    assert token not in table[child]["cmdline"]  # seen before its exec: the parent's cmdline
    time.sleep(period)
    _until(lambda: token in _apply(table, sampler.sample({}))[child]["cmdline"], timeout=10, step=period)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_process_start_is_true_to_a_tenth_of_a_second(backend, children):
    """A process's start is when it began, not up to a second earlier (``/proc/stat``'s whole-second boot time):
    the console compares it with the moment a diagnosis read the host, and a benchmark restarted just after
    that read must count as a run the verdict never saw."""
    before = time.time()
    child = children(["sleep", "300"])
    after = time.time()
    sampler = ProcSampler({"proc_root": child.pid}, backend=backend)
    start = _apply({}, sampler.sample({}))[child.pid]["start"]
    assert before - 0.1 <= start <= after + 0.1, (before, start, after)
