"""What the rest of the console uses: frozen records built from a validated fleet file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.inventory.schema import AlertSpec, NotifySpec


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
    progress: str | None = None  # regex for the benchmark's own progress lines (None: the built-in default)
    kind: str | None = None  # "batch" | "server" (None: diagnose guesses from the processes)

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
class SignatureSpec:
    """A ``[[signature]]`` row: a log pattern that diagnose adds to its built-in table."""

    code: str
    severity: str  # "info" | "warning" | "error" | "critical"
    pattern: str
    explanation: str
    label: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ImportSpec:
    """An ``[[import]]`` the console re-runs while it runs (``vastai = true`` or ``command = [...]``).

    Imports of files (``ssh_config``, ``vastai_json``) are read once by ``load_fleet``; these are carried
    so that the runtime refresh knows what to run and how often.
    """

    command: tuple[str, ...]
    refresh: float = 60.0
    tags: tuple[str, ...] = ()
    running_only: bool = True
    source: str = ""


@dataclass(frozen=True)
class SourceSpec:
    """A ``[[source]]``: GPU figures for the fleet from a Prometheus that scrapes DCGM-exporter
    (``console/sources/prometheus.py``); ``host_label`` names the host, matched to an instance's name or host.
    ``ssh``: how the console reaches the fleet-file instances it covers (``console/core/on_demand.py``)."""

    prometheus: str
    host_label: str = "Hostname"
    interval: float = 5.0
    timeout: float = 5.0
    source: str = ""
    ssh: str = "on_demand"  # instances it covers: SSH opened on demand, closed when idle ("always": kept open)


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
    heartbeat: float | None = None  # seconds between agent heartbeats (None: agent default)
    gpus: int | None = None  # GPUs this instance should have (None: not known)
    ssh_config: str | None = None  # a Host alias resolved through ~/.ssh/config
    jump: tuple[str, ...] = ()  # ProxyJump hops, "user@host:port", first hop first
    connect_timeout: float | None = None  # seconds (None: the link's default)
    keepalive: float | None = None  # ServerAliveInterval in seconds, 0 = off (None: the link's default)
    benchmark: BenchmarkSpec = field(default_factory=BenchmarkSpec)
    signatures: tuple[SignatureSpec, ...] = ()  # the fleet file's [[signature]] rows, tried before the built-ins
    agent_extra: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    source: str = ""
    price_per_hour: float | None = None  # the rental's price per hour (None: not known)
    price_source: str = ""  # where the price came from: "fleet.toml:12", "vast.ai dph_total", "[defaults]"
    vast_id: str | None = None  # the vast.ai instance id (an import's ``id``): ``{vast_id}`` in [actions]

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def agent_config(self) -> dict[str, Any]:
        """The JSON config handed to this instance's agent."""
        benchmark = self.benchmark.as_agent_config()
        if self.benchmark.progress:  # the benchmark's own progress lines (diagnose: hung vs progressing)
            benchmark["progress"] = self.benchmark.progress
        if self.benchmark.kind:  # batch or server (diagnose: idle GPUs are trouble or a server waiting)
            benchmark["kind"] = self.benchmark.kind
        config: dict[str, Any] = {
            "interval": self.interval,
            "logs": list(self.logs),
            "watch_dirs": list(self.watch_dirs),
            "benchmark": benchmark,
        }
        rows = self.signatures  # fleet.toml [[signature]] rows, tried by diagnose before its built-in table
        if rows:
            config["signatures"] = [
                {"code": r.code, "severity": r.severity, "pattern": r.pattern, "explanation": r.explanation}
                for r in rows
            ]
        if self.stall_seconds is not None:
            config["stall_seconds"] = self.stall_seconds
        if self.heartbeat is not None:
            config["heartbeat_interval"] = self.heartbeat
        config.update(self.agent_extra)
        return config


def duration_seconds(text: str) -> float:
    """``"90s"``, ``"20m"``, ``"2h"``, ``"1d"`` (the schema's ``Duration``, already checked) in seconds."""
    text = text.strip().lower()
    return float(text[:-1].strip()) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[text[-1]]


@dataclass(frozen=True)
class ActionsSpec:
    """``[actions]``: ``stop`` is an argv run on this machine (``{vast_id}``, ``{name}``, ``{host}`` replaced,
    each as one argument); ``stop_idle_after`` seconds idle run it by themselves (None: never)."""

    stop: tuple[str, ...] = ()
    stop_idle_after: float | None = None
    source: str = ""


@dataclass
class Fleet:
    instances: list[Instance]
    probes: list[ProbeSpec] = field(default_factory=list)
    source: str = ""
    signatures: list[SignatureSpec] = field(default_factory=list)
    imports: list[ImportSpec] = field(default_factory=list)  # imports to re-run while the console runs
    sources: list[SourceSpec] = field(default_factory=list)  # [[source]] rows (Prometheus)
    alerts: list[AlertSpec] = field(default_factory=list)  # [[alert]] rules (console/monitor/alerts.py evaluates them)
    notify: list[NotifySpec] = field(default_factory=list)  # [[notify]] sinks (console/notify/ sends to them)
    currency: str = "$"  # [defaults] currency: how prices and spend are written
    actions: ActionsSpec = field(default_factory=ActionsSpec)

    def get(self, name: str) -> Instance:
        for inst in self.instances:
            if inst.name == name:
                return inst
        raise KeyError(name)
