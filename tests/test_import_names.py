"""Names are one printable line, tags a list, and an error in an imported file names its line: ``fleet-console
check`` run as a user runs it, on real fleet files, vast.ai JSON and ssh_config files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_inventory_cli import run_cli

VAST = {"id": 7, "label": "lab", "ssh_host": "ssh4.vast.ai", "ssh_port": 30101, "actual_status": "running"}


def check_fails(fleet: Path) -> str:
    """``check`` on ``fleet``: exit 2 and one clean line on stderr, which is returned."""
    result = run_cli("check", "--fleet", str(fleet))
    err = result.stderr.strip()
    assert result.returncode == 2, (result.stdout, err)
    assert "\n" not in err and "Traceback" not in err and "\x1b" not in err + result.stdout, err
    return err


def vast_fleet(tmp_path: Path, rows: list[dict[str, object]]) -> tuple[Path, Path]:
    vast = tmp_path / "vast.json"
    vast.write_text(json.dumps(rows, indent=2))  # one key a line: instance #1 starts on line 9
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[import]]\nvastai_json = "vast.json"\n')
    return fleet, vast


@pytest.mark.parametrize("label", ["gpu\nbox", "\x1b]0;owned\x07box", "tab\there"])
def test_a_vast_label_that_is_not_one_printable_line_is_refused_at_its_line(tmp_path: Path, label: str) -> None:
    fleet, vast = vast_fleet(tmp_path, [VAST, {**VAST, "id": 8, "label": label}])
    err = check_fails(fleet)
    assert err.startswith(f"fleet-console: {vast}:11: instance 8: [1].label must be one printable line, not "), err


def test_a_vast_error_names_the_line_of_the_key(tmp_path: Path) -> None:
    fleet, vast = vast_fleet(tmp_path, [VAST, {**VAST, "id": 8, "label": "b", "ssh_port": "22"}])
    err = check_fails(fleet)
    assert err == f"fleet-console: {vast}:13: instance 8 ('b'): [1].ssh_port must be a number from 1 to 65535, not '22'"
    fleet.write_text('[[instance]]\nname = "lab"\nhost = "h"\n\n[[import]]\nvastai_json = "vast.json"\n')
    vast.write_text(json.dumps([{**VAST, "label": "x"}, VAST], indent=2))
    assert check_fails(fleet) == f"fleet-console: {vast}:9: duplicate instance name 'lab' (first at {fleet}:1)"


def test_an_ssh_config_host_with_control_characters_is_refused_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text("Host good\n  HostName 10.0.0.1\n\nHost evil\x1b[2J\n  HostName 10.0.0.2\n")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[import]]\nssh_config = "ssh_config"\n')
    err = check_fails(fleet)
    assert err == f"fleet-console: {tmp_path / 'ssh_config'}:4: name must be one printable line, not 'evil\\x1b[2J'"


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[[instance]]\nname = "a\\nb"\nhost = "h"\n', 2, "name must be one printable line, not 'a\\nb'"),
        ('[[instance]]\nname = "a"\nhost = "h\\u001b[31m"\n', 3,
         "instance 'a': host must be one printable line, not 'h\\x1b[31m'"),
        ('[[instance]]\nname = "a"\nhost = "h"\ntags = "gpu,prod"\n', 4,
         "instance 'a': tags must be a list of strings like [\"gpu\"], not 'gpu,prod'"),
        ('[defaults]\ntags = "gpu"\n\n[[instance]]\nname = "a"\nhost = "h"\n', 2,
         "instance 'a': tags must be a list of strings like [\"gpu\"], not 'gpu'"),
        ('[[instance]]\nname = "a"\nhost = "h"\ntags = ["ok", "new\\nline"]\n', 4,
         "instance 'a': tags must be one printable line, not 'new\\nline'"),
        ('[[import]]\nvastai = true\ntags = "vast"\n', 3,
         "import #1: tags must be a list of strings like [\"gpu\"], not 'vast'"),
    ],
)
def test_fleet_file_names_and_tags(tmp_path: Path, text: str, line: int, reason: str) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    assert check_fails(fleet) == f"fleet-console: {fleet}:{line}: {reason}"
