"""The process tree of one instance: a Textual ``Tree`` updated in place (expansion and cursor survive)."""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from console.agent.protocol import ProcRecord

from .render import size


def proc_label(rec: ProcRecord) -> Text:
    """``pid name [state] cpu rss gpu wchan command`` for one process (wchan "?" when the kernel hides it).

    The figures come before wchan and the command line so that they stay on screen in an 80-column pane.
    """
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("%-7s" % rec.get("pid"), "bold")
    text.append(" %s" % (rec.get("name") or "?"))
    state = rec.get("state") or "?"
    text.append(" [%s]" % state, "bold red" if state in ("D", "Z") else "")
    cpu = rec.get("cpu")
    text.append(" cpu %s" % ("?" if cpu is None else "%.0f%%" % cpu))
    text.append(" rss %s" % size(rec.get("rss")))
    gpu = rec.get("gpu_mem")
    text.append(" gpu %s" % ("-" if gpu is None else size(gpu)), "bold" if gpu else "dim")
    wchan = rec.get("wchan")
    wchan = wchan if wchan not in (None, "", "0") else "?"
    text.append(" wchan=%s" % (wchan if len(wchan) <= 24 else wchan[:23] + "…"), "dim")
    cmd = rec.get("cmdline")
    if cmd:
        text.append("  " + str(cmd)[:200], "dim")
    return text


class ProcessTree(Tree[int]):
    """Processes by parent. ``update_procs`` diffs against the nodes it holds instead of rebuilding."""

    DEFAULT_CSS = """
    ProcessTree { height: 1fr; }
    """

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__("processes", id=id)
        self.show_root = False
        self.guide_depth = 2
        self._pt_nodes: Dict[int, TreeNode[int]] = {}
        self._pt_parent: Dict[int, Optional[int]] = {}
        self._pt_records: Dict[int, ProcRecord] = {}
        self._auto_expand = True

    def update_procs(self, procs: Mapping[int, ProcRecord]) -> None:
        cursor = self.cursor_node
        cursor_pid = cursor.data if cursor is not None else None
        # gone (or re-parented) processes first
        for pid in list(self._pt_nodes):
            rec = procs.get(pid)
            if rec is None or self._parent_of(rec, procs) != self._pt_parent.get(pid):
                self._drop(pid)
        # new ones, parents before children
        for pid in self._ordered(procs):
            rec = procs[pid]
            node = self._pt_nodes.get(pid)
            if node is None:
                parent_pid = self._parent_of(rec, procs)
                parent = self._pt_nodes.get(parent_pid) if parent_pid is not None else self.root
                if parent is None:
                    parent = self.root
                node = parent.add(proc_label(rec), data=pid, expand=self._auto_expand)
                node.allow_expand = True
                self._pt_nodes[pid] = node
                self._pt_parent[pid] = parent_pid
                self._pt_records[pid] = rec
            elif self._pt_records.get(pid) is not rec and self._pt_records.get(pid) != rec:
                node.set_label(proc_label(rec))
                self._pt_records[pid] = rec
        for node in self._pt_nodes.values():
            node.allow_expand = bool(node.children)
        self.root.expand()
        if cursor_pid is not None and cursor_pid in self._pt_nodes:
            node = self._pt_nodes[cursor_pid]
            if self.cursor_node is not node:
                self.call_after_refresh(self._restore_cursor, cursor_pid)

    def _restore_cursor(self, pid: int) -> None:
        node = self._pt_nodes.get(pid)
        if node is not None:
            self.move_cursor(node, animate=False)

    def _drop(self, pid: int) -> None:
        node = self._pt_nodes.pop(pid, None)
        self._pt_parent.pop(pid, None)
        self._pt_records.pop(pid, None)
        if node is None:
            return
        # descendants go with the node; forget them too (they are re-added under their parent)
        stack = list(node.children)
        while stack:
            child = stack.pop()
            cpid = child.data
            if cpid is not None and self._pt_nodes.get(cpid) is child:
                self._pt_nodes.pop(cpid, None)
                self._pt_parent.pop(cpid, None)
                self._pt_records.pop(cpid, None)
            stack.extend(child.children)
        node.remove()

    @staticmethod
    def _parent_of(rec: ProcRecord, procs: Mapping[int, ProcRecord]) -> Optional[int]:
        ppid = rec.get("ppid")
        return ppid if ppid in procs and ppid != rec.get("pid") else None

    def _ordered(self, procs: Mapping[int, ProcRecord]) -> List[int]:
        """Pids ordered so that every parent comes before its children (start time, then pid)."""
        children: Dict[Optional[int], List[int]] = {}
        for pid, rec in procs.items():
            children.setdefault(self._parent_of(rec, procs), []).append(pid)
        for kids in children.values():
            kids.sort(key=lambda p: (procs[p].get("start") or 0, p))
        out: List[int] = []
        stack = list(reversed(children.get(None, [])))
        seen = set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            out.append(pid)
            stack.extend(reversed(children.get(pid, [])))
        # cycles (never expected) would leave pids out: add them at the top level
        out.extend(p for p in procs if p not in seen)
        return out
