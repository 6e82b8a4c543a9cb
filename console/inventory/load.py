"""``load_fleet``: the fleet file read, checked against :mod:`schema`, and turned into records.

Three steps, each with ``file:line: reason`` errors: TOML (``toml_text``), shape (msgspec, whose error
path is mapped back to a line by ``LineIndex``), then what a type cannot say (regexes compile, and those run
over log lines cannot backtrack for ever; names are unique and one printable line; an import says what to
import), and the imports are read.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import re
import string
import tomllib
import warnings
from pathlib import Path
from typing import Any

import msgspec
from msgspec.inspect import DictType, ListType, Metadata, StructType, UnionType, type_info

from console.inventory import schema, toml_text
from console.inventory.errors import ConfigError, read_capped
from console.inventory.imports import read_ssh_config, read_vastai_json
from console.inventory.notify_rows import notify_specs
from console.inventory.patterns import backtracks
from console.inventory.probes import BUILTIN_PROBE_KEYS
from console.inventory.records import (
    ActionsSpec,
    BenchmarkSpec,
    Fleet,
    ImportSpec,
    Instance,
    ProbeSpec,
    SignatureSpec,
    SourceSpec,
    duration_seconds,
)
from console.inventory.schema import AlertSpec, BenchmarkRow, FleetFile, ImportRow, InstanceRow

DEFAULT_FLEET_PATHS = ("fleet.toml", "~/.config/fleet-console/fleet.toml")
VASTAI_COMMAND = ("vastai", "show", "instances", "--raw")
_ARRAYS = {"instance", "probe", "signature", "import", "alert", "notify"}
_INSTANCE_FIELDS = set(Instance.__dataclass_fields__) - {"benchmark", "agent_extra", "source"}
_FLEET_WIDE = ("currency",)  # [defaults] keys that are the fleet's, not each instance's
_LISTS = ("tags", "logs", "watch_dirs", "jump")


def find_fleet_file(explicit: str | None) -> Path | None:
    """The fleet file to use: ``--fleet``, else ./fleet.toml, else the user's config dir."""
    if explicit:
        return Path(explicit).expanduser()
    for candidate in DEFAULT_FLEET_PATHS:
        p = Path(candidate).expanduser()
        if p.exists():
            return p
    return None


STOP_PLACEHOLDERS = ("vast_id", "name", "host")


def placeholder_problem(arg: str) -> str | None:
    """Why one argument of ``[actions] stop`` is not a template ``str.format`` fills with the instance's
    ``{vast_id}``, ``{name}``, ``{host}`` alone (None when it is): no other field, no attribute, index,
    conversion or format spec (``{{``/``}}`` are literal braces)."""
    use = "use {vast_id}, {name} or {host}; {{ and }} for a literal brace"
    try:
        fields = [(f, conv, spec) for _t, f, spec, conv in string.Formatter().parse(arg) if f is not None]
    except ValueError:
        return f"a brace without its pair ({use})"
    for field, conv, spec in fields:
        if field not in STOP_PLACEHOLDERS or conv or spec:
            text = "{" + field + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            return f"unknown placeholder {text} ({use})"
    return None


def load_fleet(path: str | Path) -> Fleet:
    """Read and validate a fleet file (and the host lists it imports).

    The cyclic GC is paused meanwhile: loading makes many small acyclic objects, and its collections
    over them were a quarter of the time for a large fleet (and grew faster than the fleet).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _load(Path(path).expanduser())
    finally:
        if was_enabled:
            gc.enable()


def _load(path: Path) -> Fleet:
    text = read_capped(path, "fleet file")
    try:
        data, lines = toml_text.parse(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        line = int(m.group(1)) if m else getattr(exc, "lineno", None)
        if line is None and "(at end of document)" in msg:
            line = text.count("\n") + (0 if text.endswith("\n") else 1)
        reason = "invalid TOML: " + re.sub(r"\s*\(at (line|end of document).*\)$", "", msg)
        raise ConfigError(path, line, reason) from None
    except RecursionError:
        raise ConfigError(path, None, "invalid TOML: nested too deep") from None
    try:
        doc = msgspec.convert(data, FleetFile, strict=True)
    except msgspec.ValidationError as exc:
        try:
            error = _explain(str(exc), data, path, lines)
        except Exception:  # a message shape not foreseen: still one line, never a traceback
            error = ConfigError(path, None, str(exc))
        raise error from None
    return _Builder(path, lines, doc).fleet()


# -- msgspec's error, explained ---------------------------------------------------------------------

_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")


def _parse_path(at: str) -> list[Any]:
    """``$.instance[3].port`` -> ``["instance", 3, "port"]`` (stops at ``[...]``, a dict value)."""
    out: list[Any] = []
    for m in _STEP.finditer(at, 1):
        if m.group(0) == "[...]":
            break
        out.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
    return out


def _struct_of(t: Any) -> StructType | None:
    while True:
        if isinstance(t, StructType):
            return t
        if isinstance(t, Metadata):
            t = t.type
        elif isinstance(t, (ListType, DictType)):
            t = t.item_type if isinstance(t, ListType) else t.value_type
        elif isinstance(t, UnionType):
            found = [s for s in (_struct_of(u) for u in t.types) if s is not None]
            return found[0] if found else None
        else:
            return None


def _description(t: Any) -> str | None:
    if isinstance(t, Metadata):
        desc = (t.extra_json_schema or {}).get("description")
        return desc if isinstance(desc, str) else _description(t.type)
    if isinstance(t, UnionType):
        for u in t.types:
            desc = _description(u)
            if desc:
                return desc
    if isinstance(t, ListType):
        return _description(t.item_type)
    return None


_ROOT = type_info(FleetFile)
_DESCRIPTIONS = {**schema.DESCRIPTIONS, "tags": "a list of strings"}  # (a string is refused: see _Builder.text)


def _walk(comps: list[Any], into: bool) -> tuple[StructType, Any]:
    """The struct at ``comps`` (``into``) or holding its last key, and that key's field (None: not one)."""
    assert isinstance(_ROOT, StructType)
    struct: StructType = _ROOT
    found: Any = None
    keys = [c for c in comps if isinstance(c, str)]
    for n, comp in enumerate(keys, 1):
        found = next((f for f in struct.fields if f.encode_name == comp), None)
        if found is None:
            break
        child = _struct_of(found.type)
        if child is not None and (into or n < len(keys)):
            struct = child
    return struct, found


def _value_at(data: Any, comps: list[Any]) -> Any:
    for comp in comps:
        try:
            data = data[comp]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _context(data: dict[str, Any], comps: list[Any]) -> tuple[str, list[str]]:
    """How a message names where it is ("instance 'a': ") and the key path inside that."""
    keys = [c for c in comps if isinstance(c, str)]
    if len(comps) >= 2 and comps[0] in _ARRAYS and isinstance(comps[1], int):
        row = _value_at(data, comps[:2])
        label = row.get("name") or row.get("code") if isinstance(row, dict) else None
        who = f"{comps[0]} {label!r}" if isinstance(label, str) else f"{comps[0]} #{comps[1] + 1}"
        return f"{who}: ", keys[1:]
    return "", keys


def _explain(error: str, data: dict[str, Any], path: Path, lines: toml_text.LineIndex) -> ConfigError:
    msg, _, at = error.partition(" - at `")
    at = at.rstrip("`")
    if at.startswith("key` in `"):
        at = at[len("key` in `"):]
    comps = _parse_path(at)
    prefix, keys = _context(data, comps)
    m = re.match(r"Object (contains unknown|missing required) field `(.*)`$", msg)
    struct, found = _walk(comps, into=m is not None)
    if m is not None and m.group(1) == "contains unknown":
        key = m.group(2)
        names = [f.encode_name for f in struct.fields]
        table = schema.TABLE_WORDS.get(struct.cls.__name__, "")
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = schema.MISPLACED.get((table, key)) or (
            f"did you mean {close[0]!r}?" if close else f"expected one of {', '.join(sorted(names))}"
        )
        return ConfigError(path, lines.line([*comps, key]), f"{prefix}unknown {table} key {key!r} ({hint})")
    if m is not None:
        what = " ".join(keys) or schema.TABLE_WORDS.get(struct.cls.__name__, "table")
        if not keys and comps and isinstance(comps[-1], int):
            what = str(comps[0])
        return ConfigError(path, lines.line(comps), f"{prefix.rstrip(': ') or what} needs {m.group(2)}")
    name = ".".join(keys)
    field_name = keys[-1] if keys else ""
    desc = _DESCRIPTIONS.get(field_name) or (_description(found.type) if found is not None else None)
    value_comps = comps[: max(i for i, c in enumerate(comps) if isinstance(c, str)) + 1] if keys else comps
    value = _value_at(data, value_comps)
    reason = f"{prefix}{name} must be {desc}, not {_short(value)}" if desc else f"{prefix}{name}: {msg}"
    return ConfigError(path, lines.line(comps), reason)


# -- records from the checked document -------------------------------------------------------------


_ONE_LINE = ("name", "host", "user", "tags")


def _origin(source: str) -> tuple[str, int | None]:
    """``file:line`` (and a vast.ai id after it) as the file and the line an error names."""
    m = re.fullmatch(r"(.*?):(\d+)(?: \(id .*\))?", source)
    return (m.group(1), int(m.group(2))) if m else (source, None)


def _given(row: msgspec.Struct | None) -> dict[str, Any]:
    """The keys the file gave (the Structs omit defaults, i.e. None, in ``to_builtins``)."""
    return {} if row is None else msgspec.to_builtins(row)


def _strings(value: str | list[str] | None, default: tuple[str, ...] = ()) -> tuple[str, ...]:
    if value is None:
        return default
    return (value,) if isinstance(value, str) else tuple(value)


class _Builder:
    def __init__(self, path: Path, lines: toml_text.LineIndex, doc: FleetFile) -> None:
        self.path, self.lines, self.doc = path, lines, doc
        self.defaults = _given(doc.defaults)
        self.fleet_wide = {k: self.defaults.pop(k) for k in _FLEET_WIDE if k in self.defaults}
        self.checked_patterns: set[tuple[str, bool]] = set()

    def error(self, comps: list[Any], reason: str) -> ConfigError:
        return ConfigError(self.path, self.lines.line(comps), reason)

    def regex(self, pattern: str, comps: list[Any], what: str, who: str = "", on_logs: bool = False) -> None:
        """``pattern`` compiles; ``on_logs`` (run over log lines): it cannot backtrack for ever either."""
        if (pattern, on_logs) in self.checked_patterns:
            return
        try:
            with warnings.catch_warnings():  # "possible nested set" and the like: valid today
                warnings.simplefilter("ignore")
                re.compile(pattern)
                slow = on_logs and backtracks(pattern)
        except re.error as exc:
            raise self.error(comps, f"{who}bad {what} {pattern!r}: {exc}") from None
        except (RecursionError, OverflowError, ValueError) as exc:
            raise self.error(comps, f"{who}bad {what} {pattern!r}: {type(exc).__name__}") from None
        if slow:
            raise self.error(comps, f"{who}{what} {pattern!r} has a repeat inside a repeat that can match the same "
                                    "text: it can backtrack for ever on a long line (write it so that each part "
                                    "matches what the other cannot, e.g. (a+b)+ for (a+)+)")
        self.checked_patterns.add((pattern, on_logs))

    def benchmark(self, row: BenchmarkRow | None, base: BenchmarkSpec, comps: list[Any], who: str) -> BenchmarkSpec:
        if row is None:
            return base
        given = _given(row)
        for key in ("match", "entrypoint"):
            for pattern in _strings(given.get(key)):
                self.regex(pattern, [*comps, key], "benchmark pattern", who)
        if "progress" in given:
            self.regex(given["progress"], [*comps, "progress"], "benchmark.progress regex", who, on_logs=True)
        start = given.get("start", base.start)
        env = given.get("env")
        return BenchmarkSpec(
            start=tuple(start) if isinstance(start, list) else start,
            match=_strings(given.get("match"), base.match),
            entrypoint=_strings(given.get("entrypoint"), base.entrypoint),
            log=given.get("log", base.log),
            cwd=given.get("cwd", base.cwd),
            stop_timeout=float(given.get("stop_timeout", base.stop_timeout)),
            env=tuple(sorted((k, str(v)) for k, v in env.items())) if env is not None else base.env,
            progress=given.get("progress", base.progress),
            kind=given.get("kind", base.kind),
        )

    def text(self, fields: dict[str, Any], comps: list[Any], origin: str | None, who: str) -> None:
        """Names, hosts, users and tags (``fields`` over ``[defaults]``) are one printable line; ``tags`` a list."""
        for key in _ONE_LINE:
            values = fields.get(key, self.defaults.get(key))
            where = [*comps, key] if key in fields else ["defaults", key]
            if key == "tags" and isinstance(values, str):
                raise self.error(where, f"{who}tags must be a list of strings like [\"gpu\"], not {_short(values)}")
            for value in values if isinstance(values, (list, tuple)) else (values,):
                if isinstance(value, str) and not value.isprintable():
                    reason = f"{who}{key} must be one printable line, not {_short(value)}"
                    if origin is not None and key in fields:  # an imported host: its own file and line
                        raise ConfigError(*_origin(origin), reason)
                    raise self.error(where, reason)

    def instance(
        self, fields: dict[str, Any], bench: BenchmarkSpec, source: str, comps: list[Any], imported: str | None = None
    ) -> Instance:
        """``fields`` over ``[defaults]``; ``imported`` names the import the fields came from (then filtered)."""
        merged = {**self.defaults, **fields}
        name = merged.get("name")
        if not isinstance(name, str) or not name.strip():
            raise self.error(comps, "instance needs a name")
        name = name.strip()
        who = f"instance {_short(name)}: " if name.isprintable() else ""
        self.text(fields, comps, source if imported else None, who)
        transport = merged.get("transport", "ssh")
        host = merged.get("host") or merged.get("ssh_config") or ("localhost" if transport == "local" else None)
        if not host:
            raise self.error(comps, f"instance {name!r} needs a host (or ssh_config = \"alias\")")
        values = merged if imported is None else {k: v for k, v in merged.items() if k in _INSTANCE_FIELDS}
        for key in _LISTS:
            if key in values:
                values[key] = _strings(values[key])
        if values.get("vast_id") is not None:
            values["vast_id"] = str(values["vast_id"])
        if "price_per_hour" in fields and imported is None:  # its own value, then the import's, then [defaults]
            values["price_source"] = f"{self.path.name}:{self.lines.line([*comps, 'price_per_hour'])}"
        elif "price_per_hour" not in fields and "price_per_hour" in self.defaults:
            values["price_source"] = f"{self.path.name}:{self.lines.line(['defaults', 'price_per_hour'])} [defaults]"
        return Instance(**{**values, "name": name, "host": host, "benchmark": bench, "source": source})

    def fleet(self) -> Fleet:
        doc, path = self.doc, self.path
        bench = self.benchmark(doc.benchmark, BenchmarkSpec(), ["benchmark"], "")
        instances: list[Instance] = []
        headers = self.lines.headers
        rows: list[dict[str, Any]] = msgspec.to_builtins(doc.instance)  # one C call: only the given keys
        for i, (row, fields) in enumerate(zip(doc.instance, rows, strict=True)):
            comps: list[Any] = ["instance", i]
            own = bench
            if fields.pop("benchmark", None) is not None:
                own = self.benchmark(row.benchmark, bench, [*comps, "benchmark"], f"instance {row.name!r}: ")
            line = headers.get(("instance", i))
            instances.append(self.instance(fields, own, f"{path}:{line}" if line else str(path), comps))
        imports: list[ImportSpec] = []
        for i, imp in enumerate(doc.imports):
            instances.extend(self.imported(imp, ["import", i], bench, imports))
        self.unique(instances)
        signatures = self.signatures()
        if signatures:  # every instance's agent gets the fleet's own rows (rare: no copy otherwise)
            sig_rows = tuple(signatures)
            instances = [dataclasses.replace(inst, signatures=sig_rows) for inst in instances]
        fleet = Fleet(
            instances=instances,
            probes=self.probes(),
            source=str(path),
            signatures=signatures,
            imports=imports,
            sources=self.sources(),
            alerts=self.alerts(),
            notify=notify_specs(doc.notify, path, self.error, lambda comps: self.lines.headers.get(tuple(comps))),
            currency=self.fleet_wide.get("currency", "$"),
            actions=self.actions(),
        )
        return fleet

    def actions(self) -> ActionsSpec:
        """``[actions]``: the stop command (a template checked for its placeholders) and the automatic stop."""
        row = self.doc.actions
        if row is None:
            return ActionsSpec()
        stop = tuple(row.stop or ())
        if stop and "/" not in stop[0] and stop[0].split() != [stop[0]]:  # "vastai stop" as one item
            raise self.error(["actions", "stop"], f"actions.stop[0] {stop[0]!r}: the program alone, one argument a "
                                                  'list item (["vastai", "stop", "instance", "{vast_id}"])')
        for i, arg in enumerate(stop):
            problem = placeholder_problem(arg)
            if problem is not None:
                raise self.error(["actions", "stop"], f"actions.stop[{i}] {arg!r}: {problem}")
        after = duration_seconds(row.stop_idle_after) if row.stop_idle_after is not None else None
        if after is not None and not stop:
            raise self.error(["actions", "stop_idle_after"], "actions.stop_idle_after needs actions.stop = [...] "
                                                             "(the command that stops an instance)")
        if after is not None and not 10 <= after <= 30 * 86400:
            raise self.error(["actions", "stop_idle_after"],
                             f"actions.stop_idle_after must be from 10s to 30d, not {row.stop_idle_after!r}")
        return ActionsSpec(stop=stop, stop_idle_after=after, source=f"{self.path}:{self.lines.line(['actions'])}")

    def imported(
        self, imp: ImportRow, comps: list[Any], bench: BenchmarkSpec, specs: list[ImportSpec]
    ) -> list[Instance]:
        given = _given(imp)
        kinds = [k for k in ("ssh_config", "vastai_json", "vastai", "command") if k in given]
        if len(kinds) != 1:
            what = "import needs one of" if not kinds else f"import has {' and '.join(kinds)}; use one of"
            raise self.error(comps, f"{what} ssh_config = PATH, vastai_json = PATH, vastai = true, command = [...]")
        kind = kinds[0]
        for key, allowed in (("hosts", ("ssh_config",)), ("refresh", ("vastai", "command")),
                             ("running_only", ("vastai_json", "vastai", "command"))):
            if key in given and kind not in allowed:
                raise self.error([*comps, key], f"import #{comps[1] + 1}: {key} does not apply to {kind} imports")
        self.text(given, comps, None, f"import #{comps[1] + 1}: ")
        tags = _strings(given.get("tags"))
        running_only = given.get("running_only", True)
        source_line = self.lines.line(comps)
        if kind in ("vastai", "command"):
            if kind == "vastai" and not given["vastai"]:
                reason = f"import #{comps[1] + 1}: vastai = false imports nothing; remove the import"
                raise self.error([*comps, "vastai"], reason)
            command = VASTAI_COMMAND if kind == "vastai" else tuple(given["command"])
            specs.append(ImportSpec(command=command, refresh=float(given.get("refresh", 60.0)), tags=tags,
                                    running_only=running_only, source=f"{self.path}:{source_line}"))
            return []
        source = (self.path.parent / Path(given[kind]).expanduser()).resolve()
        if kind == "ssh_config":
            hosts = read_ssh_config(source, _strings(given.get("hosts"), ("*",)))
        else:
            hosts = read_vastai_json(source, running_only=running_only)
        out = []
        for host in hosts:
            host["tags"] = [*host.get("tags", ()), *tags]
            origin = host.pop("source")
            out.append(self.instance(host, bench, origin, comps, imported=kind))
        return out

    def unique(self, instances: list[Instance]) -> None:
        seen: dict[str, str] = {}
        for inst in instances:
            first = seen.setdefault(inst.name, inst.source)
            if first is not inst.source:
                raise ConfigError(*_origin(inst.source), f"duplicate instance name {inst.name!r} (first at {first})")

    def probes(self) -> list[ProbeSpec]:
        probes: list[ProbeSpec] = []
        keys: dict[str, str] = {}
        for i, row in enumerate(self.doc.probe):
            if row.key in BUILTIN_PROBE_KEYS:
                reason = f"probe {row.name!r}: key {row.key!r} belongs to a built-in probe (use a letter or 6-9)"
                raise self.error(["probe", i, "key"], reason)
            if row.key in keys:
                raise self.error(["probe", i, "key"], f"probe key {row.key!r} already used by {keys[row.key]!r}")
            keys[row.key] = row.name
            timeout = float(row.timeout) if row.timeout is not None else 20.0
            probes.append(ProbeSpec(name=row.name, key=row.key, command=row.command, timeout=timeout,
                                    title=row.title if row.title is not None else row.name))
        return probes

    def signatures(self) -> list[SignatureSpec]:
        out = []
        for i, row in enumerate(self.doc.signature):
            self.regex(row.pattern, ["signature", i, "pattern"], "pattern", f"signature {row.code!r}: ", on_logs=True)
            line = self.lines.headers.get(("signature", i))
            out.append(SignatureSpec(code=row.code, severity=row.severity, pattern=row.pattern,
                                     explanation=row.explanation, label=row.label,
                                     source=f"{self.path}:{line}" if line else str(self.path)))
        return out

    def sources(self) -> list[SourceSpec]:
        """``[[source]]`` rows: one Prometheus each (a URL twice would double every figure's cost)."""
        out: list[SourceSpec] = []
        seen: dict[str, int] = {}
        for i, row in enumerate(self.doc.source):
            url = row.prometheus.rstrip("/")
            if url in seen:
                raise self.error(["source", i, "prometheus"],
                                 f"source #{i + 1}: {url} is already source #{seen[url] + 1}")
            seen[url] = i
            given = _given(row)
            interval = float(given.get("interval", 5.0))
            line = self.lines.headers.get(("source", i))
            out.append(SourceSpec(prometheus=url, host_label=given.get("host_label", "Hostname"), interval=interval,
                                  timeout=float(given.get("timeout", min(interval, 5.0))),
                                  source=f"{self.path}:{line}" if line else str(self.path),
                                  ssh=given.get("ssh", "on_demand")))
        return out

    def alerts(self) -> list[AlertSpec]:
        out: list[AlertSpec] = []
        seen: dict[str, int] = {}
        for i, row in enumerate(self.doc.alert):
            comps: list[Any] = ["alert", i]
            who = f"alert {row.name!r}: "
            if row.name in seen:
                reason = f"duplicate alert name {row.name!r} (first is alert #{seen[row.name]})"
                raise self.error([*comps, "name"], reason)
            seen[row.name] = i + 1
            statuses, verdicts = _strings(row.statuses), _strings(row.verdicts)  # type: ignore[arg-type]
            idle_for = duration_seconds(row.idle_for) if row.idle_for is not None else None
            health = _strings(row.gpu_health)  # type: ignore[arg-type]
            if idle_for is not None and (statuses or verdicts):
                raise self.error(comps, f"{who}idle_for is a rule of its own: leave out statuses and verdicts")
            if health and (statuses or verdicts or idle_for is not None):
                raise self.error([*comps, "gpu_health"], f"{who}gpu_health is a rule of its own: leave out "
                                                          "statuses, verdicts and idle_for (write two rules)")
            if row.price_above is not None and idle_for is None:
                raise self.error([*comps, "price_above"], f"{who}price_above needs idle_for = \"20m\"")
            if not statuses and not verdicts and idle_for is None and not health:
                raise self.error(comps, f"{who}needs statuses = [...], verdicts = [...], idle_for = \"20m\" or "
                                        "gpu_health = [...] (what to alert on)")
            webhooks = _strings(row.webhook)
            if not webhooks and not row.bell:
                raise self.error(comps, f"{who}needs webhook = \"http://...\" or bell = true (where to send it)")
            line = self.lines.headers.get(("alert", i))
            out.append(AlertSpec(
                name=row.name, statuses=statuses, verdicts=verdicts, instances=_strings(row.instances),
                tags=_strings(row.tags), for_seconds=float(row.for_ or 0.0),
                repeat=float(row.repeat) if row.repeat is not None else AlertSpec.repeat,
                webhooks=webhooks, bell=bool(row.bell), severity=row.severity or "warning",
                send_resolved=row.send_resolved is not False, summary=row.summary or "",
                source=f"{self.path}:{line}" if line else str(self.path),
                idle_for=idle_for, price_above=float(row.price_above or 0.0), gpu_health=tuple(dict.fromkeys(health)),
            ))
        return out


__all__ = ["DEFAULT_FLEET_PATHS", "InstanceRow", "find_fleet_file", "load_fleet"]
