"""``fleet-console notify test [SINK]``: a test message to each ``[[notify]]`` sink (or the one named), and what
each answered (HTTP status and body, or the SMTP reply), secrets redacted. Exit 0 when every sink took it."""

from __future__ import annotations

import argparse
import concurrent.futures

from console.fleet_file import load_fleet_file
from console.inventory import ConfigError
from console.inventory.secrets import SecretError, redact
from console.notify.deliver import send_once
from console.notify.message import Message
from console.notify.sinks import open_sink


def run_notify(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)
    specs = list(fleet.notify)
    if not specs:
        raise ConfigError(fleet.source, None, "no [[notify]] sinks in this file (docs/notify.md)")
    if args.sink:
        specs = [s for s in specs if s.name == args.sink]
        if not specs:
            names = ", ".join(s.name for s in fleet.notify)
            raise ConfigError(fleet.source, None, f"no notify sink named {args.sink!r} (there are: {names})")
    failed = 0

    def one(spec: object) -> str:
        try:
            sink = open_sink(spec)  # type: ignore[arg-type]
        except SecretError as exc:
            return f"failed: {exc}"
        answer = send_once(sink, Message(test=True), timeout=args.timeout)
        return ("ok: " if answer.ok else "failed: ") + redact(answer.line())

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(specs))) as pool:
        for spec, line in zip(specs, pool.map(one, specs), strict=True):
            failed += not line.startswith("ok")
            print(f"{spec.name:<16} {spec.type:<9} {line}")
    return 1 if failed else 0
