"""The console's themes (Textual ``Theme`` objects) and the remembered theme choice.

Three themes: ``dark``, ``light`` and ``high-contrast``. Their colours are chosen so that they stay
distinct when the terminal only has 256 colours (Textual downgrades truecolor), and every status is
also spelled out in text, so nothing is lost with ``NO_COLOR`` (Textual renders monochrome then).

The chosen theme is kept in ``settings.json`` in the user's config dir
(``platformdirs.user_config_dir("fleet-console")``; ``FLEET_CONSOLE_CONFIG_DIR`` overrides it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from textual.theme import Theme

TCSS_PATH = Path(__file__).with_name("console.tcss")

DARK = Theme(
    name="dark",
    primary="#5fafff",
    secondary="#00afd7",  # the memory figures: readable on the cursor row too
    accent="#ffaf00",
    warning="#ffaf00",
    error="#ff5f5f",
    success="#5fd75f",
    foreground="#e4e4e4",
    background="#121212",
    surface="#1c1c1c",
    panel="#262626",
    dark=True,
    variables={
        "status-stale": "#af87ff",
        "status-idle": "#ffd75f",
        "status-connecting": "#8a8a8a",
        "spark": "#5fafff",
        "footer-key-foreground": "#5fafff",
    },
)

LIGHT = Theme(
    name="light",
    primary="#005faf",
    secondary="#005f87",  # the memory figures: readable on the cursor row too
    accent="#af5f00",
    warning="#af5f00",
    error="#d70000",
    success="#008700",
    foreground="#121212",
    background="#eeeeee",
    surface="#e4e4e4",
    panel="#d0d0d0",
    dark=False,
    variables={
        "status-stale": "#8700af",
        "status-idle": "#875f00",
        "status-connecting": "#585858",
        "spark": "#005faf",
        "footer-key-foreground": "#005faf",
    },
)

HIGH_CONTRAST = Theme(
    name="high-contrast",
    primary="#00ffff",
    secondary="#00ffff",
    accent="#ffff00",
    warning="#ffff00",
    error="#ff0000",
    success="#00ff00",
    foreground="#ffffff",
    background="#000000",
    surface="#000000",
    panel="#000000",
    boost="#303030",
    dark=True,
    luminosity_spread=0.0,
    text_alpha=1.0,
    variables={
        "status-stale": "#ff00ff",
        "status-idle": "#ffff00",
        "status-connecting": "#c0c0c0",
        "spark": "#00ffff",
        "footer-key-foreground": "#ffff00",
        "border": "#ffffff",
        "border-blurred": "#c0c0c0",
    },
)

THEMES: Dict[str, Theme] = {t.name: t for t in (DARK, LIGHT, HIGH_CONTRAST)}
THEME_NAMES: List[str] = list(THEMES)
DEFAULT_THEME = "dark"


def next_theme(current: Optional[str], picked: Optional[str] = None) -> str:
    """The theme after ``current`` in the cycle dark -> light -> high-contrast (-> ``picked``) -> dark.

    ``picked`` is a theme chosen in the command palette (any of Textual's): it joins the ring, so ``t``
    comes back to it instead of leaving it for good.
    """
    ring = THEME_NAMES + ([picked] if picked and picked not in THEME_NAMES else [])
    try:
        return ring[(ring.index(current or "") + 1) % len(ring)]
    except ValueError:
        return ring[0]


def config_dir() -> Path:
    override = os.environ.get("FLEET_CONSOLE_CONFIG_DIR")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_config_dir("fleet-console"))


def settings_path() -> Path:
    return config_dir() / "settings.json"


def load_settings() -> Dict[str, Any]:
    try:
        data = json.loads(settings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_settings(**changes: Any) -> None:
    """Merge ``changes`` into settings.json (written atomically); errors are ignored (best effort)."""
    data = load_settings()
    data.update(changes)
    path = settings_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def saved_theme() -> Optional[str]:
    name = load_settings().get("theme")
    return name if isinstance(name, str) else None


def picked_theme() -> Optional[str]:
    """The last theme picked in the palette that is not one of ours (it stays in ``t``'s ring)."""
    name = load_settings().get("picked_theme")
    return name if isinstance(name, str) and name not in THEMES else None


def remember_theme(name: str) -> None:
    """Keep ``name`` for the next run; a theme outside ours is also kept as the palette's pick."""
    if name in THEMES:
        save_settings(theme=name)
    else:
        save_settings(theme=name, picked_theme=name)
