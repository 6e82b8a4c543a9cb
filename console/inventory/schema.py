"""The fleet file's shape, declared: one msgspec Struct per table, every number bounded.

``msgspec.convert(data, FleetFile, strict=True)`` does the type, range and unknown-key checks (no
truthy strings, no nan, no ints for booleans); ``load`` turns its error path into ``file:line: reason``
using each field's ``description``. ``None`` means "not given" (TOML has no null), so ``[defaults]``
can be merged under each instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from msgspec import Meta, Struct, field

NonEmpty = Annotated[str, Meta(min_length=1, description="a non-empty string")]
Strings = str | list[str]  # one string or a list of them
Port = Annotated[int, Meta(ge=1, le=65535, description="a number from 1 to 65535")]
Interval = Annotated[float, Meta(ge=0.2, le=60, description="a number of seconds from 0.2 to 60")]
Heartbeat = Annotated[float, Meta(ge=1, le=60, description="a number of seconds from 1 to 60")]
StallSeconds = Annotated[
    float, Meta(ge=5, le=86400, description="a positive number of seconds from 5 to 86400")
]
StopTimeout = Annotated[float, Meta(ge=0.5, le=600, description="a positive number of seconds from 0.5 to 600")]
ProbeTimeout = Annotated[float, Meta(ge=1, le=3600, description="a positive number of seconds from 1 to 3600")]
ConnectTimeout = Annotated[float, Meta(ge=1, le=300, description="a number of seconds from 1 to 300")]
Keepalive = Annotated[float, Meta(ge=0, le=3600, description="a number of seconds from 0 (off) to 3600")]
Refresh = Annotated[float, Meta(ge=10, le=86400, description="a number of seconds from 10 to 86400")]
Gpus = Annotated[int, Meta(ge=0, le=1024, description="a whole number of GPUs from 0 to 1024")]
_PORT_RE = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
JUMP_RE = r"^(?:[^@\s:/\[\]]+@)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::" + _PORT_RE + r")?$"
Hop = Annotated[str, Meta(pattern=JUMP_RE, description='"user@host:port" (user and port optional)')]
Jump = Annotated[Hop | list[Hop], Meta(description='"user@host:port" or a list of them')]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="a NAME = \"value\" table")]
ProbeKey = Annotated[str, Meta(min_length=1, max_length=1, description="one character")]
Code = Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="a snake_case code like disk_full")]
Command = Annotated[list[NonEmpty], Meta(min_length=1, description="an argv list like [\"vastai\", ...]")]
Price = Annotated[float, Meta(ge=0, le=10000, description="a price per hour from 0 to 10000 (a number, like 0.45)")]
Currency = Annotated[str, Meta(pattern=r"^[^\s\d.,-]{1,8}$",
                               description='a currency sign or code like "$", "€", "EUR"')]
DURATION_RE = r"^\s*\d+(\.\d+)?\s*[smhd]\s*$"
Duration = Annotated[str, Meta(pattern=DURATION_RE, description='a duration like "90s", "20m", "2h" or "1d"')]

# Descriptions for fields whose type alone does not say enough; keyed by field name.
DESCRIPTIONS = {
    "tags": "a list of strings, like [\"gpu\"]",
    "logs": "a string or a list of strings",
    "watch_dirs": "a string or a list of strings",
    "hosts": "a string or a list of strings",
    "match": "a string or a list of strings",
    "entrypoint": "a string or a list of strings",
    "start": "a command string or an argv list",
    "env": 'a table of NAME = "value" pairs',
    "accept_new_host_key": "true or false (not a string)",
    "running_only": "true or false (not a string)",
    "vastai": "true or false (not a string)",
    "transport": "'ssh' or 'local'",
    "kind": "'batch' or 'server'",
    "ssh": "'on_demand' or 'always'",
    "severity": "'info', 'warning', 'error' or 'critical'",
    "benchmark": "a table",
    "defaults": "a table",
    "instance": "[[instance]] tables",
    "probe": "[[probe]] tables",
    "signature": "[[signature]] tables",
    "import": "[[import]] tables",
    "alert": "[[alert]] tables",
    "source": "[[source]] tables",
    "statuses": "a status or a list of them: failed, needs_action, unreachable, benchmark_down, stale, gpu_idle, "
    "connecting, ok",
    "gpu_health": "a GPU health field or a list of them: ecc_uncorrected, row_remap_failure, row_remap_pending, "
    "retired_pages_pending, xid, hw_slowdown, hw_thermal, hw_power_brake, sw_thermal, sw_power_cap, pcie_degraded",
    "verdicts": "a verdict code or a list of them, like [\"oom\", \"benchmark_not_running\"]",
    "instances": "a name pattern (\"vast-*\") or a list of them",
    "webhook": "an http:// or https:// URL or a list of them",
    "bell": "true or false (not a string)",
    "send_resolved": "true or false (not a string)",
    "starttls": "true or false (not a string)",
    "notify": "[[notify]] tables",
    "type": "'ntfy', 'slack', 'discord', 'telegram', 'email' or 'webhook'",
    "to": "an address or a list of them",
    "actions": "a table",
    "stop": 'an argv list like ["vastai", "stop", "instance", "{vast_id}"]',
}

# Keys that exist, but not in the table they were written in: what to say instead of "did you mean".
MISPLACED = {
    ("defaults", "benchmark"): "the shared benchmark goes in its own [benchmark] table",
    ("defaults", "name"): "name is set per [[instance]]",
    ("defaults", "host"): "host is set per [[instance]]",
    ("defaults", "transport"): "transport is set per [[instance]]",
    ("top-level", "instances"): "did you mean [[instance]]?",
    ("instance", "currency"): "the currency is set once, in [defaults]",
    ("top-level", "currency"): "the currency goes in [defaults]",
    ("top-level", "price_per_hour"): "price_per_hour goes in [defaults] or an [[instance]]",
}


class BenchmarkRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    start: Strings | None = None
    match: Strings | None = None
    entrypoint: Strings | None = None
    log: NonEmpty | None = None
    cwd: NonEmpty | None = None
    stop_timeout: StopTimeout | None = None
    env: dict[EnvName, str | int | float] | None = None
    progress: NonEmpty | None = None  # a regex, compiled by load
    kind: Literal["batch", "server"] | None = None  # None: diagnose guesses (docs/diagnosis.md "Liveness")


class HostRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Keys allowed both per instance and in ``[defaults]``."""

    port: Port | None = None
    user: NonEmpty | None = None
    key: NonEmpty | None = None
    tags: Strings | None = None
    known_hosts: NonEmpty | None = None
    accept_new_host_key: bool | None = None
    python: NonEmpty | None = None
    logs: Strings | None = None
    watch_dirs: Strings | None = None
    interval: Interval | None = None
    heartbeat: Heartbeat | None = None
    stall_seconds: StallSeconds | None = None
    gpus: Gpus | None = None
    ssh_config: NonEmpty | None = None
    jump: Jump | None = None
    connect_timeout: ConnectTimeout | None = None
    keepalive: Keepalive | None = None
    price_per_hour: Price | None = None  # the rental's price (currency: [defaults] currency)


class DefaultsRow(HostRow, forbid_unknown_fields=True, omit_defaults=True):
    """``[defaults]``: the host keys, and what is set once for the fleet."""

    currency: Currency | None = None  # how money is written ("$" by default)


class ActionsRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``[actions]``: commands run on this machine (the ops box) for an instance, ``{vast_id}`` etc. substituted."""

    stop: Command | None = None  # stop (or destroy) the rental: key S, :stop, ``fleet-console stop``
    stop_idle_after: Duration | None = None  # run ``stop`` by itself after this long idle (announced ahead)


class InstanceRow(HostRow, forbid_unknown_fields=True, omit_defaults=True):
    name: NonEmpty | None = None  # required, checked by load to say "instance needs a name"
    host: NonEmpty | None = None
    transport: Literal["ssh", "local"] | None = None
    benchmark: BenchmarkRow | None = None


class ProbeRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    name: NonEmpty
    key: ProbeKey
    command: NonEmpty
    timeout: ProbeTimeout | None = None
    title: str | None = None


class SignatureRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    code: Code
    severity: Literal["info", "warning", "error", "critical"]
    pattern: NonEmpty  # a regex, compiled by load
    explanation: NonEmpty
    label: NonEmpty | None = None


class ImportRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    ssh_config: NonEmpty | None = None
    hosts: Strings | None = None
    vastai_json: NonEmpty | None = None
    vastai: bool | None = None
    command: Command | None = None
    refresh: Refresh | None = None
    tags: Strings | None = None
    running_only: bool | None = None


# -- [[source]] (console/sources/prometheus.py polls them)
PromUrl = Annotated[
    str, Meta(pattern=r"^https?://[^\s/?#]+[^\s?#]*$", max_length=2048, description="an http:// or https:// URL")
]
LabelName = Annotated[
    str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="a Prometheus label name like Hostname")
]
SourceInterval = Annotated[float, Meta(ge=1, le=3600, description="a number of seconds from 1 to 3600")]
SourceTimeout = Annotated[float, Meta(ge=0.5, le=120, description="a number of seconds from 0.5 to 120")]


class SourceRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    prometheus: PromUrl
    host_label: LabelName | None = None
    interval: SourceInterval | None = None
    timeout: SourceTimeout | None = None
    ssh: Literal["on_demand", "always"] | None = None


# -- [[alert]] (console/monitor/alerts.py evaluates them) ------------------------------------------------------
# the status table's names (console/core/status.py; tests/test_alerts.py keeps the two the same)
StatusName = Literal["failed", "needs_action", "unreachable", "benchmark_down", "stale", "gpu_idle", "connecting", "ok"]
# the GPU health fields an alert may name (console/core/gpu_health.py ALERT_FIELDS; tests keep the two the same)
HealthField = Literal["ecc_uncorrected", "row_remap_failure", "row_remap_pending", "retired_pages_pending", "xid",
                      "hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap", "pcie_degraded"]
AlertFor = Annotated[float, Meta(ge=0, le=86400, description="a number of seconds from 0 to 86400")]
AlertRepeat = Annotated[float, Meta(ge=0, le=604800, description="a number of seconds from 0 (never) to 604800")]
# scheme, an optional user:password@ (sent as basic auth), a host or [IPv6], an optional valid port, the rest
WEBHOOK_RE = (r"^https?://(?:[^\s/?#]*@)?(?:\[[0-9A-Fa-f:.]+\]|[^\s/?#@:\[\]]+)(?::" + _PORT_RE
              + r")?(?:[/?#]\S*)?$")
WebhookUrl = Annotated[str, Meta(pattern=WEBHOOK_RE, max_length=2048, description="an http:// or https:// URL")]


class AlertRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    name: Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$", description="a name like BenchmarkDown")]
    statuses: StatusName | list[StatusName] | None = None
    verdicts: Code | list[Code] | None = None
    instances: Strings | None = None
    tags: Strings | None = None
    for_: AlertFor | None = field(default=None, name="for")
    repeat: AlertRepeat | None = None
    webhook: WebhookUrl | list[WebhookUrl] | None = None
    bell: bool | None = None
    severity: Literal["info", "warning", "error", "critical"] | None = None
    send_resolved: bool | None = None
    summary: NonEmpty | None = None
    idle_for: Duration | None = None  # fire on idle spend: idle (benchmark down or GPUs idle) this long
    price_above: Price | None = None  # ... at more than this price per hour (default: any price)
    gpu_health: HealthField | list[HealthField] | None = None  # fire while any GPU shows one of these (NVML)


@dataclass(frozen=True)
class AlertSpec:
    """A checked ``[[alert]]`` row: fire when a matching instance is in one of ``statuses`` (or its last verdict
    is one of ``verdicts``) for ``for_seconds``; post to ``webhooks``, ring the bell, repeat every ``repeat``."""

    name: str
    statuses: tuple[str, ...] = ()
    verdicts: tuple[str, ...] = ()
    instances: tuple[str, ...] = ()  # fnmatch patterns on the instance name (empty: all)
    tags: tuple[str, ...] = ()  # any of these tags (empty: all)
    for_seconds: float = 0.0
    repeat: float = 4 * 3600.0  # 0: never repeat while firing
    webhooks: tuple[str, ...] = ()
    bell: bool = False
    severity: str = "warning"
    send_resolved: bool = True
    summary: str = ""
    source: str = ""
    idle_for: float | None = None  # seconds of idle spend that fire it (None: a status/verdict rule)
    price_above: float = 0.0  # only instances whose price per hour is above this
    gpu_health: tuple[str, ...] = ()  # NVML health fields (ecc_uncorrected, xid, hw_slowdown, ...): a rule of its own


# -- [[notify]] (console/notify/ sends to them; console/inventory/notify_rows.py checks what a type cannot say) ----
SINK_TYPES = ("ntfy", "slack", "discord", "telegram", "email", "webhook")
SinkType = Literal["ntfy", "slack", "discord", "telegram", "email", "webhook"]
SinkDuration = Annotated[str | float, Meta(description='a duration like "30s", "2m", "1h" or a number of seconds')]
SinkName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="a name like ops-ntfy")]
PerHour = Annotated[int, Meta(ge=1, le=3600, description="a whole number of messages from 1 to 3600")]


class NotifyRow(Struct, forbid_unknown_fields=True, omit_defaults=True):
    type: SinkType
    name: SinkName | None = None
    url: NonEmpty | None = None  # the server (ntfy), the incoming webhook, the API base (telegram); env:/file: too
    topic: NonEmpty | None = None
    token: NonEmpty | None = None
    chat_id: NonEmpty | int | None = None
    host: NonEmpty | None = None
    port: Port | None = None
    starttls: bool | None = None
    user: NonEmpty | None = None
    password: NonEmpty | None = None
    from_: NonEmpty | None = field(default=None, name="from")
    to: Strings | None = None
    min_duration: SinkDuration | None = None
    group_wait: SinkDuration | None = None
    statuses: StatusName | list[StatusName] | None = None
    instances: Strings | None = None
    tags: Strings | None = None
    quiet_hours: NonEmpty | None = None
    max_per_hour: PerHour | None = None
    send_resolved: bool | None = None


@dataclass(frozen=True)
class NotifySpec:
    """A checked ``[[notify]]`` row. Secrets (``url``, ``token``, ``password``) are kept as written: an ``env:`` or
    ``file:`` reference stays a reference here, resolved only by the notifier (console/inventory/secrets.py)."""

    type: str
    name: str
    url: str = ""
    topic: str = ""
    token: str = ""
    chat_id: str = ""
    host: str = ""
    port: int = 0
    starttls: bool = True
    user: str = ""
    password: str = ""
    sender: str = ""
    to: tuple[str, ...] = ()
    min_duration: float = 30.0
    group_wait: float = 10.0
    statuses: tuple[str, ...] = ("failed", "benchmark_down", "gpu_idle", "unreachable")
    instances: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    quiet_hours: tuple[int, int] | None = None  # minutes after local midnight: start, end
    max_per_hour: int = 30
    send_resolved: bool = True
    base: str = ""  # the fleet file's folder (file: references are relative to it)
    source: str = ""


class FleetFile(Struct, forbid_unknown_fields=True, omit_defaults=True):
    defaults: DefaultsRow | None = None
    benchmark: BenchmarkRow | None = None
    actions: ActionsRow | None = None
    instance: list[InstanceRow] = field(default_factory=list)
    probe: list[ProbeRow] = field(default_factory=list)
    signature: list[SignatureRow] = field(default_factory=list)
    imports: list[ImportRow] = field(default_factory=list, name="import")
    alert: list[AlertRow] = field(default_factory=list)
    source: list[SourceRow] = field(default_factory=list)
    notify: list[NotifyRow] = field(default_factory=list)


TABLE_WORDS = {  # how a message names the table a key is in
    "FleetFile": "top-level",
    "HostRow": "defaults",
    "DefaultsRow": "defaults",
    "ActionsRow": "actions",
    "InstanceRow": "instance",
    "BenchmarkRow": "benchmark",
    "ProbeRow": "probe",
    "SignatureRow": "signature",
    "ImportRow": "import",
    "AlertRow": "alert",
    "NotifyRow": "notify",
}
