"""Built-in probes: small read-only looks at the host, each ``{"title": str, "lines": [str]}``.

A new probe is one function ``(config) -> lines`` and one row in ``PROBES``; the ``probe`` op
(``console.agent.ops``) runs it by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Callable, Dict, List, Tuple

from ..diagnosis import diagnose as dg
from ..wire.config import AgentConfig, as_list, plain, watch_dirs
from ..wire.protocol import ProbeResult
from ..wire.timefmt import fmt_age
from ..wire.wording import plural

MAX_LINES = 500


def probe_tree(config: AgentConfig) -> List[str]:
    from ..sample.procs import read_process_table

    processes = read_process_table(plain(config))
    pids = {int(r["pid"]) for r in processes}
    kids = dg.children_map(processes)
    lines: List[str] = []
    for root in sorted((r for r in processes if int(r.get("ppid") or 0) not in pids), key=lambda r: r["pid"]):
        lines.append(dg.proc_line(root))
        lines.extend(dg.proc_line(r, d) for d, r in dg.descendants(root["pid"], kids))
    return lines or ["no processes visible"]


def probe_recent_files(config: AgentConfig) -> List[str]:
    now = time.time()
    files = dg.watched_files(config)
    if not files:
        dirs = as_list(config.get("watch_dirs"))
        return ["no files in %s" % ", ".join(dirs) if dirs else "no watched dirs configured"]
    return ["%8s ago %8s %s" % (fmt_age(now - f["mtime"]), dg.fmt_size(f["size"]), f["path"])
            for f in files[:60]]


def _meminfo() -> Dict[str, int]:
    out: Dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    out[parts[0].rstrip(":")] = int(parts[1]) * (1024 if len(parts) > 2 else 1)
    except OSError:
        pass
    return out


def df_percent(used: int, avail: int) -> int:
    """``df``'s Use%: used over what an ordinary user could have (used + available), rounded up.

    Root's reserved blocks are neither, so used/size reads low (9 % where df says 24 %).
    """
    room = used + avail
    return -(-100 * used // room) if room > 0 else 0


def probe_resources(config: AgentConfig) -> List[str]:
    lines: List[str] = []
    seen = set()
    for path in [*(d for d, _ in watch_dirs(config)), "/"]:
        try:
            dev = os.stat(path).st_dev
            usage = shutil.disk_usage(path)
        except OSError as exc:
            lines.append("disk %s: %s" % (path, exc.strerror or exc))
            continue
        if dev in seen:
            continue
        seen.add(dev)
        pct = df_percent(usage.used, usage.free)
        used, total, free = dg.fmt_size(usage.used), dg.fmt_size(usage.total), dg.fmt_size(usage.free)
        full = "  FULL" if pct >= 98 else ""
        lines.append("disk %s: %s used of %s (%d%%), %s free%s" % (path, used, total, pct, free, full))
    mem = _meminfo()
    if mem.get("MemTotal"):
        avail = mem.get("MemAvailable", mem.get("MemFree", 0))
        lines.append("memory: %s available of %s" % (dg.fmt_size(avail), dg.fmt_size(mem["MemTotal"])))
        if mem.get("SwapTotal"):
            swap_free, swap_total = dg.fmt_size(mem.get("SwapFree", 0)), dg.fmt_size(mem["SwapTotal"])
            lines.append("swap: %s free of %s" % (swap_free, swap_total))
    try:
        load = os.getloadavg()
        lines.append("load: %.2f %.2f %.2f on %s" % (load[0], load[1], load[2], plural(os.cpu_count() or 0, "CPU")))
    except OSError:
        pass
    return lines


def probe_dmesg(config: AgentConfig) -> List[str]:
    result = dg.read_dmesg(max_lines=200)
    if result.get("error"):
        return ["dmesg: %s" % result["error"]]
    return result["lines"] or ["dmesg: empty"]


def probe_nvidia_smi(config: AgentConfig) -> List[str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ["nvidia-smi not found"]
    try:
        proc = subprocess.run([exe], stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return ["nvidia-smi timed out after 20s (a hung driver or a lost GPU?)"]
    except OSError as exc:
        return ["nvidia-smi failed: %s" % exc]
    lines = (proc.stdout + proc.stderr).decode("utf-8", "replace").splitlines()
    if proc.returncode != 0:
        lines.append("nvidia-smi exited with code %d" % proc.returncode)
    return lines


PROBES: Dict[str, Tuple[str, Callable[[AgentConfig], List[str]]]] = {
    "tree": ("process tree (pid state wchan cpu rss command)", probe_tree),
    "recent_files": ("recently modified files in watched dirs", probe_recent_files),
    "resources": ("disk, memory and load", probe_resources),
    "dmesg": ("kernel log (tail)", probe_dmesg),
    "nvidia_smi": ("nvidia-smi", probe_nvidia_smi),
}


def catalog() -> List[Dict[str, str]]:
    """The built-in probes, in order: ``[{name, title}]``."""
    return [{"name": name, "title": title} for name, (title, _) in PROBES.items()]


def run_probe(config: AgentConfig, name: str) -> ProbeResult:
    """Run one built-in probe: ``{"title", "lines"}``; an unknown name raises ValueError."""
    if name not in PROBES:
        raise ValueError("unknown probe %r (known: %s)" % (name, ", ".join(sorted(PROBES))))
    title, fn = PROBES[name]
    lines = [str(line) for line in fn(config)]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES], "... %s more" % plural(len(lines) - MAX_LINES, "line")]
    return {"title": title, "lines": lines}

