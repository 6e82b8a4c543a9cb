"""What the rest of the console may use of a link, and the status rules every link kind shares.

- :class:`Link` is the Protocol the controller holds: ``AgentLink`` (and its ``SshLink``/``LocalLink``) and
  ``ShardedLink`` (the console's side of a link run in a worker process) both satisfy it.
- :class:`StatusRules` is the one place where a status change sets the waiters' events and reaches the
  state, and where "permanent" is decided; both link kinds inherit it instead of restating it.
- :func:`accept_offer` is the host-key rule (an unknown key may be accepted, a changed one never).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from console.inventory import Instance
from console.link.hostkeys import HostKeyOffer, append_known_host

if TYPE_CHECKING:
    from console.link.base import CommandResult, StatusHandler

# Failures that retrying will not fix (a file to fix, a key to accept or add): a link retries them only
# every few minutes, and at once after ``retry_now()`` (a reload, an accepted host key).
PERMANENT = frozenset(("needs_action", "hostkey_unknown", "hostkey_changed", "hostkey_mismatch", "auth_failed"))
FAILURES = frozenset(("unreachable", "agent_failed")) | PERMANENT


class LinkError(Exception):
    """A request or command could not be carried out on an instance."""


class Link(Protocol):
    """One instance's link as the controller, the reload and SSH-on-demand use it."""

    instance: Instance
    name: str
    status: str
    detail: str
    next_retry_at: float | None  # time.time() of the next attempt while failing
    outcome_event: asyncio.Event  # set once an attempt has ended: connected or failed
    connected_event: asyncio.Event

    host_key_offer: HostKeyOffer | None  # an unknown key the host offered, which the operator may accept

    def start(self) -> Any: ...
    async def stop(self) -> None: ...
    def retry_now(self) -> None: ...
    @property
    def failed_permanently(self) -> bool: ...
    async def request(self, op: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]: ...
    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult: ...
    def accept_host_key(self) -> HostKeyOffer: ...


class StatusRules:
    """The status bookkeeping both link kinds share (``_on_status`` feeds the fleet state)."""

    name: str
    status: str
    detail: str
    outcome_event: asyncio.Event
    connected_event: asyncio.Event
    _on_status: StatusHandler
    host_key_offer: HostKeyOffer | None = None  # set by SSH links when a host offers an unknown key

    def retry_now(self) -> None:
        raise NotImplementedError

    def _set_status(self, status: str, detail: str) -> None:
        self.status, self.detail = status, detail
        if status == "connected" or status in FAILURES:
            self.outcome_event.set()
        if status == "connected":
            self.connected_event.set()
        else:
            self.connected_event.clear()
        self._on_status(self.name, status, detail)

    @property
    def failed_permanently(self) -> bool:
        """The last attempt failed in a way that waiting will not fix."""
        return self.status in PERMANENT

    def accept_host_key(self) -> HostKeyOffer:
        """Trust the unknown key the host offered last (:func:`accept_offer`), then reconnect at once."""
        offer = accept_offer(self.name, self.host_key_offer, self.status, self.detail)
        self.host_key_offer = None
        self._forget_offer()
        self.retry_now()
        return offer

    def _forget_offer(self) -> None:
        """Where the offer is also kept elsewhere (a link worker), forget it there too."""


def accept_offer(name: str, offer: HostKeyOffer | None, status: str, detail: str) -> HostKeyOffer:
    """Trust the unknown key a host offered: write it to its known_hosts. The caller forgets the offer and
    retries at once. LinkError when there is none to accept or the key changed (never accepted here);
    OSError when known_hosts cannot be written."""
    if offer is None:
        raise LinkError(f"{name}: no unknown host key to accept ({status}: {detail})")
    if offer.changed:
        raise LinkError(f"{name}: refused: {offer.describe()}")
    append_known_host(offer.known_hosts, offer.host, offer.port, offer.key)
    return offer
