"""The one instance screen: built in the background before the first Enter, then pointed at each instance
opened (building ~50 widgets costs ~150-350 ms; showing a built screen costs a layout and a paint, issue 19)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Optional

from widgets.instance_screen import InstanceScreen

if TYPE_CHECKING:
    from console.ui.app import FleetApp

WARM_AFTER = 1.0  # seconds after start: the instance screen is built in the background (before gc.freeze)
LAY_OUT_RETRY = 0.1  # seconds between looks at whether the screen built in the background has mounted
SHUTDOWN_WAIT = 2.0  # seconds a quit waits for that background build to finish mounting


class InstanceScreens:
    """Keeps ``app``'s instance screen (``screen``, None until built): ``open``, ``warm``, ``settle``."""

    def __init__(self, app: FleetApp) -> None:
        self.app = app
        self.screen: Optional[InstanceScreen] = None

    def open(self, name: str, tab: str = "tab-gpus") -> None:
        """Show ``name`` on the instance screen (on tab ``tab``)."""
        app = self.app
        if name not in app.state.instances:
            return
        screen = self.screen
        if screen is None:
            screen = self._install(name, tab)
        elif screen.is_running and not screen.is_mounted:  # built in the background, not quite done: then
            app.call_after_refresh(self.open, name, tab)
            return
        while screen in app.screen_stack:  # opened from the instance screen or a screen above it
            app.pop_screen()
        screen.show_instance(name, tab)
        app.push_screen(screen)
        app.call_after_refresh(app.update_detail)  # an instance at "summary" gets its streams back now

    def _install(self, name: str, tab: str = "tab-gpus") -> InstanceScreen:
        """The one instance screen (installed: leaving it keeps its widgets for the next instance opened)."""
        screen = InstanceScreen(self.app.controller, name, tab=tab)
        self.app.install_screen(screen, "instance")
        self.screen = screen
        return screen

    def warm(self) -> None:
        """Build the instance screen before the first Enter: composed, styled and mounted off the screen stack
        (what ``push_screen`` does before it shows a screen), so that the first open of a session costs a
        layout and a paint like every later one, not the ~150-350 ms of building ~50 widgets (issue 19)."""
        app = self.app
        if self.screen is not None or not app.screen_stack:
            return
        if not app.state.instances:  # (instances a Prometheus source finds come later)
            app.set_timer(WARM_AFTER, self.warm)
            return
        screen = self._install(next(iter(app.state.instances)))
        try:  # Textual 8.2: registers and starts the screen (its children mount), loads its CSS
            app._get_screen(screen)
            app._load_screen_css(screen)
        except Exception:  # a Textual without these: the first open builds it, as before
            return
        app.set_timer(LAY_OUT_RETRY, self._lay_out)

    def _lay_out(self) -> None:
        """The built screen laid out at the terminal's size and rendered once, off the screen stack: the first
        open of a session then skips the layout (~20 ms at 1000 hosts) and the first renders of ~50 widgets
        (~40 ms: Textual's style and line caches), which made it ~150-190 ms against ~80-100 ms for later
        ones. Nothing is drawn on the terminal: the compositor's lines stay in memory until the screen is shown;
        a resize in between lays it out again on the first open, as before."""
        screen = self.screen
        if screen is None or not screen.is_running or screen in self.app.screen_stack:
            return
        if not screen.is_mounted:
            self.app.set_timer(LAY_OUT_RETRY, self._lay_out)
            return
        with contextlib.suppress(Exception):  # Textual 8.2 internals, as in warm
            screen._refresh_layout(self.app.size)
            screen._compositor.render_update(full=True)

    async def settle(self) -> None:
        """Before a quit: a screen being built in the background first finishes mounting (Textual closes an
        installed screen's nodes one by one, and a Tabs widget whose Mount comes after its tabs were closed
        raises "No Tab with id" and turns the quit into a traceback)."""
        screen = self.screen
        deadline = time.monotonic() + SHUTDOWN_WAIT
        while screen is not None and screen.is_running and not screen.is_mounted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


__all__ = ["WARM_AFTER", "InstanceScreens"]
