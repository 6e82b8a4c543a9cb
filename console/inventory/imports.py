"""Hosts from outside the fleet file: an OpenSSH client config and vast.ai's instance list.

Each reader returns plain dicts of instance fields (``name``, ``host``, ``port``, ... and ``source``,
where the host came from: ``file:line``) after checking every value, so a bad entry is one
:class:`ConfigError` naming the file and the line (a vast.ai JSON's: the line of the key, and its JSON path
like ``[3].label``), and the vast.ai id and label. Text fields must be one printable line.
"""

from __future__ import annotations

import bisect
import fnmatch
import glob
import json
import re
import shlex
from pathlib import Path
from typing import Any

from console.inventory.errors import ConfigError, read_capped

_MAX_INCLUDE_DEPTH = 16  # as OpenSSH's READCONF_MAX_DEPTH


# -- ~/.ssh/config ---------------------------------------------------------------------------------


def _ssh_lines(path: Path, depth: int, where: tuple[Path, int] | None) -> list[tuple[str, list[str], Path, int]]:
    """``(keyword, args, file, line)`` for every directive, Include expanded in place."""
    if depth > _MAX_INCLUDE_DEPTH:
        assert where is not None
        raise ConfigError(where[0], where[1], f"Include nested more than {_MAX_INCLUDE_DEPTH} deep (an Include loop?)")
    text = read_capped(path, "ssh config")
    out: list[tuple[str, list[str], Path, int]] = []
    for no, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        first = line.split(None, 1)[0]
        if "=" in first:  # Keyword=value
            line = line.replace("=", " ", 1)
        try:
            parts = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ConfigError(path, no, f"cannot parse ssh config line: {exc}") from None
        if not parts:
            continue
        keyword, args = parts[0].lower(), parts[1:]
        if keyword == "include":
            for arg in args:
                pattern = Path(arg).expanduser()
                if not pattern.is_absolute():  # OpenSSH: relative to ~/.ssh; here: to the including file
                    pattern = path.parent / pattern
                for found in sorted(glob.glob(str(pattern))):
                    out.extend(_ssh_lines(Path(found), depth + 1, (path, no)))
            continue
        out.append((keyword, args, path, no))
    return out


def _is_concrete(name: str) -> bool:
    return not any(c in name for c in "*?!")


def _host_matches(name: str, patterns: list[str]) -> bool:
    """OpenSSH ``Host`` matching: any positive pattern matches and no negated one does."""
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if fnmatch.fnmatchcase(name, pattern[1:]):
                return False
        elif fnmatch.fnmatchcase(name, pattern):
            matched = True
    return matched


def _int_arg(keyword: str, value: str, lo: int, hi: int, path: Path, no: int, name: str) -> int:
    if not (value.isascii() and value.isdigit()) or not lo <= int(value) <= hi:
        raise ConfigError(path, no, f"host {name!r}: {keyword} must be a number from {lo} to {hi}, not {value!r}")
    return int(value)


def read_ssh_config(path: Path, patterns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Concrete ``Host`` entries of an OpenSSH client config whose names match ``patterns``.

    Values are taken as ssh takes them: the first one found wins, from every ``Host`` block that
    matches the name (wildcard blocks included); ``Match`` blocks are skipped (their conditions need a
    live connection); ``Include`` is followed. Hosts named only by patterns (``Host *``) are not
    imported, and an import that finds none is an error.
    """
    directives = _ssh_lines(path, 0, None)
    blocks: list[tuple[list[str] | None, list[tuple[str, list[str], Path, int]]]] = [([ "*"], [])]
    literal: dict[str, list[int]] = {}  # host name -> blocks that name it without wildcards
    wildcard: list[int] = [0]
    first_seen: dict[str, tuple[Path, int]] = {}
    for keyword, args, file, no in directives:
        if keyword == "host":
            index = len(blocks)
            blocks.append((args, []))
            if all(_is_concrete(a) for a in args):
                for name in args:
                    literal.setdefault(name, []).append(index)
            else:
                wildcard.append(index)
            for name in args:
                if _is_concrete(name) and any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    first_seen.setdefault(name, (file, no))
        elif keyword == "match":
            blocks.append((None, []))
        else:
            blocks[-1][1].append((keyword, args, file, no))
    if not first_seen:
        raise ConfigError(path, None, f"ssh config has no concrete Host entries matching {', '.join(patterns)}"
                                      " (Host patterns like * are not imported)")
    hosts = []
    for name, (file, no) in first_seen.items():
        options: dict[str, tuple[list[str], Path, int]] = {}
        for index in sorted({*literal.get(name, ()), *wildcard}):
            block_patterns, lines = blocks[index]
            if block_patterns is None or not _host_matches(name, block_patterns):
                continue
            for keyword, args, opt_file, opt_no in lines:
                if args:
                    options.setdefault(keyword, (args, opt_file, opt_no))
        hosts.append(_ssh_entry(name, options, f"{file}:{no}"))
    return hosts


def _ssh_entry(name: str, options: dict[str, tuple[list[str], Path, int]], source: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "host": name, "tags": ["ssh-config"], "source": source}
    for keyword, (args, file, no) in options.items():
        value = args[0]
        if keyword == "hostname":
            entry["host"] = value.replace("%h", name).replace("%%", "%")
        elif keyword == "port":
            entry["port"] = _int_arg("Port", value, 1, 65535, file, no, name)
        elif keyword == "user":
            entry["user"] = value
        elif keyword == "identityfile":
            entry["key"] = value
        elif keyword == "userknownhostsfile" and value.lower() != "none":
            entry["known_hosts"] = value
        elif keyword == "proxyjump" and value.lower() != "none":
            entry["jump"] = [hop for hop in value.split(",") if hop]
        elif keyword == "connecttimeout":
            entry["connect_timeout"] = float(_int_arg("ConnectTimeout", value, 1, 300, file, no, name))
        elif keyword == "serveraliveinterval":
            entry["keepalive"] = float(_int_arg("ServerAliveInterval", value, 0, 3600, file, no, name))
    return entry


# -- vast.ai ---------------------------------------------------------------------------------------


def read_vastai_json(path: Path, running_only: bool = True) -> list[dict[str, Any]]:
    """Hosts from a saved ``vastai show instances --raw`` JSON array."""
    text = read_capped(path, "vast.ai JSON")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ConfigError(path, None, "invalid JSON: nested too deep") from None
    return parse_vastai_instances(data, str(path), running_only=running_only, lines=json_lines(text))


_WS = re.compile(r"[ \t\n\r]*")


def json_lines(text: str) -> dict[tuple[Any, ...], int]:
    """Lines in a (valid) vast.ai JSON: ``(i,)`` -> where instance ``i`` starts, ``(i, key)`` -> its key's line."""
    newlines = [m.start() for m in re.finditer("\n", text)]
    out: dict[tuple[Any, ...], int] = {}
    decoder = json.JSONDecoder()

    def ws(pos: int, sep: str = "") -> int:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        return ws(pos + 1) if sep and text.startswith(sep, pos) else pos

    def line(pos: int) -> int:
        return bisect.bisect(newlines, pos) + 1

    def members(pos: int, at: tuple[Any, ...] | None) -> int:
        """Past the object at ``pos``; its keys' lines noted under ``at``, or its "instances" array read."""
        pos = ws(pos + 1)
        while not text.startswith("}", pos):
            key, end = decoder.raw_decode(text, pos)
            if at is not None:
                out[(*at, key)] = line(pos)
            pos = ws(ws(end), ":")
            if at is None and key == "instances" and text.startswith("[", pos):
                array(pos)
            pos = ws(ws(decoder.raw_decode(text, pos)[1]), ",")
        return pos + 1

    def array(pos: int) -> None:
        pos, i = ws(pos + 1), 0
        while not text.startswith("]", pos):
            out[(i,)] = line(pos)
            end = members(pos, (i,)) if text.startswith("{", pos) else decoder.raw_decode(text, pos)[1]
            pos, i = ws(ws(end), ","), i + 1

    start = ws(0)
    try:
        if text.startswith("{", start):  # {"instances": [...]}
            members(start, None)
        elif text.startswith("[", start):
            array(start)
    except (ValueError, IndexError, RecursionError):  # (the file parsed: only the lines are lost)
        pass
    return out


class _Item:
    """One instance of a vast.ai list, for its checks: errors name the line and the JSON path."""

    def __init__(self, item: dict[str, Any], index: int, source: str, lines: dict[tuple[Any, ...], int]) -> None:
        self.item, self.index, self.source, self.lines, self.who = item, index, source, lines, f"instance #{index}"

    def error(self, key: str | None, reason: str) -> ConfigError:
        line = self.lines.get((self.index, key)) or self.lines.get((self.index,))
        path = f"[{self.index}]" + (f".{key}" if key else "")
        return ConfigError(self.source, line, f"{self.who}: {path} {reason}")

    def int(self, key: str, lo: int, hi: int) -> int | None:
        value = self.item.get(key)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise self.error(key, f"must be a number from {lo} to {hi}, not {_short(value)}")
        return value

    def price(self, key: str) -> float | None:
        """A price per hour (``dph_total``): a number from 0 to 10000, or absent."""
        value = self.item.get(key)
        if value is None:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 10000:
            raise self.error(key, f"must be a price per hour from 0 to 10000, not {_short(value)}")
        return float(value)

    def str(self, key: str) -> str | None:
        value = self.item.get(key)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, not {_short(value)}")
        if not value.isprintable():
            raise self.error(key, f"must be one printable line, not {_short(value)}")
        return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_vastai_instances(
    data: Any, source: str, running_only: bool = True, lines: dict[tuple[Any, ...], int] | None = None
) -> list[dict[str, Any]]:
    """Instance fields from ``vastai show instances --raw`` output (already JSON-decoded).

    Reads the real ``--raw`` fields: ``id``, ``label``, ``ssh_host`` (else ``public_ipaddr``),
    ``ssh_port``, ``actual_status``, ``gpu_name``, ``num_gpus`` (which becomes the expected ``gpus``),
    ``dph_total`` (dollars per hour: ``price_per_hour``, when present). Each dict holds ``name``, ``host``,
    ``port``, ``tags``, ``gpus``, ``source``, ``vast_id`` (``{vast_id}`` in [actions]) and ``status``
    for the runtime refresh. ``source`` names the file or command, ``lines`` (``json_lines``)
    where each instance is in it, for errors.
    """
    if isinstance(data, dict) and isinstance(data.get("instances"), list):
        data = data["instances"]
    if not isinstance(data, list):
        kind = type(data).__name__.replace("dict", "object").replace("NoneType", "null")
        raise ConfigError(source, None, f"expected a JSON array of instances (vastai show instances --raw), not {kind}")
    hosts = []
    for i, raw in enumerate(data):
        if not isinstance(raw, dict):
            line = (lines or {}).get((i,))
            raise ConfigError(source, line, f"instance #{i} is not an object but {_short(raw)}")
        host = _vast_host(_Item(raw, i, source, lines or {}), running_only)
        if host is not None:
            hosts.append(host)
    return hosts


def _vast_host(item: _Item, running_only: bool) -> dict[str, Any] | None:
    """One instance's fields (None: not running, and only running ones wanted)."""
    vast_id = item.item.get("id")
    if not isinstance(vast_id, (int, str)) or isinstance(vast_id, bool) or not str(vast_id).isprintable() \
            or vast_id == "":
        raise item.error("id", f"must be a number or a string, not {_short(vast_id)}")
    label = item.item.get("label")
    shown = isinstance(label, str) and label and label.isprintable()
    item.who = f"instance {str(vast_id)[:40]}" + (f" ({_short(label)})" if shown else "")
    label = item.str("label")
    status = item.str("actual_status")
    if running_only and status not in (None, "running"):
        return None
    host = item.str("ssh_host") or item.str("public_ipaddr")
    port = item.int("ssh_port", 1, 65535)
    if host is None or port is None:
        if host is None:
            raise item.error("ssh_host", "(or public_ipaddr) is missing")
        raise item.error("ssh_port", "is missing")
    gpus = item.int("num_gpus", 0, 1024)
    gpu_name = item.str("gpu_name")
    tags = ["vast"]
    if gpu_name:
        tags.append(f"{gpus or 1}x {gpu_name}")
    line = item.lines.get((item.index,))
    price = item.price("dph_total")
    return {
        **({"price_per_hour": price, "price_source": "vast.ai dph_total"} if price is not None else {}),
        "name": label or f"vast-{vast_id}",
        "host": host,
        "port": port,
        "tags": tags,
        "gpus": gpus,
        "source": f"{item.source}:{line} (id {vast_id})" if line else f"{item.source} (id {vast_id})",
        "vast_id": vast_id,
        "status": status,
    }
