"""Diagnosis classes learned from blind round 7 (tests/fixtures/incidents-blind/round-7), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis import signatures
from console.agent.diagnosis.progress import parse
from tests.test_diagnose import TRAIN_BENCH, by_code, gpu, logs_of, rec


@pytest.mark.parametrize("line,code", [
    ('        "ERROR: An NVIDIA kernel module \'nvidia-drm\' appears to be already loaded in your kernel.",',
     "install_failed"),
    ("ERROR: Installation has failed.  Please see the file '/var/log/nvidia-installer.log' for details.",
     "install_failed"),
    ("2024/03/19 08:00:45 ERROR : couldn't list directory: couldn't fetch token: token expired and there's no "
     "refresh token - manually refresh with \"rclone config reconnect box:\"", "credentials_refused"),
    ('ERROR "cp s3://bucket/a.tsv /scratch/a.tsv": RequestError: send request failed caused by: Get '
     '"https://bucket.s3.amazonaws.com/a.tsv": dial tcp: lookup bucket.s3.amazonaws.com: no such host',
     "download_failed"),
    ("[signal SIGSEGV: segmentation violation code=0x1 addr=0x30 pc=0x63588ea7b2e0]", None),  # Go's panic's note
    ("panic: runtime error: invalid memory address or nil pointer dereference", "panic"),
    ("Fatal Python error: Segmentation fault", "segfault"),
])
def test_round_7_wordings_join_their_classes(line: str, code: str | None) -> None:
    sig = signatures.match_line(line)
    assert (sig.code if sig is not None else None) == code, line


def test_a_count_of_files_downloaded_is_a_download_meter() -> None:
    sample = parse("2024-01-08T16:47:15.309222Z  INFO text_generation_launcher: Download: [6/19] -- ETA: 0:15:29")
    assert sample is not None and sample.kind == "download" and sample.amount == "6" and not sample.done


def test_an_amount_over_a_total_with_a_rate_is_a_download_meter_without_a_percent() -> None:
    """tabby's meter (round 3's starting case): no percent, only sizes and a rate."""
    sample = parse("   00:02:25 \u2595\u2588\u2588\u2588      \u258f 0.98 GiB/1.53 GiB  7.18 MiB/s  ETA 79s.")
    assert sample is not None and sample.kind == "download" and round(sample.percent or 0) == 64 and not sample.done


def busy_run(tmp_path: Path, util: int, pcie: Dict[str, int]) -> Dict[str, Any]:
    now = time.time()
    (tmp_path / "train.log").write_text("".join("step %d/5000 loss 2.1\n" % s for s in range(1, 60)))
    device = dict(gpu(util, 400.0, limit=600.0, holder=501), health={"pcie": pcie})
    return {"now": now, "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
            "processes": [rec(501, 1, "python3 train.py", start=now - 600)],
            "gpu": {"state": "ok", "devices": [device]}}


def test_a_busy_gpu_on_a_link_that_trained_low_is_pcie_degraded(tmp_path: Path) -> None:
    low = busy_run(tmp_path, 100, {"gen": 2, "width": 16, "max_gen": 5, "max_width": 16})
    assert "gen 2 x16 of gen 5 x16" in by_code(dg.analyze(low))["pcie_degraded"]["summary"]
    narrow = busy_run(tmp_path, 100, {"gen": 4, "width": 8, "max_gen": 4, "max_width": 16})
    assert "pcie_degraded" in by_code(dg.analyze(narrow))
    # an idle link trains down to save power; one generation down is within what boards negotiate
    for util, pcie in ((0, {"gen": 1, "width": 16, "max_gen": 5, "max_width": 16}),
                       (100, {"gen": 4, "width": 16, "max_gen": 5, "max_width": 16})):
        assert "pcie_degraded" not in by_code(dg.analyze(busy_run(tmp_path, util, pcie)))
