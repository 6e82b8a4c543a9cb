"""The instance screen (Enter on a pane): GPU detail, process tree, log tabs, diagnosis, probe output."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Dict, List, Mapping, Optional

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer, VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Input, Static, TabbedContent, TabPane

from console.agent.timefmt import fmt_age as format_age
from console.state import FleetState, InstanceState
from console.status import STALE, badge

from .gpu_panel import GpuPanel
from .log_view import LogView
from .pane import retry_text
from .process_panel import ProcessPanel
from .render import operator_text, short_path

SEVERITY_STYLE = {"critical": "bold reverse red", "error": "bold red", "warning": "yellow", "info": "dim"}
TABS = ("tab-gpus", "tab-procs", "tab-logs", "tab-diag", "tab-probes")


STEP_STYLE = {"ok": "green", "problem": "bold red", "info": "", "skipped": "dim"}


def _verdict_line(verdict: Mapping[str, Any]) -> str:
    """The verdict's summary, its code said once (``healthy: healthy: ...`` nowhere)."""
    summary = operator_text(str(verdict.get("summary") or verdict.get("code") or "?"))
    code = str(verdict.get("code") or "")
    for word in {code, code.replace("_", " "), str(verdict.get("label") or "")} - {""}:
        while summary.lower().startswith(word.lower() + ": " + word.lower() + ": "):
            summary = summary[len(word) + 2:]
    return summary


def diagnosis_text(inst: InstanceState) -> Text:
    diag = inst.diagnosis
    text = Text()
    if not diag:
        text.append("No diagnosis yet — press d to diagnose %s.\n" % inst.name, "dim")
        return text
    verdict = diag.get("verdict") or {}
    sev = verdict.get("severity") or "info"
    text.append(" %s " % sev.upper(), SEVERITY_STYLE.get(sev, "bold") + (" reverse" if sev != "critical" else ""))
    summary = _verdict_line(verdict)
    text.append(" %s" % summary, "bold")
    code = str(verdict.get("code") or "")
    if code and not summary.lower().startswith(code.replace("_", " ").lower()):
        text.append("  [%s]" % code, "dim")
    if inst.diagnosis_at:
        text.append("  (%s ago)" % format_age(time.time() - inst.diagnosis_at), "dim")
    text.append("\n")
    for finding in diag.get("findings") or []:
        fsev = finding.get("severity") or "info"
        text.append("\n%-8s " % fsev.upper(), SEVERITY_STYLE.get(fsev, ""))
        text.append(operator_text(str(finding.get("summary") or "")), "bold")
        if finding.get("code"):
            text.append("  [%s]" % finding["code"], "dim")
        text.append("\n")
        full_paths: List[str] = []
        for ev in finding.get("evidence") or []:
            path = str(ev.get("path") or "")
            where = short_path(path)
            if where != path and path not in full_paths:
                full_paths.append(path)
            if ev.get("line") is not None:
                where += ":%s" % ev["line"]
            text.append("    %s" % where, "cyan")
            if ev.get("text"):
                text.append("  %s" % ev["text"])
            text.append("\n")
        for path in full_paths:  # the file's full path once, under its lines
            text.append("      in %s\n" % path, "dim")
    steps = [s for s in diag.get("steps") or [] if not (isinstance(s, dict) and s.get("name") == "verdict")]
    if steps:  # (the verdict step repeats the line at the top)
        text.append("\nWhat was checked\n", "bold")
        width = max((len(str(s.get("name", "?"))) for s in steps if isinstance(s, dict)), default=10) + 1
        for step in steps:
            if not isinstance(step, dict):
                text.append("  · %s\n" % step, "dim")
                continue
            status = str(step.get("status") or "")
            text.append("  %s" % str(step.get("name", "?")).ljust(width))
            text.append("%-8s" % status, STEP_STYLE.get(status, "dim"))
            text.append("%s\n" % operator_text(str(step.get("summary") or "")))
            for line in step.get("lines") or []:
                text.append("      %s\n" % line, "dim")
    return text


def probes_text(inst: InstanceState) -> Text:
    text = Text(no_wrap=True)
    if not inst.probes:
        text.append("No probe output yet — press p to run a probe.\n", "dim")
        return text
    for name, data in sorted(inst.probes.items(), key=lambda kv: kv[1].get("at", 0)):  # the newest last
        text.append("%s" % data.get("title") or name, "bold")
        text.append("  (%s, %s ago)\n" % (name, format_age(time.time() - data.get("at", time.time()))), "dim")
        for line in data.get("lines") or []:
            text.append("  %s\n" % line)
        text.append("\n")
    return text


def header_text(inst: InstanceState, demo: bool, read_only: bool, retry_at: Optional[float] = None) -> Text:
    text = Text()
    text.append(" %s " % inst.name, "bold reverse")
    label = badge(inst.status)
    if inst.status == STALE and inst.age() is not None:
        label += " " + format_age(inst.age() or 0)
    text.append(" %s " % label, "bold")
    if inst.status_detail:
        text.append(operator_text(inst.status_detail) + "  ", "italic")
    retry = retry_text(retry_at, time.time())
    if retry:
        text.append(retry + "  ", "bold")
    addr = "%s@%s:%s" % (inst.user or "?", inst.host, inst.port or 22)
    text.append(addr, "dim")
    if inst.tags:
        text.append("  [%s]" % ",".join(inst.tags), "dim")
    flags = inst.flags()
    if flags:
        text.append("  " + ", ".join(flags), "bold")
    if demo:
        text.append("  DEMO fleet — simulated GPUs", "bold reverse")
    if read_only:
        text.append("  READ-ONLY", "bold reverse")
    age = inst.age()
    if age is not None:
        text.append("  last data %s ago" % format_age(age), "dim")
    return text


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
        Binding("d", "app.diagnose_current", "Diagnose"),
        Binding("r", "app.restart_current", "Restart"),
        Binding("r", "app.refuse_restart", "Restart", show=False),  # read-only mode (the app hides the other)
        Binding("p", "app.probe_current", "Probes"),
        Binding("A", "app.accept_host_key", "Accept host key", show=False),  # an unknown key: confirmed, audited
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(
        self, state: FleetState, name: str, *, demo: bool = False, read_only: bool = False, tab: str = "tab-gpus"
    ) -> None:
        super().__init__()
        self.initial_tab = tab if tab in TABS else "tab-gpus"
        self.state = state
        self.instance_name = name
        self.demo = demo
        self.read_only = read_only
        self._log_ids: Dict[str, str] = {}
        self._log_chosen = False  # the operator picked a log file: it stays the active one
        self._seen: Dict[str, Any] = {}

    @property
    def inst(self) -> Optional[InstanceState]:
        return self.state.instances.get(self.instance_name)

    def compose(self) -> ComposeResult:
        yield Static(id="inst-header")
        with TabbedContent(id="inst-tabs", initial=self.initial_tab):
            with TabPane("GPUs", id="tab-gpus"), VerticalScroll(can_focus=False):  # keys go to the GPU lines
                yield GpuPanel(id="gpu-detail")
            with TabPane("Processes", id="tab-procs"):
                yield ProcessPanel(self.instance_name, id="proc-panel")  # header, tree/flat, filter, k/K
            with TabPane("Logs", id="tab-logs"):
                yield Static("No log files followed yet.", id="logs-empty", classes="empty")
                yield TabbedContent(id="log-tabs")
            with TabPane("Diagnosis", id="tab-diag"), VerticalScroll():
                yield Static(id="diag-text")
            with TabPane("Probes", id="tab-probes"), ScrollableContainer():
                yield Static(id="probe-text")  # command output: long lines scroll sideways, never wrap
        yield Input(placeholder="search the log (enter: find, then n / N; esc: close)", id="log-search", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        inst = self.inst
        if inst is not None:
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
        retry_at = getattr(self.app, "retry_at", lambda name: None)(inst.name)  # a failing link's next try
        self.query_one("#inst-header", Static).update(header_text(inst, self.demo, self.read_only, retry_at))
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
                self.query_one("#diag-text", Static).update(diagnosis_text(inst))
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
                pane_id = "log-%d" % len(self._log_ids)
                self._log_ids[path] = pane_id
                title = os.path.basename(path) or path
                if path == inst.bench_log:
                    title = "[benchmark] " + title
                # a file name is host text: plain Content, never parsed as markup ("[link=...]", "[/")
                tabs.add_pane(TabPane(Content(title), LogView(ring, id=pane_id + "-view"), id=pane_id))
                self.query_one("#logs-empty").display = False
                if path == inst.bench_log and not self._log_chosen:
                    self.call_after_refresh(self._show_log, pane_id)  # the benchmark's own log first
        if visible:
            view = self.active_log()
            if view is not None and view.is_mounted:
                view.sync()

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
        search = self.query_one("#log-search", Input)
        search.add_class("-shown")
        search.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "log-search":
            return
        event.stop()
        view = self.active_log()
        if view is None:
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
                search.remove_class("-shown")
                view = self.active_log()
                if view is not None:
                    view.focus()
