"""The ``?`` help screen, generated from the bindings themselves, so it lists every key and says what the
footer says.

Why generated: a hand-written list drifts as keys are added (process, log and filter keys come and go).
Here every binding of the app, of the fleet screen and its views, of the instance screen and the widgets on
it (the live ones where that screen is open, else the widget classes its module uses), and of Textual's own
scrolled views and tab bars, becomes a row: its keys as the footer shows them (``App.get_key_display``),
its description as the footer shows it, then a longer note where ``NOTES`` has one (keyed by action, not
by key, so a new key for an old action needs nothing here). Keys bound to the same action in a section
share a row. The text is plain (``rich.text.Text``, never markup) and at most ``WIDTH`` columns, so it fits
an 80-column terminal; it scrolls where it is taller than the screen.
"""

from __future__ import annotations

import re
import sys
from textwrap import wrap
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingsMap
from textual.containers import ScrollableContainer, VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Input, Static, Tabs

from console.core.status import TABLE

WIDTH = 74  # an 80-column terminal less the box's border, padding and scrollbar
KEY_W = 16  # the keys column (longer key lists push the description to the next line)

# What an action does, longer than its footer word: by the class that binds it ("App": the app and the fleet
# screen), then by action name (no namespace, no arguments; see ``action_group``).
_FLEET_VIEW = {
    "cursor": "move between instances",
    "first": "the first instance",
    "last": "the last instance",
    "page": "a page up / down",
    "open": "open the instance: GPUs, processes, logs, diagnosis, probes",
    "toggle_select": "select / unselect (fleet actions use the selection shown)",
    "select_shown": "select every instance shown",
    "clear_selection": "unselect all",
    "cycle_sort": "next sort column (shown in the header)",
    "reverse_sort": "reverse the sort",
    "toggle_stable": "hold the rows in place (no reshuffle under the cursor)",
}
NOTES: Dict[str, Dict[str, str]] = {
    "App": {
        "quit": "quit the console (ctrl+q from any screen)",
        "help": "this help",
        "filter": "filter by name, tag or host (tag:x status:x util<5 temp>85); esc clears",
        "diagnose": "diagnose the selected instances (or the focused one)",
        "restart": "restart the benchmark (asks first; refused in read-only)",
        "stop_rental": "stop the rental: [actions] stop, after a dialog with what idling costs (audited)",
        "probe": "probes menu (pick by key or from the list)",
        "cycle_theme": "next theme: dark, light, high-contrast (remembered)",
        "reload": "reload fleet.toml and its imports (also on change, SIGUSR1)",
        "timeline": "event timeline: transitions, verdicts, restarts, probes (enter: the whole entry)",
        "shell": "ssh into the instance (the console's settings; audited)",
        "copy": "copy: the ssh command; on a screen, the log cursor's or evidence line",
        "toggle_view": "grid / table view (remembered)",
        "command": "command: open, diagnose, restart, stop, probe, sort, theme",
        "accept_host_key": "trust the unknown host key of the instance (its fingerprint first; audited)",
        "command_palette": "command palette",
        "clear": "clear the selection, then the filter",
        "focus_next": "focus the next / previous widget",
        "copy_text": "copy the text selected with the mouse",
    },
    "FleetGrid": _FLEET_VIEW,
    "FleetTable": _FLEET_VIEW,
    "InstanceScreen": {
        "back": "back to the fleet",
        "next_tab": "GPUs, Processes, Logs, Diagnosis, Probes",
        "tab": "that tab (then the arrows scroll it)",
        "next_log": "next / previous log file",
        "search": "search the log; n / N next / previous match",
        "accept_host_key": "trust an unknown host key (shows its fingerprint; audited)",
        "copy_text": "copy the text selected with the mouse",
    },
    "LogView": {
        "toggle_follow": "follow / pause the log",
        "next_match": "next / previous search match",
        "end": "the end of the log, following again",
        "home": "the first line held",
        "toggle_wrap": "wrap long lines",
        "scroll_up": "move the line cursor (▸: the line y copies); above the top, older lines",
        "scroll_down": "move the line cursor",
        "page_up": "the line cursor a page up / down",
        "page_down": "the line cursor a page down",
    },
}
# Actions that are one row with another (a read-only twin, the instance screen's form of a fleet action).
ALIASES: Dict[str, str] = {
    "refuse_restart": "restart",
    "restart_current": "restart",
    "diagnose_current": "diagnose",
    "probe_current": "probe",
    "focus_previous": "focus_next",
    "prev_match": "next_match",
    "help_quit": "quit",
}
# Textual's own focusable widgets on these screens: their keys are listed once, in their own section.
TEXTUAL_VIEWS: Tuple[Type[Widget], ...] = (ScrollableContainer, Tabs)


class Row:
    """One help line: the keys (as the footer shows them), their descriptions, the note."""

    __slots__ = ("descriptions", "group", "keys", "note")

    def __init__(self, group: str, note: str) -> None:
        self.group = group
        self.keys: List[str] = []
        self.descriptions: List[str] = []
        self.note = note

    def text(self) -> str:
        """``  keys            Description / Other — note``, the keys in a column of ``KEY_W`` (a longer list goes
        on under it, each continued line ending in ","), the rest wrapped beside them."""
        said = " / ".join(self.descriptions)
        body = "%s — %s" % (said, self.note) if said and self.note else said or self.note or "-"
        key_lines: List[str] = []
        for key in self.keys:
            if key_lines and len(key_lines[-1]) + 2 + len(key) <= KEY_W - 1:
                key_lines[-1] += ", " + key
            elif key_lines:
                key_lines[-1] += ","
                key_lines.append(key)
            else:
                key_lines.append(key)
        body_lines = wrap(body, WIDTH - KEY_W - 3)
        out = []
        for k in range(max(len(key_lines), len(body_lines))):
            keys = key_lines[k] if k < len(key_lines) else ""
            text = body_lines[k] if k < len(body_lines) else ""
            out.append(("  %s %s" % (keys.ljust(KEY_W), text)).rstrip())
        return "\n".join(out)


def action_group(action: str) -> str:
    """``app.restart_current`` -> ``restart``: the action's name without namespace or arguments, aliased."""
    name = re.sub(r"\(.*\)$", "", action.rsplit(".", 1)[-1]).strip()
    return ALIASES.get(name, name)


def bindings_of(source: Any) -> BindingsMap:
    """The merged bindings of a live node (``_bindings``: what the keys do now) or of a widget class."""
    if isinstance(source, DOMNode):
        return source._bindings
    merged = getattr(source, "_merged_bindings", None)
    return merged if isinstance(merged, BindingsMap) else BindingsMap()


def owner_name(source: Any) -> str:
    """Whose notes apply: ``App`` for the app and a plain screen (the fleet screen), else the class name."""
    cls = source if isinstance(source, type) else type(source)
    if issubclass(cls, App) or cls is Screen:
        return "App"
    return cls.__name__


def section_rows(
    app: App[Any], sources: Sequence[Any], listed: Set[Tuple[str, str]], first: Optional[Any] = None
) -> List[Row]:
    """Rows for the bindings of ``sources``, given in focus-chain order (the first to bind a key has it),
    leaving out what ``listed`` (key display, action group) already has, which is updated; ``first``: the
    source whose rows come first."""
    rows: Dict[str, Row] = {}
    owner: Dict[str, Any] = {}
    for source in sources:
        for key in bindings_of(source).key_to_bindings:
            owner.setdefault(key, source)  # shadowed in later sources
    ordered = sorted(sources, key=lambda s: s is not first) if first is not None else list(sources)
    for source in ordered:
        notes = NOTES.get(owner_name(source), {})
        for key, bindings in bindings_of(source).key_to_bindings.items():
            if owner[key] is not source:
                continue
            for binding in bindings:
                group = action_group(binding.action)
                shown = app.get_key_display(binding)
                if (shown, group) in listed:
                    continue
                listed.add((shown, group))
                row = rows.get(group)
                if row is None:
                    row = rows[group] = Row(group, notes.get(group, ""))
                if shown not in row.keys:
                    row.keys.append(shown)
                if binding.description and binding.description not in row.descriptions:
                    row.descriptions.append(binding.description)
    return list(rows.values())


def title_of(cls: type) -> str:
    """A section title: ``HELP_TITLE`` where the class has one, else its name in words (``LogView``: Log view)."""
    title = getattr(cls, "HELP_TITLE", None)
    if isinstance(title, str) and title:
        return title
    words = re.findall(r"[A-Z][a-z0-9]*|[a-z0-9]+", cls.__name__)
    return " ".join(words).capitalize() if words else cls.__name__


def _project(cls: type) -> bool:
    return not cls.__module__.startswith("textual.")


def widget_classes(nodes: Iterable[DOMNode]) -> Tuple[List[type], List[type]]:
    """The widget classes with bindings among ``nodes``, in order: (the project's, Textual's own). A container
    counts (its keys work while a widget inside it has the focus); text inputs do not (they type the keys)."""
    ours: List[type] = []
    theirs: List[type] = []
    for node in nodes:
        cls = type(node)
        if not isinstance(node, Widget) or isinstance(node, (Input, Screen)):
            continue
        if not bindings_of(cls).key_to_bindings:
            continue
        target = ours if _project(cls) else theirs
        if cls not in target:
            target.append(cls)
    return ours, theirs


def package_widget_classes(package: str = "widgets") -> List[type]:
    """Widget classes with bindings defined in ``package``'s loaded modules: the instance screen's
    widgets where that screen is not open yet (its tabs' widgets live in modules of their own)."""
    out: List[type] = []
    for name, module in sorted(sys.modules.items()):
        if not (name == package or name.startswith(package + ".")) or module is None:
            continue
        for value in vars(module).values():
            if (isinstance(value, type) and issubclass(value, Widget) and value.__module__ == name
                    and not issubclass(value, (Input, Screen))
                    and bindings_of(value).key_to_bindings and value not in out):
                out.append(value)
    return out


def help_sections(app: App[Any]) -> List[Tuple[str, List[Row]]]:
    """Every key of the console, by where it works: everywhere (the app), the fleet screen's views, the
    instance screen and its widgets, Textual's scrolled views and tab bars (listed once, at the end: the
    widgets above that scroll inherit their keys)."""
    from .instance_screen import InstanceScreen

    stack = [s for s in app.screen_stack if not isinstance(s, ModalScreen)]
    fleet = stack[0] if stack else None
    open_screens = [s for s in stack if isinstance(s, InstanceScreen)]
    fleet_classes, textual_classes = widget_classes(fleet.walk_children(with_self=False) if fleet else ())
    inst_classes = [c for c in package_widget_classes(InstanceScreen.__module__.rsplit(".", 1)[0])
                    if c not in fleet_classes]
    textual_classes += [c for c in TEXTUAL_VIEWS if c not in textual_classes]
    if open_screens:
        ours, theirs = widget_classes(open_screens[-1].walk_children(with_self=False))
        inst_classes = ours + [c for c in inst_classes if c not in ours]
        textual_classes += [c for c in theirs if c not in textual_classes]
    scrolling: Set[Tuple[str, str]] = set()
    scroll_rows = section_rows(app, textual_classes, scrolling)

    sections: List[Tuple[str, List[Row]]] = []
    listed = set(scrolling)
    sources: List[Any] = ([fleet] if fleet is not None else []) + [app]
    sections.append(("Everywhere (the fleet screen, and every screen unless it says otherwise)",
                     section_rows(app, sources, listed, first=app)))
    everywhere = set(listed)
    for cls in fleet_classes:
        sections.append((title_of(cls), section_rows(app, [cls], listed)))
    listed = set(everywhere)  # (the app's keys work on the instance screen too: said once)
    screen_source: Any = open_screens[-1] if open_screens else InstanceScreen
    sections.append(("Instance screen (enter)", section_rows(app, [screen_source], listed)))
    for cls in inst_classes:
        sections.append((title_of(cls) + " (instance screen)", section_rows(app, [cls], listed)))
    sections.append(("Scrolled views and tab bars (and the views above that scroll)", scroll_rows))
    return [(title, rows) for title, rows in sections if rows]


def help_text(app: App[Any]) -> Text:
    """The whole help as plain text with bold section titles (no markup: nothing in it is parsed)."""
    text = Text()
    text.append("fleet-console — keys", "bold")
    text.append("\n(generated from the key bindings; the footer shows the commonest)\n", "dim")
    for title, rows in help_sections(app):
        text.append("\n")
        text.append(title, "bold")
        text.append("\n")
        for row in rows:
            text.append(row.text() + "\n")
    statuses = ", ".join(s.badge + (" (age)" if s.name == "stale" else "") for s in TABLE)
    text.append("\n")
    text.append("\n".join(wrap("Statuses, trouble first: %s." % statuses, WIDTH)) + "\n")
    text.append("\n".join(wrap("Filters (/, :diagnose/:restart/:probe, MCP fleet_status): words of the name, host or a "
                                "tag, tag:x, status:x, and numbers joined by &: util<5 & power>300, temp>85, mem>90%, "
                                "mem>20G, idle>10m, $/h>1 (once prices exist).", WIDTH)) + "\n")
    text.append("Mouse: click a pane to focus it, double-click to open; keys do it all.\n")
    text.append("(end of help)", "dim")
    return text


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 84; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1; scrollbar-size-vertical: 1;
    }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.text: Optional[Text] = None

    def compose(self) -> ComposeResult:
        self.text = help_text(self.app)
        with VerticalScroll():
            yield Static(self.text, id="help-text")

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()  # the arrows, PgDn and End scroll it

    @property
    def plain(self) -> str:
        """The help as plain text (what tests read, whatever is scrolled into view)."""
        return self.text.plain if self.text is not None else ""

    async def action_dismiss(self, result: None = None) -> None:
        """Close at once without a result (Screen's own action awaits pending callbacks first)."""
        self.dismiss(None)
