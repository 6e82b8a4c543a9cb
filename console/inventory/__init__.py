"""The fleet inventory: ``fleet.toml`` plus hosts imported from ``~/.ssh/config`` and vast.ai JSON.

Every problem is a :class:`ConfigError` whose text is one line naming the file and line.
``schema`` declares the file's shape (msgspec Structs), ``load`` checks and builds, ``records`` holds
the frozen records the console uses, ``imports`` reads ssh_config and vast.ai lists.
"""

from console.inventory.errors import MAX_FILE_BYTES, ConfigError
from console.inventory.imports import parse_vastai_instances, read_ssh_config, read_vastai_json
from console.inventory.load import DEFAULT_FLEET_PATHS, VASTAI_COMMAND, find_fleet_file, load_fleet
from console.inventory.records import BenchmarkSpec, Fleet, ImportSpec, Instance, ProbeSpec, SignatureSpec

__all__ = [
    "DEFAULT_FLEET_PATHS",
    "MAX_FILE_BYTES",
    "VASTAI_COMMAND",
    "BenchmarkSpec",
    "ConfigError",
    "Fleet",
    "ImportSpec",
    "Instance",
    "ProbeSpec",
    "SignatureSpec",
    "find_fleet_file",
    "load_fleet",
    "parse_vastai_instances",
    "read_ssh_config",
    "read_vastai_json",
]
