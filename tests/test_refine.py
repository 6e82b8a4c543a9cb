"""A wrapper's verdict (a Python exception, a launcher's exit status, the processes gone) is refined by the class
the failure lines name in words no signature knows; the wrapper stays the alternative, and a failure line that
names no class leaves the verdict as it was (console/agent/diagnosis/lexicon.py, refine.py). Pure: ``analyze`` on
built facts, real files for the logs. The wordings are made up in each class's words, so no signature knows them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.alternatives import alternatives
from console.agent.diagnosis.lexicon import class_of
from tests.test_diagnose import logs_of

TRACEBACK = ('Traceback (most recent call last):\n  File "/app/run.py", line 10, in <module>\n    main()\n'
             '  File "/app/run.py", line 7, in main\n    pool.grow(1 << 34)\n{line}\n')
CASES = {  # (log text, the class, a piece of the evidence line, the wrapper's verdict before)
    "an exception naming GPU memory": (
        TRACEBACK.format(line="zephyr.errors.ArenaError: device arena exhausted: out of device memory growing pool"),
        "cuda_oom", "out of device memory", "python_traceback"),
    "an exception naming a refused credential": (
        TRACEBACK.format(line="zephyr.errors.FetchError: weights bundle: upstream answered 403 for the signed link"),
        "credentials_refused", "answered 403", "python_traceback"),
    "the processes gone after a fetch that could not connect": (
        "[setup] fetching shard index\n[setup] ERROR shard index: network is unreachable (attempt 3/3)\n"
        "[setup] giving up\n", "download_failed", "network is unreachable", "benchmark_not_running"),
    "the processes gone after a binary built for another GPU": (
        "solver 4.2 starting on 1 device\nFATAL: kernel table has no kernel image for device 0 (built for sm_70)\n",
        "version_mismatch", "no kernel image", "benchmark_not_running"),
}


def _facts(tmp_path: Path, text: str) -> Dict[str, Any]:
    log = tmp_path / "run.log"
    log.write_text(text)
    now = time.time()
    os.utime(log, (now - 20, now - 20))
    return {"now": now, "benchmark": {"match": [r"run\.py"], "entrypoint": [r"entrypoint\.sh"]},
            "stall_seconds": 60, "processes": [], "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0, "power": 20.0}]}}


@pytest.mark.parametrize("why", sorted(CASES))
def test_the_class_the_failure_line_names_is_the_verdict(tmp_path: Path, why: str) -> None:
    text, code, piece, wrapper = CASES[why]
    result = dg.analyze(_facts(tmp_path, text))
    assert result["verdict"]["code"] == code, result["verdict"]
    head = next(f for f in result["findings"] if f["code"] == code)
    assert piece in head["evidence"][0]["text"]
    assert wrapper in [a["code"] for a in alternatives(result)]


def test_a_failure_that_names_no_class_keeps_its_wrappers_verdict(tmp_path: Path) -> None:
    text = TRACEBACK.format(line="KeyError: 'scheduler'")
    assert dg.analyze(_facts(tmp_path, text))["verdict"]["code"] == "python_traceback"
    text = "[setup] fetching shard index\n[setup] ERROR the remote end hung up unexpectedly\n"
    assert dg.analyze(_facts(tmp_path, text))["verdict"]["code"] == "benchmark_not_running"


@pytest.mark.parametrize(("line", "code"), [
    ("posix_memalign of 96 GiB returned NULL", "host_memory_exhausted"),
    ("E1207 allocator: not enough free GPU memory for the KV pool", "cuda_oom"),
    ("bind 0.0.0.0:8000: address already in use", "address_in_use"),
    ("open /data/shard-0001: too many open files", "resource_limit"),
    ("libfoo.so.3: cannot open shared object file: No such file or directory", "library_missing"),
    ("write /ckpt/step-9.bin: no space left on device", "disk_full"),
    ("Error: CUDA driver library cannot be found", "no_gpu_driver"),
    ("curl: (56) Recv failure: Connection reset by peer", "download_failed"),
    ("the run stopped: step 400 loss 1.9", None),
])
def test_the_lexicon_reads_each_class_in_its_own_words(line: str, code: str) -> None:
    assert class_of(line) == code
