"""A fleet file written from text under one ``[[instance]]``: loaded, or its one-line error with the path as ``F``."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.inventory import ConfigError, Fleet, load_fleet

HEAD = '[[instance]]\nname = "a"\nhost = "h"\n\n'


def load(tmp_path: Path, text: str) -> Fleet:
    path = tmp_path / "fleet.toml"
    path.write_text(HEAD + text)
    return load_fleet(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value).replace(str(tmp_path / "fleet.toml"), "F")
