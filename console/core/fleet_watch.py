"""The fleet while it runs: re-read ``fleet.toml`` when it changes or on a reload signal, and re-run its imports.

``FleetWatch(controller)`` polls the fleet file's mtime every few seconds (no new dependency: a stat
call is cheap) and installs the reload signals' handlers (SIGUSR1; serve adds SIGHUP); both call
``controller.reload()``. Every ``vastai = true`` or ``command = [...]`` import runs its CLI every ``refresh``
seconds (``run_import``: an asyncio subprocess with a timeout); its hosts become instances with the fleet
file's ``[defaults]`` and ``[benchmark]`` (``build_imported``), and ``controller.set_imported`` connects the
new rentals and drops the destroyed ones. A failing CLI is one line in ``controller.fleet_errors``, never a crash,
and keeps the last good list (a CLI hiccup must not disconnect a fleet).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from console.agent.wire.wording import plural
from console.inventory import ConfigError, ImportSpec, Instance, parse_vastai_instances

if TYPE_CHECKING:
    from console.core.controller import FleetController

POLL_SECONDS = 2.0  # fleet file mtime poll
IMPORT_TIMEOUT = 60.0  # seconds a `vastai show instances --raw` may take
MAX_OUTPUT = 64 * 1024 * 1024


class ImportFailed(Exception):
    """An import's CLI failed; the message is one line naming the command and saying why."""


async def run_import(spec: ImportSpec, timeout: float = IMPORT_TIMEOUT) -> list[dict[str, Any]]:
    """Run the import's CLI and return its hosts (``parse_vastai_instances`` dicts)."""
    what = " ".join(spec.command)
    try:
        proc = await asyncio.create_subprocess_exec(
            *spec.command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
    except OSError as exc:
        hint = " (pip install vastai, then vastai set api-key KEY)" if spec.command[0] == "vastai" else ""
        raise ImportFailed(f"{spec.source}: cannot run {spec.command[0]}: {exc.strerror}{hint}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise ImportFailed(f"{spec.source}: `{what}` did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip().splitlines()
        why = tail[-1][:200] if tail else f"exit status {proc.returncode}"
        raise ImportFailed(f"{spec.source}: `{what}` failed: {why}")
    if len(out) > MAX_OUTPUT:
        raise ImportFailed(f"{spec.source}: `{what}` printed more than {MAX_OUTPUT >> 20} MiB")
    try:
        data = json.loads(out)
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise ImportFailed(f"{spec.source}: `{what}` did not print JSON ({exc})") from None
    try:
        return parse_vastai_instances(data, f"`{what}`", running_only=spec.running_only)
    except ConfigError as exc:
        raise ImportFailed(f"{spec.source}: {exc}") from None


def build_imported(fleet_path: Path, spec: ImportSpec, hosts: list[dict[str, Any]]) -> list[Instance]:
    """Instances for an import's hosts, with the fleet file's ``[defaults]`` and ``[benchmark]``.

    Uses the inventory's own builder so imported instances are made exactly as ``load_fleet`` makes
    those of a ``vastai_json`` import.
    """
    from console.inventory import load as inventory_load
    from console.inventory import schema, toml_text
    from console.inventory.errors import read_capped
    from console.inventory.records import BenchmarkSpec

    text = read_capped(fleet_path, "fleet file")
    try:
        data, lines = toml_text.parse(text)
        doc = msgspec.convert(data, schema.FleetFile, strict=True)
    except Exception as exc:  # the file was valid when loaded; an edit since is the reload's to report
        raise ImportFailed(f"{fleet_path}: cannot read [defaults] for the import: {exc}") from None
    builder = inventory_load._Builder(fleet_path, lines, doc)
    bench = builder.benchmark(doc.benchmark, BenchmarkSpec(), ["benchmark"], "")
    out = []
    for host in hosts:
        host = dict(host)
        host["tags"] = [*host.get("tags", ()), *spec.tags]
        origin = host.pop("source")
        try:
            out.append(builder.instance(host, bench, origin, ["import", 0], imported="vastai"))
        except ConfigError as exc:
            raise ImportFailed(f"{spec.source}: {exc}") from None
    return out


def _same(a: Instance, b: Instance) -> bool:
    """The same instance for the link: every field but where it was declared (a line moved is no change)."""
    return dataclasses.replace(a, source="") == dataclasses.replace(b, source="") and a.agent_extra == b.agent_extra


async def apply(controller: FleetController, instances: list[Instance]) -> tuple[list[str], list[str], list[str]]:
    """Make the running fleet ``instances``: returns the names added, removed and changed.

    Unchanged instances keep their link and state (history); a changed one keeps its state and gets a
    new link; a removed one is disconnected and dropped. Links that failed for good are retried at once
    (a reload is how an operator says "I fixed it").
    """

    old = {inst.name: inst for inst in controller.fleet.instances}
    new = {inst.name: inst for inst in instances}
    added = [n for n in new if n not in old]
    removed = [n for n in old if n not in new]
    changed = [n for n in new if n in old and not _same(old[n], new[n])]
    controller.fleet.instances = list(instances)
    state = controller.state
    stopping = [controller.links.pop(n) for n in removed + changed if n in controller.links]
    await asyncio.gather(*(link.stop() for link in stopping), return_exceptions=True)
    for name in removed:
        if state.instances.pop(name, None) is not None:  # FleetState has no remove_instance yet
            state.order_version += 1
    for name in added + changed:
        state.add_instance(new[name])
        if controller.started:
            link = controller.new_link(new[name])
            controller.links[name] = link
            link.start()
    for name, link in controller.links.items():
        if name not in added and name not in changed and link.failed_permanently:
            link.retry_now()
    return added, removed, changed


async def refresh_imports(controller: FleetController, specs: list[ImportSpec] | None = None) -> None:
    """Run the imports (all of the fleet's, or ``specs``) at once, then apply what they found."""
    specs = list(controller.fleet.imports) if specs is None else specs
    path = Path(controller.fleet.source)

    async def one(spec: ImportSpec) -> None:
        key = import_key(spec)
        try:
            controller.imported[key] = build_imported(path, spec, await run_import(spec))
            controller.fleet_errors.pop(key, None)
        except ImportFailed as exc:
            controller.fleet_errors[key] = str(exc)

    await asyncio.gather(*(one(s) for s in specs))
    await apply(controller, [*_priced(controller), *_imported(controller)])


def _priced(controller: FleetController) -> list[Instance]:
    """The file's instances, those an import also lists taking the import's price (``dph_total``) and vast.ai id
    where the file gives none of their own: an instance's own price wins over the import's, which wins over
    ``[defaults]``."""
    keys = {import_key(s) for s in controller.fleet.imports}
    found = {i.name: i for key, got in controller.imported.items() if key in keys for i in got}
    out = []
    for inst in controller.file_instances:
        imp = found.get(inst.name)
        if imp is not None:
            own = bool(inst.price_source) and not inst.price_source.endswith("[defaults]")
            if imp.price_per_hour is not None and not own:
                inst = dataclasses.replace(inst, price_per_hour=imp.price_per_hour, price_source=imp.price_source)
            if inst.vast_id is None and imp.vast_id is not None:
                inst = dataclasses.replace(inst, vast_id=imp.vast_id)
        out.append(inst)
    return out


def _imported(controller: FleetController) -> list[Instance]:
    """Instances of the current imports; a name the file (or an earlier import) has is left out."""
    keys = {import_key(s) for s in controller.fleet.imports}
    seen = {inst.name for inst in controller.file_instances}
    out = []
    for key, instances in controller.imported.items():
        if key not in keys:
            continue
        for inst in instances:
            if inst.name not in seen:
                seen.add(inst.name)
                out.append(inst)
    return out


async def reload(controller: FleetController) -> str:
    """Re-read the fleet file and re-run its imports; returns one line saying what changed.

    A file with errors changes nothing: its one-line error is in ``fleet_errors`` (and returned).
    """
    from console.inventory import load_fleet

    source = controller.fleet.source
    try:
        fleet = await asyncio.to_thread(load_fleet, source)
    except ConfigError as exc:
        controller.fleet_errors[source] = f"not reloaded: {exc}"
        return controller.fleet_errors[source]
    controller.fleet_errors.pop(source, None)
    before = {inst.name for inst in controller.fleet.instances}
    controller.file_instances = list(fleet.instances)
    controller.fleet.probes, controller.fleet.signatures = fleet.probes, fleet.signatures
    controller.fleet.imports = fleet.imports
    controller.fleet.currency, controller.fleet.actions = fleet.currency, fleet.actions
    controller.state.currency = fleet.currency
    for key in [k for k in controller.fleet_errors if k != source and k not in map(import_key, fleet.imports)]:
        del controller.fleet_errors[key]
    controller.watch.sync_imports()
    await refresh_imports(controller)
    after = {inst.name: inst for inst in controller.fleet.instances}
    added, removed = sorted(set(after) - before), sorted(before - set(after))
    parts = [plural(len(after), "instance")]
    if added:
        parts.append("added " + ", ".join(added))
    if removed:
        parts.append("removed " + ", ".join(removed))
    return f"{source}: reloaded: " + "; ".join(parts)


def import_key(spec: ImportSpec) -> str:
    """Which import a list of instances came from (its command and where the fleet file declares it)."""
    return f"{spec.source} {' '.join(spec.command)}"


# Signals that re-read the fleet file. A terminal program ends on SIGHUP (its terminal went away: the TUI
# quits, console/ui/hangup.py), so there SIGUSR1 reloads; serve, a daemon, adds SIGHUP (systemd's ExecReload).
TERMINAL_RELOAD_SIGNALS: tuple[int, ...] = (signal.SIGUSR1,)
DAEMON_RELOAD_SIGNALS: tuple[int, ...] = (signal.SIGHUP, signal.SIGUSR1)


class FleetWatch:
    """Reloads the fleet when its file changes or on a reload signal; re-runs its imports every ``refresh`` s."""

    def __init__(self, controller: FleetController, poll: float = POLL_SECONDS,
                 reload_signals: tuple[int, ...] = TERMINAL_RELOAD_SIGNALS) -> None:
        self.controller = controller
        self.poll = poll
        self.reload_signals = reload_signals
        self._tasks: list[asyncio.Task[None]] = []
        self._import_tasks: dict[str, asyncio.Task[None]] = {}
        self._handled: tuple[int, ...] = ()  # the reload signals whose handlers are installed now
        self.on_reload: Callable[[str], None] | None = None  # told each reload's one line (the TUI's toast)
        self.reloads = 0

    @property
    def path(self) -> Path | None:
        source = self.controller.fleet.source
        return Path(source) if source and Path(source).is_file() else None

    async def start(self, watch_file: bool = True) -> None:
        """Watch the file (and the reload signals) when ``watch_file``; run the imports once now, then every
        refresh."""
        if watch_file and self.path is not None:
            self._tasks.append(asyncio.create_task(self._poll_file(self._signature()), name="fleet-watch:file"))
            loop = asyncio.get_running_loop()
            for sig in self.reload_signals:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
                    loop.add_signal_handler(sig, self._on_signal, signal.Signals(sig).name)
                    self._handled += (sig,)
        if self.controller.fleet.imports:
            if watch_file:  # the UI is up meanwhile; rentals appear when the CLI answers
                self._tasks.append(asyncio.create_task(refresh_imports(self.controller), name="imports:first"))
            else:  # one-shot commands report the imported instances too
                await refresh_imports(self.controller)
        self.sync_imports()

    def sync_imports(self) -> None:
        """One refresh loop per import of the current fleet (started, or stopped when the import went)."""
        specs = {import_key(s): s for s in self.controller.fleet.imports}
        for key in list(self._import_tasks):
            if key not in specs:
                self._import_tasks.pop(key).cancel()
        for key, spec in specs.items():
            if key not in self._import_tasks:
                self._import_tasks[key] = asyncio.create_task(self._refresh_loop(spec), name=f"import:{key}")

    async def stop(self) -> None:
        for sig in self._handled:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_signal_handler(sig)
        self._handled = ()
        tasks = [*self._tasks, *self._import_tasks.values()]
        self._tasks, self._import_tasks = [], {}
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _on_signal(self, name: str) -> None:
        self._tasks.append(asyncio.create_task(self._reload(name)))

    async def _reload(self, why: str) -> None:
        self.reloads += 1
        with contextlib.suppress(Exception):  # reload reports its own errors in fleet_errors
            message = await self.controller.reload()
            if self.on_reload is not None:
                self.on_reload(message)

    def _signature(self) -> tuple[int, int, int] | None:
        """mtime, size and inode: an editor that replaces the file within one mtime tick still shows."""
        path = self.path
        try:
            st = path.stat() if path is not None else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None

    async def _poll_file(self, last: tuple[int, int, int] | None) -> None:
        while True:
            await asyncio.sleep(self.poll)
            now = self._signature()
            if now is not None and now != last:
                last = now
                await self._reload("file changed")

    async def _refresh_loop(self, spec: ImportSpec) -> None:
        while True:
            await asyncio.sleep(spec.refresh)
            with contextlib.suppress(Exception):
                await self.controller.refresh_imports([spec])
