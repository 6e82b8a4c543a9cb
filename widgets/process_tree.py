"""The process tree of one instance: a Textual ``Tree`` updated in place (expansion and cursor survive).

Each line is fixed-width columns (benchmark mark, pid, state, cpu, rss, gpu mem, wchan) and then the tree
guides and the command: the figures stay aligned whatever the depth. ``flat`` shows every process at the top
level ordered by ``sort_key`` (re-sorted at most every ``RESORT_EVERY`` s, so rows hold still under the
cursor); ``filter_text`` keeps the processes whose pid, name or command line contain it (in the tree with
their ancestors, so they keep their place).
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Pattern, Set, Tuple, cast

from rich.style import Style
from rich.text import Text
from textual.strip import Strip
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from console.agent.wire.procmatch import matches_program
from console.agent.wire.protocol import ProcRecord

from .render import size

# (title, width, align) of the columns left of the tree guides; a row's first COLS_WIDTH characters
COLUMNS: Tuple[Tuple[str, int, str], ...] = (
    ("", 1, "<"),  # "*": a benchmark process (fleet.toml benchmark.match)
    ("PID", 7, ">"),
    ("S", 1, "<"),
    ("CPU%", 5, ">"),
    ("RSS", 6, ">"),
    ("GPU", 6, ">"),
    ("WCHAN", 12, "<"),
)
COLS_WIDTH = sum(width + 1 for _, width, _ in COLUMNS)
SORT_KEYS = ("cpu", "rss", "gpu_mem", "pid")  # the flat view's orders (``o`` cycles)
SORT_TITLES = {"cpu": "CPU%", "rss": "RSS", "gpu_mem": "GPU", "pid": "PID"}
RESORT_EVERY = 2.0  # seconds: the flat view re-sorts on its own at most this often
BENCH_STYLE = "bold yellow"
TOGGLE = Style.from_meta({"toggle": True})


def _cell(value: str, width: int, align: str) -> str:
    value = value if len(value) <= width else value[: width - 1] + "~"
    return value.rjust(width) if align == ">" else value.ljust(width)


def _wchan(rec: ProcRecord) -> str:
    wchan = rec.get("wchan")
    return wchan if wchan not in (None, "", "0") else "?"


def row_columns(rec: ProcRecord, bench: bool = False) -> Text:
    """The fixed-width figures of one process: exactly ``COLS_WIDTH`` characters, one cell each."""
    cpu = rec.get("cpu")
    gpu = rec.get("gpu_mem")
    state = str(rec.get("state") or "?")[:1]
    values = (
        "*" if bench else " ",
        str(rec.get("pid")),
        state,
        "?" if cpu is None else ("%.0f" % cpu if cpu >= 10 else "%.1f" % cpu),
        size(rec.get("rss")),
        "-" if gpu is None else size(gpu),
        _wchan(rec),
    )
    styles = (BENCH_STYLE, BENCH_STYLE if bench else "bold", "bold red" if state in ("D", "Z") else "", "", "",
              "bold" if gpu else "dim", "dim")
    text = Text(no_wrap=True, overflow="ellipsis")
    for (_, width, align), value, style in zip(COLUMNS, values, styles, strict=True):
        text.append(_cell(value, width, align), style)
        text.append(" ")
    return text


def proc_label(rec: ProcRecord, bench: bool = False) -> Text:
    """One row: the columns (``row_columns``), then the name and the command line (host text, never markup)."""
    text = row_columns(rec, bench)
    text.append(str(rec.get("name") or "?"), BENCH_STYLE if bench else "bold")
    cmd = rec.get("cmdline")
    if cmd:
        text.append("  " + str(cmd)[:200], "dim")
    return text


def header_line(flat: bool, sort_key: str, filter_text: str = "", shown: int = 0, total: int = 0) -> Text:
    """The column titles over the rows (the flat view's sort column marked), then the view and the filter."""
    text = Text(no_wrap=True, overflow="ellipsis")
    sort_title = SORT_TITLES.get(sort_key) if flat else None
    for title, width, align in COLUMNS:
        label = title + "▼" if title and title == sort_title else title
        text.append(_cell(label, width, align) + " ", "bold")
    text.append("COMMAND", "bold")
    mode = "flat, by %s" % sort_key.replace("_", " ") if flat else "tree"
    text.append("  [%s" % mode, "dim")
    if filter_text:
        text.append("; filter ", "dim")
        text.append(filter_text, "bold")
        text.append(" %d/%d" % (shown, total), "dim")
    text.append("]", "dim")
    return text


def detail_text(rec: Optional[ProcRecord], bench: bool = False, now: Optional[float] = None) -> Text:
    """The selected process in full: pid, name, state, wchan, age, then its whole command line (wrapped)."""
    text = Text()
    if rec is None:
        text.append("no process selected", "dim")
        return text
    text.append("pid %s " % rec.get("pid"), "bold")
    text.append(str(rec.get("name") or "?"), BENCH_STYLE if bench else "bold")
    text.append("  ppid %s  state %s  wchan=%s" % (rec.get("ppid"), rec.get("state") or "?", _wchan(rec)), "dim")
    start = rec.get("start")
    if start:
        from console.agent.wire.timefmt import fmt_age

        text.append("  up %s" % fmt_age(max(0.0, (now or time.time()) - float(start))), "dim")
    if bench:
        text.append("  benchmark", BENCH_STYLE)
    text.append("\n")
    text.append(str(rec.get("cmdline") or "(no command line)"))
    return text


def _sort_value(rec: ProcRecord, key: str) -> float:
    value = cast(Mapping[str, Any], rec).get(key)
    return float(value) if isinstance(value, (int, float)) else -1.0


class ProcessTree(Tree[int]):
    """Processes by parent (or flat). ``update_procs`` diffs against the nodes it holds instead of rebuilding."""

    DEFAULT_CSS = """
    ProcessTree { height: 1fr; }
    """

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__("processes", id=id)
        self.show_root = False
        self.guide_depth = 2
        self._start_over()

    def _start_over(self) -> None:
        """The view as a new tree has it: tree mode, first sort key, no filter, no processes."""
        self.flat = False
        self.sort_key = SORT_KEYS[0]
        self.filter_text = ""
        self.bench_pids: Set[int] = set()
        self.shown = 0  # processes the view holds (after the filter)
        self._pt_nodes: Dict[int, TreeNode[int]] = {}
        self._pt_parent: Dict[int, Optional[int]] = {}
        self._pt_records: Dict[int, Tuple[ProcRecord, bool]] = {}
        self._bench_cache: Dict[int, Tuple[str, str, bool]] = {}
        self._procs: Mapping[int, ProcRecord] = {}
        self._patterns: List[Pattern[str]] = []
        self._auto_expand = True
        self._sorted_at = 0.0

    def forget(self) -> None:
        """Drop the processes and the view's settings: the panel shows another instance next."""
        self.clear()
        self._start_over()

    # -- the view's settings (each rebuilds the rows) ---------------------------------------------------
    def set_view(self, flat: Optional[bool] = None, sort_key: Optional[str] = None,
                 filter_text: Optional[str] = None) -> None:
        if flat is not None:
            self.flat = flat
        if sort_key is not None:
            self.sort_key = sort_key
        if filter_text is not None:
            self.filter_text = filter_text
        cursor = self.cursor_node
        keep = cursor.data if cursor is not None else None
        self._reset()
        self.update_procs(self._procs, self._patterns)
        if keep is not None and keep in self._pt_nodes:
            self.call_after_refresh(self._restore_cursor, keep)

    def expand_everything(self) -> None:
        self._auto_expand = True
        for child in self.root.children:
            child.expand_all()

    def collapse_everything(self) -> None:
        self._auto_expand = False
        for child in self.root.children:
            child.collapse_all()

    def selected(self) -> Optional[ProcRecord]:
        node = self.cursor_node
        if node is None or node.data is None:
            return None
        held = self._pt_records.get(node.data)
        return held[0] if held is not None else None

    def _reset(self) -> None:
        self.clear()
        self._pt_nodes.clear()
        self._pt_parent.clear()
        self._pt_records.clear()
        self._sorted_at = 0.0

    # -- data -> nodes -------------------------------------------------------------------------------
    def update_procs(self, procs: Mapping[int, ProcRecord], bench_patterns: Iterable[Pattern[str]] = ()) -> None:
        self._procs = procs
        self._patterns = list(bench_patterns)
        self.bench_pids = self._bench(procs)
        view = self._visible(procs)
        self.shown = len(view)
        if self.flat:
            self._layout_flat(view)
        else:
            self._layout_tree(view)
        if self.cursor_line < 0 and self._pt_nodes:
            self.cursor_line = 0  # a selection from the start: its full command line shows below

    def _bench(self, procs: Mapping[int, ProcRecord]) -> Set[int]:
        """Pids whose program matches ``benchmark.match`` (the agent's rule), cached per (pid, name, cmdline)."""
        if not self._patterns:
            return set()
        out: Set[int] = set()
        cache = self._bench_cache
        for pid, rec in procs.items():
            name, cmd = str(rec.get("name") or ""), str(rec.get("cmdline") or "")
            hit = cache.get(pid)
            if hit is None or hit[0] != name or hit[1] != cmd:
                hit = cache[pid] = (name, cmd, matches_program(rec, self._patterns))
            if hit[2]:
                out.add(pid)
        for pid in [p for p in cache if p not in procs]:
            del cache[pid]
        return out

    def _visible(self, procs: Mapping[int, ProcRecord]) -> Mapping[int, ProcRecord]:
        needle = self.filter_text.strip().lower()
        if not needle:
            return procs
        hits = [pid for pid, rec in procs.items()
                if needle in ("%s %s %s" % (pid, rec.get("name") or "", rec.get("cmdline") or "")).lower()]
        keep = set(hits)
        if not self.flat:  # their ancestors too, so that they keep their place in the tree
            for pid in hits:
                ppid = procs[pid].get("ppid")
                while ppid in procs and ppid not in keep and ppid != pid:
                    keep.add(ppid)
                    ppid = procs[ppid].get("ppid")
        return {pid: procs[pid] for pid in keep}

    def _label(self, pid: int, rec: ProcRecord, node: TreeNode[int]) -> None:
        held = (rec, pid in self.bench_pids)
        old = self._pt_records.get(pid)
        if old is None or old[1] != held[1] or (old[0] is not rec and old[0] != rec):
            node.set_label(proc_label(rec, held[1]))
            self._pt_records[pid] = held

    def _layout_flat(self, view: Mapping[int, ProcRecord]) -> None:
        order = sorted(view, key=lambda p: (-_sort_value(view[p], self.sort_key), p))
        if self.sort_key == "pid":
            order = sorted(view)
        now = time.monotonic()
        current = [n.data for n in self.root.children]
        same_set = set(current) == set(order)
        if current != order and (not same_set or now - self._sorted_at >= RESORT_EVERY):
            cursor = self.cursor_node
            keep = cursor.data if cursor is not None else None
            self._reset()
            for pid in order:
                node = self.root.add(proc_label(view[pid], pid in self.bench_pids), data=pid, allow_expand=False)
                self._pt_nodes[pid] = node
                self._pt_parent[pid] = None
                self._pt_records[pid] = (view[pid], pid in self.bench_pids)
            self._sorted_at = now
            self.root.expand()
            if keep is not None and keep in self._pt_nodes:
                self.call_after_refresh(self._restore_cursor, keep)
            return
        for pid, node in self._pt_nodes.items():
            self._label(pid, view[pid], node)

    def _layout_tree(self, procs: Mapping[int, ProcRecord]) -> None:
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
                node = parent.add(proc_label(rec, pid in self.bench_pids), data=pid, expand=self._auto_expand)
                node.allow_expand = True
                self._pt_nodes[pid] = node
                self._pt_parent[pid] = parent_pid
                self._pt_records[pid] = (rec, pid in self.bench_pids)
            else:
                self._label(pid, rec, node)
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

    # -- rendering: columns, then the guides, then the command -------------------------------------------
    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        """Tree's line with the guides moved right of the columns (Tree draws them first, shifting the figures)."""
        tree_lines = self._tree_lines
        width = self.size.width
        if y >= len(tree_lines):
            return Strip.blank(width, base_style)
        line = tree_lines[y]
        is_hover = self.hover_line >= 0 and any(node._hover for node in line.path)
        cache_key = (y, is_hover, width, self._updates, self._pseudo_class_state,
                     tuple(node._updates for node in line.path))
        strip: Optional[Strip] = self._line_cache.get(cache_key)
        if strip is None:
            line_style = self.get_component_rich_style("tree--highlight-line") if is_hover else base_style
            line_style += Style(meta={"line": y})
            guide_style = self.get_component_rich_style("tree--guides", partial=True)
            label_style = self.get_component_rich_style("tree--label", partial=True)
            if self.hover_line == y:
                label_style += self.get_component_rich_style("tree--highlight", partial=True)
            if self.cursor_line == y:
                label_style += self.get_component_rich_style("tree--cursor", partial=False)
            node = line.path[-1]
            label = node._label.copy()
            label.stylize(label_style)
            parts = label.divide([COLS_WIDTH])
            text = Text(style=line_style, no_wrap=True)
            text.append_text(parts[0])
            guides_at = len(text)
            if len(line.path) > 2:  # the top level needs no guide
                for above in line.path[1:-1][1:]:
                    text.append("  " if above.is_last else "│ ", style=guide_style)
                text.append("└ " if line.last else "├ ", style=guide_style)
            if node._allow_expand:
                text.append(self.ICON_NODE_EXPANDED if node.is_expanded else self.ICON_NODE, line_style + TOGGLE)
            if self.cursor_line == y:  # the cursor bar runs on through the guides, from the figures to the command
                text.stylize(self.get_component_rich_style("tree--cursor", partial=False), guides_at, len(text))
            if len(parts) > 1:
                text.append_text(parts[1])
            text.stylize(Style(meta={"node": node._id}))
            strip = Strip(list(text.render(self.app.console)))
            strip = strip.extend_cell_length(max(self.virtual_size.width, width), line_style)
            self._line_cache[cache_key] = strip
        return strip.crop(x1, x2)

