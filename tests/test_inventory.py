"""The fleet file's checks, as pure parsing: every bad file is one ``file:line: reason`` line.

Real files in tmp_path, the real loader; no SSH here (tests/test_inventory_cli.py runs the commands).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from console.inventory import (
    MAX_FILE_BYTES,
    VASTAI_COMMAND,
    ConfigError,
    Instance,
    load_fleet,
    parse_vastai_instances,
    toml_text,
)

I = "[[instance]]\nname = 'a'\nhost = 'h'\n"  # noqa: E741 - one instance, lines 1-3
SIG = "[[signature]]\ncode = 'disk_full'\nseverity = 'error'\npattern = 'x'\n"
S = "seconds from"
CUR = 'defaults.currency must be a currency sign or code like "$", "€", "EUR", '
EXAMPLE_ARGV = '(["vastai", "stop", "instance", "{vast_id}"])'
ARGV = 'actions.stop must be an argv list like ["vastai", "stop", "instance", "{vast_id}"], '
USE = "(use {vast_id}, {name} or {host}; {{ and }} for a literal brace)"
STOP = "[actions]\nstop = ['vastai', 'stop', 'instance', '{vast_id}']\n"

# (fleet.toml text, line or None, the exact reason)
BAD: list[tuple[str, int | None, str]] = [
    # types: no truthy strings, no ints for booleans, no floats for ints
    (I + "accept_new_host_key = 'false'\n", 4,
     "instance 'a': accept_new_host_key must be true or false (not a string), not 'false'"),
    ("[defaults]\naccept_new_host_key = 1\n" + I, 2,
     "defaults.accept_new_host_key must be true or false (not a string), not 1"),
    (I + "port = '22'\n", 4, "instance 'a': port must be a number from 1 to 65535, not '22'"),
    (I + "port = true\n", 4, "instance 'a': port must be a number from 1 to 65535, not True"),
    (I + "port = 22.5\n", 4, "instance 'a': port must be a number from 1 to 65535, not 22.5"),
    (I + "tags = [1, 2]\n", 4, "instance 'a': tags must be a list of strings, not [1, 2]"),
    (I + "logs = 5\n", 4, "instance 'a': logs must be a string or a list of strings, not 5"),
    (I + "watch_dirs = [true]\n", 4, "instance 'a': watch_dirs must be a string or a list of strings, not [True]"),
    (I + "gpus = '2'\n", 4, "instance 'a': gpus must be a whole number of GPUs from 0 to 1024, not '2'"),
    ("[benchmark]\nstart = 5\n", 2, "benchmark.start must be a command string or an argv list, not 5"),
    ("[benchmark]\nenv = { A = true }\n", 2,
     "benchmark.env must be a table of NAME = \"value\" pairs, not {'A': True}"),
    ("[benchmark]\nenv = { 'A B' = 'x' }\n", 2,
     "benchmark.env must be a table of NAME = \"value\" pairs, not {'A B': 'x'}"),
    ("instance = 1\n", 1, "instance must be [[instance]] tables, not 1"),
    ("defaults = 3\n", 1, "defaults must be a table, not 3"),
    (I + "transport = 'telnet'\n", 4, "instance 'a': transport must be 'ssh' or 'local', not 'telnet'"),
    # ranges, nan and inf
    (I + "port = 0\n", 4, "instance 'a': port must be a number from 1 to 65535, not 0"),
    (I + "port = 70000\n", 4, "instance 'a': port must be a number from 1 to 65535, not 70000"),
    (I + "interval = nan\n", 4, f"instance 'a': interval must be a number of {S} 0.2 to 60, not nan"),
    (I + "interval = inf\n", 4, f"instance 'a': interval must be a number of {S} 0.2 to 60, not inf"),
    (I + "interval = 1e-9\n", 4, f"instance 'a': interval must be a number of {S} 0.2 to 60, not 1e-09"),
    (I + "heartbeat = 0.5\n", 4, f"instance 'a': heartbeat must be a number of {S} 1 to 60, not 0.5"),
    (I + "stall_seconds = 86401\n", 4,
     f"instance 'a': stall_seconds must be a positive number of {S} 5 to 86400, not 86401"),
    ("[benchmark]\nstop_timeout = 0.1\n", 2,
     f"benchmark.stop_timeout must be a positive number of {S} 0.5 to 600, not 0.1"),
    (I + "\n[[instance]]\nname = 'b'\nhost = 'h'\nbenchmark = { stop_timeout = 601 }\n", 8,
     f"instance 'b': benchmark.stop_timeout must be a positive number of {S} 0.5 to 600, not 601"),
    (I + "\n[instance.benchmark]\nstop_timeout = -1\n", 6,
     f"instance 'a': benchmark.stop_timeout must be a positive number of {S} 0.5 to 600, not -1"),
    ("[[probe]]\nname = 'x'\nkey = 'x'\ncommand = 'true'\ntimeout = 3601\n", 5,
     f"probe 'x': timeout must be a positive number of {S} 1 to 3600, not 3601"),
    (I + "gpus = -1\n", 4, "instance 'a': gpus must be a whole number of GPUs from 0 to 1024, not -1"),
    (I + "connect_timeout = 0\n", 4, f"instance 'a': connect_timeout must be a number of {S} 1 to 300, not 0"),
    ("[defaults]\nkeepalive = 3601\n", 2, f"defaults.keepalive must be a number of {S} 0 (off) to 3600, not 3601"),
    (I + "jump = 'user@host:99999'\n", 4,
     "instance 'a': jump must be \"user@host:port\" or a list of them, not 'user@host:99999'"),
    (I + "jump = ['ok', 'a b']\n", 4,
     "instance 'a': jump must be \"user@host:port\" or a list of them, not ['ok', 'a b']"),
    # names, duplicates, unknown keys
    ("[[instance]]\nhost = 'h'\n", 1, "instance needs a name"),
    ("[[instance]]\nname = '  '\nhost = 'h'\n", 1, "instance needs a name"),
    ("[[instance]]\nname = ''\nhost = 'h'\n", 2, "instance #1: name must be a non-empty string, not ''"),
    ("[[instance]]\nname = 'a'\n", 1, "instance 'a' needs a host (or ssh_config = \"alias\")"),
    ("\n" + I + "\n" + I, 6, "duplicate instance name 'a' (first at {path}:2)"),
    (I + "hots = 1\n", 4, "instance 'a': unknown instance key 'hots' (did you mean 'host'?)"),
    (I + "benchmark = { mach = 'x' }\n", 4, "instance 'a': unknown benchmark key 'mach' (did you mean 'match'?)"),
    ("instances = 1\n", 1, "unknown top-level key 'instances' (did you mean [[instance]]?)"),
    ("colour = 1\n", 1,
     "unknown top-level key 'colour' (expected one of actions, alert, benchmark, defaults, import, instance, notify, "
     "probe, signature, "
     "source)"),
    ("[defaults]\nusr = 'x'\n", 2, "unknown defaults key 'usr' (did you mean 'user'?)"),
    ("[defaults]\nbenchmark = {}\n", 2,
     "unknown defaults key 'benchmark' (the shared benchmark goes in its own [benchmark] table)"),
    # regexes
    ("[benchmark]\nmatch = ['(unclosed']\n", 2,
     "bad benchmark pattern '(unclosed': missing ), unterminated subpattern at position 0"),
    ("[benchmark]\nmatch = [\n  'ok',\n  '(bad',\n]\n", 2,
     "bad benchmark pattern '(bad': missing ), unterminated subpattern at position 0"),
    ("[benchmark]\nprogress = '(['\n", 2,
     "bad benchmark.progress regex '([': unterminated character set at position 1"),
    (I + "benchmark = { entrypoint = '*x' }\n", 4,
     "instance 'a': bad benchmark pattern '*x': nothing to repeat at position 0"),
    # [[signature]] rows
    (SIG.replace("disk_full", "Disk-Full") + "explanation = 'e'\n", 2,
     "signature 'Disk-Full': code must be a snake_case code like disk_full, not 'Disk-Full'"),
    (SIG.replace("'error'", "'fatal'") + "explanation = 'e'\n", 3,
     "signature 'disk_full': severity must be 'info', 'warning', 'error' or 'critical', not 'fatal'"),
    (SIG.replace("'x'", "'(('") + "explanation = 'e'\n", 4,
     "signature 'disk_full': bad pattern '((': missing ), unterminated subpattern at position 1"),
    (SIG, 1, "signature 'disk_full' needs explanation"),
    (SIG + "explanation = 'e'\nwhy = 1\n", 6,
     "signature 'disk_full': unknown signature key 'why' "
     "(expected one of code, explanation, label, pattern, severity)"),
    # probes
    ("[[probe]]\nname = 'x'\nkey = 'ab'\ncommand = 'true'\n", 3, "probe 'x': key must be one character, not 'ab'"),
    ("[[probe]]\nname = 'x'\nkey = 'x'\n", 1, "probe 'x' needs command"),
    ("[[probe]]\nname = 'x'\nkey = 'x'\ncommand = 't'\n\n[[probe]]\nname = 'y'\nkey = 'x'\ncommand = 't'\n", 8,
     "probe key 'x' already used by 'x'"),
    ("[[probe]]\nname = 'x'\nkey = '1'\ncommand = 'true'\n", 3,
     "probe 'x': key '1' belongs to a built-in probe (use a letter or 6-9)"),
    # [[import]]
    ("[[import]]\nvastai = true\nrefresh = 5\n", 3, f"import #1: refresh must be a number of {S} 10 to 86400, not 5"),
    ("[[import]]\nvastai = 'yes'\n", 2, "import #1: vastai must be true or false (not a string), not 'yes'"),
    ("[[import]]\nvastai = false\n", 2, "import #1: vastai = false imports nothing; remove the import"),
    ("[[import]]\ncommand = []\n", 2, "import #1: command must be an argv list like [\"vastai\", ...], not []"),
    ("[[import]]\nvastai = true\nvastai_json = 'x.json'\n", 1,
     "import has vastai_json and vastai; "
     "use one of ssh_config = PATH, vastai_json = PATH, vastai = true, command = [...]"),
    ("[[import]]\ntags = ['x']\n", 1,
     "import needs one of ssh_config = PATH, vastai_json = PATH, vastai = true, command = [...]"),
    ("[[import]]\nssh_config = 'c'\nrefresh = 60\n", 3, "import #1: refresh does not apply to ssh_config imports"),
    ("[[import]]\nvastai_json = 'v.json'\nhosts = ['x']\n", 3,
     "import #1: hosts does not apply to vastai_json imports"),
    # the rental bill (issue 31): the currency, [actions] stop and stop_idle_after
    ("[defaults]\ncurrency = ''\n", 2, CUR + "not ''"),
    ("[defaults]\ncurrency = 5\n", 2, CUR + "not 5"),
    ("[defaults]\ncurrency = 'US dollars'\n", 2, CUR + "not 'US dollars'"),
    ('[defaults]\ncurrency = "\\u001b[31m"\n', 2, CUR + "not '\\x1b[31m'"),
    (I + "currency = 'EUR'\n", 4,
     "instance 'a': unknown instance key 'currency' (the currency is set once, in [defaults])"),
    ("currency = 'EUR'\n", 1, "unknown top-level key 'currency' (the currency goes in [defaults])"),
    ("[actions]\nstop = 'vastai stop instance {vast_id}'\n", 2, ARGV + "not 'vastai stop instance {vast_id}'"),
    ("[actions]\nstop = []\n", 2, ARGV + "not []"),
    ("[actions]\nstop = ['vastai', 5]\n", 2, ARGV + "not ['vastai', 5]"),
    ("[actions]\nstop = ['vastai stop', '{vast_id}']\n", 2,
     "actions.stop[0] 'vastai stop': the program alone, one argument a list item " + EXAMPLE_ARGV),
    ("[actions]\nstop = ['vastai', '{id}']\n", 2, "actions.stop[1] '{id}': unknown placeholder {id} " + USE),
    ("[actions]\nstop = ['vastai', '{vast_id.__class__}']\n", 2,
     "actions.stop[1] '{vast_id.__class__}': unknown placeholder {vast_id.__class__} " + USE),
    ("[actions]\nstop = ['vastai', '{vast_id!r}']\n", 2,
     "actions.stop[1] '{vast_id!r}': unknown placeholder {vast_id!r} " + USE),
    ("[actions]\nstop = ['vastai', '{vast_id']\n", 2, "actions.stop[1] '{vast_id': a brace without its pair " + USE),
    ("[actions]\nstop_idle_after = '30m'\n", 2,
     "actions.stop_idle_after needs actions.stop = [...] (the command that stops an instance)"),
    (STOP + "stop_idle_after = 'soon'\n", 3,
     'actions.stop_idle_after must be a duration like "90s", "20m", "2h" or "1d", not \'soon\''),
    (STOP + "stop_idle_after = 1800\n", 3,
     'actions.stop_idle_after must be a duration like "90s", "20m", "2h" or "1d", not 1800'),
    (STOP + "stop_idle_after = '5s'\n", 3, "actions.stop_idle_after must be from 10s to 30d, not '5s'"),
    (STOP + "stop_idle_after = '45d'\n", 3, "actions.stop_idle_after must be from 10s to 30d, not '45d'"),
    (STOP + "stop_after = '30m'\n", 3, "unknown actions key 'stop_after' (did you mean 'stop_idle_after'?)"),
    ("[defaults]\nprice_per_hour = -0.5\n", 2,
     "defaults.price_per_hour must be a price per hour from 0 to 10000 (a number, like 0.45), not -0.5"),
    # TOML itself
    ("[[instance]]\nname = 'a'\nhost = \n", 3, "invalid TOML: Invalid value"),
    (I + "port = 1\nport = 2\n", 5, "invalid TOML: Cannot overwrite a value"),
    ("[[instance]]\nname = 'a'\nhost = 'x", 3, "invalid TOML: Expected \"'\""),
    ("\n[[0.1instance]]\n", 2,
     "unknown top-level key '0' (expected one of actions, alert, benchmark, defaults, import, instance, notify, "
     "probe, signature, "
     "source)"),
]


@pytest.mark.parametrize(("text", "line", "reason"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_fleet_file_is_one_line_with_file_and_line(
    tmp_path: Path, text: str, line: int | None, reason: str
) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    where = f"{path}:{line}" if line else str(path)
    assert str(info.value) == f"{where}: {reason.replace('{path}', str(path))}"
    assert info.value.line == line and info.value.path == str(path)


def test_at_least_forty_bad_files() -> None:
    assert len(BAD) >= 40


def test_huge_file_is_refused_without_parsing(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text("# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    started = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_fleet(path)
    assert str(info.value) == f"{path}: fleet file is larger than 4 MiB; refusing to parse it"
    assert time.perf_counter() - started < 0.5


def test_unreadable_inputs_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"fleet.toml: cannot read fleet file: no such file$"):
        load_fleet(tmp_path / "fleet.toml")
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ConfigError, match=r"dir.toml: cannot read fleet file: it is a directory$"):
        load_fleet(tmp_path / "dir.toml")
    (tmp_path / "latin1.toml").write_bytes(b"# ok\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.toml:2: fleet file is not UTF-8 text"):
        load_fleet(tmp_path / "latin1.toml")


# -- ~/.ssh/config ---------------------------------------------------------------------------------


NO_HOSTS = "ssh config has no concrete Host entries matching * (Host patterns like * are not imported)"


def _import_ssh(tmp_path: Path, config: str, hosts: str = '["*"]') -> Path:
    (tmp_path / "ssh_config").write_text(config)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[import]]\nssh_config = "ssh_config"\nhosts = {hosts}\n')
    return fleet


@pytest.mark.parametrize(
    ("config", "line", "reason"),
    [
        ("Include ssh_config\nHost a\n", 1, "Include nested more than 16 deep (an Include loop?)"),
        ("Host *\n  User root\n", None, NO_HOSTS),
        ("Match host a\n  User x\n", None, NO_HOSTS),
        ("Host a\n  Port abc\n", 2, "host 'a': Port must be a number from 1 to 65535, not 'abc'"),
        ("Host a\n  Port 0\n", 2, "host 'a': Port must be a number from 1 to 65535, not '0'"),
        ("Host a\n  ConnectTimeout soon\n", 2, "host 'a': ConnectTimeout must be a number from 1 to 300, not 'soon'"),
        ("Host a\n  HostName \"unclosed\n", 2, "cannot parse ssh config line: No closing quotation"),
    ],
)
def test_odd_ssh_config_is_one_line_naming_the_file(tmp_path: Path, config: str, line: int | None, reason: str) -> None:
    fleet = _import_ssh(tmp_path, config)
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    where = tmp_path / "ssh_config"
    assert str(info.value) == (f"{where}:{line}" if line else str(where)) + f": {reason}"


def test_missing_ssh_config_names_it(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[import]]\nssh_config = "nope/config"\n')
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    assert str(info.value) == f"{tmp_path / 'nope' / 'config'}: cannot read ssh config: no such file"


def test_ssh_config_read_as_ssh_reads_it(tmp_path: Path) -> None:
    (tmp_path / "more.conf").write_text("Host gpu-c\n  HostName 10.0.0.3\n")
    fleet = _import_ssh(tmp_path, (
        "ServerAliveInterval 15\n"
        "Include more.conf missing-*.conf\n"
        "Host gpu-a gpu-b\n  HostName 10.0.0.1\n  Port 40022\n  User ubuntu\n  IdentityFile ~/.ssh/a\n"
        "  ProxyJump jump@bastion:2222,10.9.9.9\n  ConnectTimeout 7\n  UserKnownHostsFile ~/.ssh/kh_gpu\n"
        "Match host gpu-a\n  Port 1\n"
        "Host gpu-b\n  Port 1234\n  HostName ignored-because-first-wins\n"
        "Host gpu-*\n  User later-loses\n  IdentityFile ~/.ssh/fallback\n"
        "Host !gpu-b *\n  ServerAliveInterval 99\n"
        "Host other\n  HostName 1.1.1.1\n"
    ), hosts='["gpu-*"]')
    by = {i.name: i for i in load_fleet(fleet).instances}
    assert list(by) == ["gpu-c", "gpu-a", "gpu-b"]
    a, b, c = by["gpu-a"], by["gpu-b"], by["gpu-c"]
    assert (a.host, a.port, a.user, a.key) == ("10.0.0.1", 40022, "ubuntu", "~/.ssh/a")  # Match skipped
    assert a.jump == ("jump@bastion:2222", "10.9.9.9") and a.connect_timeout == 7.0
    assert a.known_hosts == "~/.ssh/kh_gpu" and a.keepalive == 15.0 and a.tags == ("ssh-config",)
    assert (b.host, b.port) == ("10.0.0.1", 40022)  # the first value found wins, as in ssh
    assert (c.host, c.port, c.user, c.key) == ("10.0.0.3", 22, "later-loses", "~/.ssh/fallback")
    assert a.source == f"{tmp_path / 'ssh_config'}:3" and c.source == f"{tmp_path / 'more.conf'}:1"


# -- vast.ai ---------------------------------------------------------------------------------------

VAST = {"id": 7, "label": "lab", "ssh_host": "ssh4.vast.ai", "ssh_port": 30101, "public_ipaddr": "9.9.9.9",
        "actual_status": "running", "gpu_name": "RTX 4090", "num_gpus": 2}
DPH = "must be a price per hour from 0 to 10000, "


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({"id": 1}, "expected a JSON array of instances (vastai show instances --raw), not object"),
        (None, "expected a JSON array of instances (vastai show instances --raw), not null"),
        ([5], ":1: instance #0 is not an object but 5"),
        ([{**VAST, "ssh_host": None, "public_ipaddr": None}],
         ":1: instance 7 ('lab'): [0].ssh_host (or public_ipaddr) is missing"),
        ([{**VAST, "ssh_port": None}], ":1: instance 7 ('lab'): [0].ssh_port is missing"),
        ([{**VAST, "ssh_port": "30101"}],
         ":1: instance 7 ('lab'): [0].ssh_port must be a number from 1 to 65535, not '30101'"),
        ([{**VAST, "num_gpus": "2"}], ":1: instance 7 ('lab'): [0].num_gpus must be a number from 0 to 1024, not '2'"),
        ([{**VAST, "label": 5}], ":1: instance 7: [0].label must be a string, not 5"),
        ([{**VAST, "id": None}], ":1: instance #0: [0].id must be a number or a string, not None"),
        ([{**VAST, "ssh_host": ["x"]}], ":1: instance 7 ('lab'): [0].ssh_host must be a string, not ['x']"),
        ([{**VAST, "dph_total": "0.5"}], ":1: instance 7 ('lab'): [0].dph_total " + DPH + "not '0.5'"),
        ([{**VAST, "dph_total": -0.2}], ":1: instance 7 ('lab'): [0].dph_total " + DPH + "not -0.2"),
        ([{**VAST, "dph_total": True}], ":1: instance 7 ('lab'): [0].dph_total " + DPH + "not True"),
        ([{**VAST, "dph_total": 1e9}], ":1: instance 7 ('lab'): [0].dph_total " + DPH + "not 1000000000.0"),
        ([VAST, {**VAST, "id": 8, "label": "b", "dph_total": [1]}],
         ":1: instance 8 ('b'): [1].dph_total " + DPH + "not [1]"),
    ],
)
def test_odd_vastai_json_is_one_line_naming_file_and_instance(tmp_path: Path, data: object, reason: str) -> None:
    (tmp_path / "v.json").write_text(json.dumps(data))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[import]]\nvastai_json = "v.json"\n')
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    assert str(info.value) == (f"{tmp_path / 'v.json'}{reason}" if reason.startswith(":") else
                               f"{tmp_path / 'v.json'}: {reason}")


def test_parse_vastai_instances_maps_the_raw_fields() -> None:
    rows = [VAST, {**VAST, "id": 8, "label": None, "ssh_host": None, "num_gpus": None, "gpu_name": None},
            {**VAST, "id": 9, "actual_status": "exited", "ssh_port": None}]
    hosts = parse_vastai_instances({"instances": rows}, "vastai")
    assert hosts == [
        {"name": "lab", "host": "ssh4.vast.ai", "port": 30101, "tags": ["vast", "2x RTX 4090"], "gpus": 2,
         "source": "vastai (id 7)", "vast_id": 7, "status": "running"},
        {"name": "vast-8", "host": "9.9.9.9", "port": 30101, "tags": ["vast"], "gpus": None,
         "source": "vastai (id 8)", "vast_id": 8, "status": "running"},
    ]
    # an exited row is skipped before its fields are checked; kept (running_only=False), it must be whole
    with pytest.raises(ConfigError, match=r"^x: instance 9 .*: \[2\]\.ssh_port is missing$"):
        parse_vastai_instances(rows, "x", running_only=False)


def test_vastai_json_import_carries_gpus_and_duplicates_name_both(tmp_path: Path) -> None:
    (tmp_path / "v.json").write_text(json.dumps([VAST]))
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[import]]\nvastai_json = "v.json"\ntags = ["prod"]\n')
    (inst,) = load_fleet(fleet).instances
    assert inst.gpus == 2 and inst.tags == ("vast", "2x RTX 4090", "prod") and inst.address == "root@ssh4.vast.ai:30101"
    fleet.write_text('[[instance]]\nname = "lab"\nhost = "h"\n\n[[import]]\nvastai_json = "v.json"\n')
    with pytest.raises(ConfigError) as info:
        load_fleet(fleet)
    assert str(info.value) == f"{tmp_path / 'v.json'}:1: duplicate instance name 'lab' (first at {fleet}:1)"


# -- good files ------------------------------------------------------------------------------------

GOOD = """\
[defaults]
user = "ubuntu"
gpus = 8
keepalive = 30
connect_timeout = 5
jump = "ops@bastion:2222"
heartbeat = 2

[benchmark]
start = "/root/run.sh"
match = "cuzk-bench"
progress = 'proof (\\d+) done'

[[instance]]
name = "a"
host = "10.0.0.1"
gpus = 0
jump = ["j1", "root@j2:22", "[::1]:2200"]
accept_new_host_key = false

[[instance]]
name = "b"
ssh_config = "vast-b"
benchmark = { progress = "step \\\\d+", stop_timeout = 2.5 }

[[signature]]
code = "disk_full"
severity = "critical"
pattern = "No space left on device"
explanation = "The disk is full."
label = "disk full"

[[import]]
vastai = true
refresh = 120
tags = ["vast"]

[[import]]
command = ["/opt/vastai", "show", "instances", "--raw"]
running_only = false
"""


def test_good_file_round_trips_every_new_field(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(GOOD)
    fleet = load_fleet(path)
    a, b = fleet.instances
    assert (a.gpus, a.jump, a.keepalive, a.connect_timeout, a.heartbeat) == (
        0, ("j1", "root@j2:22", "[::1]:2200"), 30.0, 5.0, 2.0)
    assert a.accept_new_host_key is False and a.user == "ubuntu"
    assert a.source == f"{path}:{GOOD.splitlines().index('[[instance]]') + 1}"
    assert (b.gpus, b.jump, b.ssh_config, b.host) == (8, ("ops@bastion:2222",), "vast-b", "vast-b")
    assert a.benchmark.progress == r"proof (\d+) done" and b.benchmark.progress == r"step \d+"
    assert b.benchmark.stop_timeout == 2.5 and b.benchmark.match == ("cuzk-bench",)
    assert b.benchmark.start == "/root/run.sh"
    assert a.agent_config()["heartbeat_interval"] == 2.0
    (sig,) = fleet.signatures
    assert (sig.code, sig.severity, sig.pattern, sig.explanation, sig.label) == (
        "disk_full", "critical", "No space left on device", "The disk is full.", "disk full")
    assert sig.source == f"{path}:{GOOD.splitlines().index('[[signature]]') + 1}"
    vast, cmd = fleet.imports
    assert (vast.command, vast.refresh, vast.tags, vast.running_only) == (VASTAI_COMMAND, 120.0, ("vast",), True)
    assert (cmd.command, cmd.refresh, cmd.running_only) == (("/opt/vastai", "show", "instances", "--raw"), 60.0, False)


def test_new_fields_default_so_old_constructors_work() -> None:
    inst = Instance(name="x", host="h")
    assert (inst.gpus, inst.ssh_config, inst.jump, inst.connect_timeout, inst.keepalive, inst.heartbeat) == (
        None, None, (), None, None, None)
    assert "heartbeat_interval" not in inst.agent_config()


FAST_SAMPLES = [
    GOOD,
    I + "port = 22\ntags = ['a', \"b\", ]\ninterval = 0.5\nx = -1.5e3 # c\n",
    "# c\n\n[defaults]\nuser = 'r'\n\n[[instance]]\nname = \"a\"\n[[instance]] # two\nname = 'b'\n",
    "a = 1\r\nb = 'x'\r\n",
    "a = 01\n", "a = 1_000\n", "a = \"\\u00e9\"\n", "a = 'x'\rb = 1\n", "a = 1\na = 2\n", "[a]\n[a]\n",
    "a = 1\n[[a]]\n", "[[a]]\n[a]\n", "a = [1, [2]]\n", "a = [\n1]\n", "a = \"\"\"x\"\"\"\n", "a = nan\n",
    "a.b = 1\n", "a = 1 2\n", "a\x0c= 1\n", "a = 1 # \x01\n", "[ [a]]\n", "[a] x\n", "a = +0\nb = -0.0\nc = 1E5\n",
]


@pytest.mark.parametrize("text", FAST_SAMPLES)
def test_fast_toml_path_agrees_with_tomllib(text: str) -> None:
    try:
        expected: object = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        expected = "error"
    fast = toml_text._fast(text)
    if fast is not None:
        assert repr(fast[0]) == repr(expected)
    try:
        got: object = toml_text.parse(text)[0]
    except tomllib.TOMLDecodeError:
        got = "error"
    assert repr(got) == repr(expected)  # repr: nan == nan


def test_load_is_linear(tmp_path: Path) -> None:
    def timed(n: int) -> float:
        path = tmp_path / f"f{n}.toml"
        path.write_text("".join(f'[[instance]]\nname = "g{i}"\nhost = "10.0.0.{i % 250}"\nport = {2000 + i}\n\n'
                                for i in range(n)))
        started = time.perf_counter()
        assert len(load_fleet(path).instances) == n
        return time.perf_counter() - started

    timed(100)
    assert timed(5000) < 3.0  # was 17 s (a line search per instance); about 0.2 s now


# -- the command, as a user runs it ----------------------------------------------------------------


@pytest.mark.parametrize("text", [I + "accept_new_host_key = 'false'\n", I + "interval = nan\n", "\n" + I + I,
                                  "[[signature]]\ncode = 'x'\n"])
def test_check_prints_one_line_and_exits_2(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "console", "check", "--fleet", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith(f"fleet-console: {path}:"), err


def test_mangled_files_never_raise_anything_but_config_error(tmp_path: Path) -> None:
    """Random cuts, duplications and swaps of a good file: a Fleet or one ConfigError line, nothing else."""
    import random

    rng = random.Random(1234)
    (tmp_path / "v.json").write_text(json.dumps([VAST, {**VAST, "id": 8, "label": "x"}]))
    (tmp_path / "c").write_text("Host gpu-z\n  Port 2022\n")
    base = GOOD + '\n[[import]]\nvastai_json = "v.json"\n\n[[import]]\nssh_config = "c"\n'
    tokens = ["'x'", "1", "-1", "nan", "true", "[", "]", "{", "}", "=", "\n", "[[instance]]", '"', "1e999", "0.1"]
    path = tmp_path / "fleet.toml"
    for _ in range(400):
        text = list(base)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text))
            op = rng.random()
            if op < 0.4:
                del text[at:at + rng.randint(1, 8)]
            elif op < 0.8:
                text.insert(at, rng.choice(tokens))
            else:
                text[at] = rng.choice(tokens)
        path.write_text("".join(text))
        try:
            load_fleet(path)
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(str(tmp_path))


def test_signature_rows_reach_every_instances_agent_config(tmp_path: Path) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(
        '[[instance]]\nname = "a"\nhost = "h1"\n\n[[instance]]\nname = "b"\nhost = "h2"\n\n'
        '[[signature]]\ncode = "license_expired"\nseverity = "error"\npattern = "license .* expired"\n'
        'explanation = "the prover\'s license ran out"\n'
    )
    fleet = load_fleet(fleet_file)
    for inst in fleet.instances:
        rows = inst.agent_config()["signatures"]
        assert rows == [{"code": "license_expired", "severity": "error", "pattern": "license .* expired",
                         "explanation": "the prover's license ran out"}]
