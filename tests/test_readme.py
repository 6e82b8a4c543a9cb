"""The README's fleet.toml example is a valid fleet file (a newcomer copies it first)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from console.inventory import load_fleet

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_fleet_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NTFY_TOKEN", "tk_readme_example")  # its [[notify]] row takes the token from the environment
    text = README.read_text()
    start = text.index("```toml\n[defaults]") + len("```toml\n")
    example = text[start : text.index("```", start)]
    # its file imports point at files of the reader's; give them small real ones
    (tmp_path / "instances.json").write_text(json.dumps([
        {"id": 7, "label": "a", "ssh_host": "ssh1.vast.ai", "ssh_port": 1234, "actual_status": "running",
         "num_gpus": 4}]))
    (tmp_path / "ssh_config").write_text("Host vast-b\n  HostName 10.1.2.3\n  Port 2222\n")
    example = example.replace('"instances.json"', json.dumps(str(tmp_path / "instances.json")))
    example = example.replace('"~/.ssh/config"', json.dumps(str(tmp_path / "ssh_config")))
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(example)
    fleet = load_fleet(fleet_file)
    assert {i.name for i in fleet.instances} >= {"vast-3090-a", "vast-b"}
    assert fleet.signatures and fleet.signatures[0].code == "license_expired"
    assert fleet.get("vast-3090-a").gpus == 8 and fleet.get("vast-3090-a").benchmark.progress
