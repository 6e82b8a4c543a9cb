"""Find and load the fleet file; the one-line failure every command prints."""

from __future__ import annotations

import sys

from console.inventory import ConfigError, Fleet, find_fleet_file, load_fleet

NO_FLEET_FILE = "no fleet file: pass --fleet FILE, or create ./fleet.toml (try `fleet-console demo`)"


class NoFleetFile(ConfigError):
    """No fleet file given or found (``reason`` says what to do)."""


def fail(message: str, prog: str = "fleet-console") -> int:
    """``prog: message`` on stderr; exit status 2."""
    print(f"{prog}: {message}", file=sys.stderr)
    return 2


def load_fleet_file(given: str | None, missing: str = NO_FLEET_FILE) -> Fleet:
    """The fleet file named by ``--fleet`` (or found in the usual places), loaded and checked.

    ConfigError (``file:line: reason``) when it is bad, NoFleetFile (saying ``missing``) when there is none."""
    path = find_fleet_file(given)
    if path is None:
        raise NoFleetFile("fleet.toml", None, missing)
    return load_fleet(path)
