"""What the fleet grid and the fleet table share: the cursor, the selection and the filter.

``FleetView`` holds them, one object for both views: ``v`` switches views without losing them, and every
fleet action (``d``, ``r``, ``p``, ``s``, ``y``) reads its targets from it. ``FleetViewWidget`` is the base
of the two widgets: the keys and clicks that move the cursor and select, the palette and the theme, written
once; each view says how it lays out its items (``visible_names``, ``refresh_item``, ``scroll_to_item``,
``name_at``).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, List, Optional, Sequence, Set

from textual import events
from textual.scroll_view import ScrollView

from console.core.state import FleetState

from .messages import CursorMoved, OpenInstance, SelectionChanged
from .palette import Palette

ORDER_HOLD = 2.0  # seconds the order holds after a key moves or selects, so items do not jump under the cursor


class FleetView:
    """The instance under the cursor, the instances selected and the filter typed, shared by both views."""

    def __init__(self) -> None:
        self.cursor_name: Optional[str] = None
        self.selected: Set[str] = set()
        self.query_text = ""
        self.moved = False  # the operator moved the cursor (a key, a click): until then it follows the top row

    def follows_top(self) -> bool:
        """Whether the cursor stays on the first row as statuses settle (the operator has not moved it)."""
        return not self.moved

    def targets(self, shown: Sequence[str]) -> List[str]:
        """What a fleet action applies to: the selected instances among ``shown`` (never one the filter hides),
        else the cursor's."""
        chosen = [n for n in shown if n in self.selected]
        if chosen:
            return chosen
        return [self.cursor_name] if self.cursor_name else []

    def toggle(self, name: str) -> None:
        if name in self.selected:
            self.selected.discard(name)
        else:
            self.selected.add(name)

    def select(self, names: Iterable[str]) -> None:
        self.selected.update(names)

    def clear_selection(self) -> List[str]:
        """Unselect all; returns the names that were selected."""
        names = list(self.selected)
        self.selected.clear()
        return names


class FleetViewWidget(ScrollView, can_focus=True):
    """A view of the fleet on a shared ``FleetView``: cursor keys, selection, open, clicks, palette."""

    def __init__(self, state: FleetState, view: FleetView, *, name: Optional[str] = None,
                 id: Optional[str] = None) -> None:
        super().__init__(name=name, id=id)
        self.state = state
        self.view = view
        self._palette: Optional[Palette] = None
        self._hold_until = 0.0  # time.monotonic() until which the order holds (ORDER_HOLD)

    # -- the shared state ---------------------------------------------------------------------------
    @property
    def cursor_name(self) -> Optional[str]:
        return self.view.cursor_name

    @cursor_name.setter
    def cursor_name(self, name: Optional[str]) -> None:
        self.view.cursor_name = name

    @property
    def selected(self) -> Set[str]:
        return self.view.selected

    @property
    def query_text(self) -> str:
        return self.view.query_text

    # -- what each view gives --------------------------------------------------------------------------
    @property
    def visible_names(self) -> List[str]:
        """The instances shown, in order (the filter applied)."""
        raise NotImplementedError

    def refresh_item(self, name: Optional[str]) -> None:
        """Repaint ``name``'s pane or row (the cursor or the selection moved on or off it)."""
        raise NotImplementedError

    def scroll_to_item(self, name: str) -> None:
        """Scroll ``name``'s pane or row into view."""
        raise NotImplementedError

    def name_at(self, x: int, y: int) -> Optional[str]:
        """The instance at widget coordinates ``(x, y)``, None off the items."""
        raise NotImplementedError

    def forget_lines(self) -> None:
        """Drop the cached lines (the theme changed)."""

    # -- palette / theme ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: Any) -> None:
        self._palette = None
        self.forget_lines()
        self.refresh()

    @property
    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = Palette(self.app.get_css_variables(), self.rich_style)
        return self._palette

    # -- cursor / selection / mouse ------------------------------------------------------------------
    def hold_order(self) -> None:
        self._hold_until = time.monotonic() + ORDER_HOLD

    def order_held(self) -> bool:
        """A key moved or selected within the last ``ORDER_HOLD`` seconds."""
        return time.monotonic() < self._hold_until

    def move_to(self, name: Optional[str]) -> None:
        """The cursor on ``name``, in view; the order holds for a moment."""
        self.hold_order()
        if name is None or name == self.cursor_name:
            return
        self.view.moved = True
        old = self.cursor_name
        self.cursor_name = name
        self.refresh_item(old)
        self.refresh_item(name)
        self.scroll_to_item(name)
        self.post_message(CursorMoved(name))

    def action_first(self) -> None:
        names = self.visible_names
        if names:
            self.move_to(names[0])

    def action_last(self) -> None:
        names = self.visible_names
        if names:
            self.move_to(names[-1])

    def action_open(self) -> None:
        if self.cursor_name:
            self.post_message(OpenInstance(self.cursor_name))

    def action_toggle_select(self) -> None:
        name = self.cursor_name
        if not name:
            return
        self.hold_order()
        self.view.toggle(name)
        self.refresh_item(name)
        self.post_message(SelectionChanged(frozenset(self.selected)))

    def action_select_shown(self) -> None:
        """Select every instance the filter shows (``a``)."""
        self.hold_order()
        self.view.select(self.visible_names)
        self.refresh()
        self.post_message(SelectionChanged(frozenset(self.selected)))

    def action_clear_selection(self) -> None:
        self.clear_selection()

    def clear_selection(self) -> None:
        for name in self.view.clear_selection():
            self.refresh_item(name)
        self.post_message(SelectionChanged(frozenset()))

    def on_click(self, event: events.Click) -> None:
        name = self.name_at(event.x, event.y)
        if name is None:
            return
        self.focus()
        self.move_to(name)
        if event.chain >= 2:
            self.post_message(OpenInstance(name))

    def on_focus(self) -> None:
        self.refresh_item(self.cursor_name)

    def on_blur(self) -> None:
        self.refresh_item(self.cursor_name)


__all__ = ["ORDER_HOLD", "FleetView", "FleetViewWidget"]
