"""The Textual console: the fleet views, the instance screen, keys, the frame clock.

The app only renders ``controller.state`` (console.core.state.FleetState) and turns keys into controller
calls, through ``FleetControl`` (console/core/control.py), the one seam between the UI and the core.
Frames update the state at full rate; the app repaints at a bounded frame rate (``FRAME_INTERVAL``) from
the state's dirty set, and only changed, visible panes. The fleet actions are console/ui/fleet_actions.py,
the ``:`` commands console/ui/command_runner.py, toasts and the timeline console/ui/notices.py, the instance
screen's reuse console/ui/instance_screens.py, the top bar console/ui/header.py, themes console/ui/theming.py,
screenshots console/ui/screenshots.py.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Iterable, List, Optional, Tuple

from rich.text import Text
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input, Static

from console.core.control import FleetControl
from console.core.detail import DetailTracker, table_on_screen
from console.core.status import THEME_DEFAULTS
from console.ui import fleet_actions, theming
from console.ui.command_runner import run_command
from console.ui.hangup import CHECK_SECONDS, HangupWatch
from console.ui.header import DEMO_BANNER, fleet_header
from console.ui.idle_gc import IdleCollector
from console.ui.instance_screens import WARM_AFTER, InstanceScreens
from console.ui.notices import NoticeBoard, timeline_entries
from console.ui.screenshots import ScreenshotDelivery
from themes import TCSS_PATH
from widgets.command_bar import CommandBar
from widgets.detail_pane import DetailPane
from widgets.filter_bar import FilterBar
from widgets.fleet_grid import PANE_BUDGET, FleetGrid
from widgets.fleet_table import FleetTable, table_from_settings, toggle_view
from widgets.fleet_view import FleetView, FleetViewWidget
from widgets.footer import Footer  # Textual's, without its recompose leak (issue 15 item 11)
from widgets.help_screen import HelpScreen
from widgets.instance_screen import InstanceScreen
from widgets.messages import CursorMoved, OpenInstance, SelectionChanged
from widgets.pane import ages as pane_ages
from widgets.styles_cache import release_dead_line_caches
from widgets.timeline_screen import TimelineScreen

FRAME_INTERVAL = 0.25  # seconds between repaints (4 Hz)
LARGE_FLEET = 500  # instances: past this many the fleet view repaints every LARGE_FRAME_INTERVAL
LARGE_FRAME_INTERVAL = 1.0  # (1 Hz: figures come once a second; an open instance stays at 4 Hz, keys at once)
LARGE_PANE_BUDGET = 16  # grid panes repainted per frame there (each of ~15 visible once a frame)
TICK_INTERVAL = 1.0  # seconds between re-derivations of time-based states (stale, idle)
DETAIL_INTERVAL = 0.5  # seconds between looks at what is in view (console/core/detail.py)
FREEZE_AFTER = 2.0  # seconds after start: what is alive then is moved out of the collector's way (gc.freeze)


class FleetApp(NoticeBoard, ScreenshotDelivery):
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
        Binding("X", "stop_rental", "Stop rental", show=False),  # [actions] stop, confirmed (ui/stop_actions.py)
        Binding("t", "cycle_theme", "Theme"),
        Binding("R", "reload", "Reload"),
        Binding("e", "timeline", "Events"),
        Binding("s", "shell", "Shell"),  # ssh into the instance (read-only too: audited)
        Binding("y", "copy", "Copy"),  # ssh command, log line or evidence line (OSC 52)
        Binding("v", "toggle_view", "View"),  # grid / table (remembered)
        Binding("colon", "command", "Command"),  # :open, :diagnose, :restart, :probe, :sort, :theme
        Binding("A", "accept_host_key", "Accept key"),  # shown only where a host key waits (check_action)
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        Binding("escape", "clear", "Clear", show=False),
    ]

    def __init__(self, controller: FleetControl, theme: Optional[str] = None, bell: bool = False) -> None:
        super().__init__()
        self.controller = controller
        self.state = controller.state
        self.read_only = controller.read_only
        self.demo = controller.demo
        self.bell_enabled = bell
        self._theme_warning = theming.choose_theme(self, theme)
        self.view = FleetView()  # the cursor, selection and filter the grid and the table share
        self._last_tick = 0.0
        self._painted_at = -1e9  # time.monotonic() when paint_frame last ran through (the large fleet's 1 Hz)
        self.frames_held = 0  # frames that large fleet skipped
        # detail on demand (console/core/detail.py): agents of instances out of view send a summary
        self.detail = DetailTracker(self.state, controller.set_detail) if controller.detail_on_demand else None
        self._header_key: Any = None
        self._stopped = False
        self.idle_gc = IdleCollector()  # full collections between keys (console/ui/idle_gc.py)
        self.hangup = HangupWatch(self.action_quit)  # SIGHUP or a dead tty ends the TUI (console/ui/hangup.py)
        self.frames_painted = 0
        self.age_checks = 0  # panes looked at for text that ages by itself, all ticks together (tests, benches)
        self.instance_screens = InstanceScreens(self)  # built once, shown for each instance opened

    # -- layout --------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="topbar")
        yield FilterBar()
        yield CommandBar(self.controller, self.focus_view)  # ':' (widgets/command_bar.py)
        grid = FleetGrid(self.state, self.view, id="grid")
        grid.fleet_file = self.controller.fleet_source
        grid.retry_at = self.retry_at
        with Horizontal(id="fleet-body"):  # grid or table, and the selected instance beside it from 160 columns
            yield grid
            yield table_from_settings(self.state, self.view, grid)  # v: the table view (widgets/fleet_table.py)
            yield DetailPane(self.state, self.view, retry_at=self.retry_at, id="detail")  # (shows itself when wide)
        yield Footer()

    @property
    def grid(self) -> FleetGrid:
        return self.screen_stack[0].query_one(FleetGrid)

    def shown_view(self) -> FleetViewWidget:
        """The fleet view shown: the grid, or the table (``v``)."""
        table = self.screen_stack[0].query_one(FleetTable)
        return table if table.display else self.grid

    def focus_view(self) -> None:
        self.shown_view().focus()

    async def on_mount(self) -> None:
        if self._theme_warning:
            self.notify(self._theme_warning, severity="warning")
        self.focus_view()
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
        self.hangup.install()  # the terminal gone (SIGHUP, a dead tty): quit, as a terminal program does
        watch = getattr(self.controller, "watch", None)  # (a replay has no fleet file to follow)
        if watch is not None:
            watch.on_reload = self._reloaded  # an edit or SIGUSR1 says what it did, as R does
        self.set_interval(CHECK_SECONDS, self.hangup.check)
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
        body = self.screen_stack[0]
        try:
            grid, table, detail = body.query_one(FleetGrid), body.query_one(FleetTable), body.query_one(DetailPane)
        except Exception:
            return
        if now - self._last_tick >= TICK_INTERVAL - FRAME_INTERVAL / 2:  # (each paint of the large fleet's 1 Hz)
            self._last_tick = now
            state.tick(now)
            # panes whose text ages by itself ("last seen 2m ago", "restarted 40s ago") repaint each second: those
            # in view and the open instance (a pane scrolled into view is brought up to date at the next paint;
            # the table ages its visible rows itself), not the whole fleet each second
            candidates = self._aging_candidates(grid, table)
            self.age_checks += len(candidates)
            seen = ((n, state.instances.get(n)) for n in candidates)
            state.mark_dirty(n for n, inst in seen
                             if inst is not None and (pane_ages(inst, now) or self.retry_at(n) is not None))
        dirty = state.take_dirty()
        events = state.take_events()
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
        for text, severity in state.take_notes():  # what the core did by itself: an automatic stop announced
            self.notify(text, title="Automatic stop", severity=severity, timeout=12)
        self.frames_painted += 1

    def _aging_candidates(self, grid: FleetGrid, table: FleetTable) -> list[str]:
        """The instances whose age text can be seen now: the grid's panes in view (while the grid is shown) and
        the open instance."""
        names = [] if table.display else grid.on_screen_names()
        screen = self.screen
        if isinstance(screen, InstanceScreen):
            names.append(screen.instance_name)
        return names

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
        if self.screen_stack:  # SSH on demand (console/core/on_demand.py): the open instance's session stays
            screen = self.screen
            self.controller.keep_open(screen.instance_name if isinstance(screen, InstanceScreen) else None)
        if not self.screen_stack or not self.screen_stack[0].is_mounted:
            return
        try:
            view = self.shown_view()
        except Exception:  # closing
            return
        on_screen = view.on_screen_names() if isinstance(view, FleetGrid) else table_on_screen(view)
        screen = self.screen
        opened = screen.instance_name if isinstance(screen, InstanceScreen) else None
        # the link workers send these instances' frames as they come, the others' merged once a second
        self.controller.set_view([*on_screen, opened] if opened else on_screen)
        if self.detail is not None:
            self.detail.update(on_screen, opened)

    def retry_at(self, name: str) -> Optional[float]:
        """When ``name``'s failing link tries again (``time.time()``), None when it is not waiting to."""
        return self.controller.retry_at(name)

    def header_text(self) -> Text:
        return fleet_header(self.state, self.grid, demo=self.demo, read_only=self.read_only)

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

    # -- targets and the instance screen ---------------------------------------------------------------
    def targets(self) -> List[str]:
        """The instances a fleet action applies to: the instance screen's, the selection, or the cursor."""
        screen = self.screen
        if isinstance(screen, InstanceScreen):
            return [screen.instance_name]
        return self.view.targets(self.grid.visible_names)

    def on_open_instance(self, message: OpenInstance) -> None:
        self.open_instance(message.name)

    def open_instance(self, name: str, tab: str = "tab-gpus") -> None:
        self.instance_screens.open(name, tab)

    def warm_instance_screen(self) -> None:
        self.instance_screens.warm()

    # -- messages ------------------------------------------------------------------------------------
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
            self.focus_view()
            self._apply_filter(event.value)

    def _apply_filter(self, query: str) -> None:
        """The filter as typed: the grid narrows down, the header counts it, the table and detail pane follow now."""
        self.grid.set_query(query)
        self.update_header()
        self._poll_now(FleetTable, DetailPane)

    def on_command_bar_run(self, message: CommandBar.Run) -> None:
        run_command(self, message.command)

    # -- actions -------------------------------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_timeline(self) -> None:
        """The event timeline: this session's notices and, from the history file, what came before."""
        if not isinstance(self.screen, TimelineScreen):
            self.push_screen(TimelineScreen(self.timeline_entries()))

    def timeline_entries(self, limit: int = 500) -> List[Tuple[float, str, str]]:
        return timeline_entries(self.session_events, self.controller, limit)

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
        """Any theme change is remembered: ``t``, and a pick in the palette (Textual's own themes too)."""
        self.call_after_refresh(theming.remember_shown_theme, self)

    def action_cycle_theme(self) -> None:
        theming.cycle_theme(self)

    def action_reload(self) -> None:
        """Re-read the fleet file and re-run its imports (the controller keeps unchanged instances as they are)."""
        self.run_worker(self._reload(), group="reload", exclusive=True)

    async def _reload(self) -> None:
        self._reloaded(await self.controller.reload())

    def _reloaded(self, message: str) -> None:
        source = str(getattr(getattr(self.controller, "fleet", None), "source", "") or "")
        if source and "/" in source:  # a toast is one line: the file's name, so that what changed shows
            message = message.replace(source, source.rsplit("/", 1)[1])
        self.notify(message, severity="error" if "not reloaded" in message else "information", timeout=6)

    def action_diagnose(self) -> None:
        names = self.targets()
        if not names:
            self.notify("no instance to diagnose", severity="warning")
            return
        fleet_actions.diagnose(self, names)

    def action_diagnose_current(self) -> None:
        self.action_diagnose()

    def action_restart(self) -> None:
        names = self.targets()
        if not names:
            self.notify("no instance to restart", severity="warning")
            return
        fleet_actions.confirm_restart(self, names)

    def action_stop_rental(self) -> None:
        from console.ui.stop_actions import confirm_stop

        names = self.targets()
        if names:
            confirm_stop(self, names)

    def action_restart_current(self) -> None:
        self.action_restart()

    def action_refuse_restart(self) -> None:
        """Read-only mode's ``r`` (the footer does not offer it): the refusal is said and audited."""
        self.action_restart()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In read-only mode the restart bindings are hidden (``r`` falls to ``refuse_restart``)."""
        if action in ("restart", "restart_current"):
            return not self.read_only
        if action == "refuse_restart":
            return self.read_only
        if action == "accept_host_key":  # the footer says "A Accept key" where an unknown host key waits
            return self._host_key_waiting() is not None
        return True

    def _host_key_waiting(self) -> Optional[str]:
        """The instance (the screen's, else the cursor's) whose link was offered an unknown host key."""
        with contextlib.suppress(Exception):  # (asked while screens come and go)
            screen = self.screen
            name = screen.instance_name if isinstance(screen, InstanceScreen) else self.grid.cursor_name
            offer = self.controller.host_key_offer(name) if name else None
            if offer is not None and not offer.changed:
                return name
        return None

    def action_accept_host_key(self) -> None:
        """``A``: trust the unknown host key the instance (the screen's or the cursor's) offers
        (console/ui/fleet_actions.py)."""
        name = self._host_key_waiting()
        if name is not None:
            fleet_actions.accept_host_key(self, name)

    def action_probe(self) -> None:
        screen = self.screen
        fleet_actions.choose_probe(self, screen.instance_name if isinstance(screen, InstanceScreen)
                                   else self.grid.cursor_name)

    def action_probe_current(self) -> None:
        self.action_probe()

    def action_shell(self) -> None:
        """``s``: suspend the console, ``ssh`` into the instance with its settings, come back (console/ui/shell.py)."""
        from console.ui.shell import open_shell, shell_target

        self.run_worker(open_shell(self, shell_target(self)), group="shell", exclusive=True)

    def action_command(self) -> None:
        """``:``: the command bar (k9s-style; widgets/command_bar.py, parsed by console/core/command_mode.py)."""
        if len(self.screen_stack) == 1:
            self.screen_stack[0].query_one(CommandBar).open()

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

    # -- leaving -------------------------------------------------------------------------------------
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
        self.hangup.uninstall()
        await self.stop_controller()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.InputEvent):  # keys and the mouse: not the moment for a full collection
            self.idle_gc.saw_input()
        await super().on_event(event)

    async def _shutdown(self) -> None:
        await self.instance_screens.settle()  # (one being built in the background first finishes mounting)
        await super()._shutdown()

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


__all__ = ["DEMO_BANNER", "FREEZE_AFTER", "FleetApp"]
