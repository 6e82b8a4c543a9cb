"""The fleet inventory: ``fleet.toml`` plus hosts imported from ``~/.ssh/config`` and vast.ai JSON.

Every problem is a :class:`ConfigError` whose text is one line naming the file and line.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from console.actions import BUILTIN_PROBE_KEYS

DEFAULT_FLEET_PATHS = ("fleet.toml", "~/.config/fleet-console/fleet.toml")


class ConfigError(Exception):
    """A bad inventory: ``str(err)`` is ``path:line: reason``."""

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path, self.line, self.reason = str(path), line, reason
        where = f"{self.path}:{line}" if line else self.path
        super().__init__(f"{where}: {reason}")


@dataclass(frozen=True)
class BenchmarkSpec:
    """How to find, stop and start an instance's benchmark."""

    start: str | tuple[str, ...] | None = None
    match: tuple[str, ...] = ()
    entrypoint: tuple[str, ...] = ()
    log: str | None = None
    cwd: str | None = None
    stop_timeout: float = 10.0
    env: tuple[tuple[str, str], ...] = ()  # extra environment for the started benchmark

    def as_agent_config(self) -> dict[str, Any]:
        start = list(self.start) if isinstance(self.start, tuple) else self.start
        return {
            "start": start,
            "match": list(self.match),
            "entrypoint": list(self.entrypoint),
            "log": self.log,
            "cwd": self.cwd,
            "stop_timeout": self.stop_timeout,
            "env": dict(self.env),
        }


@dataclass(frozen=True)
class ProbeSpec:
    """A custom probe: a command run on its own SSH channel with a timeout."""

    name: str
    key: str
    command: str
    timeout: float = 20.0
    title: str = ""


@dataclass(frozen=True)
class Instance:
    """One GPU instance as the console reaches it."""

    name: str
    host: str
    port: int = 22
    user: str = "root"
    key: str | None = None
    tags: tuple[str, ...] = ()
    transport: str = "ssh"  # "ssh", or "local": run the agent on this machine without SSH
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    accept_new_host_key: bool = False
    python: str = "python3"
    logs: tuple[str, ...] = ()
    watch_dirs: tuple[str, ...] = ("/tmp",)
    interval: float = 1.0
    stall_seconds: float | None = None  # diagnose: a download log unchanged this long is stalled (None: agent default)
    benchmark: BenchmarkSpec = field(default_factory=BenchmarkSpec)
    agent_extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    source: str = ""

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def agent_config(self) -> dict[str, Any]:
        """The JSON config handed to this instance's agent."""
        config: dict[str, Any] = {
            "interval": self.interval,
            "logs": list(self.logs),
            "watch_dirs": list(self.watch_dirs),
            "benchmark": self.benchmark.as_agent_config(),
        }
        if self.stall_seconds is not None:
            config["stall_seconds"] = self.stall_seconds
        config.update(self.agent_extra)
        return config


@dataclass
class Fleet:
    instances: list[Instance]
    probes: list[ProbeSpec] = field(default_factory=list)
    source: str = ""

    def get(self, name: str) -> Instance:
        for inst in self.instances:
            if inst.name == name:
                return inst
        raise KeyError(name)


# -- fleet.toml -----------------------------------------------------------------------------------

_INSTANCE_KEYS = {
    "name", "host", "port", "user", "key", "tags", "transport", "known_hosts", "accept_new_host_key",
    "python", "logs", "watch_dirs", "interval", "stall_seconds", "benchmark",
}
_DEFAULT_KEYS = _INSTANCE_KEYS - {"name", "host", "port", "transport"} | {"port"}
_BENCH_KEYS = {"start", "match", "entrypoint", "log", "cwd", "stop_timeout", "env"}
_PROBE_KEYS = {"name", "key", "command", "timeout", "title"}
_IMPORT_KEYS = {"ssh_config", "hosts", "vastai_json", "tags", "running_only"}
_TOP_KEYS = {"defaults", "benchmark", "instance", "probe", "import"}


class _Lines:
    """Finds the line of a table or key in the TOML text, for error messages."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def table(self, name: str, index: int) -> int | None:
        pattern = re.compile(r"^\s*\[\[\s*" + re.escape(name) + r"\s*\]\]")
        seen = -1
        for no, line in enumerate(self.lines, 1):
            if pattern.match(line):
                seen += 1
                if seen == index:
                    return no
        return None

    def key(self, key: str, after: int | None = None) -> int | None:
        pattern = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
        start = (after or 1) - 1
        for no in range(start, len(self.lines)):
            if pattern.match(self.lines[no]):
                return no + 1
            if no > start and after is not None and self.lines[no].lstrip().startswith("[["):
                break
        return after


def _str_list(value: Any, what: str, err: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise err(f"{what} must be a string or a list of strings")
    return tuple(value)


def _benchmark(raw: Any, base: BenchmarkSpec, err: Any) -> BenchmarkSpec:
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise err("benchmark must be a table")
    unknown = set(raw) - _BENCH_KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise err(f"unknown benchmark key {key!r} (expected one of {', '.join(sorted(_BENCH_KEYS))})", key)
    start = raw.get("start", base.start)
    if isinstance(start, (list, tuple)):
        start = _str_list(start, "benchmark.start", err)
    elif start is not None and not isinstance(start, str):
        raise err("benchmark.start must be a command string or an argv list", "start")
    timeout = raw.get("stop_timeout", base.stop_timeout)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise err("benchmark.stop_timeout must be a positive number of seconds", "stop_timeout")
    match = _str_list(raw.get("match", list(base.match)), "benchmark.match", err)
    entrypoint = _str_list(raw.get("entrypoint", list(base.entrypoint)), "benchmark.entrypoint", err)
    for pattern in match + entrypoint:
        try:
            re.compile(pattern)
        except re.error as exc:
            key = "match" if pattern in match else "entrypoint"
            raise err(f"bad benchmark pattern {pattern!r}: {exc}", key) from None
    env = raw.get("env", dict(base.env))
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) and isinstance(v, (str, int, float))
        for k, v in env.items()
    ):
        raise err("benchmark.env must be a table of NAME = \"value\" pairs", "env")
    return BenchmarkSpec(
        env=tuple(sorted((k, str(v)) for k, v in env.items())),
        start=start,
        match=match,
        entrypoint=entrypoint,
        log=raw.get("log", base.log),
        cwd=raw.get("cwd", base.cwd),
        stop_timeout=float(timeout),
    )


def _instance(raw: dict[str, Any], defaults: dict[str, Any], bench: BenchmarkSpec, err: Any, source: str) -> Instance:
    unknown = set(raw) - _INSTANCE_KEYS
    if unknown:
        raise err(f"unknown instance key {sorted(unknown)[0]!r}")
    merged = {**defaults, **{k: v for k, v in raw.items() if k != "benchmark"}}
    name = merged.get("name")
    if not isinstance(name, str) or not name.strip():
        raise err("instance needs a name")
    transport = merged.get("transport", "ssh")
    if transport not in ("ssh", "local"):
        raise err(f"instance {name!r}: transport must be 'ssh' or 'local'")
    host = merged.get("host", "localhost" if transport == "local" else None)
    if not isinstance(host, str) or not host:
        raise err(f"instance {name!r} needs a host")
    port = merged.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise err(f"instance {name!r}: port must be a number from 1 to 65535, not {port!r}")
    interval = merged.get("interval", 1.0)
    if not isinstance(interval, (int, float)) or interval <= 0:
        raise err(f"instance {name!r}: interval must be a positive number of seconds")
    stall = merged.get("stall_seconds")
    if stall is not None and (not isinstance(stall, (int, float)) or isinstance(stall, bool) or stall <= 0):
        raise err(f"instance {name!r}: stall_seconds must be a positive number of seconds")
    for key in ("user", "key", "known_hosts", "python"):
        if key in merged and not isinstance(merged[key], str):
            raise err(f"instance {name!r}: {key} must be a string")
    return Instance(
        name=name.strip(),
        host=host,
        port=port,
        user=merged.get("user", "root"),
        key=merged.get("key"),
        tags=_str_list(merged.get("tags", []), "tags", err),
        transport=transport,
        known_hosts=merged.get("known_hosts"),
        accept_new_host_key=bool(merged.get("accept_new_host_key", False)),
        python=merged.get("python", "python3"),
        logs=_str_list(merged.get("logs", []), "logs", err),
        watch_dirs=_str_list(merged.get("watch_dirs", ["/tmp"]), "watch_dirs", err),
        interval=float(interval),
        stall_seconds=float(stall) if stall is not None else None,
        benchmark=_benchmark(raw.get("benchmark"), bench, err),
        source=source,
    )


def _probe(raw: dict[str, Any], err: Any) -> ProbeSpec:
    unknown = set(raw) - _PROBE_KEYS
    if unknown:
        raise err(f"unknown probe key {sorted(unknown)[0]!r}")
    name, key, command = raw.get("name"), raw.get("key"), raw.get("command")
    if not isinstance(name, str) or not isinstance(command, str) or not name or not command:
        raise err("probe needs a name and a command")
    if not isinstance(key, str) or len(key) != 1:
        raise err(f"probe {name!r}: key must be one character")
    if key in BUILTIN_PROBE_KEYS:
        raise err(f"probe {name!r}: key {key!r} belongs to a built-in probe (use a letter or 6-9)")
    timeout = raw.get("timeout", 20.0)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise err(f"probe {name!r}: timeout must be a positive number of seconds")
    return ProbeSpec(name=name, key=key, command=command, timeout=float(timeout), title=raw.get("title", name))


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate a fleet file (and the host lists it imports)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"cannot read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        line = int(m.group(1)) if m else getattr(exc, "lineno", None)
        raise ConfigError(path, line, "invalid TOML: " + re.sub(r"\s*\(at line.*\)$", "", msg)) from None
    lines = _Lines(text)

    def err_at(line: int | None) -> Any:
        return lambda reason, key=None: ConfigError(path, line, reason)

    def bench_err(reason: str, key: str | None = None) -> ConfigError:
        header = next((no for no, text in enumerate(lines.lines, 1) if text.strip() == "[benchmark]"), None)
        return ConfigError(path, (lines.key(key, after=header) if key and header else None) or header, reason)

    unknown = set(data) - _TOP_KEYS
    if unknown:
        key = sorted(unknown)[0]
        line = lines.key(key) or lines.table(key, 0)
        raise ConfigError(path, line, f"unknown top-level key {key!r} (expected {', '.join(sorted(_TOP_KEYS))})")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        raise ConfigError(path, lines.key("defaults"), "defaults must be a table")
    bad = set(defaults) - _DEFAULT_KEYS
    if bad:
        key = sorted(bad)[0]
        raise ConfigError(path, lines.key(key), f"unknown defaults key {key!r}")
    bench = _benchmark(data.get("benchmark", {}), BenchmarkSpec(), bench_err)

    instances: list[Instance] = []
    for index, raw in enumerate(_tables(data, "instance", path, lines)):
        line = lines.table("instance", index)
        instances.append(_instance(raw, defaults, bench, err_at(line), f"{path}:{line}"))
    for index, raw in enumerate(_tables(data, "import", path, lines)):
        line = lines.table("import", index)
        instances.extend(_import(raw, path, line, defaults, bench))
    probes = [
        _probe(raw, err_at(lines.table("probe", i))) for i, raw in enumerate(_tables(data, "probe", path, lines))
    ]

    seen: dict[str, str] = {}
    for inst in instances:
        if inst.name in seen:
            line_no = int(inst.source.rsplit(":", 1)[-1]) if inst.source.rsplit(":", 1)[-1].isdigit() else None
            raise ConfigError(path, line_no, f"duplicate instance name {inst.name!r} (first at {seen[inst.name]})")
        seen[inst.name] = inst.source
    keys: dict[str, str] = {}
    for i, probe in enumerate(probes):
        if probe.key in keys:
            reason = f"probe key {probe.key!r} already used by {keys[probe.key]!r}"
            raise ConfigError(path, lines.table("probe", i), reason)
        keys[probe.key] = probe.name
    return Fleet(instances=instances, probes=probes, source=str(path))


def _tables(data: dict[str, Any], name: str, path: Path, lines: _Lines) -> list[dict[str, Any]]:
    value = data.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(path, lines.key(name) or lines.table(name, 0), f"use [[{name}]] tables for {name!r}")
    return value


# -- imports --------------------------------------------------------------------------------------


def _import(
    raw: dict[str, Any], path: Path, line: int | None, defaults: dict[str, Any], bench: BenchmarkSpec
) -> list[Instance]:
    unknown = set(raw) - _IMPORT_KEYS
    if unknown:
        raise ConfigError(path, line, f"unknown import key {sorted(unknown)[0]!r}")
    extra_tags = tuple(raw.get("tags", ()))
    base_dir = path.parent
    if "ssh_config" in raw:
        source = (base_dir / Path(raw["ssh_config"]).expanduser()).resolve()
        patterns = _str_list(raw.get("hosts", ["*"]), "hosts", lambda r, k=None: ConfigError(path, line, r))
        return _imported(read_ssh_config(source, patterns), extra_tags, defaults, bench)
    if "vastai_json" in raw:
        source = (base_dir / Path(raw["vastai_json"]).expanduser()).resolve()
        hosts = read_vastai_json(source, running_only=bool(raw.get("running_only", True)))
        return _imported(hosts, extra_tags, defaults, bench)
    raise ConfigError(path, line, "import needs ssh_config = PATH or vastai_json = PATH")


def _imported(
    hosts: list[dict[str, Any]], extra_tags: tuple[str, ...], defaults: dict[str, Any], bench: BenchmarkSpec
) -> list[Instance]:
    out = []
    for host in hosts:
        source = host.pop("source")
        host["tags"] = [*host.get("tags", ()), *extra_tags]
        out.append(_instance(host, defaults, bench, lambda r, k=None, s=source: ConfigError(s, None, r), source))
    return out


def read_ssh_config(path: Path, patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Concrete ``Host`` entries of an OpenSSH client config whose names match ``patterns``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read ssh config: {exc.strerror or exc}") from None
    hosts: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    for no, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parts = shlex.split(line.replace("=", " ", 1) if "=" in line.split()[0] else line)
        except ValueError as exc:
            raise ConfigError(path, no, f"cannot parse: {exc}") from None
        keyword, args = parts[0].lower(), parts[1:]
        if keyword == "match":
            current = []
        elif keyword == "host":
            current = []
            for name in args:
                if any(c in name for c in "*?!") or not any(fnmatch.fnmatch(name, p) for p in patterns):
                    continue
                entry: dict[str, Any] = {"name": name, "host": name, "source": f"{path}:{no}"}
                hosts.append(entry)
                current.append(entry)
        elif current and args:
            for entry in current:
                if keyword == "hostname":
                    entry["host"] = args[0]
                elif keyword == "port":
                    if not args[0].isdigit():
                        raise ConfigError(path, no, f"bad Port {args[0]!r}")
                    entry["port"] = int(args[0])
                elif keyword == "user":
                    entry["user"] = args[0]
                elif keyword == "identityfile":
                    entry.setdefault("key", args[0])
    for entry in hosts:
        entry["tags"] = ["ssh-config"]
    return hosts


def read_vastai_json(path: Path, running_only: bool = True) -> list[dict[str, Any]]:
    """Hosts from a saved ``vastai show instances --raw`` JSON array."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(path, None, f"cannot read vast.ai JSON: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    if isinstance(data, dict) and isinstance(data.get("instances"), list):
        data = data["instances"]
    if not isinstance(data, list):
        raise ConfigError(path, 1, "expected a JSON array of instances")
    hosts = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ConfigError(path, None, f"instance #{i} is not an object")
        if running_only and item.get("actual_status") not in (None, "running"):
            continue
        host = item.get("ssh_host") or item.get("public_ipaddr")
        port = item.get("ssh_port")
        if not host or not isinstance(port, int):
            raise ConfigError(path, None, f"instance {item.get('id', i)!r} has no ssh_host/ssh_port")
        tags = ["vast"]
        if item.get("gpu_name"):
            gpus = item.get("num_gpus") or 1
            tags.append(f"{gpus}x {item['gpu_name']}")
        hosts.append({
            "name": str(item.get("label") or f"vast-{item.get('id', i)}"),
            "host": str(host),
            "port": port,
            "tags": tags,
            "source": f"{path} (id {item.get('id', i)})",
        })
    return hosts


def find_fleet_file(explicit: str | None) -> Path | None:
    """The fleet file to use: ``--fleet``, else ./fleet.toml, else the user's config dir."""
    if explicit:
        return Path(explicit).expanduser()
    for candidate in DEFAULT_FLEET_PATHS:
        p = Path(candidate).expanduser()
        if p.exists():
            return p
    return None
