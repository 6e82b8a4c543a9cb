"""The instance screen (Enter on a pane): GPU detail, process tree, log tabs, diagnosis, probe output."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input, Static, TabbedContent, TabPane, Tabs

from console.core.control import FleetControl
from console.core.state import InstanceState, LogRing

from .diagnosis_text import diagnosis_text, probes_text
from .evidence_view import EvidenceView
from .footer import Footer  # Textual's, without its recompose leak (issue 15 item 11)
from .gpu_panel import GpuPanel
from .instance_header import header_text
from .log_grep import GrepScreen
from .log_view import LogView
from .process_panel import ProcessPanel
from .styles_cache import release_dead_line_caches, release_query_caches

TABS = ("tab-gpus", "tab-procs", "tab-logs", "tab-diag", "tab-probes")


LOG_INPUT_PLACEHOLDERS = {
    "search": "search the log (enter: find, then n / N; esc: close)",
    "filter": "filter: only lines with this text (as you type; enter: keep; esc: clear)",
    "grep": "grep the whole file on the host (enter: run; hits with line numbers)",
}


class LogTabs(TabbedContent):
    """The log files' tabs. Emptied when the screen shows another instance, while the first pane's activation
    (queued by Textual when a pane is added to empty tabs) may still be on its way: an activation of a tab
    that is gone is dropped here, where TabbedContent would raise "No Tab with id" and end the app."""

    def _on_tabs_tab_activated(self, event: Tabs.TabActivated) -> None:
        # Textual calls the handler of each class in the MRO: this one runs first, and prevent_default keeps
        # TabbedContent's from running for a tab that is gone
        tab_id = event.tab.id
        if tab_id is not None and self._is_associated_tabs(event.tabs) and not event.tabs.query(f"#{tab_id}"):
            event.prevent_default()
            event.stop()

    def _on_tabs_cleared(self, event: Tabs.Cleared) -> None:
        # clear_panes posts Cleared at once and removes the old tabs later: a pane added and activated
        # meanwhile (the next instance's log) must not be deactivated by that late message (issue 35 item 7)
        if self._is_associated_tabs(event.tabs) and event.tabs.active:
            event.prevent_default()
            event.stop()


class InstanceScreen(Screen):
    """One instance in detail. The app calls ``update_from_state()`` when the instance changed."""

    DEFAULT_CSS = """
    InstanceScreen #inst-header { height: auto; max-height: 2; background: $panel; padding: 0 1; }
    InstanceScreen TabbedContent { height: 1fr; }
    InstanceScreen TabPane { padding: 0; }
    InstanceScreen #log-search { display: none; height: 1; border: none; }
    InstanceScreen #log-search.-shown { display: block; }
    InstanceScreen .empty { color: $text-muted; padding: 0 1; }
    InstanceScreen #probe-text { width: auto; }
    """

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("q", "back", "Back", show=False),  # q leaves this screen; the app quits from the grid (or ctrl+q)
        Binding("tab", "next_tab(1)", "Next tab", show=False),
        Binding("shift+tab", "next_tab(-1)", "Previous tab", show=False),
        Binding("right_square_bracket", "next_log(1)", "Next log", show=False),
        Binding("left_square_bracket", "next_log(-1)", "Previous log", show=False),
        Binding("1", "tab(0)", "GPUs", show=False),
        Binding("2", "tab(1)", "Procs", show=False),
        Binding("3", "tab(2)", "Logs", show=False),
        Binding("4", "tab(3)", "Diagnosis", show=False),
        Binding("5", "tab(4)", "Probes", show=False),
        Binding("slash", "search", "Search log"),
        Binding("ctrl+f", "search", "Search log", show=False),
        Binding("ampersand", "filter", "Filter log", show=False),  # less's key: only matching lines; esc clears
        Binding("g", "grep", "Grep log on host", show=False),  # the whole file, on the host (op grep)
        Binding("d", "app.diagnose_current", "Diagnose"),
        Binding("r", "app.restart_current", "Restart"),
        Binding("r", "app.refuse_restart", "Restart", show=False),  # read-only mode (the app hides the other)
        Binding("p", "app.probe_current", "Probes"),
        Binding("A", "app.accept_host_key", "Accept key"),  # shown where an unknown key waits: confirmed, audited
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, control: FleetControl, name: str, *, tab: str = "tab-gpus") -> None:
        super().__init__()
        self.control = control  # what it shows (control.state) and asks (logs, greps, signals, history)
        self.state = control.state
        self.demo = control.demo
        self.read_only = control.read_only
        self._log_serial = 0  # log pane ids are never reused: a removed pane may still be leaving the DOM
        self._styled_at: Optional[int] = None  # the app's CSS update count its nodes were styled with
        self.show_instance(name, tab)  # not mounted yet: sets the per-instance fields compose reads

    @property
    def inst(self) -> Optional[InstanceState]:
        return self.state.instances.get(self.instance_name)

    def compose(self) -> ComposeResult:
        yield Static(id="inst-header")
        with TabbedContent(id="inst-tabs", initial=self.initial_tab):
            with TabPane("GPUs", id="tab-gpus"), VerticalScroll(can_focus=False):  # keys go to the GPU lines
                yield GpuPanel(self.control, id="gpu-detail")
            with TabPane("Processes", id="tab-procs"):
                yield ProcessPanel(self.instance_name, self.control, id="proc-panel")  # header, tree/flat, filter, k/K
            with TabPane("Logs", id="tab-logs"):
                yield Static("No log files followed yet.", id="logs-empty", classes="empty")
                yield LogTabs(id="log-tabs")
            with TabPane("Diagnosis", id="tab-diag"), VerticalScroll():
                yield EvidenceView(id="diag-text")  # a Static; up/down choose an evidence line, enter opens it
            with TabPane("Probes", id="tab-probes"), ScrollableContainer():
                yield Static(id="probe-text")  # command output: long lines scroll sideways, never wrap
        yield Input(placeholder="search the log (enter: find, then n / N; esc: close)", id="log-search", compact=True)
        yield Footer()

    def on_unmount(self) -> None:
        release_dead_line_caches()  # else Textual keeps this screen's rendered lines (widgets/styles_cache.py)

    def on_screen_suspend(self) -> None:
        release_dead_line_caches()  # the lines of log views show_instance removed (widgets/styles_cache.py)

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Runs before Textual's own handler, which restyles every node of a screen shown (~30-50 ms for
        this one's): shown again with the CSS its nodes were styled with (no theme or CSS change since, by
        the app's count of them), it needs no restyle; its own class changes restyle their nodes anyway."""
        count = self.app._css_update_count
        if self._styled_at == count:
            event.refresh_styles = False
        self._styled_at = count

    def on_mount(self) -> None:
        self._styled_at = self.app._css_update_count  # styled as it mounted
        inst = self.inst
        if inst is not None:
            with contextlib.suppress(NoMatches):  # built in the background as the app quits: pruned already
                self._update(inst, force=True)
        self.call_after_refresh(self.focus_content)  # the first tab's content has the keys, not the tab bar

    # -- another instance on the same screen ----------------------------------------------------------
    def show_instance(self, name: str, tab: str = "tab-gpus") -> None:
        """Show ``name`` on this (already built) screen, as a new screen would: nothing of the instance shown
        before stays (log panes, process view, chosen GPU, filters, scroll positions, focus).

        Building the screen's widgets and styling them costs ~150 ms; the app keeps one screen and points it
        at the next instance, so opening one costs a paint (issue 19: open <= 150 ms at 1000 hosts)."""
        self.instance_name = name
        self.initial_tab = tab if tab in TABS else "tab-gpus"
        self._log_ids: Dict[str, str] = {}  # log path -> its pane's id
        self._log_chosen = False  # the operator picked a log file: it stays the active one
        self._input_mode = "search"  # what #log-search is for now: search | filter | grep
        self._seen: Dict[str, Any] = {}  # what each tab last showed (versions), to repaint only on change
        if not self.is_mounted:  # composed on its first show: compose and on_mount read the fields above
            return
        self.workers.cancel_group(self, "log-grep")  # a grep of the last instance's log answers nobody now
        with contextlib.suppress(NoMatches):
            self.query_one("#gpu-detail", GpuPanel).forget()
            self.query_one(ProcessPanel).forget(name)
            self.query_one("#diag-text", EvidenceView).show(Text(), [])
            self.query_one("#probe-text", Static).update("")
            search = self.query_one("#log-search", Input)
            search.remove_class("-shown")
            search.value = ""
            log_tabs = self.query_one("#log-tabs", TabbedContent)
            release_query_caches(log_tabs)  # else they keep the last instance's removed tabs
            log_tabs.clear_panes()
            self.query_one("#logs-empty").display = True
            for box in self.query(ScrollableContainer):  # the GPU, Diagnosis and Probes tabs open at the top
                box.scroll_home(animate=False)
            self.query_one("#inst-tabs", TabbedContent).active = self.initial_tab
        self.set_focus(None)  # nothing of the last instance's keeps the keys
        self.call_after_refresh(self.focus_content)  # the tab's content has them: the GPU lines' ↑↓ and z at once
        inst = self.inst
        if inst is not None:
            with contextlib.suppress(NoMatches):
                self._update(inst, force=True)

    # -- state -> widgets ----------------------------------------------------------------------------
    def update_from_state(self, force: bool = False) -> None:
        """Repaint what changed; a no-op while the screen is still composing or already closing."""
        inst = self.inst
        if inst is None or not self.is_mounted:
            return
        with contextlib.suppress(NoMatches):
            self._update(inst, force)

    def _update(self, inst: InstanceState, force: bool) -> None:
        retry_at = self.control.retry_at(inst.name)  # a failing link's next try
        width = max(20, (self.size.width or self.app.size.width) - 2)  # (the header's padding)
        self.query_one("#inst-header", Static).update(header_text(inst, self.demo, self.read_only, retry_at, width))
        active = self.query_one("#inst-tabs", TabbedContent).active
        if force or active == "tab-gpus":
            self.query_one("#gpu-detail", GpuPanel).show(inst, 0, time.time(), force=force)
        if (force or active == "tab-procs") and self._seen.get("procs") != inst.procs_version:
            self._seen["procs"] = inst.procs_version
            self.query_one(ProcessPanel).show(inst)
        if self._seen.get("logs") != inst.logs_version:
            self._seen["logs"] = inst.logs_version
            self._sync_logs(inst, active == "tab-logs" or force)
        if force or active == "tab-diag":
            key = (id(inst.diagnosis), inst.diagnosis_at)
            if force or self._seen.get("diag") != key:
                self._seen["diag"] = key
                rows: List[Tuple[int, str, Optional[int]]] = []
                text = diagnosis_text(inst, rows)
                self.query_one("#diag-text", EvidenceView).show(text, rows)
        if force or active == "tab-probes":
            probes_key = tuple((k, v.get("at")) for k, v in inst.probes.items())
            if force or self._seen.get("probes") != probes_key:
                self._seen["probes"] = probes_key
                self.query_one("#probe-text", Static).update(probes_text(inst))
                # output opens at its tail (a kernel log's last lines, not its boot lines)
                box = self.query_one("#tab-probes ScrollableContainer", ScrollableContainer)
                self.call_after_refresh(box.scroll_end, animate=False, x_axis=False)

    def _sync_logs(self, inst: InstanceState, visible: bool) -> None:
        tabs = self.query_one("#log-tabs", TabbedContent)
        for path, ring in inst.logs.items():
            if path not in self._log_ids:
                pane_id = self._new_log_id(path)
                title = os.path.basename(path) or path
                if path == inst.bench_log:
                    title = "[benchmark] " + title
                # a file name is host text: plain Content, never parsed as markup ("[link=...]", "[/")
                tabs.add_pane(TabPane(Content(title), self._log_view(ring, pane_id), id=pane_id))
                self.query_one("#logs-empty").display = False
                if path == inst.bench_log and not self._log_chosen:
                    self.call_after_refresh(self._show_log, pane_id)  # the benchmark's own log first
                else:  # log tabs emptied for another instance stay without an active pane till one is set
                    self.call_after_refresh(self._ensure_active_log)
        if visible:
            view = self.active_log()
            if view is not None and view.is_mounted:
                view.sync()

    def _new_log_id(self, path: str) -> str:
        self._log_serial += 1
        pane_id = self._log_ids[path] = "log-%d" % self._log_serial
        return pane_id

    def _ensure_active_log(self, tries: int = 20) -> None:
        try:
            tabs = self.query_one("#log-tabs", TabbedContent)
            ids = list(self._log_ids.values())
            if ids and tabs.active not in ids:
                tabs.active = ids[0]
        except (NoMatches, ValueError):  # the pane is still mounting
            if tries > 0:
                self.set_timer(0.05, lambda: self._ensure_active_log(tries - 1))

    def _show_log(self, pane_id: str) -> None:
        with contextlib.suppress(NoMatches, ValueError):
            tabs = self.query_one("#log-tabs", TabbedContent)
            tabs.active = pane_id
            if self.query_one("#inst-tabs", TabbedContent).active == "tab-logs":
                self.focus_content()

    def active_log(self) -> Optional[LogView]:
        tabs = self.query_one("#log-tabs", TabbedContent)
        pane = tabs.active_pane
        if pane is None:
            return None
        views = pane.query(LogView)
        return views.first() if views else None

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.update_from_state(force=False)
        if event.tabbed_content.id == "log-tabs" or event.pane.id == "tab-logs":
            view = self.active_log()
            if view is not None and view.is_mounted:
                view.sync()

    # -- actions -------------------------------------------------------------------------------------
    def action_back(self) -> None:
        search = self.query_one("#log-search", Input)
        if search.has_class("-shown"):
            search.remove_class("-shown")
            return
        view = self.active_log()
        if view is not None and view.filter and self.query_one("#inst-tabs", TabbedContent).active == "tab-logs":
            view.set_filter("")  # esc clears the log's filter first, then leaves
            return
        self.app.pop_screen()

    def action_tab(self, index: int) -> None:
        with contextlib.suppress(NoMatches):  # a key pressed while the screen is still composing
            self.query_one("#inst-tabs", TabbedContent).active = TABS[index]
            self.call_after_refresh(self.focus_content)

    def action_next_tab(self, step: int) -> None:
        with contextlib.suppress(NoMatches):
            active = self.query_one("#inst-tabs", TabbedContent).active
            index = TABS.index(active) if active in TABS else 0
            self.action_tab((index + step) % len(TABS))

    def action_next_log(self, step: int) -> None:
        """``]`` / ``[``: the next / previous log file, from any tab."""
        with contextlib.suppress(NoMatches):
            tabs = self.query_one("#log-tabs", TabbedContent)
            ids = list(self._log_ids.values())
            if not ids:
                return
            current = tabs.active if tabs.active in ids else ids[0]
            self.query_one("#inst-tabs", TabbedContent).active = "tab-logs"
            tabs.active = ids[(ids.index(current) + step) % len(ids)] if tabs.active in ids else current
            self._log_chosen = True
            self.call_after_refresh(self.focus_content)

    def focus_content(self) -> None:
        """Give the keys to what the tab shows (arrows and PgDn scroll it), not to the tab bar."""
        with contextlib.suppress(NoMatches):
            active = self.query_one("#inst-tabs", TabbedContent).active
            if active == "tab-logs":
                view = self.active_log()
                if view is not None:
                    view.focus()
                return
            if active == "tab-diag":
                self.query_one("#diag-text", EvidenceView).focus()
                return
            pane = self.query_one("#" + active, TabPane)
            for widget in pane.query("*"):
                if widget.focusable:
                    widget.focus()
                    return

    def action_search(self) -> None:
        self.query_one("#inst-tabs", TabbedContent).active = "tab-logs"
        if self.active_log() is None:
            self.notify("no log to search yet", severity="warning")
            return
        self._open_input("search")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        event.stop()
        view = self.active_log()
        if view is None:
            return
        if self._input_mode != "search":
            self._submit_log_tool(view, event.input)
            return
        if event.value != view.search:
            view.set_search(event.value)
        else:
            view.action_next_match()
        view.focus()  # n / N (and enter) go on from the match; the box stays until esc

    def on_key(self, event) -> None:
        if event.key == "escape":
            search = self.query_one("#log-search", Input)
            if search.has_focus:
                event.stop()
                if self._input_mode == "filter":  # esc in the filter box drops the filter
                    view = self.active_log()
                    if view is not None:
                        view.set_filter("")
                search.remove_class("-shown")
                view = self.active_log()
                if view is not None:
                    view.focus()

    # -- log tools: & filter, g grep on the host, older lines, evidence -> its log line -----------------------
    def _log_view(self, ring: LogRing, pane_id: str) -> LogView:
        """A log's view; it reads older lines through the controller (agent op ``read``) when hosts can be asked."""
        view = LogView(ring, id=pane_id + "-view")
        if self.control.live:
            control, name = self.control, self.instance_name

            async def load(path: str, before: Optional[int], n: int) -> Dict[str, Any]:
                return await control.read_log(name, path, before, n)

            view.loader = load
        return view

    def _open_input(self, mode: str) -> None:
        with contextlib.suppress(NoMatches):
            self.query_one("#inst-tabs", TabbedContent).active = "tab-logs"
        view = self.active_log()
        if view is None:
            self.notify("no log to %s yet" % mode, severity="warning")
            return
        self._input_mode = mode
        box = self.query_one("#log-search", Input)
        box.placeholder = LOG_INPUT_PLACEHOLDERS[mode]
        box.value = {"search": view.search, "filter": view.filter}.get(mode, "")
        box.add_class("-shown")
        box.focus()

    def action_filter(self) -> None:
        self._open_input("filter")

    def action_grep(self) -> None:
        self._open_input("grep")

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search" and self._input_mode == "filter" and event.input.has_class("-shown"):
            view = self.active_log()
            if view is not None:
                view.set_filter(event.value)  # as typed: the lines narrow down with each key

    def _submit_log_tool(self, view: LogView, box: Input) -> None:
        box.remove_class("-shown")
        view.focus()
        if self._input_mode == "filter":
            view.set_filter(box.value)
            return
        pattern = box.value.strip()
        if pattern:
            self.run_worker(self._grep(view.path, pattern), group="log-grep", exclusive=True, exit_on_error=False)

    async def _grep(self, path: str, pattern: str) -> None:
        if not self.control.live:
            self.notify("grep needs a live agent", severity="warning")
            return
        self.notify("grep %r in %s on the host…" % (pattern, path), timeout=2)
        try:
            data = await self.control.grep_log(self.instance_name, path, pattern)
        except Exception as exc:  # ActionError, a dropped link: one line, the screen stays
            self.notify("grep %s: %s" % (path, exc), severity="warning", timeout=6)
            return
        hits = [(int(n), str(t)) for n, t in data.get("hits") or []]
        note = ""
        if data.get("timed_out"):
            note = "stopped after %d lines (time limit)" % int(data.get("lines") or 0)
        elif data.get("truncated"):
            note = "the first %d hits" % len(hits)

        def jump(line: Optional[int]) -> None:
            if line is not None:
                self.open_log_at(path, line)

        self.app.push_screen(GrepScreen(path, pattern, hits, note), jump)

    def on_evidence_view_open(self, message: EvidenceView.Open) -> None:
        message.stop()
        if not message.path.startswith("/"):  # "dmesg": the kernel log is no file (p runs the dmesg probe)
            self.notify("%s is not a log file here" % message.path, severity="warning", timeout=4)
            return
        self.open_log_at(message.path, message.line)

    def open_log_at(self, path: str, line: Optional[int]) -> None:
        """The Logs tab on ``path`` (a pane of its own when it is not followed), scrolled to ``line``, marked."""
        inst = self.inst
        if inst is None:
            return
        pane_id = self._log_ids.get(path)
        if pane_id is None:
            pane_id = self._new_log_id(path)
            ring = inst.logs.get(path) or LogRing(path)  # not followed: its lines come from the host only
            tabs = self.query_one("#log-tabs", TabbedContent)
            tabs.add_pane(TabPane(Content(os.path.basename(path) or path), self._log_view(ring, pane_id), id=pane_id))
            self.query_one("#logs-empty").display = False
        self._log_chosen = True
        self.query_one("#inst-tabs", TabbedContent).active = "tab-logs"
        self.call_after_refresh(self._goto, pane_id, line, 20)

    def _goto(self, pane_id: str, line: Optional[int], tries: int) -> None:
        with contextlib.suppress(NoMatches):
            tabs = self.query_one("#log-tabs", TabbedContent)
            views = self.query("#%s-view" % pane_id)
            view = views.first() if views else None
            if not isinstance(view, LogView) or not view.is_mounted:
                if tries > 0:  # the pane was just added: wait for it to mount
                    self.set_timer(0.05, lambda: self._goto(pane_id, line, tries - 1))
                return
            tabs.active = pane_id
            view.focus()
            if line is not None:
                view.goto_line(line)
