"""Shell into an instance (``s``): the system ``ssh`` with the console's own settings for that instance.

Why a separate module: the argv is built by a pure function (``ssh_argv``), tested without a terminal, and
always an argv list handed to ``exec`` (never a shell string): a host name from a vast.ai import or a key path
with spaces cannot become shell text or an ssh option. ``run_suspended`` runs it with the app suspended
(Textual's ``App.suspend``) while the event loop keeps the links alive, and returns to the console as it was.
A shell that fails says why on the console (ssh's last stderr line, which the repaint would erase) and in the
audit log.

What is carried from the instance record, as the console's own link uses it (``console/link/auth.py``):
user and port (left to ``~/.ssh/config`` for an ``ssh_config`` alias unless the fleet file sets them), the
key (``-i``), the known_hosts file with ``StrictHostKeyChecking=yes`` (the console never trusts a new key
from here), the jump hosts (``-J``), the connect timeout and keepalive. ``--`` ends the options, so even a
hostile destination is only ever a destination.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
from typing import TYPE_CHECKING, Any, Iterator, List, Optional, Sequence

from textual.app import App
from textual.widgets import TabbedContent

from console.core.text_safety import clean
from widgets.instance_screen import InstanceScreen

if TYPE_CHECKING:
    from console.ui.app import FleetApp

SSH = "ssh"
TAIL_BYTES = 4096  # of ssh's stderr, kept to say why it failed
FAILED_TOAST_SECONDS = 30.0  # a failed shell's toast stays this long (the timeline, e, keeps it for good)
_CLOSED = re.compile(r"^(Shared connection|Connection) to \S+ closed\.?$")  # ssh's own goodbye, not a reason


class ShellError(ValueError):
    """The instance cannot be shelled into as configured (the message says why)."""


def _check_word(what: str, value: str) -> str:
    """A host, user or jump hop: no leading ``-`` (an ssh option), no whitespace or control characters."""
    if not value:
        raise ShellError("%s is empty" % what)
    if value.startswith("-"):
        raise ShellError("%s %r starts with '-' (would read as an ssh option)" % (what, value))
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise ShellError("%s %r holds whitespace or control characters" % (what, value))
    return value


def _option_path(what: str, path: str) -> str:
    """A file path as an ``-o``/``-i`` value: ``~`` expanded here, ``%`` escaped (ssh expands ``%`` tokens in
    IdentityFile and UserKnownHostsFile), quoted when it holds spaces (ssh splits those values on them)."""
    path = os.path.expanduser(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in path) or '"' in path:
        raise ShellError("%s %r holds a quote or control characters" % (what, path))
    path = path.replace("%", "%%")
    return '"%s"' % path if any(c.isspace() for c in path) else path


def _seconds(value: float) -> str:
    return str(max(1, round(value)))


def ssh_argv(inst: Any, ssh: str = SSH, command: Sequence[str] = ()) -> List[str]:
    """The ``ssh`` argv that logs in to ``inst`` (an ``inventory.Instance``) as the console does.

    A ``transport = "local"`` instance runs on this machine: its "shell" is the user's ``$SHELL``.
    Raises ``ShellError`` for a value ssh would misread.
    """
    if getattr(inst, "transport", "ssh") == "local":
        return [os.environ.get("SHELL") or "/bin/sh", *command]
    alias = getattr(inst, "ssh_config", None)
    port = int(getattr(inst, "port", 22) or 22)
    user = getattr(inst, "user", None) or None
    argv = [ssh]
    if alias:  # as the link does: the config decides what the fleet file leaves at its default
        dest = _check_word("ssh_config alias", alias)
        if user == "root":
            user = None
        if port == 22:
            port = 0
    else:
        dest = _check_word("host", str(getattr(inst, "host", "") or ""))
    if user:
        argv += ["-l", _check_word("user", user)]
    if port:
        argv += ["-p", str(port)]
    key = getattr(inst, "key", None)
    if key:
        argv += ["-i", _option_path("key", key)]
    known = getattr(inst, "known_hosts", None)
    if known:
        argv += ["-o", "UserKnownHostsFile=%s" % _option_path("known_hosts", known)]
    argv += ["-o", "StrictHostKeyChecking=yes"]  # as the link: an unknown or changed key is refused
    jump = [_check_word("jump host", hop) for hop in getattr(inst, "jump", ()) or ()]
    if jump:
        argv += ["-J", ",".join(jump)]
    timeout = getattr(inst, "connect_timeout", None)
    if timeout:
        argv += ["-o", "ConnectTimeout=%s" % _seconds(timeout)]
    keepalive = getattr(inst, "keepalive", None)
    if keepalive is not None:
        argv += ["-o", "ServerAliveInterval=%d" % max(0, int(keepalive))]
    if command:
        argv += ["--", dest, *command]
    else:
        argv += ["-t", "--", dest]
    return argv


def command_line(argv: Sequence[str]) -> str:
    """The argv as one line an operator can paste into a shell (``y`` copies it)."""
    return shlex.join(list(argv))


@contextlib.contextmanager
def _console_keeps_running() -> Iterator[None]:
    """While the shell has the terminal, Ctrl-C / Ctrl-\\ / Ctrl-Z go to the shell, not the console.

    The handlers are Python functions (not SIG_IGN), so the child's exec resets them to their defaults.
    """
    saved = {}
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP):
        with contextlib.suppress(ValueError, OSError):  # (not the main thread: leave them)
            saved[sig] = signal.signal(sig, lambda *_: None)
    try:
        yield
    finally:
        for sig, handler in saved.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, handler)


async def run_suspended(app: App[Any], argv: Sequence[str], errors: Optional[List[str]] = None) -> Optional[int]:
    """Run ``argv`` on the terminal with ``app`` suspended; its exit status (None: it could not start).

    The event loop keeps running meanwhile (links, state, timers); nothing is drawn until the app resumes
    (``batch_update``), which repaints the screen as it was. With ``errors``, what the program writes to stderr
    still reaches the terminal, and its last lines are added to ``errors`` (the repaint would erase them).
    """
    import asyncio

    with app.batch_update(), app.suspend(), _console_keeps_running():
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stderr=asyncio.subprocess.PIPE if errors is not None else None)
        except OSError as exc:
            if errors is not None:
                errors.append(exc.strerror or str(exc))
            return None
        tee = asyncio.ensure_future(_tee(proc.stderr, errors)) if errors is not None and proc.stderr else None
        rc = await proc.wait()
        if tee is not None:
            with contextlib.suppress(asyncio.TimeoutError):  # (a child that keeps stderr open: not waited for)
                await asyncio.wait_for(tee, 2.0)
        return rc


async def _tee(stream: Any, errors: Optional[List[str]]) -> None:
    """Copy ``stream`` to the terminal's stderr as it comes; its last lines (at most 4 KB) into ``errors``."""
    tail = b""
    while True:
        chunk = await stream.read(4096)
        if not chunk:
            break
        with contextlib.suppress(OSError):
            os.write(2, chunk)
        tail = (tail + chunk)[-TAIL_BYTES:]
    lines = [clean(line.strip()) for line in tail.decode("utf-8", "replace").splitlines()]
    if errors is not None:
        errors.extend(line for line in lines if line and not _CLOSED.match(line))


def failure_reason(errors: Sequence[str]) -> str:
    """The line that says why a shell failed: ssh's last words (``Host key verification failed.``)."""
    return errors[-1] if errors else ""


def shell_target(app: FleetApp) -> Optional[str]:
    """The instance ``s`` and ``y`` act on: the instance screen's, else the cursor's (grid or table)."""
    screen = app.screen
    if isinstance(screen, InstanceScreen) and screen.instance_name:
        return screen.instance_name
    return app.view.cursor_name  # (the grid's and the table's)


async def open_shell(app: FleetApp, name: Optional[str]) -> Optional[int]:
    """``s``: audit, suspend, ``ssh``, resume; says how it ended. Works in ``--read-only`` too (the operator's
    own shell) but is always audited; in read-only mode an audit log that cannot be written refuses it."""
    state = app.state.instances.get(name) if name else None
    if state is None or not name:
        app.notify("no instance to shell into", severity="warning")
        return None
    try:
        argv = ssh_argv(state.instance)
    except ShellError as exc:
        app.notify("%s: no shell: %s" % (name, exc), severity="error", timeout=8)
        return None
    audit = app.controller.audit
    host = str(getattr(state.instance, "host", "") or "")
    note = "read-only console" if app.read_only else None
    if audit is not None:
        try:
            audit.record(name, host, "shell", "started", {"argv": argv}, origin="tui", note=note)
        except OSError as exc:
            if app.read_only:
                app.notify("%s: shell refused: cannot write the audit log: %s" % (name, exc), severity="error")
                return None
            app.notify("audit log not written: %s" % exc, severity="warning")
    errors: List[str] = []
    rc = await run_suspended(app, argv, errors if argv[0] == SSH else None)
    reason = failure_reason(errors)
    if audit is not None:
        with contextlib.suppress(OSError):
            result: dict[str, Any] = {"returncode": rc, **({"reason": reason} if reason else {})}
            audit.record(name, host, "shell", "ended" if rc is not None else "failed", result,
                         origin="tui", note=note)
    if rc is None:
        app.notify("%s: could not run %s%s" % (name, argv[0], ": " + reason if reason else ""), severity="error",
                   timeout=FAILED_TOAST_SECONDS, markup=False)
    elif rc == 255 and argv[0] == SSH:  # the reason first: a one-line toast keeps it; the timeline (e) has it all
        app.notify("%s: ssh failed: %s\n(exit 255) %s" % (name, reason or "no reason given", command_line(argv)),
                   severity="error", timeout=FAILED_TOAST_SECONDS, markup=False)
    elif rc != 0 and reason:
        app.notify("%s: shell ended (exit %d): %s" % (name, rc, reason), severity="warning",
                   timeout=FAILED_TOAST_SECONDS, markup=False)
    else:
        app.notify("%s: shell closed (exit %d)" % (name, rc), timeout=3)
    return rc


def evidence_line(diagnosis: Any) -> str:
    """The verdict's first evidence line as ``path:line: text`` ("" when there is none)."""
    for finding in (diagnosis or {}).get("findings") or ():
        for ev in finding.get("evidence") or ():
            where = str(ev.get("path") or "")
            if ev.get("line") is not None:
                where += ":%s" % ev["line"]
            return ("%s: %s" % (where, ev.get("text") or "")).strip()
    return ""


def copy_text(app: FleetApp) -> tuple[str, str]:
    """What ``y`` copies, and what to call it: on the Logs tab the line under the cursor,
    on the Diagnosis tab the first evidence line, else the ssh command line of the instance."""
    screen = app.screen
    name = shell_target(app)
    state = app.state.instances.get(name) if name else None
    tab = ""
    if isinstance(screen, InstanceScreen):
        with contextlib.suppress(Exception):
            tab = screen.query_one("#inst-tabs", TabbedContent).active
    if tab == "tab-logs" and isinstance(screen, InstanceScreen):
        view = screen.active_log()
        cursor = view.cursor_line() if view is not None else None
        if cursor is not None:  # the line under the log's cursor (marked ▸)
            return cursor[1], "log line %d" % cursor[0]
    if tab == "tab-diag" and state is not None:
        line = evidence_line(state.diagnosis)
        if line:
            return line, "evidence line"
    if state is None:
        return "", ""
    try:
        return command_line(ssh_argv(state.instance)), "ssh command"
    except ShellError as exc:
        return "", str(exc)


__all__ = ["SSH", "ShellError", "command_line", "copy_text", "evidence_line", "failure_reason", "open_shell",
           "run_suspended", "shell_target", "ssh_argv"]
