"""The Processes tab: a column header, the process tree (or flat list), a filter box and the selected
process's full command line; ``T`` / ``K`` send TERM / KILL to the selected process through the agent (``j`` /
``k`` move, as everywhere else: htop's and k9s's capitals for the signals).

The keys are this widget's own, so they act only while the tab has the focus (``/`` searches the log
elsewhere on the instance screen). A signal is confirmed first, refused (and audited) in read-only mode,
and carried out by the controller's ``signal_process`` (the agent's op ``signal``: no shell text).
"""

from __future__ import annotations

from typing import Optional

from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static, Tree

from console.agent.wire.protocol import ProcRecord
from console.core.actions import ReadOnlyError
from console.core.control import FleetControl
from console.core.state import InstanceState

from .confirm_screen import ConfirmScreen
from .process_tree import SORT_KEYS, ProcessTree, detail_text, header_line

SIGNAL_NOTES = {
    "TERM": "SIGTERM asks it to exit (it may clean up, or ignore it). Recorded in the audit log.",
    "KILL": "SIGKILL ends it at once, without cleanup. Recorded in the audit log.",
}


class ProcessPanel(Vertical):
    """Header, tree, filter box and detail line of one instance's processes. ``show(inst)`` repaints it."""

    DEFAULT_CSS = """
    ProcessPanel { height: 1fr; }
    ProcessPanel #proc-header { height: 1; background: $panel; }
    ProcessPanel #proc-filter { display: none; height: 1; border: none; }
    ProcessPanel #proc-filter.-shown { display: block; }
    ProcessPanel #proc-detail { height: auto; max-height: 3; background: $panel; padding: 0 1; }
    """

    BINDINGS = [
        Binding("t", "toggle_flat", "Tree/flat"),
        Binding("o", "cycle_sort", "Sort", show=False),
        Binding("slash", "filter", "Filter"),
        Binding("f", "filter", "Filter", show=False),
        Binding("plus,equals_sign", "expand_all", "Expand all", show=False),
        Binding("minus", "collapse_all", "Collapse all", show=False),
        Binding("j", "move(1)", "Down", show=False),  # vim's keys move here too (issue 35 item 10)
        Binding("k", "move(-1)", "Up", show=False),
        Binding("T", "signal('TERM')", "TERM"),
        Binding("K", "signal('KILL')", "KILL"),
        Binding("escape", "close_filter", "Close filter", show=False),
    ]

    def __init__(self, instance_name: str, control: FleetControl, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.instance_name = instance_name
        self.control = control  # signal_process carries the signal out (and refuses it read-only)
        self._inst: Optional[InstanceState] = None

    def compose(self) -> ComposeResult:
        yield Static(header_line(False, SORT_KEYS[0]), id="proc-header")
        yield ProcessTree(id="proc-tree")  # first focusable: the tab gives it the keys
        yield Input(placeholder="filter: pid, name or command line (enter: keep, esc: clear)", id="proc-filter",
                    compact=True)
        yield Static(detail_text(None), id="proc-detail")

    @property
    def proc_tree(self) -> ProcessTree:
        return self.query_one(ProcessTree)

    def forget(self, instance_name: str) -> None:
        """Start over for ``instance_name``: no processes, filter or view settings of the one shown before."""
        self.instance_name = instance_name
        self._inst = None
        box = self.query_one("#proc-filter", Input)
        box.remove_class("-shown")
        box.value = ""
        self.proc_tree.forget()
        self._paint()

    # -- state -> widgets ----------------------------------------------------------------------------
    def show(self, inst: InstanceState) -> None:
        self._inst = inst
        tree = self.proc_tree
        tree.update_procs(inst.shown_procs(), inst.bench_patterns)
        self._paint()

    def _paint(self) -> None:
        tree = self.proc_tree
        total = len(self._inst.shown_procs()) if self._inst is not None else 0
        self.query_one("#proc-header", Static).update(
            header_line(tree.flat, tree.sort_key, tree.filter_text, tree.shown, total))
        self._paint_detail()

    def _paint_detail(self) -> None:
        rec = self.proc_tree.selected()
        bench = rec is not None and rec.get("pid") in self.proc_tree.bench_pids
        self.query_one("#proc-detail", Static).update(detail_text(rec, bench))

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted[int]) -> None:
        self._paint_detail()

    # -- view keys -----------------------------------------------------------------------------------
    def action_move(self, step: int) -> None:
        """``j`` / ``k``: the next / previous process (the tree's own down / up)."""
        tree = self.proc_tree
        tree.action_cursor_down() if step > 0 else tree.action_cursor_up()

    def action_toggle_flat(self) -> None:
        tree = self.proc_tree
        tree.set_view(flat=not tree.flat)
        self._paint()

    def action_cycle_sort(self) -> None:
        tree = self.proc_tree
        key = SORT_KEYS[(SORT_KEYS.index(tree.sort_key) + 1) % len(SORT_KEYS)]
        tree.set_view(flat=True, sort_key=key)  # sorting is the flat view's
        self._paint()

    def action_expand_all(self) -> None:
        self.proc_tree.expand_everything()

    def action_collapse_all(self) -> None:
        self.proc_tree.collapse_everything()

    def action_filter(self) -> None:
        box = self.query_one("#proc-filter", Input)
        box.value = self.proc_tree.filter_text
        box.add_class("-shown")
        box.focus()

    def action_close_filter(self) -> None:
        """``esc``: close the filter box and drop the filter; with neither there, the screen's ``esc`` (back)."""
        box = self.query_one("#proc-filter", Input)
        if not box.has_class("-shown") and not self.proc_tree.filter_text:
            raise SkipAction()
        box.remove_class("-shown")
        box.value = ""
        self._set_filter("")
        self.proc_tree.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "proc-filter":
            event.stop()
            self._set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "proc-filter":
            event.stop()
            self._set_filter(event.value)
            event.input.remove_class("-shown")
            self.proc_tree.focus()

    def _set_filter(self, text: str) -> None:
        if text != self.proc_tree.filter_text:
            self.proc_tree.set_view(filter_text=text)
        self._paint()

    # -- signals -------------------------------------------------------------------------------------
    def action_signal(self, sig: str) -> None:
        """``k`` TERM / ``K`` KILL the selected process: confirmed; in read-only refused (and audited)."""
        rec = self.proc_tree.selected()
        if rec is None:
            self.app.notify("no process selected", severity="warning")
            return
        name = self.instance_name
        if self.control.read_only:
            self.app.run_worker(self._send(rec, sig), group="signal")  # the controller refuses and audits it
            return
        inst = self._inst
        host = "%s@%s:%s" % (inst.user or "?", inst.host, inst.port or 22) if inst is not None else name
        items = [
            "%s (%s)" % (name, host),
            "pid %s  %s  (state %s)" % (rec.get("pid"), rec.get("name") or "?", rec.get("state") or "?"),
            str(rec.get("cmdline") or "")[:300] or "(no command line)",
        ]

        def answered(yes: Optional[bool]) -> None:
            if yes:
                self.app.run_worker(self._send(rec, sig), group="signal")
            else:
                self.app.notify("%s not sent, nothing done" % sig, timeout=3)

        self.app.push_screen(
            ConfirmScreen("Send %s to pid %s on %s?" % (sig, rec.get("pid"), name), items,
                          note=SIGNAL_NOTES.get(sig, ""), confirm_label=sig),
            answered,
        )

    async def _send(self, rec: ProcRecord, sig: str) -> None:
        app = self.app
        pid = rec["pid"]
        name = self.instance_name
        try:
            result = await self.control.signal_process(name, pid, sig, origin="tui", start=rec.get("start"))
        except ReadOnlyError:
            app.notify("read-only: refused. %s not sent to pid %s on %s." % (sig, pid, name), title="Refused",
                       severity="error", timeout=8, markup=False)
            return
        except Exception as exc:  # never let a worker error end the console
            app.notify("%s: %s to pid %s failed: %s" % (name, sig, pid, exc), severity="error", timeout=10,
                       markup=False)
            return
        if not result.get("ok"):
            app.notify(str(result.get("error")), severity="error", timeout=10, markup=False)
            return
        data = result.get("data") or {}
        alive = "still running" + ("; K sends KILL" if sig == "TERM" else "")
        tail = alive if data.get("alive_after") else "it exited"
        app.notify("%s: %s sent to pid %s (%s); %s" % (name, sig, pid, rec.get("name") or "?", tail), timeout=6,
                   markup=False)
