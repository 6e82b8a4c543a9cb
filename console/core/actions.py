"""The errors of an operator's actions: refused, failed, read-only (the probe menu is console/inventory/probes.py)."""

from __future__ import annotations


class ActionError(Exception):
    """An action could not be carried out; the text is one line for the operator."""


class ReadOnlyError(ActionError):
    """Destructive actions are disabled (``--read-only``)."""

    def __init__(self, action: str = "restart") -> None:
        super().__init__(f"{action} refused: the console runs with --read-only")
