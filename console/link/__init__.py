"""Links: one per instance, each keeping that instance's agent running and its frames flowing.

- ``base.py``: ``AgentLink`` (session loop, requests by id, reconnect with ``Backoff``), ``Session``;
- ``ssh.py``: ``SshLink`` (asyncssh, known_hosts, agent upload, or an agentless session when the host has
  no usable python3: ``console.agentless``);
- ``local.py``: ``LocalLink`` (the agent as a local subprocess);
- ``exec.py``: one command on its own exec channel of an SSH connection;
- ``auth.py``: where and how to log in, as ``ssh`` does (``~/.ssh/config`` through asyncssh, key files,
  ssh-agent, jump hosts), local problems found first (``needs_action``);
- ``hostkeys.py``: known_hosts lookups, fingerprints, the unknown key a host offered, writing an accepted one.
- ``pace.py``: the connect limiter (handshakes in flight, per event loop) and the spread of reconnect storms.
- ``surface.py``: ``Link`` (what the controller may use of any link), the status and host-key rules every
  link kind shares;
- ``shards.py`` / ``shard_process.py``: big fleets' links in worker processes (``ShardPool``, ``ShardedLink``).

Link statuses: ``connecting``, ``connected``, ``unreachable``, ``agent_failed``, and the ``PERMANENT`` ones
(``needs_action``, ``hostkey_unknown``, ``hostkey_changed``, ``auth_failed``), retried only every few
minutes or at once after ``retry_now()`` (a reload, an accepted host key).

Imports flow one way: ``pace`` <- ``base`` <- ``exec`` <- ``console.agentless.session`` <- ``ssh``;
``base`` <- ``local``; ``auth``/``hostkeys`` <- ``ssh``.
"""

from __future__ import annotations

from console.inventory import Instance
from console.link.base import (
    HELLO_TIMEOUT,
    MAX_LINE,
    PERMANENT,
    SILENCE_TIMEOUT,
    AgentLink,
    Backoff,
    CommandResult,
    FrameHandler,
    LinkError,
    Session,
    SessionFailed,
    StatusHandler,
)
from console.link.exec import RawResult, exec_command, failure_reason
from console.link.local import LocalLink
from console.link.ssh import REMOTE_DIR, SshLink
from console.link.surface import Link

__all__ = [
    "HELLO_TIMEOUT",
    "MAX_LINE",
    "PERMANENT",
    "REMOTE_DIR",
    "SILENCE_TIMEOUT",
    "AgentLink",
    "Backoff",
    "CommandResult",
    "FrameHandler",
    "Link",
    "LinkError",
    "LocalLink",
    "RawResult",
    "Session",
    "SessionFailed",
    "SshLink",
    "StatusHandler",
    "exec_command",
    "failure_reason",
    "make_link",
]


def make_link(instance: Instance, on_frame: FrameHandler, on_status: StatusHandler) -> AgentLink:
    """The link for an instance's transport."""
    cls = LocalLink if instance.transport == "local" else SshLink
    return cls(instance, on_frame, on_status)
