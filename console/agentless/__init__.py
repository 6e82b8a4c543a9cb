"""Agentless mode: the agent's frames built from plain commands run over SSH (no python3 on the host).

It mirrors the agent's samplers: ``host.py`` (is python3 there, host facts, output sections), ``gpu.py``
(nvidia-smi -> ``gpu`` frames), ``procs.py`` (``/proc`` or ``ps`` -> ``procs`` frames), ``logs.py`` (the
configured logs -> ``log`` frames). Those are pure: they build the shell commands (fixed text, every path
through ``shlex.quote``) and turn their output into the same ``hello``/``gpu``/``procs``/``log``/``heartbeat``
frames the agent sends (docs/architecture.md). ``session.py`` runs the commands on exec channels of the link's
SSH connection and hands the frames to the link; it is not imported here, so the pure parts never pull in
the link (``console.link.ssh`` imports the session).
"""

from __future__ import annotations

from console.agentless.gpu import (
    APP_FIELDS,
    GPU_FIELDS,
    GPU_TIMEOUT,
    MIB,
    GpuFrames,
    GpuReading,
    gpu_command,
    parse_compute_apps,
    parse_gpu_output,
    parse_gpu_rows,
)
from console.agentless.host import (
    AGENT_VERSION,
    FACTS_COMMAND,
    MARK,
    MAX_INTERVAL,
    MIN_INTERVAL,
    MIN_PYTHON,
    NEEDS_PYTHON,
    OPS,
    POLL_TIMEOUT,
    HostFacts,
    HostProbe,
    agentless_reason,
    new_nonce,
    parse_facts,
    parse_probe,
    poll_interval,
    probe_command,
    sections,
)
from console.agentless.logs import LOG_READ_MAX, LOG_TAIL_BYTES, RemoteLogs
from console.agentless.procs import (
    PF_KTHREAD,
    RESEND,
    ProcFrames,
    ProcRow,
    parse_etime,
    parse_proc_snapshot,
    parse_ps_snapshot,
    procs_command,
)

__all__ = [
    "AGENT_VERSION",
    "APP_FIELDS",
    "FACTS_COMMAND",
    "GPU_FIELDS",
    "GPU_TIMEOUT",
    "LOG_READ_MAX",
    "LOG_TAIL_BYTES",
    "MARK",
    "MAX_INTERVAL",
    "MIB",
    "MIN_INTERVAL",
    "MIN_PYTHON",
    "NEEDS_PYTHON",
    "OPS",
    "PF_KTHREAD",
    "POLL_TIMEOUT",
    "RESEND",
    "GpuFrames",
    "GpuReading",
    "HostFacts",
    "HostProbe",
    "ProcFrames",
    "ProcRow",
    "RemoteLogs",
    "agentless_reason",
    "gpu_command",
    "new_nonce",
    "parse_compute_apps",
    "parse_etime",
    "parse_facts",
    "parse_gpu_output",
    "parse_gpu_rows",
    "parse_probe",
    "parse_proc_snapshot",
    "parse_ps_snapshot",
    "poll_interval",
    "probe_command",
    "procs_command",
    "sections",
]
