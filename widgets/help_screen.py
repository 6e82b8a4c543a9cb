"""The ``?`` help screen: every key, on the fleet grid and on an instance screen."""

from __future__ import annotations

from textwrap import fill

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from console.status import TABLE

HELP = """\
[b]fleet-console — keys[/b]

[b]Fleet grid[/b]
  arrows, j k   move between instance panes
  enter         open the instance: GPUs, processes, logs, diagnosis
  space         select / unselect (fleet actions use the selection shown)
  a / u         select every instance shown / unselect all
  /             filter by name, tag or host (tag:x status:x); esc clears
  d             diagnose the selected instances (or the focused one)
  r             restart the benchmark (asks first; off in read-only)
  p             probes menu (pick by key or from the list)
  t             next theme: dark, light, high-contrast (remembered)
  e             event timeline: transitions, verdicts, restarts, probes
  R             reload fleet.toml and its imports (also on change, SIGHUP)
  s             ssh into the instance (the console's settings; audited)
  y             copy: ssh command; on a screen, the log or evidence line
  v             grid / table view (remembered)
  o / O         table: next sort column / reverse; S keeps rows in place
  :             command: open, diagnose, restart, probe, sort, theme
  ctrl+p        command palette
  ?             this help
  q, ctrl+q     quit (ctrl+q from any screen)

[b]Instance screen[/b]
  esc, q        back to the grid
  tab, 1-5      GPUs, Processes, Logs, Diagnosis, Probes (then arrows scroll)
  ] / [         next / previous log file
  f, space      follow / pause the log; End or G follow again
  /, ctrl+f     search the log; n / N next / previous match
  d r p         diagnose, restart, probe this instance
  A             accept an unknown host key (shows its fingerprint; audited)

Statuses, trouble first: %s.
Mouse: click a pane to focus it, double-click to open; keys do it all.
""" % fill(", ".join(s.badge + (" (age)" if s.name == "stale" else "") for s in TABLE), 78 - 25)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 84; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(HELP, id="help-text")

    async def action_dismiss(self, result: None = None) -> None:
        """Close at once without a result (Screen's own action awaits pending callbacks first)."""
        self.dismiss(None)
