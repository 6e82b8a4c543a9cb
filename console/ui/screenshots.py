"""The command palette's Screenshot: saved where the operator looks for files, and said where (a toast)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from textual import events, on
from textual.app import App


def screenshot_dir() -> Path:
    """Where a screenshot goes: the user's Downloads if it exists (a desktop), else
    ``$FLEET_CONSOLE_STATE_DIR/screenshots`` (or the user's state dir), else the working directory."""
    import platformdirs

    downloads = platformdirs.user_downloads_path()
    if downloads.is_dir() and os.access(downloads, os.W_OK):
        return downloads
    base = os.environ.get("FLEET_CONSOLE_STATE_DIR") or platformdirs.user_state_dir("fleet-console")
    target = Path(base) / "screenshots"
    try:
        target.mkdir(parents=True, exist_ok=True)
        return target
    except OSError:
        return Path.cwd()


class ScreenshotDelivery(App[None]):
    """Screenshots to ``screenshot_dir()``, with a toast naming the file (or why it was not saved)."""

    def deliver_screenshot(
        self, filename: Optional[str] = None, path: Optional[str] = None, time_format: Optional[str] = None
    ) -> Optional[str]:
        """The palette's Screenshot: to ~/Downloads where there is one, else the state dir, else the cwd."""
        return super().deliver_screenshot(filename, path or str(screenshot_dir()), time_format)

    @on(events.DeliveryComplete)
    def _on_delivery_complete(self, event: events.DeliveryComplete) -> None:
        if event.name == "screenshot":
            event.prevent_default()
            self.notify("saved to %s" % (event.path or "?"), title="Screenshot", markup=False, timeout=8)

    @on(events.DeliveryFailed)
    def _on_delivery_failed(self, event: events.DeliveryFailed) -> None:  # type: ignore[override]  # (theirs: a typo)
        if event.name == "screenshot":
            event.prevent_default()
            self.notify("not saved: %s" % event.exception, title="Screenshot", severity="error", markup=False)


__all__ = ["ScreenshotDelivery", "screenshot_dir"]
