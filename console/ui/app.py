"""The Textual console: the fleet grid, the instance screen, keys, themes, notifications.

The app only renders ``controller.state`` (console.core.state.FleetState) and turns keys into controller
calls. Frames update the state at full rate; the app repaints at a bounded frame rate
(``FRAME_INTERVAL``) from the state's dirty set, and only changed, visible panes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterable, List, Optional

from rich.text import Text
from textual import events, on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.notifications import Notify
from textual.screen import Screen
from textual.widgets import Input, Static

from console.core.actions import ActionError, ReadOnlyError
from console.core.detail import DetailTracker, table_on_screen
from console.core.status import BADGES, TABLE, THEME_DEFAULTS
from console.core.text_safety import clean
from console.ui.idle_gc import IdleCollector
from themes import DEFAULT_THEME, TCSS_PATH, THEMES, next_theme, picked_theme, remember_theme, saved_theme
from widgets.command_bar import CommandBar, run_command
from widgets.confirm_screen import ConfirmScreen
from widgets.detail_pane import DetailPane
from widgets.filter_bar import FilterBar
from widgets.fleet_grid import PANE_BUDGET, FleetGrid
from widgets.fleet_table import FleetTable, table_from_settings, toggle_view
from widgets.footer import Footer  # Textual's, without its recompose leak (issue 15 item 11)
from widgets.help_screen import HelpScreen
from widgets.instance_screen import InstanceScreen
from widgets.messages import CursorMoved, OpenInstance, SelectionChanged
from widgets.pane import ages as pane_ages
from widgets.probe_menu import ProbeMenu
from widgets.styles_cache import release_dead_line_caches

FRAME_INTERVAL = 0.25  # seconds between repaints (4 Hz)
LARGE_FLEET = 500  # instances: past this many the fleet view repaints every LARGE_FRAME_INTERVAL
LARGE_FRAME_INTERVAL = 1.0  # (1 Hz: figures come once a second; an open instance stays at 4 Hz, keys at once)
LARGE_PANE_BUDGET = 16  # grid panes repainted per frame there (each of ~15 visible once a frame)
TICK_INTERVAL = 1.0  # seconds between re-derivations of time-based states (stale, idle)
DETAIL_INTERVAL = 0.5  # seconds between looks at what is in view (console/core/detail.py)
LAY_OUT_RETRY = 0.1  # seconds between looks at whether the screen built in the background has mounted
WARM_AFTER = 1.0  # seconds after start: the instance screen is built in the background (before gc.freeze)
FREEZE_AFTER = 2.0  # seconds after start: what is alive then is moved out of the collector's way (gc.freeze)
SHUTDOWN_WAIT = 2.0  # seconds a quit waits for that background build to finish mounting
DEMO_BANNER = "DEMO fleet — simulated GPUs"
MAX_NOTIFY_EVENTS = 3  # instances named in one "got worse" toast, then "+N more"
SMALL_SCREEN_ROWS = 40  # below this many rows toasts are one line each, at most SMALL_SCREEN_TOASTS at once
SMALL_SCREEN_TOASTS = 3
TOAST_CHARS = 56  # a one-line toast's text (Toast is 60 wide, less its padding and edge)
EVENT_TOAST_EVERY = 60.0  # seconds: an instance's "got worse" toasts at most this often (the timeline has all)


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


def one_line(message: str, title: str = "") -> str:
    """A toast's text in one line of at most ``TOAST_CHARS``; the timeline (``e``) has the rest."""
    first = message.split("\n", 1)[0]
    line = ("%s: %s" % (title, first)) if title else first
    if "\n" in message or len(line) > TOAST_CHARS:
        line = line[: TOAST_CHARS - 5].rstrip() + "… (e)"
    return line


class FleetApp(App):
    """``FleetApp(controller, theme=None, bell=False)``; ``controller.state`` is what is shown."""

    TITLE = "fleet-console"
    CSS_PATH = str(TCSS_PATH)
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("slash", "filter", "Filter"),
        Binding("d", "diagnose", "Diagnose"),
        Binding("r", "restart", "Restart"),
        Binding("r", "refuse_restart", "Restart", show=False),  # read-only: no footer entry, r still answers
        Binding("p", "probe", "Probes"),
        Binding("t", "cycle_theme", "Theme"),
        Binding("R", "reload", "Reload"),
        Binding("e", "timeline", "Events"),
        Binding("s", "shell", "Shell", show=False),  # ssh into the instance (read-only too: audited)
        Binding("y", "copy", "Copy", show=False),  # ssh command, log line or evidence line (OSC 52)
        Binding("v", "toggle_view", "View", show=False),  # grid / table (remembered)
        Binding("colon", "command", "Command", show=False),  # :open, :diagnose, :restart, :probe, :sort, :theme
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("escape", "clear", "Clear", show=False),
    ]

    def __init__(self, controller: Any, theme: Optional[str] = None, bell: bool = False) -> None:
        super().__init__()
        self.controller = controller
        self.state = controller.state
        self.read_only = bool(getattr(controller, "read_only", False))
        self.demo = bool(getattr(controller, "demo", False))
        self.bell_enabled = bell
        for t in THEMES.values():
            self.register_theme(t)
        self._theme_warning = ""
        chosen = theme or saved_theme() or DEFAULT_THEME
        if chosen not in self.available_themes:
            self._theme_warning = "unknown theme %r, using %s" % (chosen, DEFAULT_THEME)
            chosen = DEFAULT_THEME
        self.theme = chosen
        if theme and not self._theme_warning:
            remember_theme(chosen)
        self._last_tick = 0.0
        self._painted_at = -1e9  # time.monotonic() when paint_frame last ran through (the large fleet's 1 Hz)
        self.frames_held = 0  # frames that large fleet skipped
        # detail on demand (console/core/detail.py): agents of instances out of view send a summary
        send_detail = getattr(controller, "set_detail", None)
        monitoring = getattr(controller, "monitoring", None)  # --metrics-port / --record want every stream in full
        if getattr(monitoring, "metrics_at", None) or getattr(monitoring, "record_path", None):
            send_detail = None
        self.detail = DetailTracker(self.state, send_detail) if callable(send_detail) else None
        self._header_key: Any = None
        self._stopped = False
        self.idle_gc = IdleCollector()  # full collections between keys (console/ui/idle_gc.py)
        self.frames_painted = 0
        self.notices: deque = deque(maxlen=100)  # (severity, title, message): what notify() said
        self.session_events: deque = deque(maxlen=500)  # (ts, instance, text): this session's timeline entries
        self._event_toasted: dict[str, float] = {}  # instance -> when its last "got worse" toast was shown
        self._instance_screen: Optional[InstanceScreen] = None  # built once, shown for each instance opened

    def notify(self, message: str, *, title: str = "", severity: str = "information", **kwargs: Any) -> None:
        """Every notice goes to the event timeline (``e``) in full; on a small screen its toast is one line."""
        # the second way in for host text (controller results and errors: a verdict, a restart's log tail)
        message, title = clean(message, keep_newlines=True), clean(title)
        self.notices.append((severity, title, message))
        self.session_events.append((time.time(), "", ("%s: %s" % (title, message)) if title else message))
        if self.size.height < SMALL_SCREEN_ROWS:
            message, title = one_line(message, title), ""
        kwargs["markup"] = False  # notices carry host text and instance names: never markup (widgets pass True)
        super().notify(message, title=title, severity=severity, **kwargs)  # type: ignore[arg-type]

    def _on_notify(self, event: Notify) -> None:
        """In a tmux panel a stack of toasts would hide the grid: there only the newest few (one line each).

        Runs before Textual's own handler (which adds the new notification), so it drops the oldest ones.
        """
        if self.size.height < SMALL_SCREEN_ROWS:
            notes = self._notifications
            while len(notes) >= SMALL_SCREEN_TOASTS:
                del notes[min(notes, key=lambda n: n.raised_at)]

    # -- layout --------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="topbar")
        yield FilterBar()
        yield CommandBar()  # ':' (widgets/command_bar.py)
        grid = FleetGrid(self.state, id="grid")
        grid.fleet_file = str(getattr(getattr(self.controller, "fleet", None), "source", "") or "")
        grid.retry_at = self.retry_at
        from textual.containers import Horizontal

        with Horizontal(id="fleet-body"):  # grid or table, and the selected instance beside it from 160 columns
            yield grid
            yield table_from_settings(self.state, grid)  # v: the table view (widgets/fleet_table.py)
            yield DetailPane(self.state, grid, id="detail")  # (widgets/detail_pane.py: shows itself when wide)
        yield Footer()

    @property
    def grid(self) -> FleetGrid:
        return self.screen_stack[0].query_one(FleetGrid)

    def fleet_view(self) -> Any:
        """The fleet view shown: the grid, or the table (``v``)."""
        table = self.screen_stack[0].query_one(FleetTable)
        return table if table.display else self.grid

    async def on_mount(self) -> None:
        if self._theme_warning:
            self.notify(self._theme_warning, severity="warning")
        self.fleet_view().focus()
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.set_interval(FRAME_INTERVAL, self.paint_frame)
        self.set_interval(DETAIL_INTERVAL, self.update_detail)
        self.set_timer(WARM_AFTER, self.warm_instance_screen)
        # Once the screens are built, move the long-lived objects out of the collector's way (full collections
        # then scan only what came later: 70+ ms pauses otherwise), and run full collections in the operator's
        # pauses rather than inside the key that tipped the counter (console/ui/idle_gc.py).
        self.set_timer(FREEZE_AFTER, self.idle_gc.freeze)
        self.idle_gc.install()
        self.set_interval(1.0, self.idle_gc.tick)
        # dialogs, toasts and recomposed panes leave their rendered lines in Textual's cache otherwise
        self.set_interval(60.0, release_dead_line_caches)
        self.paint_frame()
        try:
            await self.controller.start()
        except Exception as exc:  # a start failure is shown, not fatal: the grid still works
            self.notify("could not start the fleet: %s" % exc, severity="error", timeout=10)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        # the status colours exist under every theme (also Textual's own, picked with --theme)
        return {**THEME_DEFAULTS, "spark": "#5fafff"}

    # -- the frame clock -----------------------------------------------------------------------------
    def paint_frame(self) -> None:
        """Pull what changed from the state and repaint just that (runs at FRAME_INTERVAL)."""
        if not self.screen_stack or not self.screen_stack[0].is_mounted:  # closing: the frame timer outlived the grid
            return
        if getattr(self.screen_stack[0], "_pruning", False):  # closing: its widgets go one by one (#topbar first)
            return
        now = time.time()
        state = self.state
        large, clock = len(state.instances) > LARGE_FLEET, time.monotonic()
        if large and self._frame_held(clock):
            return
        self._painted_at = clock
        if now - self._last_tick >= TICK_INTERVAL - FRAME_INTERVAL / 2:  # (each paint of the large fleet's 1 Hz)
            self._last_tick = now
            state.tick(now)
            # panes whose text ages by itself ("last seen 2m ago", "restarted 40s ago") repaint each second
            state.mark_dirty(
                n for n, inst in state.instances.items() if pane_ages(inst, now) or self.retry_at(n) is not None
            )
        dirty = state.take_dirty()
        events = state.take_events()
        body = self.screen_stack[0]
        try:
            grid, table, detail = body.query_one(FleetGrid), body.query_one(FleetTable), body.query_one(DetailPane)
        except Exception:
            return
        grid.update_from_state(dirty, LARGE_PANE_BUDGET if large else PANE_BUDGET)
        # the table and the detail pane follow in the same frame, so what changed is composed in one pass
        # (Textual re-renders every widget the dirty regions' bounding box touches, ~5 ms at 200x60, per pass)
        table.poll_state()
        detail.poll_state()
        screen = self.screen
        if isinstance(screen, InstanceScreen) and screen.instance_name in dirty:
            screen.update_from_state()
        if dirty or self._header_key is None:
            self.update_header()
        if events:
            self.report_events(events)
        self.frames_painted += 1

    def _frame_held(self, now: float) -> bool:
        """In a fleet past ``LARGE_FLEET`` instances three frames of four are held (1 Hz, the agents' sampling rate):
        a thousand hosts keep ~15 visible panes changing, each repainted per frame it changed in, and each frame is
        a compositor pass with a fixed cost of its own; at 1 Hz a pane's GPU, process and log frames of one second
        land in one repaint and each sample is still shown (bench/scale.py, docs/benchmarks.md). all-smi, the
        multi-host peer, slows to 6 s past 100 hosts. Not held: an open instance whose figures changed (its live
        view stays at 4 Hz). Keys never wait for a frame (the cursor and the detail pane follow at once)."""
        if now - self._painted_at >= LARGE_FRAME_INTERVAL - FRAME_INTERVAL / 2:
            return False
        screen = self.screen if self.screen_stack else None
        if isinstance(screen, InstanceScreen) and self.state.is_dirty(screen.instance_name):
            return False
        self.frames_held += 1
        return True

    def on_cursor_moved(self, message: CursorMoved) -> None:
        """The detail pane follows the cursor at once, not at the next frame."""
        self._poll_now(DetailPane)

    def _poll_now(self, *views: type[DetailPane] | type[FleetTable]) -> None:
        """What a key changed, shown in the key's own pass: the detail pane or the table polled now."""
        if not self.screen_stack or getattr(self.screen_stack[0], "_pruning", False):  # closing
            return
        for view in views:
            with contextlib.suppress(NoMatches):
                self.screen_stack[0].query_one(view).poll_state()

    def update_detail(self) -> None:
        """Detail on demand (console/core/detail.py): instances in view or open at "full", the rest at "summary"."""
        keep_open = getattr(self.controller, "keep_open", None)  # SSH on demand (console/core/on_demand.py)
        if callable(keep_open) and self.screen_stack:
            screen = self.screen
            keep_open(screen.instance_name if isinstance(screen, InstanceScreen) else None)
        tracker = self.detail
        if tracker is None or not self.screen_stack or not self.screen_stack[0].is_mounted:
            return
        try:
            view = self.fleet_view()
        except Exception:  # closing
            return
        on_screen = table_on_screen(view) if isinstance(view, FleetTable) else view.on_screen_names()
        screen = self.screen
        tracker.update(on_screen, screen.instance_name if isinstance(screen, InstanceScreen) else None)

    def retry_at(self, name: str) -> Optional[float]:
        """When ``name``'s failing link tries again (``time.time()``), None when it is not waiting to."""
        link = getattr(self.controller, "links", {}).get(name)
        when = getattr(link, "next_retry_at", None)
        return float(when) if isinstance(when, (int, float)) else None

    def header_text(self) -> Text:
        totals = self.state.totals()
        text = Text()
        text.append(" fleet-console ", "bold reverse")
        if self.demo:
            text.append(" %s " % DEMO_BANNER, "bold reverse")
        elif totals["simulated"]:
            text.append(" simulated GPUs ", "bold reverse")  # (said here once, not on every row)
        if self.read_only:
            text.append(" READ-ONLY ", "bold reverse")
        text.append(" %d instances" % totals["instances"])
        if totals["gpus"]:
            text.append(" · GPUs %d busy / %d idle" % (totals["busy"], totals["idle"]))
            if totals["lost"]:
                text.append(" / %d lost" % totals["lost"], "bold")
        trouble = [(s.name, totals[s.name]) for s in TABLE if s.trouble]
        parts = ["%d %s" % (n, BADGES[s].lower()) for s, n in trouble if n]
        if parts:
            text.append(" · " + ", ".join(parts), "bold")
        if totals["connecting"]:
            text.append(" · %d connecting" % totals["connecting"])
        elif not parts and totals["instances"]:
            text.append(" · all ok")  # only once every instance has answered
        grid = self.grid
        if grid.selected:
            text.append(" · %d selected" % len(grid.selected), "bold")
        if grid.query_text:
            text.append(" · filter %r: %d shown" % (grid.query_text, len(grid.visible_names)))
        return text

    def update_header(self) -> None:
        text = self.header_text()
        width = self.size.width or 80  # (the bar spans the screen; its own size lags a resize by a frame)
        key = (text.plain, width)
        if key != self._header_key:
            self._header_key = key
            bar = self.screen_stack[0].query_one("#topbar", Static)
            lines = 1 if text.cell_len <= width else 2
            if bar.styles.height is None or bar.styles.height.value != lines:
                bar.styles.height = lines  # a layout pass only when the header's height changes
                bar.update(text)
            else:
                bar.update(text, layout=False)  # same size: repaint the bar alone, no layout

    def report_events(self, events: List[tuple]) -> None:
        """Status changes for the worse: each one in the timeline; one short toast naming the instances,
        an instance at most once per ``EVENT_TOAST_EVERY`` (a flapping host does not toast every 30 s)."""
        now = time.time()
        fresh = []
        for n, o, s, d in events:
            self.session_events.append(
                (now, n, "%s → %s%s" % (BADGES.get(o, o), BADGES.get(s, s), (" (%s)" % d) if d else ""))
            )
            if now - self._event_toasted.get(n, -1e18) >= EVENT_TOAST_EVERY:
                self._event_toasted[n] = now
                fresh.append((n, s))
        if not fresh:
            return
        severity = "error" if any(s in ("failed", "unreachable", "needs_action") for _, s in fresh) else "warning"
        named = ["%s %s" % (n, BADGES.get(s, s)) for n, s in fresh[:MAX_NOTIFY_EVENTS]]
        if len(fresh) > MAX_NOTIFY_EVENTS:
            named.append("+%d more" % (len(fresh) - MAX_NOTIFY_EVENTS))
        self.notices.append((severity, "Got worse", ", ".join(named)))
        small = self.size.height < SMALL_SCREEN_ROWS
        message = one_line(", ".join(named), "Got worse" if small else "")
        super().notify(
            message, title="" if small else "Got worse", severity=severity, timeout=8, markup=False  # type: ignore[arg-type]
        )
        if self.bell_enabled:
            self.bell()

    # -- targets -------------------------------------------------------------------------------------
    def targets(self) -> List[str]:
        """The instances a fleet action applies to: the instance screen's, the selection, or the cursor."""
        screen = self.screen
        if isinstance(screen, InstanceScreen):
            return [screen.instance_name]
        grid = self.grid
        chosen = [n for n in grid.visible_names if n in grid.selected]  # never one the filter hides
        if chosen:
            return chosen
        return [grid.cursor_name] if grid.cursor_name else []

    # -- messages ------------------------------------------------------------------------------------
    def on_open_instance(self, message: OpenInstance) -> None:
        self.open_instance(message.name)

    def open_instance(self, name: str, tab: str = "tab-gpus") -> None:
        if name not in self.state.instances:
            return
        screen = self._instance_screen
        if screen is None:
            screen = self._install_instance_screen(name, tab)
        elif screen.is_running and not screen.is_mounted:  # built in the background, not quite done: then
            self.call_after_refresh(self.open_instance, name, tab)
            return
        while screen in self.screen_stack:  # opened from the instance screen or a screen above it
            self.pop_screen()
        screen.show_instance(name, tab)
        self.push_screen(screen)
        self.call_after_refresh(self.update_detail)  # an instance at "summary" gets its streams back now

    def _install_instance_screen(self, name: str, tab: str = "tab-gpus") -> InstanceScreen:
        """The one instance screen (installed: leaving it keeps its widgets for the next instance opened)."""
        screen = InstanceScreen(self.state, name, demo=self.demo, read_only=self.read_only, tab=tab)
        self.install_screen(screen, "instance")
        self._instance_screen = screen
        return screen

    def warm_instance_screen(self) -> None:
        """Build the instance screen before the first Enter: composed, styled and mounted off the screen stack
        (what ``push_screen`` does before it shows a screen), so that the first open of a session costs a
        layout and a paint like every later one, not the ~150-350 ms of building ~50 widgets (issue 19)."""
        if self._instance_screen is not None or not self.screen_stack:
            return
        if not self.state.instances:  # (instances a Prometheus source finds come later)
            self.set_timer(WARM_AFTER, self.warm_instance_screen)
            return
        screen = self._install_instance_screen(next(iter(self.state.instances)))
        try:  # Textual 8.2: registers and starts the screen (its children mount), loads its CSS
            self._get_screen(screen)
            self._load_screen_css(screen)
        except Exception:  # a Textual without these: the first open builds it, as before
            return
        self.set_timer(LAY_OUT_RETRY, self._lay_out_instance_screen)

    def _lay_out_instance_screen(self) -> None:
        """The built screen laid out at the terminal's size and rendered once, off the screen stack: the first
        open of a session then skips the layout (~20 ms at 1000 hosts) and the first renders of ~50 widgets
        (~40 ms: Textual's style and line caches), which made it ~150-190 ms against ~80-100 ms for later
        ones. Nothing is drawn on the terminal: the compositor's lines stay in memory until the screen is shown;
        a resize in between lays it out again on the first open, as before."""
        screen = self._instance_screen
        if screen is None or not screen.is_running or screen in self.screen_stack:
            return
        if not screen.is_mounted:
            self.set_timer(LAY_OUT_RETRY, self._lay_out_instance_screen)
            return
        with contextlib.suppress(Exception):  # Textual 8.2 internals, as in warm_instance_screen
            screen._refresh_layout(self.size)
            screen._compositor.render_update(full=True)

    def on_resize(self, event: events.Resize) -> None:
        """A resize can change how many lines the header needs (2 at 80 columns, 1 at 200)."""
        self.call_after_refresh(self.update_header)

    def on_selection_changed(self, message: SelectionChanged) -> None:
        self.update_header()
        self._poll_now(FleetTable)

    def on_input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, FilterBar):
            self._apply_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if isinstance(event.input, FilterBar):
            if not event.value:
                event.input.remove_class("-shown")
            self.fleet_view().focus()
            self._apply_filter(event.value)

    def _apply_filter(self, query: str) -> None:
        """The filter as typed: the grid narrows down, the header counts it, the table and detail pane follow now."""
        self.grid.set_query(query)
        self.update_header()
        self._poll_now(FleetTable, DetailPane)

    # -- actions -------------------------------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_timeline(self) -> None:
        """The event timeline: this session's notices and, from the history file, what came before."""
        from widgets.timeline_screen import TimelineScreen

        if not isinstance(self.screen, TimelineScreen):
            self.push_screen(TimelineScreen(self.timeline_entries()))

    def history_path(self) -> Any:
        monitoring = getattr(self.controller, "monitoring", None)
        return getattr(monitoring, "history_path", None)

    def timeline_entries(self, limit: int = 500) -> List[tuple]:
        """``(ts, instance, text)`` newest first: the history file's events (kept across console runs:
        transitions, flaps, verdicts, restarts with pids, probes) and this session's notices."""
        out = list(self.session_events)
        path = self.history_path()
        if path is not None:
            monitoring = getattr(self.controller, "monitoring", None)
            history = getattr(monitoring, "history", None)
            with contextlib.suppress(Exception):
                if history is not None:
                    history.flush()
            with contextlib.suppress(Exception):
                from console.monitor.history import HistoryReader
                from widgets.timeline_screen import history_line

                reader = HistoryReader(path)
                try:
                    for ev in reader.events(None, time.time() - 7 * 86400)[-limit:]:
                        out.append((ev["ts"], ev["instance"], history_line(ev)))
                finally:
                    reader.close()
        out.sort(key=lambda e: -e[0])
        return out[:limit]

    def action_filter(self) -> None:
        if isinstance(self.screen, InstanceScreen):
            return
        self.screen_stack[0].query_one(FilterBar).open()

    def action_clear(self) -> None:
        grid = self.grid
        if grid.selected:
            grid.clear_selection()
        elif grid.query_text:
            bar = self.screen_stack[0].query_one(FilterBar)
            bar.value = ""
            bar.remove_class("-shown")
            grid.set_query("")
        self.update_header()

    def _theme_changed(self, theme: Any) -> None:
        """Any theme change is remembered: ``t``, and a pick in the palette (Textual's own themes too).

        The palette's picker previews each theme it passes over, so the pick is written once it closes.
        """
        self.call_after_refresh(self._remember_theme)

    def _remember_theme(self) -> None:
        if type(self.screen).__name__ == "CommandPalette":
            self.set_timer(0.5, self._remember_theme)  # still browsing: what it closes on is what counts
            return
        if self.theme != saved_theme():
            remember_theme(self.theme)

    def action_cycle_theme(self) -> None:
        name = next_theme(self.theme, picked_theme())
        self.theme = name
        remember_theme(name)
        self.notify("theme: %s" % name, timeout=2)

    def action_reload(self) -> None:
        """Re-read the fleet file and re-run its imports (the controller keeps unchanged instances as they are)."""
        self.run_worker(self._reload(), group="reload", exclusive=True)

    async def _reload(self) -> None:
        message = await self.controller.reload()
        self.notify(message, severity="error" if "not reloaded" in message else "information", timeout=6)

    def action_diagnose(self) -> None:
        names = self.targets()
        if not names:
            self.notify("no instance to diagnose", severity="warning")
            return
        self.notify("diagnosing %s…" % ", ".join(names), timeout=3)
        self.run_worker(self._diagnose(names), group="diagnose", exclusive=False)

    def action_diagnose_current(self) -> None:
        self.action_diagnose()

    async def _diagnose(self, names: List[str]) -> None:
        async def one(name: str) -> None:
            try:
                data = await self.controller.diagnose(name)
            except Exception as exc:
                self.notify("%s: diagnosis failed: %s" % (name, exc), severity="error", timeout=8)
                return
            verdict = (data or {}).get("verdict") or {}
            sev = verdict.get("severity") or "info"
            self.notify(
                "%s: %s" % (name, verdict.get("summary") or verdict.get("code") or "done"),
                title="Diagnosis (%s)" % sev,
                severity="error" if sev in ("error", "critical") else "warning" if sev == "warning" else "information",
                timeout=8,
            )
            self.show_tab(name, 3)  # the verdict with its evidence lines

        await asyncio.gather(*(one(n) for n in names))

    def show_tab(self, name: str, index: int) -> bool:
        """Show tab ``index`` of ``name``'s screen if that screen is open; False when it is not."""
        screen = self.screen
        if not (isinstance(screen, InstanceScreen) and screen.instance_name == name):
            return False
        screen.action_tab(index)
        screen.update_from_state(force=True)
        return True

    def action_restart(self) -> None:
        names = self.targets()
        if not names:
            self.notify("no instance to restart", severity="warning")
            return
        if self.read_only:
            # no dialog: nothing will happen. The controller records the refusal in the audit log.
            self.run_worker(self._restart(names, announce=False), group="restart")
            return

        def answered(yes: Optional[bool]) -> None:
            if yes:
                self.run_worker(self._restart(names), group="restart")
            else:
                self.notify("restart cancelled, nothing done", timeout=3)

        self.push_screen(
            ConfirmScreen(
                "Restart the benchmark on %d instance%s?" % (len(names), "" if len(names) == 1 else "s"),
                names,
                note="Stops the configured processes (TERM, then KILL) and starts the benchmark again.",
                confirm_label="Restart",
            ),
            answered,
        )

    def action_restart_current(self) -> None:
        self.action_restart()

    def action_accept_host_key(self) -> None:
        """Trust the unknown host key the open instance offers (``A``), after a dialog that shows its fingerprint.

        A changed key is never accepted here: the operator removes the old line by hand (ssh-keygen -R).
        """
        screen = self.screen
        if not isinstance(screen, InstanceScreen):
            return
        name = screen.instance_name
        offer = getattr(self.controller.links.get(name), "host_key_offer", None)
        if offer is None:
            self.notify(f"{name}: no unknown host key to accept", severity="warning", markup=False)
            return
        if offer.changed:
            self.notify(f"{name}: the host key CHANGED; not accepted here (check it, then ssh-keygen -R and reload)",
                        severity="error", markup=False)
            return

        async def accept() -> None:
            try:
                message = await self.controller.accept_host_key(name)
            except ActionError as exc:
                self.notify(str(exc), severity="error", markup=False)
                return
            self.notify(message, markup=False)

        def answered(yes: Optional[bool]) -> None:
            if yes:
                self.run_worker(accept(), group="accept")
            else:
                self.notify("host key not accepted, nothing written", timeout=3)

        self.push_screen(
            ConfirmScreen(
                f"Trust the host key of {name}?",
                [offer.fingerprint, f"{offer.host}:{offer.port}"],
                note=f"Written to {offer.known_hosts} and recorded in the audit log; then it reconnects. "
                "Compare the fingerprint with what the provider shows first.",
                confirm_label="Trust",
            ),
            answered,
        )

    def action_refuse_restart(self) -> None:
        """Read-only mode's ``r`` (the footer does not offer it): the refusal is said and audited."""
        self.action_restart()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In read-only mode the restart bindings are hidden (``r`` falls to ``refuse_restart``)."""
        if action in ("restart", "restart_current"):
            return not self.read_only
        if action == "refuse_restart":
            return self.read_only
        return True

    async def _restart(self, names: List[str], announce: bool = True) -> None:
        if announce:
            self.notify("restarting %s…" % ", ".join(names), timeout=3)
        try:
            results = await self.controller.restart(names, origin="tui")
        except ReadOnlyError:
            self.notify(
                "Read-only mode: restart refused. Nothing was sent to %s." % ", ".join(names),
                title="Refused",
                severity="error",
                timeout=8,
            )
            return
        except Exception as exc:
            self.notify("restart failed: %s" % exc, severity="error", timeout=10)
            return
        from console.core.controller import TOAST_TAIL_LINES, describe_restart  # (the app takes any controller)

        for name, result in (results or {}).items():
            if result.get("ok"):
                self.state.note_restart(name)  # the verdict before it is history; the pane says "restarted"
            # the started pid; or that the benchmark died at once, with its log's last lines
            text = "\n".join(describe_restart(name, result, tail=TOAST_TAIL_LINES))
            if result["ok"]:
                self.notify(text, timeout=6)
            else:
                self.notify(text, severity="error", timeout=10)

    def action_probe(self) -> None:
        screen = self.screen
        name = screen.instance_name if isinstance(screen, InstanceScreen) else self.grid.cursor_name
        if not name:
            self.notify("no instance to probe", severity="warning")
            return
        try:
            specs = list(self.controller.probe_specs(name))
        except Exception as exc:
            self.notify("no probes: %s" % exc, severity="error")
            return
        if not specs:
            self.notify("no probes configured", severity="warning")
            return

        def chosen(probe: Optional[str]) -> None:
            if probe:
                self.run_worker(self._probe(name, probe), group="probe")

        self.push_screen(ProbeMenu(name, specs), chosen)

    def action_probe_current(self) -> None:
        self.action_probe()

    async def _probe(self, name: str, probe: str) -> None:
        self.notify("%s: running probe %s…" % (name, probe), timeout=3)
        try:
            data = await self.controller.probe(name, probe)
        except Exception as exc:
            self.notify("%s: probe %s failed: %s" % (name, probe, exc), severity="error", timeout=10)
            return
        if name in self.state.instances and not self.state.instances[name].probes.get(probe):
            self.state.set_probe_result(name, probe, data or {})
        if self.show_tab(name, 4):
            return
        if len(self.screen_stack) == 1:  # asked from the grid: its output is what the operator wants next
            self.open_instance(name, tab="tab-probes")
        else:  # (another screen is up: do not pull the operator away from it)
            self.notify("%s: probe %s done (its output is on the Probes tab, 5)" % (name, probe), timeout=6)

    def action_shell(self) -> None:
        """``s``: suspend the console, ``ssh`` into the instance with its settings, come back (console/ui/shell.py)."""
        from console.ui.shell import open_shell, shell_target

        self.run_worker(open_shell(self, shell_target(self)), group="shell", exclusive=True)

    def action_command(self) -> None:
        """``:``: the command bar (k9s-style; widgets/command_bar.py, parsed by console/core/command_mode.py)."""
        if len(self.screen_stack) == 1:
            self.screen_stack[0].query_one(CommandBar).open()

    def on_command_bar_run(self, message: CommandBar.Run) -> None:
        run_command(self, message.command)

    def action_toggle_view(self) -> None:
        """``v``: grid / table (widgets/fleet_table.py), remembered in settings.json."""
        if len(self.screen_stack) == 1:
            toggle_view(self.screen_stack[0].query_one(FleetTable), self.grid)

    def action_copy(self) -> None:
        """``y``: copy (OSC 52) the ssh command, the log line or the evidence line in view (console/ui/shell.py)."""
        from console.ui.shell import copy_text

        text, what = copy_text(self)
        if not text:
            self.notify("nothing to copy%s" % (": " + what if what else ""), severity="warning", timeout=3)
            return
        self.copy_to_clipboard(text)
        self.notify("copied %s" % what, timeout=2)

    async def action_quit(self) -> None:
        await self.stop_controller()
        self.exit()

    async def stop_controller(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            await self.controller.stop()

    async def on_unmount(self) -> None:
        self.idle_gc.uninstall()
        await self.stop_controller()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):  # keys and the mouse: not the moment for a full collection
            self.idle_gc.saw_input()
        await super().on_event(event)

    async def _shutdown(self) -> None:
        """A quit while the instance screen is being built in the background (``warm_instance_screen``) first
        lets it finish mounting: Textual closes an installed screen's nodes one by one, and a Tabs widget whose
        Mount comes after its tabs were closed raises "No Tab with id" and turns the quit into a traceback."""
        screen = self._instance_screen
        deadline = time.monotonic() + SHUTDOWN_WAIT
        while screen is not None and screen.is_running and not screen.is_mounted and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await super()._shutdown()

    # -- screenshots ---------------------------------------------------------------------------------
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

    # -- command palette -----------------------------------------------------------------------------
    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Fleet: open focused instance", "Open the instance screen (enter)", self._open_cursor)
        yield SystemCommand("Fleet: filter", "Filter by name, tag or host (/)", self.action_filter)
        yield SystemCommand(
            "Fleet: select / unselect", "Toggle the focused pane's selection (space)", self._toggle_select
        )
        yield SystemCommand("Fleet: diagnose", "Diagnose selected or focused instances (d)", self.action_diagnose)
        yield SystemCommand("Fleet: restart benchmark", "Restart, after confirmation (r)", self.action_restart)
        yield SystemCommand("Fleet: probes", "Run a probe on the focused instance (p)", self.action_probe)
        yield SystemCommand("Fleet: cycle theme", "dark, light, high-contrast, your pick (t)", self.action_cycle_theme)
        yield SystemCommand("Fleet: help", "Keys and statuses (?)", self.action_help)
        for name in sorted(self.state.instances)[:500]:
            yield SystemCommand("Open %s" % name, "Instance screen of %s" % name, lambda n=name: self.open_instance(n))

    def _open_cursor(self) -> None:
        if self.grid.cursor_name:
            self.open_instance(self.grid.cursor_name)

    def _toggle_select(self) -> None:
        self.grid.action_toggle_select()
