"""``[[notify]]`` rows checked beyond their types: each sink's required keys, keys that do not apply to its type,
durations, quiet hours, URLs and secret references (an ``env:`` that is not set is a ``file:line`` error in
``check``, not a silent sink at 3 am). The values behind references are never kept (console/inventory/secrets.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console.inventory.errors import ConfigError
from console.inventory.schema import WEBHOOK_RE, NotifyRow, NotifySpec
from console.inventory.secrets import SecretError, is_reference, resolve

Error = Callable[[list[Any], str], ConfigError]

REQUIRED = {
    "ntfy": ("url", "topic"),
    "slack": ("url",),
    "discord": ("url",),
    "telegram": ("token", "chat_id"),
    "email": ("host", "from", "to"),
    "webhook": ("url",),
}
ALLOWED = {
    "ntfy": {"url", "topic", "token"},
    "slack": {"url"},
    "discord": {"url"},
    "telegram": {"url", "token", "chat_id"},
    "email": {"host", "port", "starttls", "user", "password", "from", "to"},
    "webhook": {"url"},
}
SECRET_KEYS = ("url", "token", "password")
COMMON = {"type", "name", "min_duration", "group_wait", "statuses", "instances", "tags", "quiet_hours",
          "max_per_hour", "send_resolved"}
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_CLOCK = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
_URL = re.compile(WEBHOOK_RE)
_ADDRESS = re.compile(r"^[^@\s<>]+@[^@\s<>]+$")


def parse_duration(value: str | float) -> float | None:
    """``"30s"``, ``"2m"``, ``"1h"``, ``"90"`` or a number, as seconds from 0 to 86400 (None: not one)."""
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", value)
        if m is None:
            return None
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    return seconds if 0 <= seconds <= 86400 else None


def parse_quiet_hours(value: str) -> tuple[int, int] | None:
    """``"22:00-07:00"`` as (start, end) minutes after local midnight (None: not that shape)."""
    parts = [p.strip() for p in value.split("-")]
    if len(parts) != 2:
        return None
    found = [_CLOCK.match(p) for p in parts]
    if found[0] is None or found[1] is None:
        return None
    start, end = (int(m.group(1)) * 60 + int(m.group(2)) for m in found if m is not None)
    return (start, end) if start != end else None


def notify_specs(rows: list[NotifyRow], path: Path, error: Error, line_of: Callable[[list[Any]], int | None]
                 ) -> list[NotifySpec]:
    """The checked sinks; names default to the type (``slack-2`` for a second one) and are unique."""
    import msgspec

    out: list[NotifySpec] = []
    names: dict[str, int] = {}
    for i, row in enumerate(rows):
        comps: list[Any] = ["notify", i]
        given: dict[str, Any] = msgspec.to_builtins(row)
        name = row.name or (row.type if row.type not in names else f"{row.type}-{i + 1}")
        who = f"notify {name!r}: "
        if name in names:
            raise error([*comps, "name"], f"duplicate notify name {name!r} (first is notify #{names[name]})")
        names[name] = i + 1
        for key in given:
            if key not in COMMON and key not in ALLOWED[row.type]:
                raise error([*comps, key], f"{who}{key} does not apply to {row.type} (it takes "
                                           f"{', '.join(sorted(ALLOWED[row.type]))})")
        for key in REQUIRED[row.type]:
            if key not in given:
                raise error(comps, f"{who}{row.type} needs {key}")
        for key in SECRET_KEYS:
            value = given.get(key)
            if isinstance(value, str) and is_reference(value):
                try:
                    value = resolve(value, path.parent)  # checked here, kept as the reference
                except SecretError as exc:
                    raise error([*comps, key], f"{who}{key}: {exc}") from None
            if key == "url" and isinstance(value, str) and not _URL.match(value):
                shown = given["url"] if is_reference(given["url"]) else url_shape(value)
                raise error([*comps, key], f"{who}url must be an http:// or https:// URL, not {shown}")
        durations = {}
        for key, default in (("min_duration", 30.0), ("group_wait", 10.0)):
            raw = given.get(key)
            seconds = default if raw is None else parse_duration(raw)
            if seconds is None:
                raise error([*comps, key], f"{who}{key} must be a duration from 0 to 24h like \"30s\" or \"2m\", "
                                           f"not {raw!r}")
            durations[key] = seconds
        quiet = None
        if row.quiet_hours is not None:
            quiet = parse_quiet_hours(row.quiet_hours)
            if quiet is None:
                raise error([*comps, "quiet_hours"], f"{who}quiet_hours must be \"HH:MM-HH:MM\" (local time, like "
                                                     f"\"22:00-07:00\"), not {row.quiet_hours!r}")
        to = (row.to,) if isinstance(row.to, str) else tuple(row.to or ())
        for address in (*to, *((row.from_,) if row.from_ else ())):
            if not _ADDRESS.match(address):
                raise error([*comps, "to" if address in to else "from"], f"{who}{address!r} is not an email address")
        statuses = (row.statuses,) if isinstance(row.statuses, str) else tuple(row.statuses or ())
        instances = (row.instances,) if isinstance(row.instances, str) else tuple(row.instances or ())
        tags = (row.tags,) if isinstance(row.tags, str) else tuple(row.tags or ())
        line = line_of(comps)
        out.append(NotifySpec(
            type=row.type, name=name, url=row.url or "", topic=row.topic or "", token=row.token or "",
            chat_id=str(row.chat_id) if row.chat_id is not None else "", host=row.host or "",
            port=row.port or (587 if row.starttls is not False else 25), starttls=row.starttls is not False,
            user=row.user or "", password=row.password or "", sender=row.from_ or "", to=to,
            min_duration=durations["min_duration"], group_wait=durations["group_wait"],
            statuses=statuses or NotifySpec.statuses, instances=instances, tags=tags, quiet_hours=quiet,
            max_per_hour=row.max_per_hour or NotifySpec.max_per_hour, send_resolved=row.send_resolved is not False,
            base=str(path.parent), source=f"{path}:{line}" if line else str(path)))
    return out


def url_shape(url: str) -> str:
    """A URL as an error may show it: what comes before its path, less any ``user:password@`` (the rest may hold
    a token)."""
    scheme, sep, rest = url.partition("://")
    netloc = re.split(r"[/?#]", rest if sep else scheme, maxsplit=1)[0].rsplit("@", 1)[-1]
    return repr(f"{scheme}://{netloc}" if sep else netloc[:40])
