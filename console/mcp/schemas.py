"""The output schemas of the MCP tools (what ``tools.py`` builds), published as each tool's ``outputSchema``.

Numbers that a host may report as integers or fractions are ``float``; fields a result leaves out when they
do not apply have defaults. Extra fields are allowed, so a result can grow without breaking a client.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class Verdict(_Out):
    code: str
    severity: str
    summary: str
    age_s: Optional[float] = Field(None, description="seconds since the diagnosis ran")


class GpuSummary(_Out):
    state: Optional[str] = Field(None, description="ok | no_gpu | error; null before the first sample")
    count: int
    lost: list[int]
    util_avg: Optional[float] = None
    mem_used: Optional[float] = Field(None, description="bytes")
    mem_total: Optional[float] = Field(None, description="bytes")
    simulated: bool


class Spend(_Out):
    price_per_hour: Optional[float] = Field(None, description="the rental's price per hour (null: not known)")
    price_source: Optional[str] = Field(None, description="where the price came from (fleet.toml line, vast.ai)")
    mode: str = Field(description="bench | idle (benchmark down or GPUs idle: paid for nothing) | other")
    watched_s: float = Field(description="seconds since the console began watching it")
    benchmark_s: float
    idle_s: float = Field(description="seconds benchmark-down or GPU-idle since the console began watching")
    idle_episode_s: float
    spend: Optional[float] = Field(None, description="money spent while watched (fleet currency)")
    idle_spend: Optional[float] = Field(None, description="money spent idle (fleet currency)")
    since_benchmark_spend: Optional[float] = None


class InstanceRow(_Out):
    name: str
    address: str
    tags: list[str]
    status: str = Field(
        description="failed | needs_action | unreachable | benchmark_down | stale | gpu_idle | connecting | ok")
    detail: str
    link: str
    benchmark: str = Field(description="running | starting | not_running | unknown")
    verdict: Optional[Verdict] = Field(None, description="the last diagnosis, if one ran")
    gpus: GpuSummary
    flags: list[str]
    data_age_s: Optional[float] = Field(None, description="seconds since the instance last sent anything")
    spend: Optional[Spend] = None


class FleetStatus(_Out):
    instances: list[InstanceRow] = Field(description="trouble first")
    matched: int
    fleet_totals: dict[str, int]
    truncated: bool
    note: Optional[str] = None
    currency: str = "$"
    fleet_rates: Optional[dict[str, float]] = Field(None, description="burning_per_hour, idle_per_hour")


class GpuProc(_Out):
    pid: Optional[int] = None
    mem: Optional[float] = None
    name: Optional[str] = None


class GpuDevice(_Out):
    index: int
    name: str
    util: Optional[float] = None
    mem_used: Optional[float] = None
    mem_total: Optional[float] = None
    temp: Optional[float] = None
    power: Optional[float] = None
    lost: bool
    error: Optional[str] = None
    procs: list[GpuProc]


class Process(_Out):
    pid: Optional[int] = None
    ppid: Optional[int] = None
    name: str
    cmdline: str
    state: str
    wchan: Optional[str] = None
    cpu: Optional[float] = None
    rss: Optional[float] = None
    gpu_mem: Optional[float] = None
    age_s: Optional[float] = None
    benchmark: bool = Field(description="matches the fleet file's [benchmark] match patterns")
    entrypoint: bool = Field(description="matches the fleet file's [benchmark] entrypoint patterns")


class FollowedLog(_Out):
    path: str
    lines_held: int
    last_line: Optional[int] = None
    last_text: Optional[str] = None
    event: Optional[str] = None
    missing: bool
    updated_age_s: Optional[float] = None


class Evidence(_Out):
    path: str
    line: Optional[int] = None
    text: str


class Finding(_Out):
    code: str
    severity: str = Field(description="info | warning | error | critical")
    summary: str
    evidence: list[Evidence]


class VerdictCore(_Out):
    code: str
    severity: str
    summary: str


class Alternative(_Out):
    code: str
    summary: str
    evidence: list[Evidence]


class Diagnosis(_Out):
    instance: str
    verdict: VerdictCore
    findings: list[Finding] = Field(description="most severe first")
    alternatives: list[Alternative] = Field(default_factory=list,
                                            description="up to two other explanations, most likely first (top-3)")
    steps: list[Any]
    truncated: bool
    note: Optional[str] = None


class AgentInfo(_Out):
    version: str
    python: str
    agentless: bool


class InstanceDetail(InstanceRow):
    link_detail: str
    agent: AgentInfo
    gpu_devices: list[GpuDevice]
    processes: list[Process]
    process_count: int
    logs: list[FollowedLog]
    diagnosis: Optional[Diagnosis] = None
    truncated: bool
    note: Optional[str] = None


class LogLine(_Out):
    line: int
    text: str
    cut_from: Optional[int] = Field(None, description="the line's real length when it was cut")


class LogRead(_Out):
    instance: str
    path: str
    mode: str
    source: str = Field(description="host (read now) or console (the lines the console holds, host not reachable)")
    lines: list[LogLine]
    truncated: bool
    around_line: Optional[int] = None
    pattern: Optional[str] = None
    matched: Optional[int] = None
    file_lines: Optional[int] = None
    note: Optional[str] = None


class ProbeOutput(_Out):
    instance: str
    probe: str
    title: str
    lines: list[str]
    truncated: bool
    note: Optional[str] = None


class RestartOutcome(_Out):
    instance: str
    outcome: str = Field(description="ok | failed | refused")
    message: str
    reason: str
    stopped: list[int] = []
    started_pid: Optional[int] = None
    plan: list[str] = Field(default=[], description="what it stopped, one line per process group (pid, program, "
                            "age, parent entrypoint), or 'no benchmark running: will only start', then what it started")
