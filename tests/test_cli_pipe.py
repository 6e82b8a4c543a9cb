"""The command line in a pipeline: a reader that stops early (``| head``) gets no traceback on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_check_into_a_closed_pipe_prints_no_traceback(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    rows = (f'[[instance]]\nname = "box{i}"\nhost = "10.0.{i // 250}.{i % 250}"\n\n' for i in range(3000))
    fleet.write_text("".join(rows))
    # `fleet-console check | head -1`: read one line, then close our end while the command still writes
    proc = subprocess.Popen(
        [sys.executable, "-m", "console", "check", "--fleet", str(fleet)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert b"ok, 3000 instances" in first
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141
