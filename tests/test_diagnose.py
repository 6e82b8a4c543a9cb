"""Diagnosis: the pure analysis on fixtures, and the gatherer on real fake-benchmark process chains."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis import signatures
from console.agent.diagnosis.signatures import read_tail
from console.agent.ops import OPS
from console.agent.wire import config as agent_config
from tests.fixtures.chains.harness import Harness, wait_for

LOCAL_SEED = Path(__file__).resolve().parent / "fixtures" / "seed-warmup-broken-pipe"
SHARED_SEED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "seed-warmup-broken-pipe"


def seed_dirs() -> List[Path]:
    return [p for p in (SHARED_SEED, LOCAL_SEED) if (p / "tmp").is_dir()]


@pytest.fixture(params=seed_dirs(), ids=lambda p: "shared" if p == SHARED_SEED else "local")
def seed_tmp(request: Any, tmp_path: Path) -> Path:
    """A copy of the seed fixture's tmp/ (the logs as they were on the instance)."""
    dest = tmp_path / "tmp"
    shutil.copytree(str(request.param / "tmp"), str(dest))
    old = time.time() - 900
    for path in dest.iterdir():
        os.utime(str(path), (old, old))
    return dest


def rec(pid: int, ppid: int, cmdline: str, state: str = "S", wchan: Optional[str] = None, cpu: float = 0.0,
        start: float = 0.0) -> Dict[str, Any]:
    return {"pid": pid, "ppid": ppid, "name": cmdline.split()[0].rsplit("/", 1)[-1], "cmdline": cmdline,
            "state": state, "wchan": wchan, "cpu": cpu, "rss": 4 << 20, "start": start or time.time() - 3600,
            "gpu_mem": None}


def code_of(line: str) -> str | None:
    """The code one log line gets from the signature table (None: no signature, or a harmless line)."""
    sig = signatures.match_line(line)
    return sig.code if sig is not None and not signatures.is_harmless(line) else None


def logs_of(directory: Path) -> List[Dict[str, Any]]:
    out = []
    for path in sorted(directory.iterdir()):
        lines, first = read_tail(str(path))
        st = path.stat()
        out.append({"path": str(path), "mtime": st.st_mtime, "size": st.st_size, "first_line": first,
                    "lines": lines})
    return out


SEED_BENCH = {"match": [r"cuzk-daemon", r"cuzk-bench\b"], "entrypoint": [r"/entrypoint\.sh"]}


def seed_facts(tmp: Path, wchan: Optional[str] = "do_wait", gpu_util: int = 0) -> Dict[str, Any]:
    procs = [
        rec(1, 0, "/sbin/docker-init -- /opt/start.sh"),
        rec(27, 1, "/usr/sbin/sshd -D"),
        rec(369, 1, "bash /entrypoint.sh", wchan=wchan),
    ]
    return {
        "now": time.time(),
        "benchmark": SEED_BENCH,
        "processes": procs,
        "files": [{"path": log["path"], "mtime": log["mtime"], "size": log["size"]} for log in logs_of(tmp)],
        "logs": logs_of(tmp),
        "dmesg": {"lines": [], "error": "not permitted"},
        "gpu": {"state": "ok", "devices": [{"index": 0, "util": gpu_util, "mem_used": 0},
                                           {"index": 1, "util": gpu_util, "mem_used": 0}]},
    }


def by_code(result: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {f["code"]: f for f in result["findings"]}


# -- the seed, pure ------------------------------------------------------------------------------
def test_seed_headline_is_transport_error_on_the_warmup_proof(seed_tmp: Path) -> None:
    result = dg.analyze(seed_facts(seed_tmp))
    verdict = result["verdict"]
    assert verdict["code"] == "transport_error"
    assert verdict["severity"] in ("error", "critical")
    assert "warmup proof" in verdict["summary"] and "Broken pipe (os error 32)" in verdict["summary"]
    found = by_code(result)
    transport = found["transport_error"]
    log = str(seed_tmp / "benchmark-full.log")
    ev = {(e["path"], e["line"]): e["text"] for e in transport["evidence"]}
    assert "broken pipe" in ev[(log, 5)]
    assert ev[(log, 8)] == "1: Broken pipe (os error 32)"
    assert ev[(log, 9)] == "warmup proof failed, aborting benchmark"
    assert found["benchmark_not_running"]["severity"] == "error"
    assert "369" in found["waiting_on_child"]["summary"]
    assert "do_wait" in found["waiting_on_child"]["summary"]
    missing = found["missing_input"]
    assert missing["severity"] == "info"
    assert "then downloaded" in missing["summary"]
    assert (log, 1) in {(e["path"], e["line"]) for e in missing["evidence"]}
    assert any(e["text"].endswith("100.0%") and e["line"] == 3 for e in missing["evidence"])
    assert found["gpu_idle"]["severity"] == "warning"
    names = [s["name"] for s in result["steps"]]
    assert names == ["processes", "entrypoint", "recent_files", "logs", "signatures", "liveness", "gpu", "verdict"]
    assert all(f["severity"] in ("info", "warning", "error", "critical") for f in result["findings"])


def test_seed_waiting_on_child_without_wchan(seed_tmp: Path) -> None:
    """wchan is often unknown on these hosts: a live entrypoint whose child exited still counts."""
    facts = seed_facts(seed_tmp, wchan=None)
    result = dg.analyze(facts)
    assert "waiting_on_child" in by_code(result)
    assert result["verdict"]["code"] == "transport_error"
    # an idle child (sleep) also counts; a busy child does not
    facts["processes"].append(rec(400, 369, "sleep infinity"))
    assert "only idle children" in by_code(dg.analyze(facts))["waiting_on_child"]["summary"]
    facts["processes"][-1] = rec(400, 369, "python3 setup_params.py", state="R", cpu=95.0)
    assert "waiting_on_child" not in by_code(dg.analyze(facts))


def test_symptoms_alone_rank_benchmark_not_running(tmp_path: Path) -> None:
    facts = {"now": time.time(), "benchmark": SEED_BENCH,
             "processes": [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait")], "logs": [], "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0}]}}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "benchmark_not_running"
    assert set(by_code(result)) == {"benchmark_not_running", "waiting_on_child", "gpu_idle"}


def test_a_young_entrypoint_still_setting_up_is_starting_not_failed(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / "setup.log").write_text("C1 output not found\nDownloading from https://x.r2.dev/c1.json ...\n")
    os.utime(str(tmp_path / "setup.log"), (now, now))
    procs = [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait", start=now - 5),
             rec(370, 369, "curl -# -o /data/c1.json https://x.r2.dev/c1.json", start=now - 4)]
    facts = {"now": now, "benchmark": SEED_BENCH, "processes": procs, "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0}]}}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "starting", result["findings"]
    assert "not started yet" in result["verdict"]["summary"] and "5s ago" in result["verdict"]["summary"]
    assert all(f["severity"] == "info" for f in result["findings"] if f["code"] != "missing_input")
    # the same tree two minutes later is a problem again
    for r in procs:
        r["start"] -= 120
    later = dg.analyze(facts)
    assert later["verdict"]["severity"] in ("warning", "error")
    assert by_code(later)["benchmark_not_running"]["severity"] == "error"


def test_a_young_entrypoint_whose_benchmark_already_failed_is_not_starting(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / "benchmark-full.log").write_text(
        "Running warmup proof...\nError: status: Unavailable, message: \"error sending request: broken pipe\"\n"
        "warmup proof failed, aborting benchmark\n")
    procs = [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait", start=now - 20)]
    facts = {"now": now, "benchmark": SEED_BENCH, "processes": procs, "logs": logs_of(tmp_path), "files": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "transport_error"
    down = by_code(result)["benchmark_not_running"]
    assert down["severity"] == "error" and "not started yet" not in down["summary"]


def test_a_young_entrypoint_whose_setup_download_was_refused_is_not_starting(tmp_path: Path) -> None:
    """An explicit failure inside the start-up grace (git-lfs over its quota) is the verdict; a line that says
    something succeeded and something failed ("Clone succeeded, but checkout failed") is no recovery."""
    now = time.time()
    (tmp_path / "setup.log").write_text(
        "Downloading ckpt/epoch=30.ckpt (189 MB)\n"
        "Error downloading object: ckpt/epoch=30.ckpt (2f2ff84): Smudge error: batch response: This repository is "
        "over its data quota. Account responsible for LFS bandwidth should purchase more data packs.\n"
        "fatal: ckpt/epoch=30.ckpt: smudge filter lfs failed\nwarning: Clone succeeded, but checkout failed.\n")
    procs = [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait", start=now - 5)]
    facts = {"now": now, "benchmark": SEED_BENCH, "processes": procs, "logs": logs_of(tmp_path), "files": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "download_failed", result["findings"]


def _idle_gpus(n: int = 1) -> Dict[str, Any]:
    return {"state": "ok", "devices": [{"index": i, "util": 0, "mem_used": 1 << 20} for i in range(n)]}


def test_idle_gpus_after_an_error_that_predates_the_live_process_are_that_error(tmp_path: Path) -> None:
    log = tmp_path / "webui.log"
    log.write_text("Traceback (most recent call last):\n  File \"server.py\", line 1, in <module>\n"
                   "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory\n")
    old = time.time() - 30
    os.utime(str(log), (old, old))
    now = time.time()
    facts = {"now": now, "benchmark": {"match": [r"server\.py"], "entrypoint": [r"start\.sh"]},
             "processes": [rec(500, 1, "python3 server.py --listen", start=now - 10)],
             "logs": logs_of(tmp_path), "files": [], "gpu": _idle_gpus()}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "library_missing", result["findings"]


def test_idle_gpus_while_the_last_line_saves_a_checkpoint_are_healthy(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "{'loss': 1.1843, 'learning_rate': 1.8e-05, 'epoch': 0.42}\n"
        "[INFO] [torch_checkpoint_engine.py:21:save] [Torch] Saving out/checkpoint-2000/global_step2000/"
        "zero_pp_rank_0_mp_rank_00_optim_states.pt...\n")
    now = time.time()
    facts = {"now": now, "benchmark": {"match": [r"train_bash\.py"], "entrypoint": [r"/entrypoint\.sh"]},
             "processes": [rec(600, 1, "python3 train_bash.py --deepspeed ds_zero2.json", start=now - 3600)],
             "logs": logs_of(tmp_path), "files": [], "gpu": _idle_gpus(4)}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "healthy", result["findings"]


def test_throttled_clocks_explain_a_slowdown() -> None:
    from console.agent.diagnosis import codes, rank
    from console.agent.diagnosis.records import Item
    slow = Item("slowed_down", "warning", "steps 3.5x slower", [], time=100.0)
    hot = Item("throttled", "warning", "HW Power Brake Slowdown: Active", [], time=50.0)
    assert codes.tier("slowed_down") == "symptom"
    code, head = rank.choose([slow, hot], None, None)
    assert code == "throttled" and head is hot
    assert rank.link_symptoms([slow, hot], head) == ["slowed_down"] and slow.caused_by == "throttled"
    code, head = rank.choose([Item("slowed_down", "warning", "steps 3.5x slower", [], time=100.0)], None, None)
    assert code == "slowed_down"


def test_healthy_running_benchmark(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("Running warmup proof...\nwarmup ok in 40.1s\nproof 1/10 done\n")
    facts = {
        "now": time.time(),
        "benchmark": SEED_BENCH,
        "processes": [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait"),
                      rec(400, 369, "bash benchmark.sh"),
                      rec(401, 400, "/opt/cuzk-daemon --config x", state="R", cpu=300.0),
                      rec(402, 400, "/opt/cuzk-bench --warmup", cpu=2.0)],
        "logs": logs_of(tmp_path),
        "files": [],
        "gpu": {"state": "ok", "devices": [{"index": 0, "util": 97}, {"index": 1, "util": 95}]},
    }
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "healthy", result["findings"]
    assert result["verdict"]["severity"] == "info"
    assert result["findings"] == []


def test_errors_from_before_the_current_run_are_history(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("Running warmup proof...\n    0: transport error\n")
    old = time.time() - 3600
    os.utime(str(log), (old, old))
    facts = {
        "now": time.time(),
        "benchmark": SEED_BENCH,
        "processes": [rec(401, 1, "/opt/cuzk-daemon", state="R", cpu=300.0, start=time.time() - 60)],
        "logs": logs_of(tmp_path),
        "files": [],
    }
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "healthy"
    assert by_code(result)["transport_error"]["severity"] == "info"


def test_cuda_oom_outranks_the_transport_error_it_causes(tmp_path: Path) -> None:
    (tmp_path / "daemon.log").write_text(
        "2026-12-03T05:56:40Z INFO cuzk_daemon::srv: starting cuzk-daemon\n"
        "2026-12-03T05:56:57Z ERROR cuzk_daemon::prove: synthesis failed on GPU 0: CUDA error: out of memory\n")
    (tmp_path / "bench.log").write_text(
        "Running warmup proof...\nError: status: Unavailable, message: \"Connection refused\"\n"
        "warmup proof failed, aborting benchmark\n")
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": logs_of(tmp_path), "files": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "cuda_oom"
    # the headline reads like a sentence: no timestamp, level or module path from the log line
    assert result["verdict"]["summary"] == "CUDA out of memory: synthesis failed on GPU 0: CUDA error: out of memory"
    assert {"cuda_oom", "transport_error", "benchmark_not_running"} <= set(by_code(result))


def test_host_oom_kill_and_gpu_lost_from_dmesg() -> None:
    uptime = 9100.0
    dmesg = [
        "[   12.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.14",
        "[ 8123.400000] cuzk-daemon invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP)",
        "[ 8123.456789] Out of memory: Killed process 4242 (cuzk-daemon) total-vm:987654321kB, "
        "anon-rss:123456789kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:241000kB oom_score_adj:0",
    ]
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": [], "files": [],
             "dmesg": {"lines": dmesg, "error": None, "uptime": uptime}, "dmesg_max_age": 3600}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "host_oom_kill"
    assert "cuzk-daemon (pid 4242)" in result["verdict"]["summary"]
    assert by_code(result)["host_oom_kill"]["evidence"][0]["path"] == "dmesg"
    dmesg.append("[ 9001.000001] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus.")
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "gpu_lost"
    assert "fell off the bus" in result["verdict"]["summary"]
    # events older than dmesg_max_age are not news
    facts["dmesg"]["uptime"] = 9001.0 + 7200
    assert dg.analyze(facts)["verdict"]["code"] == "benchmark_not_running"


def test_kernel_events_from_before_the_current_run_are_history() -> None:
    now = time.time()
    uptime = 9100.0  # the OOM kill below happened ~1000 s ago; the entrypoint started 300 s ago
    dmesg = ["[ 8100.000000] Out of memory: Killed process 4242 (cuzk-daemon) total-vm:9kB, anon-rss:9kB"]
    facts = {"now": now, "benchmark": SEED_BENCH, "logs": [], "files": [],
             "processes": [rec(369, 1, "bash /entrypoint.sh", start=now - 300)],
             "dmesg": {"lines": dmesg, "error": None, "uptime": uptime}, "dmesg_max_age": 6 * 3600}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "benchmark_not_running"
    oom = by_code(result)["host_oom_kill"]
    assert oom["severity"] == "info" and oom["summary"].startswith("before the current run")
    facts["processes"][0]["start"] = now - 2000  # the same kill during this run is the headline
    assert dg.analyze(facts)["verdict"]["code"] == "host_oom_kill"


def test_gpu_lost_from_the_sampler() -> None:
    facts = {"now": time.time(), "benchmark": {}, "processes": [], "logs": [], "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 99},
                                                {"index": 1, "lost": True, "error": "GPU is lost"}]}}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "gpu_lost"
    assert result["verdict"]["severity"] == "critical"


def test_download_stalled_and_unresolved_missing_input(tmp_path: Path) -> None:
    log = tmp_path / "benchmark-full.log"
    log.write_bytes(b"C1 output not found at /data/c1.json\nDownloading from https://x/c1.json ...\n"
                    b"#=#=#\r   0.0%\r###      5.2%\r########################     33.9%")
    old = time.time() - 600
    os.utime(str(log), (old, old))
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": logs_of(tmp_path),
             "files": [], "stall_seconds": 120}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "download_stalled"
    assert "33.9%" in result["verdict"]["summary"]
    stalled = by_code(result)["download_stalled"]
    assert [e["line"] for e in stalled["evidence"]] == [2, 3]
    assert by_code(result)["missing_input"]["severity"] == "warning"
    # still moving: not stalled
    facts["stall_seconds"] = 3600
    assert "download_stalled" not in by_code(dg.analyze(facts))


def test_python_traceback_names_the_exception(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(
        "Running C2 prove...\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
        "    main()\nValueError: sector size 64GiB is not supported\n")
    facts = {"now": time.time(), "benchmark": {}, "processes": [], "logs": logs_of(tmp_path), "files": []}
    verdict = dg.analyze(facts)["verdict"]
    assert verdict["code"] == "python_traceback"
    assert "ValueError: sector size" in verdict["summary"]
    assert "C2 prove" in verdict["summary"]


# -- the gatherer on real processes -----------------------------------------------------------------

def _diagnose_until(config: Dict[str, Any], code: str, timeout: float = 30.0) -> Dict[str, Any]:
    def attempt() -> Optional[Dict[str, Any]]:
        result = dg.diagnose(config, include_dmesg=False)
        return result if result["verdict"]["code"] == code else None

    result = wait_for(attempt, timeout=timeout, interval=0.3)
    if not result:
        result = dg.diagnose(config, include_dmesg=False)
        pytest.fail("verdict %r, wanted %r: %r" % (result["verdict"], code, result["findings"]))
    return result


def test_gatherer_finds_the_seed_failure_on_a_real_chain(chains: Harness) -> None:
    chains.start("seed")
    assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    config = chains.config("seed")
    result = _diagnose_until(config, "transport_error")
    assert "warmup proof" in result["verdict"]["summary"]
    found = by_code(result)
    assert {"benchmark_not_running", "waiting_on_child"} <= set(found)
    assert found["missing_input"]["severity"] == "info"
    log = str(chains.logdir / "benchmark-full.log")
    texts = {(e["path"], e["text"]) for e in found["transport_error"]["evidence"]}
    assert (log, "warmup proof failed, aborting benchmark") in texts
    tree = next(s for s in result["steps"] if s["name"] == "entrypoint")
    assert any("entrypoint.sh" in line for line in tree["lines"])
    assert any("sleep 100000" in line for line in tree["lines"])


def test_gatherer_finds_cuda_oom_on_a_real_chain(chains: Harness) -> None:
    chains.start("oom")
    assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    result = _diagnose_until(chains.config("oom"), "cuda_oom")
    found = by_code(result)
    assert found["cuda_oom"]["evidence"][0]["path"].endswith("cuzk-bench-daemon.log")
    assert {"transport_error", "benchmark_not_running", "waiting_on_child"} <= set(found)


def test_gatherer_finds_a_stalled_download_on_a_real_chain(chains: Harness) -> None:
    chains.start("stall")
    assert wait_for(lambda: "33.9%" in chains.log_text("benchmark-full.log"), timeout=30)
    config = chains.config("stall")
    config["stall_seconds"] = 1.0
    result = _diagnose_until(config, "download_stalled")
    assert "33.9%" in result["verdict"]["summary"]
    ev = by_code(result)["download_stalled"]["evidence"]
    assert ev[-1]["line"] == 3 and ev[-1]["path"].endswith("benchmark-full.log")


def test_gatherer_healthy_when_the_chain_runs(chains: Harness) -> None:
    chains.start("run")
    assert wait_for(lambda: len(chains.bench_pids()) >= 2, timeout=30)
    result = _diagnose_until(chains.config("run"), "healthy")
    proc_step = result["steps"][0]
    assert proc_step["status"] == "ok"


def test_diagnose_op_and_function_without_an_agent(chains: Harness) -> None:
    config = chains.config("run")

    class FakeAgent:
        def __init__(self) -> None:
            self.config = config
            self.gpu = None

    data = OPS["diagnose"](FakeAgent(), {"dmesg": False})
    assert data["verdict"]["code"] == "benchmark_not_running"
    assert set(data) >= {"verdict", "findings", "steps"}
    empty = agent_config._merge(agent_config.DEFAULTS, {"watch_dirs": []})
    assert dg.diagnose(empty, include_dmesg=False)["verdict"]["code"] == "healthy"


def test_one_age_format_for_the_whole_project() -> None:
    from console.agent.wire.timefmt import fmt_age

    assert [fmt_age(s) for s in (-3, 0, 5, 95, 119, 120, 185, 7199, 7200, 7380)] == [
        "0s", "0s", "5s", "95s", "119s", "2m 00s", "3m 05s", "119m 59s", "2h 00m", "2h 03m"]
    assert dg.fmt_age is fmt_age


def test_the_defaults_table_covers_the_typed_config() -> None:
    assert set(agent_config.DEFAULTS) == set(agent_config.AgentConfig.__annotations__)
    assert set(agent_config.DEFAULTS["benchmark"]) == set(agent_config.BenchmarkConfig.__annotations__)
    assert agent_config.STARTUP_GRACE_SECONDS == agent_config.DEFAULTS["startup_grace"] == 90.0
    assert agent_config.load() == agent_config.DEFAULTS and agent_config.load() is not agent_config.DEFAULTS


# -- issue 11: causes over symptoms, content-based progress, history, done, program matching -----------------
def test_the_daemon_panic_outranks_the_broken_pipe_it_causes(tmp_path: Path) -> None:
    (tmp_path / "daemon.log").write_text(
        "2026-12-01T21:06:40Z INFO cuzk_daemon::prove: received C2 request (51.2 MB)\n"
        "thread 'tokio-runtime-worker' panicked at cuzk-core/src/srs.rs:211:38:\n"
        "index out of bounds: the len is 8 but the index is 8\n")
    (tmp_path / "bench.log").write_text(
        "Running warmup proof...\nError: status: Unavailable, message: \"error sending request: broken pipe\"\n")
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": logs_of(tmp_path), "files": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "panic"
    assert "transport_error" in result["verdict"].get("followed_by", [])
    assert by_code(result)["transport_error"].get("caused_by") == "panic"


def test_a_wrapper_never_outranks_what_it_wraps(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.\n"
        "Traceback (most recent call last):\n  File \"/usr/local/bin/torchrun\", line 8, in <module>\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "  exitcode  : 1 (pid: 9292)\n")
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": logs_of(tmp_path), "files": []}
    assert dg.analyze(facts)["verdict"]["code"] == "cuda_oom"


def test_a_repainting_meter_that_does_not_move_is_stalled_though_the_file_is_fresh(tmp_path: Path) -> None:
    states = [" 12 1024M  12  118M    0     0  1063k      0  0:17:04  0:00:11  0:10:54 10.8M"]
    states += [" 37 1024M  37  381M    0     0  1063k      0  0:17:04  0:%02d:%02d  0:10:54     0" % divmod(s, 60)
               for s in range(36, 340)]
    (tmp_path / "setup.log").write_text("[setup] fetching c2.params\n" + "\r".join(states))
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "files": [], "stall_seconds": 120,
             "logs": [dict(log, repaints={}) for log in logs_of(tmp_path)]}
    for log in facts["logs"]:
        read_tail(log["path"], repaints=log["repaints"])
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "download_stalled", result["verdict"]
    assert "381M" in result["verdict"]["summary"]
    assert result["verdict"]["brief"].startswith("download stalled at 37 % (381M) for 5m")


def test_alive_without_progress_is_hung_and_progressing_is_healthy(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("Running warmup proof...\nproof 1/10 done in 82.5s\nproof 2/10 done in 82.9s\n")
    now = time.time()
    procs = [rec(401, 1, "/opt/cuzk-daemon --config x", start=now - 900),
             rec(402, 1, "/opt/cuzk-bench --proofs 10", start=now - 900)]
    os.utime(str(log), (now - 600, now - 600))
    facts = {"now": now, "benchmark": SEED_BENCH, "processes": procs, "logs": logs_of(tmp_path), "files": [],
             "stall_seconds": 300}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "hung"
    assert by_code(result)["hung"]["evidence"][0]["line"] == 3
    os.utime(str(log), (now - 10, now - 10))
    facts["logs"] = logs_of(tmp_path)
    assert dg.analyze(facts)["verdict"]["code"] == "healthy"


def test_a_completed_run_is_finished_not_down(tmp_path: Path) -> None:
    (tmp_path / "bench.log").write_text("proof 10/10 done in 82.5s\nbenchmark finished: 10 proofs in 812.4s\n")
    now = time.time()
    facts = {"now": now, "benchmark": SEED_BENCH, "logs": logs_of(tmp_path), "files": [],
             "processes": [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait", start=now - 5),
                           rec(370, 369, "sleep infinity", start=now - 4)]}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "finished" and result["verdict"]["severity"] == "info"
    assert all(f["severity"] == "info" for f in result["findings"])


def test_recovered_errors_and_harmless_lines_are_history(tmp_path: Path) -> None:
    (tmp_path / "bench.log").write_text(
        "WARN connect attempt 1 failed: error trying to connect: Connection refused (os error 111)\n"
        "connected to cuzk-daemon (attempt 2)\n"
        "x:1:1 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object file: "
        "No such file or directory\n"
        "proof 1/10 done in 82.5s\n")
    now = time.time()
    facts = {"now": now, "benchmark": SEED_BENCH, "logs": logs_of(tmp_path), "files": [],
             "processes": [rec(401, 1, "/opt/cuzk-daemon", start=now - 60), rec(402, 1, "/opt/cuzk-bench")]}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "healthy", result["findings"]
    assert by_code(result)["transport_error"]["severity"] == "info"
    assert "missing_input" not in by_code(result)


def test_viewers_and_arguments_are_never_the_benchmark(tmp_path: Path) -> None:
    (tmp_path / "bench.log").write_text("Running warmup proof...\n")
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "logs": logs_of(tmp_path), "files": [],
             "processes": [rec(10, 1, "tail -f /tmp/cuzk-daemon.log"), rec(11, 1, "watch -n 5 pgrep -af cuzk-bench"),
                           rec(12, 1, "less /tmp/cuzk-bench.log"), rec(13, 1, "sshd: root@notty cuzk-bench")]}
    assert dg.analyze(facts)["verdict"]["code"] == "benchmark_not_running"
    facts["processes"].append(rec(14, 1, "/usr/bin/python3 /opt/cuzk-bench --proofs 10"))
    assert dg.analyze(facts)["verdict"]["code"] == "healthy"


def test_fleet_signature_rows_add_to_the_table(tmp_path: Path) -> None:
    (tmp_path / "bench.log").write_text("Running warmup proof...\nFATAL: license server said no\n")
    facts = {"now": time.time(), "benchmark": SEED_BENCH, "processes": [], "logs": logs_of(tmp_path), "files": [],
             "signatures": [{"code": "license_denied", "severity": "error", "pattern": "license server said no",
                             "explanation": "the prover's license was refused"}]}
    verdict = dg.analyze(facts)["verdict"]
    assert verdict["code"] == "license_denied" and "license server" in verdict["summary"]


def test_the_console_diagnoses_an_instance_once_when_it_enters_trouble() -> None:
    """The automatic-diagnosis rule (controller.autodiag): on entering trouble, connected with an agent,
    rate-limited per instance, never while a diagnosis is in flight on its host."""
    import asyncio

    from console.core.autodiag import AUTO_DIAGNOSE_EVERY
    from console.core.controller import FleetController
    from console.inventory import Fleet, Instance

    async def run() -> None:
        ctl = FleetController(Fleet([Instance("a", "10.0.0.1"), Instance("b", "10.0.0.1")]))
        ctl.links = {"a": None, "b": None}  # type: ignore[dict-item]  # no link is started: only the choice
        a, b = ctl.state.instances["a"], ctl.state.instances["b"]
        for inst in (a, b):
            inst.link_status, inst.status = "connected", "ok"
        assert ctl.autodiag.candidates(now=1000.0) == []
        a.status = "benchmark_down"
        assert ctl.autodiag.candidates(now=1000.0) == ["a"]
        ctl.autodiag.last["a"] = 1000.0
        assert ctl.autodiag.candidates(now=1001.0) == []  # still in trouble: not again
        a.status = "ok"
        ctl.autodiag.candidates(now=1002.0)
        a.status = "gpu_idle"
        assert ctl.autodiag.candidates(now=1003.0) == []  # rate-limited
        a.status, b.status = "ok", "benchmark_down"
        ctl.autodiag.candidates(now=1000.0 + AUTO_DIAGNOSE_EVERY)
        a.status = "benchmark_down"
        async with ctl._host_lock("b"):  # one diagnosis in flight on the host: none more
            assert ctl.autodiag.candidates(now=1001.0 + AUTO_DIAGNOSE_EVERY) == []
        # a failed verdict while the benchmark runs again is looked at again (at most once per window)
        a.status, a.bench_running = "failed", False
        assert ctl.autodiag.candidates(now=3000.0) == []
        a.bench_running = True
        assert ctl.autodiag.candidates(now=3000.0) == ["a"]
        ctl.autodiag.last["a"] = 3000.0
        assert ctl.autodiag.candidates(now=3001.0) == []

    asyncio.run(run())


# -- liveness, kind, finished runs, slowdown (blind round 1's classes) ------------------------------------------
MIB = 1 << 20


def gpu(util: int, power: float, limit: float = 350.0, mem: int = 20000 * MIB, holder: Optional[int] = None,
        index: int = 0) -> Dict[str, Any]:
    return {"index": index, "util": util, "power": power, "power_limit": limit, "mem_used": mem,
            "procs": [] if holder is None else [{"pid": holder, "mem": mem}]}


def activity(*procs: Dict[str, Any]) -> Dict[str, Any]:
    return {"seconds": 1.0, "ephemeral": [32768, 60999], "procs": list(procs)}


def act(pid: int, cpu: float = 0.0, io: int = 0, listen: Optional[List[int]] = None) -> Dict[str, Any]:
    return {"pid": pid, "cpu": cpu, "io": {"rchar": 0, "wchar": io, "read_bytes": 0, "write_bytes": io},
            "listen": listen or []}


TRAIN_BENCH = {"match": [r"train\.py", "torchrun"], "entrypoint": [r"entrypoint\.sh"]}


def stalled_training(tmp_path: Path, **extra: Any) -> Dict[str, Any]:
    """Two ranks alive, their last step 10 minutes ago (stall_seconds 120)."""
    log = tmp_path / "train.log"
    log.write_text("".join("step %d/5000 loss 2.%02d\n" % (s, 99 - s // 10) for s in range(10, 1010, 10)))
    now = time.time()
    os.utime(str(log), (now - 600, now - 600))
    procs = [rec(500, 1, "python3 /usr/local/bin/torchrun --nproc_per_node 2 train.py", start=now - 7200),
             rec(501, 500, "python3 train.py --local-rank=0", start=now - 7200),
             rec(502, 500, "python3 train.py --local-rank=1", start=now - 7200)]
    facts = {"now": now, "benchmark": TRAIN_BENCH, "processes": procs, "logs": logs_of(tmp_path), "files": [],
             "stall_seconds": 120, "gpu": {"state": "ok", "devices": [gpu(0, 60.0, holder=501)]},
             "activity": activity(act(500), act(501), act(502))}
    facts.update(extra)
    return facts


def test_a_stalled_log_with_nothing_moving_is_hung(tmp_path: Path) -> None:
    result = dg.analyze(stalled_training(tmp_path))
    assert result["verdict"]["code"] == "hung"
    assert "nothing moves" in result["verdict"]["summary"]


def test_a_checkpoint_save_or_a_cpu_phase_keeps_a_silent_run_alive(tmp_path: Path) -> None:
    saving = stalled_training(tmp_path, activity=activity(act(500), act(501, cpu=0.4, io=80 * MIB), act(502)))
    result = dg.analyze(saving)
    assert result["verdict"]["code"] == "healthy", result["verdict"]
    assert "I/O" in result["verdict"]["summary"]
    assert "gpu_idle" not in by_code(result)
    compiling = stalled_training(tmp_path, activity=activity(act(500), act(501, cpu=1.0), act(502, cpu=1.0)))
    assert dg.analyze(compiling)["verdict"]["code"] == "healthy"


def test_real_gpu_work_is_alive_and_a_spinning_gpu_is_hung(tmp_path: Path) -> None:
    working = stalled_training(tmp_path, gpu={"state": "ok", "devices": [gpu(98, 330.0, holder=501)]})
    assert dg.analyze(working)["verdict"]["code"] == "healthy"
    # 100 % util at 100 W of 350 W: a stuck collective; the ranks' CPU spins with it and does not count
    spinning = stalled_training(tmp_path, gpu={"state": "ok", "devices": [gpu(100, 100.0, holder=501)]},
                                activity=activity(act(500), act(501, cpu=1.0), act(502, cpu=1.0)))
    result = dg.analyze(spinning)
    assert result["verdict"]["code"] == "hung"
    assert "spinning" in result["verdict"]["summary"]
    # without a power reading a pinned GPU proves nothing either way: the stalled log decides
    blind = stalled_training(tmp_path, gpu={"state": "ok", "devices": [{"index": 0, "util": 100, "procs": []}]},
                             activity=activity(act(501, cpu=1.0)))
    assert dg.analyze(blind)["verdict"]["code"] == "hung"


def server_facts(tmp_path: Path, cmdline: str, listen: Optional[List[int]] = None, mem: int = 6000 * MIB,
                 kind: Optional[str] = None, log_text: str = "INFO:     Application startup complete.\n"
                 ) -> Dict[str, Any]:
    log = tmp_path / "server.log"
    log.write_text(log_text)
    now = time.time()
    os.utime(str(log), (now - 900, now - 900))
    bench = {"match": [cmdline.split()[0].rsplit("/", 1)[-1] if not cmdline.startswith("python3") else
                       cmdline.split()[1].rsplit("/", 1)[-1].replace(".", r"\.")]}
    if kind:
        bench["kind"] = kind  # type: ignore[assignment]
    return {"now": now, "benchmark": bench, "processes": [rec(41, 1, cmdline, start=now - 3600)],
            "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
            "gpu": {"state": "ok", "devices": [gpu(0, 25.0, mem=mem, holder=41 if mem else None)]},
            "activity": activity(act(41, listen=listen))}


def test_an_idle_server_with_its_model_loaded_is_healthy(tmp_path: Path) -> None:
    result = dg.analyze(server_facts(tmp_path, "vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000", listen=[8000]))
    assert result["verdict"]["code"] == "healthy", result["verdict"]
    assert "waiting for requests" in result["verdict"]["summary"]
    steps = {s["name"]: s for s in result["steps"]}
    assert steps["liveness"]["summary"].startswith("server")
    # a program that is no known server, found listening on a fixed port: guessed a server
    assert dg.analyze(server_facts(tmp_path, "python3 app.py", listen=[7860]))["verdict"]["code"] == "healthy"
    # the same process said to be a batch job: alive, its log silent, idle GPUs and nothing moving: hung
    batch = dg.analyze(server_facts(tmp_path, "python3 app.py", listen=[7860], kind="batch"))
    assert batch["verdict"]["code"] == "hung" and "nothing moves" in batch["verdict"]["summary"]
    # a server with no model on any GPU is not waiting for requests: its GPUs are idle for nothing
    empty = dg.analyze(server_facts(tmp_path, "vllm serve x", listen=[8000], mem=0))
    assert empty["verdict"]["code"] == "gpu_idle" and "no model" in empty["verdict"]["summary"]


def test_the_kind_guess() -> None:
    from console.agent.diagnosis.liveness import guess_kind

    def kind(*cmdlines: str, ports: Optional[Dict[int, List[int]]] = None, configured: Optional[str] = None) -> str:
        procs = [rec(10 + i, 1, c) for i, c in enumerate(cmdlines)]
        facts = {"benchmark": {"kind": configured},
                 "activity": activity(*(act(p, listen=ls) for p, ls in (ports or {}).items()))}
        return guess_kind(facts, procs)[0]

    assert kind("python3 -m vllm.entrypoints.openai.api_server --model x") == "server"
    assert kind("ollama serve") == "server" and kind("ollama run llama3") == "batch"
    assert kind("python3 main.py --listen 0.0.0.0 --port 8188") == "server"  # ComfyUI
    assert kind("python3 /usr/local/bin/jupyter lab") == "server"
    assert kind("python3 /usr/local/bin/jupyter nbconvert --execute x.ipynb") == "batch"
    assert kind("python3 -m sglang.bench_serving --backend sglang") == "batch"
    assert kind("python3 app.py", ports={10: [7860]}) == "server"  # listens on a fixed port ...
    assert kind("python3 app.py", ports={10: [41234]}) == "batch"  # ... not an ephemeral one (NCCL, gloo)
    assert kind("python3 train.py", ports={10: [12355]}) == "batch"  # a trainer's MASTER_PORT is no server
    assert kind("python3 /usr/local/bin/torchrun train.py", ports={10: [29500]}) == "batch"
    assert kind("/opt/cuzk-daemon --listen 0.0.0.0:9820", "/opt/cuzk-bench --proofs 10") == "batch"  # a client
    assert kind("vllm serve x", configured="batch") == "batch"
    assert kind("python3 train.py", configured="server") == "server"


def test_a_run_still_loading_its_weights_is_starting(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO 07-09 11:52:29 Load weight begin. avail mem=78.49 GB\n"
                   + "".join("Loading safetensors checkpoint shards:  %d%% Completed | %d/17 [00:%02d<01:52,  7.01s/it]"
                             "\n" % (n * 100 // 17, n, n * 7) for n in range(0, 8)))
    now = time.time()
    os.utime(str(log), (now - 3, now - 3))
    facts = {"now": now, "benchmark": {"match": ["vllm"]}, "logs": logs_of(tmp_path), "files": [],
             "processes": [rec(41, 1, "vllm serve /models/Qwen3-32B --tensor-parallel-size 2", start=now - 400)],
             "gpu": {"state": "ok", "devices": [gpu(0, 110.0, limit=700.0, mem=27000 * MIB, holder=41)]},
             "activity": activity(act(41, cpu=0.9, io=0))}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "starting", result["verdict"]
    assert "loading" in result["verdict"]["summary"]


FINISHED = [
    ("Epoch 29: 100%|##########| 1000/1000 [00:53<00:00, 18.79it/s, loss=0.00167]\n"
     "`Trainer.fit` stopped: `max_steps=30000` reached.\n"
     "Epoch 29: 100%|##########| 1000/1000 [00:53<00:00, 18.78it/s, loss=0.00171]\n", "max_steps=30000"),
    ("300 epochs completed in 5.123 hours.\nOptimizer stripped from runs/detect/train/weights/last.pt, 6.2MB\n"
     "Results saved to runs/detect/train\n", "Results saved to"),
    ("Benchmark results:\n  throughput: 812.4 tok/s\n  p50 latency: 41.2 ms\n+ echo 'bench exit code: 0'\n"
     "bench exit code: 0\n", "exit code: 0"),
    ("hf (pretrained=meta-llama/Llama-3.1-8B), gen_kwargs: (None), limit: None, batch_size: 8\n"
     "|  Tasks  |Version|Filter|n-shot| Metric |   |Value |   |Stderr|\n"
     "|---------|------:|------|-----:|--------|---|-----:|---|-----:|\n"
     "|hellaswag|      1|none  |     0|acc     |↑  |0.6003|±  |0.0049|\n"
     "|         |       |none  |     0|acc_norm|↑  |0.7906|±  |0.0041|\n", "|  Tasks  |Version|"),
    ("Saving model checkpoint to /out/final\nDone.\n", "Done."),
]
NOT_FINISHED = [
    "Training completed. Do not forget to share your model on huggingface.co/models =)\n"
    "Segmentation fault (core dumped)\n",
    "Benchmark results:\n  throughput: 812.4 tok/s\n+ echo 'bench exit code: 1'\nbench exit code: 1\n",
    "Download Results:\ngid   |stat|avg speed  |path/URI\nb71c2e|ERR |       0B/s|/var/tmp/x.params\n"
    "parameter fetch failed (aria2c exit 1)\n",
    "***** train metrics *****\n  epoch = 3.0\nTraceback (most recent call last):\n"
    "  File \"train.py\", line 9, in <module>\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
    "Model saved to /out/ckpt-1000\nstep 1010/5000 loss 1.2\nstep 1020/5000 loss 1.2\n",
]


@pytest.mark.parametrize("text,evidence", FINISHED, ids=["lightning", "yolo", "results-exit-0", "table", "done"])
def test_a_run_whose_last_words_say_it_completed_is_finished(tmp_path: Path, text: str, evidence: str) -> None:
    (tmp_path / "run.log").write_text(text)
    facts = {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "finished", result["verdict"]
    assert any(evidence in e["text"] for e in by_code(result)["finished"]["evidence"])


@pytest.mark.parametrize("text", NOT_FINISHED, ids=["segfault-after", "exit-1", "aria2c", "traceback", "went-on"])
def test_a_failure_in_the_last_words_is_not_finished(tmp_path: Path, text: str) -> None:
    (tmp_path / "run.log").write_text(text)
    facts = {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}
    assert dg.analyze(facts)["verdict"]["code"] != "finished"


def test_steps_three_times_slower_than_earlier_are_a_warning(tmp_path: Path) -> None:
    now = time.time()

    def facts_for(rates: List[float]) -> Dict[str, Any]:
        (tmp_path / "train.log").write_text("".join(
            " %d%%|#| %d/5000 [01:00<10:00, %.2fit/s]\n" % (i // 50, i, r) for i, r in enumerate(rates, 1)))
        os.utime(str(tmp_path / "train.log"), (now - 2, now - 2))
        return {"now": now, "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
                "processes": [rec(501, 1, "python3 train.py", start=now - 7200)],
                "gpu": {"state": "ok", "devices": [gpu(97, 300.0, holder=501)]}, "activity": activity(act(501, 1.0))}

    result = dg.analyze(facts_for([3.5] * 30 + [1.0] * 10))
    assert result["verdict"]["code"] == "slowed_down", result["verdict"]
    assert result["verdict"]["severity"] == "warning" and "3.5x slower" in result["verdict"]["summary"]
    assert dg.analyze(facts_for([3.5] * 30 + [1.4] * 10))["verdict"]["code"] == "healthy"  # 2.5x: not yet


def test_gather_measures_cpu_io_and_listening_ports(tmp_path: Path) -> None:
    """The diagnose op's own measurement (activity.py) on real processes: a spinner, a writer, a listener."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    scripts = {
        "spin_worker.py": "while True:\n    pass\n",
        "save_worker.py": "import time\nwhile True:\n    with open(%r, 'wb') as f:\n        f.write(b'x' * (1 << 22))\n"
                          "    time.sleep(0.1)\n" % str(tmp_path / "ckpt.bin"),
        "serve_worker.py": "import socket, time\ns = socket.socket()\ns.bind(('127.0.0.1', %d))\ns.listen(1)\n"
                           "time.sleep(60)\n" % port,
    }
    children = []
    try:
        for name, body in scripts.items():
            (tmp_path / name).write_text(body)
            children.append(subprocess.Popen([sys.executable, str(tmp_path / name)]))
        time.sleep(0.5)
        config = agent_config.merged({"watch_dirs": [str(tmp_path / "none")],
                                      "benchmark": {"match": [r"spin_worker", r"save_worker", r"serve_worker"]}})
        started = time.monotonic()
        facts = dg.gather(config, include_dmesg=False, measure_seconds=0.5)
        assert time.monotonic() - started >= 0.5
        by_pid = {p["pid"]: p for p in facts["activity"]["procs"]}
        spin, save, serve = (by_pid[c.pid] for c in children)
        assert spin["cpu"] > 0.1
        if save["io"] is not None:  # /proc/PID/io needs the same user: ours
            assert save["io"]["wchar"] >= 1 << 22
        assert serve["listen"] == [port]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_a_server_is_seen_listening_on_a_host_with_hundreds_of_sockets() -> None:
    """/proc/net/tcp is handed out a page (~26 sockets) per read: on a busy host the server's LISTEN row is pages
    in, and a one-read table called an idle inference server a batch job with idle GPUs (blind round 3's TabbyAPI
    turned gpu_idle on this box once it held a hundred listeners)."""
    import socket
    import subprocess
    import sys

    from console.agent.diagnosis.activity import listening

    crowd = []
    try:
        for _ in range(300):  # listeners opened before the server's: its row comes after theirs
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(1)
            crowd.append(s)
        server = subprocess.Popen(
            [sys.executable, "-c", "import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\n"
             "s.listen(1)\nprint(s.getsockname()[1], flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE)
        try:
            port = int(server.stdout.readline())
            assert listening([server.pid]) == {server.pid: [port]}
        finally:
            server.kill()
            server.wait()
    finally:
        for s in crowd:
            s.close()


def test_the_fleet_file_kind_reaches_the_agent(tmp_path: Path) -> None:
    from console.inventory import ConfigError, load_fleet

    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[benchmark]\nmatch = ["vllm"]\nkind = "server"\n\n[[instance]]\nname = "a"\nhost = "h"\n')
    inst = load_fleet(fleet).instances[0]
    assert inst.benchmark.kind == "server" and inst.agent_config()["benchmark"]["kind"] == "server"
    fleet.write_text('[benchmark]\nmatch = ["vllm"]\n\n[[instance]]\nname = "a"\nhost = "h"\n')
    assert "kind" not in load_fleet(fleet).instances[0].agent_config()["benchmark"]  # the agent guesses
    fleet.write_text('[benchmark]\nmatch = ["vllm"]\nkind = "daemon"\n\n[[instance]]\nname = "a"\nhost = "h"\n')
    with pytest.raises(ConfigError) as err:
        load_fleet(fleet)
    assert ":3:" in str(err.value) and "'batch' or 'server'" in str(err.value)


def test_a_download_beside_moving_steps_is_not_starting(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / "train.log").write_text("".join("step %d/5000 loss 2.1\n" % s for s in range(1, 40)))
    (tmp_path / "fetch.log").write_text("Downloading shard-00007.tar\n"
                                        " 41%|####      | 1.84G/4.48G [00:07<00:11, 271MB/s]\n")
    for name in ("train.log", "fetch.log"):
        os.utime(str(tmp_path / name), (now - 2, now - 2))
    facts = {"now": now, "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
             "processes": [rec(501, 1, "python3 train.py", start=now - 7200)],
             "gpu": {"state": "ok", "devices": [gpu(97, 300.0, holder=501)]}, "activity": activity(act(501, 1.0))}
    assert dg.analyze(facts)["verdict"]["code"] == "healthy"


def silent_log_facts(tmp_path: Path, text: str) -> Dict[str, Any]:
    """The seed host with ``serve.log`` (``text``) last written 400 s ago, ``stall_seconds`` 120, and a daemon
    started an hour ago still alive: a run whose log went silent while its processes live."""
    log = tmp_path / "serve.log"
    log.write_text(text)
    old = time.time() - 400
    os.utime(log, (old, old))
    facts = seed_facts(tmp_path)
    facts["stall_seconds"] = 120
    facts["processes"].append(rec(400, 369, "cuzk-daemon --listen 0.0.0.0:9820", start=time.time() - 3600))
    return facts


def busy_gpus(utils: List[int], watts: float, mem_used: int = 10 << 30) -> Dict[str, Any]:
    """GPUs at these utilisations, each drawing ``watts`` of a 300 W limit, no process listed."""
    return {"state": "ok", "devices": [{"index": i, "util": u, "mem_used": mem_used, "power": watts,
                                        "power_limit": 300.0, "procs": []} for i, u in enumerate(utils)]}


def test_gpus_spinning_with_a_silent_log_are_hung_even_without_a_step_counter(tmp_path: Path) -> None:
    """Blind round 3 (vLLM TP=2, LMDeploy stuck with GPUs at 100 %): no progress pattern in the log, so no stall
    could be read, and the run was called healthy. Alive processes, GPUs pinned at low power, nothing else moving
    and no log written for stall_seconds are a hang, cited by the last line the log wrote; the same GPUs drawing
    real power are work, not a hang."""
    facts = silent_log_facts(tmp_path, "INFO 05-01 10:00:01 engine.py:267] init engine\n"
                             "INFO 05-01 10:00:09 loaded model, 2 workers\n"
                             "INFO 05-01 10:00:10 Avg prompt throughput: 12.1 tokens/s, Running: 4 reqs\n")

    def gpus(watts: float) -> Dict[str, Any]:
        return busy_gpus([100, 100], watts, mem_used=20 << 30)

    facts["gpu"] = gpus(90.0)
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "hung", result["verdict"]
    hung = by_code(result)["hung"]
    assert any(e["line"] == 3 and "Avg prompt throughput" in e["text"] for e in hung["evidence"])
    assert "spinning" in hung["summary"]

    facts["gpu"] = gpus(280.0)  # the same util at real power: the GPUs compute
    assert dg.analyze(facts)["verdict"]["code"] != "hung"
