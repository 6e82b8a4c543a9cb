"""The console as a browser session runs it (``fleet-console web``): no shell key (a browser has no terminal to
hand to ``ssh``), and the actions the web server did not allow stay refused by the controller's read-only mode."""

from __future__ import annotations

from typing import Any, ClassVar

from console.ui.app import FleetApp


class WebApp(FleetApp):
    """``FleetApp`` without what a browser session must not offer: ``s`` (the shell) is unbound, so neither the
    footer nor the help lists it."""

    REFUSED: ClassVar[frozenset[str]] = frozenset({"shell"})

    def __init__(self, controller: Any, theme: str | None = None) -> None:
        super().__init__(controller, theme=theme)
        for key, bindings in list(self._bindings.key_to_bindings.items()):
            kept = [b for b in bindings if b.action not in self.REFUSED]
            if kept:
                self._bindings.key_to_bindings[key] = kept
            else:
                del self._bindings.key_to_bindings[key]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self.REFUSED:
            return False
        return super().check_action(action, parameters)

    def action_shell(self) -> None:
        self.notify("no shell from the browser: use ssh from a terminal", severity="warning")
