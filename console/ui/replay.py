"""``fleet-console replay FILE``: the usual console on a recording, with keys to pause, seek and change speed.

The recording is read and fed by ``ReplaySource`` (console/monitor/replay.py), the app's controller here;
``--check`` replays it to the end with no UI and compares the transitions with those recorded.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType

from console.core.actions import ActionError
from console.monitor.replay import ReplaySource
from console.ui.app import FleetApp


class ReplayApp(FleetApp):
    """``FleetApp`` on a replay, with keys for pause (z), seek ([ ] 10 s, { } 60 s) and speed (- +)."""

    BINDINGS: ClassVar[list[BindingType]] = [  # in the footer as one entry per pair: "[ ] ±10s"
        Binding("z", "replay_pause", "Pause/play"),
        Binding("left_square_bracket", "replay_seek(-10)", "±10s", key_display="[ ]"),
        Binding("right_square_bracket", "replay_seek(10)", "+10s", show=False),
        Binding("left_curly_bracket", "replay_seek(-60)", "±60s", key_display="{ }"),
        Binding("right_curly_bracket", "replay_seek(60)", "+60s", show=False),
        Binding("minus", "replay_speed(-1)", "Speed", key_display="- +"),
        Binding("plus,equals_sign", "replay_speed(1)", "Faster", show=False),
    ]
    # what a recording cannot do (no host to ask, no fleet file): not offered, the keys do nothing
    REFUSED: ClassVar[frozenset[str]] = frozenset(
        ("diagnose", "diagnose_current", "probe", "probe_current", "reload", "shell", "accept_host_key"))

    def __init__(self, source: ReplaySource, theme: str | None = None) -> None:
        super().__init__(source, theme=theme)
        self.source = source
        self._told = False  # the bad record the replay stopped at was shown

    def header_text(self) -> Text:
        text = super().header_text()
        src = self.source
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(src.position))
        total = max(0.0, src.end_at - src.started_at)
        where = f" · REPLAY {when} (+{src.offset:.0f}s" + (f" of {total:.0f}s" if src.finished else "") + ")"
        text.append(where, "bold reverse")
        text.append(" x%g" % src.speed + (" PAUSED" if src.paused else "") + (" END" if src.finished else ""), "bold")
        if src.error:
            text.append(" STOPPED AT A BAD RECORD (see the message)", "bold red")
        return text

    def paint_frame(self) -> None:
        self._header_key = None  # the position moves every frame
        if self.source.error and not self._told:
            self._told = True
            self.notify(self.source.error, title="replay stopped", severity="error", timeout=30, markup=False)
        super().paint_frame()

    def report_events(self, events: list[tuple[Any, ...]]) -> None:
        """The timeline (e) says when a change happened in the recording, not when it was replayed."""
        super().report_events(events)
        entries = self.session_events
        for i in range(max(0, len(entries) - len(events)), len(entries)):
            _, name, text = entries[i]
            entries[i] = (self.source.transition_at.get(name, self.source.state.virtual_now), name, text)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The fleet actions a replay refuses are not offered (the footer shows only keys that work here)."""
        if action in self.REFUSED:
            return False
        return super().check_action(action, parameters)

    def action_replay_pause(self) -> None:
        self.source.toggle()

    def action_replay_seek(self, seconds: float) -> None:
        self.source.seek(float(seconds))
        self.grid.update_from_state(set(self.state.instances))

    def action_replay_speed(self, direction: int) -> None:
        self.source.faster() if direction > 0 else self.source.slower()


def make_replay_app(source: ReplaySource, theme: str | None = None) -> ReplayApp:
    """The console on ``source`` (not yet running)."""
    return ReplayApp(source, theme=theme)


def run_replay(args: Any) -> int:
    """``fleet-console replay``: the console on the file; with ``--check``, the transitions compared, no UI."""
    try:
        source = ReplaySource(Path(args.file).expanduser(), speed=args.speed, start_at=args.start, paused=args.paused)
    except ActionError as exc:
        print(f"fleet-console: {exc}", file=sys.stderr)
        return 2
    if args.check:
        source.run_to_end()
        if source.error:
            print(f"fleet-console: {source.error}", file=sys.stderr)
            return 2
        for t, name, old, new in source.transitions:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))}  {name}: {old} -> {new}")
        same = [x[1:] for x in source.transitions] == [x[1:] for x in source.recorded]
        print(f"{len(source.transitions)} transitions; recorded {len(source.recorded)}: "
              + ("the same" if same else "DIFFERENT"))
        return 0 if same else 1
    make_replay_app(source, theme=getattr(args, "theme", None)).run()
    return 0


__all__ = ["ReplayApp", "make_replay_app", "run_replay"]
