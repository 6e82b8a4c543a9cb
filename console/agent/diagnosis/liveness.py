"""Liveness: is the run alive, and is it a batch job or a server? (pure: reads the gathered facts)

A run is alive when anything of it moves: its own progress (read from log content, ``progress.py``), its
processes' I/O (a checkpoint save, a download, a dataset read), their CPU time, real GPU work (util AND power:
a GPU at high util that draws little power is spinning, the classic stuck NCCL collective, and its host
threads spin with it, so their CPU does not count then), or, for a server, a loaded model (GPU memory held by
its processes) with the server up (listening on a TCP port, or its log says it serves).

``[benchmark] kind`` says ``batch`` or ``server``; when not given it is guessed: the benchmark is a server when
every top-level benchmark process is one: a server program (Triton, TGI's launcher, Jupyter and its kernels,
uvicorn, ComfyUI, a program named ``*server*``/``*serve*``: llama-server, sglang.launch_server, vLLM's
api_server), one started as a server (a ``serve`` subcommand: ``vllm serve``, ``ollama serve``; ``jupyter
lab``; ``--port``, ``--listen``, ``--host``), or one listening on a TCP port below the ephemeral range. A
launcher (torchrun, deepspeed, accelerate, mpirun, srun) is never a server (its rendezvous store listens too),
and a benchmark with a client among its processes (cuzk-bench driving its daemon) is a batch job.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Pattern, Set, Tuple

from ..wire.procmatch import program_name, program_views
from .progress import LogProgress
from .text import fmt_size, short

IO_MOVING = 256 * 1024  # bytes a second: the benchmark reads or writes (a heartbeat or a log line is less)
CPU_MOVING = 0.1  # cores: the benchmark computes on the CPU (an idle process uses ~0)
GPU_BUSY = 10  # percent util: the GPU has work
GPU_PINNED = 90  # percent util: a GPU at least this busy ...
SPIN_POWER = 0.4  # ... that draws less than this share of its power limit is spinning, not computing
SPIN_UTIL_LOW, SPIN_POWER_LOW = 80, 0.3  # a GPU busy at 80-90 % is spinning too when it draws under 30 %
GPU_WORK_POWER = 0.4  # real work: util >= GPU_BUSY and power >= this share of the limit
MODEL_BYTES = 1 << 30  # GPU memory in use that counts as a loaded model when no process is named
TORCH_PORTS = range(29400, 29600)  # torch elastic's rendezvous and store defaults

# programs that are servers whatever their arguments; a name with a "server"/"serve" word in it counts too
# (llama-server, text-generation-server, sglang.launch_server, vllm.entrypoints.openai.api_server, server.py)
SERVER_PROGRAM_RE = re.compile(
    r"^(?:tritonserver|text-generation-(?:launcher|router)|text-embeddings-router|jupyter-(?:lab|notebook|server)"
    r"|ipykernel(?:_launcher)?|uvicorn|gunicorn|hypercorn|comfyui|koboldcpp|xinference|tabbyapi|local-?ai"
    r"|infinity_emb|ollama_llama_server|trtllm-serve)(?:$|[._-])",
    re.IGNORECASE,
)
# a web UI is a server too: invokeai-web, webui.py / webui.sh (AUTOMATIC1111, Forge, SD.Next), a "-webui" or "-web"
SERVER_WORD_RE = re.compile(r"(?:^|[._-])(?:(?:api_?)?serv(?:er|e)|web(?:ui|server)?)(?:$|[._-])", re.IGNORECASE)
CLIENT_WORD_RE = re.compile(r"bench|client|train|eval|test|finetune|tune", re.IGNORECASE)  # drives a server
# programs that are servers only as one of their subcommands (vllm serve, ollama serve, jupyter lab)
SERVER_SUBCOMMANDS = {"jupyter": ("lab", "notebook", "server")}
LAUNCHER_RE = re.compile(
    r"^(?:torchrun|torch\.distributed\.(?:run|launch)|deepspeed|accelerate|mpirun|mpiexec|srun|horovodrun"
    r"|colossalai|composer|ray)(?:$|[-_.:])",
    re.IGNORECASE,
)
SERVER_ARGS = ("--port", "--listen", "--host")
# a server that is up says so (or answers a request)
SERVING_RE = re.compile(
    r"Uvicorn running on|Application startup complete|server is listening|\blistening on\b|\bis running at\b"
    r"|ready to roll|Started server process|\bserving\b|To see the GUI go to|Running on (?:local )?URL"
    r"|Prompt executed|\bGET /|\bPOST /|\"(?:GET|POST) /|\| 200 \||\b200 OK\b|HTTP/1\.[01]\" 200"
    r"|server (?:is )?(?:ready|started)|Started GRPCInferenceService|Started HTTPService|Kernel started"
    r"|model loaded|llama runner started",
    re.IGNORECASE,
)
# a run still loading or fetching what it needs (its latest progress meter, or its last words)
LOADING_RE = re.compile(
    r"\bload(?:ing)?\b.{0,40}\b(?:checkpoint|shards?|weights?|model|safetensors|tensors|state dict|params)"
    r"|\b(?:checkpoint|shards?|weights?|model|safetensors)\b.{0,20}\bload(?:ing)?\b|\bdownloading\b|\bfetching\b"
    r"|Load weight begin|\bloading\b.{0,60}\b(?:\d+%|\d+/\d+)"
    r"|\bcompil(?:e|es|ing)\b|\b(?:waiting for|awaiting)\b.{0,60}\bcompilation\b"
    r"|\b(?:shader|pipeline|kernel|program|module|graph)s?\b.{0,40}\bcompilation\b.{0,40}\b(?:so far|in progress)\b"
    r"|\bcapturing (?:cuda |cudagraph |the )?graphs?\b|\bwarming up\b|\bautotun"
    r"|\bbuild(?:s|ing)? (?:the |an? )?(?:\w+ )?(?:engine|extension|wheel|kernels?)\b|\bprofil(?:e|ing) run\b"
    # preparing the data before the first step: tokenizing, datasets' map/filter passes, split generation
    r"|\btokeniz(?:e|es|ing)\b|\bRunning tokenizer\b|^\s*(?:Map|Filter)\b[^:]{0,40}:\s*\d+%"
    r"|\bGenerating \w+ split\b|\bGrouping texts\b|\bpre-?process(?:es|ing)\b"
    # waiting on a job it submitted to a remote service (ColabFold's MSA server): a meter named by the job's state,
    # a poll that sleeps on it
    r"|(?-i:\b(?:PENDING|QUEUED|RUNNING|SUBMITTED)\b)\s*:\s*\d{1,3}(?:\.\d+)?\s?%"
    r"|\b(?:sleep|wait|poll)\w*\b.{0,40}(?-i:\b(?:PENDING|QUEUED|RUNNING)\b)",
    re.IGNORECASE,
)
# programs that build what the run needs before it starts: a JIT-compiled extension (ninja, cc1plus, nvcc),
# a wheel, a crate
BUILD_PROGRAM_RE = re.compile(
    r"^(?:ninja|make|cmake|cc1|cc1plus|c\+\+|g\+\+|gcc|clang(?:\+\+)?|ld|nvcc|cicc|ptxas|fatbinary|cudafe\+\+"
    r"|cargo|rustc|pip|pip3|uv|maturin|trtllm-build|[\w.]+[-_]build"
    # package managers solving or installing the run's environment (conda's "Solving environment" prints nothing
    # for minutes)
    r"|conda|mamba|micromamba|pixi|poetry|pipenv)$")
# a build tool's helpers (a shell running the next compiler, a setup.py): they do not run what was built
HELPER_RE = re.compile(r"^(?:build-script-[\w-]+|sh|bash|dash|zsh|env|python[\d.]*|perl|node|ccache|sccache|xargs"
                       r"|time|timeout|nice)$")
# a young program's last words announce its start-up (a component or extension starting, an engine initializing)
STARTUP_RE = re.compile(
    r"\bstartup\s*$|\bstarting up\b|\binitiali[sz]ing\b|\bLoading plugins\b|\bwarming up\b"
    r"|\bcompiling shaders\b|\bbuilding (?:the )?shader cache\b", re.IGNORECASE)
# a job waiting in a batch scheduler's queue (Slurm's srun/salloc, PBS's qsub -I, LSF's bsub -I, HTCondor's
# condor_submit, a Kubernetes pod Pending), and the words that say it got its resources
QUEUED_RE = re.compile(
    r"\bjob \d+ queued and waiting for resources\b|\bPending job allocation \d+|\bqsub: waiting for job \S+ to start"
    r"|<<Waiting for dispatch \.\.\.>>|\bjob \S+ is (?:queued|pending) (?:and )?waiting\b"
    r"|\bwaiting for (?:the )?(?:job|pod|allocation)\b.{0,40}\b(?:to (?:start|be scheduled)|resources)\b",
    re.IGNORECASE)
ALLOCATED_RE = re.compile(
    r"\bjob \d+ has been allocated resources\b|\bGranted job allocation\b|\bqsub: job \S+ ready\b"
    r"|<<Starting on \S+>>|\bjob \d+ (?:started|is running)\b", re.IGNORECASE)
CHECKPOINT_RE = re.compile(r"\bsav(?:e|ing)\b.{0,40}\bcheckpoints?\b|\bcheckpoint(?:ing)?\b.{0,20}\bsav", re.IGNORECASE)


class Gpus(NamedTuple):
    """What the benchmark's GPUs are doing: ``work`` (util and power), ``spin`` (pinned util at low power),
    ``busy`` (pinned util, no power reading), ``light`` (some util, low power), ``idle``, ``unknown``."""

    state: str  # work | spin | busy | light | idle | unknown
    line: str  # "gpu0 100 % at 104 W of 350 W"


class Liveness(NamedTuple):
    kind: str  # batch | server
    kind_reason: str
    measured: bool  # the activity facts are there (CPU and I/O known at least in part)
    cpu: Optional[float]  # cores used over the window
    io_rate: Optional[float]  # bytes a second read and written
    listening: List[Tuple[int, int]]  # (pid, port)
    gpus: Gpus
    model: Optional[str]  # "gpu0: 6.2G held by pid 41" when a model is loaded
    serving: Optional[str]  # why the server counts as up (its port, its log line)

    def moving(self) -> List[str]:
        """What moves besides the log's progress (empty: nothing)."""
        out: List[str] = []
        if self.io_rate is not None and self.io_rate >= IO_MOVING:
            out.append("I/O %s/s" % fmt_size(self.io_rate))
        if self.cpu is not None and self.cpu >= CPU_MOVING and self.gpus.state not in ("spin", "busy"):
            out.append("CPU %.1f cores" % self.cpu)
        if self.gpus.state == "work":
            out.append("GPU work (%s)" % self.gpus.line)
        return out

    def idle_server(self) -> bool:
        """A server with its model loaded and up, waiting for requests."""
        return self.kind == "server" and self.model is not None and self.serving is not None


def _tree_pids(bench: List[Dict[str, Any]], processes: List[Dict[str, Any]]) -> Set[int]:
    pids = {int(r["pid"]) for r in bench}
    kids: Dict[int, List[int]] = {}
    for r in processes:
        kids.setdefault(int(r.get("ppid") or 0), []).append(int(r["pid"]))
    todo = list(pids)
    while todo:
        for child in kids.get(todo.pop(), ()):
            if child not in pids:
                pids.add(child)
                todo.append(child)
    return pids


def _args_after_program(rec: Dict[str, Any]) -> List[str]:
    views = program_views(str(rec.get("cmdline") or ""), str(rec.get("name") or ""))
    if not views:
        return []
    text, length = views[0]
    return text[length:].split()


def server_reason(rec: Dict[str, Any], ports: List[int], ephemeral_low: int) -> Optional[str]:
    """Why one process looks like a server (None: it does not)."""
    prog = program_name(rec)
    if LAUNCHER_RE.match(prog) or CLIENT_WORD_RE.search(prog):
        return None
    if SERVER_PROGRAM_RE.match(prog) or SERVER_WORD_RE.search(prog):
        return "%s is a server program" % prog
    args = _args_after_program(rec)
    if args and (args[0] == "serve" or args[0] in SERVER_SUBCOMMANDS.get(prog.lower(), ())):
        return "%s %s" % (prog, args[0])
    for a in args:
        if a.split("=", 1)[0] in SERVER_ARGS:
            return "%s was started with %s" % (prog, a.split("=", 1)[0])
    fixed = [p for p in ports if p < ephemeral_low and p not in TORCH_PORTS]
    if fixed:
        return "%s listens on port %d" % (prog, fixed[0])
    return None


def guess_kind(facts: Dict[str, Any], bench: List[Dict[str, Any]]) -> Tuple[str, str]:
    """``(kind, why)``: the configured kind, else a guess from the top-level benchmark processes."""
    configured = str((facts.get("benchmark") or {}).get("kind") or "").strip().lower()
    if configured in ("batch", "server"):
        return configured, "[benchmark] kind = %s" % configured
    if not bench:
        return "batch", "no benchmark process to tell"
    activity = facts.get("activity") or {}
    ports = {int(p["pid"]): list(p.get("listen") or []) for p in activity.get("procs") or []}
    low = int((activity.get("ephemeral") or [32768])[0])
    pids = {int(r["pid"]) for r in bench}
    tops = [r for r in bench if int(r.get("ppid") or 0) not in pids]
    reasons = [server_reason(r, ports.get(int(r["pid"]), []), low) for r in tops]
    if tops and all(reasons):
        return "server", "guessed: %s" % "; ".join(sorted(set(str(r) for r in reasons)))
    return "batch", "guessed: not every benchmark process is a server"


def _power_share(d: Dict[str, Any]) -> Optional[float]:
    power, limit = d.get("power"), d.get("power_limit")
    if isinstance(power, (int, float)) and isinstance(limit, (int, float)) and limit > 0:
        return float(power) / float(limit)
    return None


def _holders(d: Dict[str, Any]) -> List[Tuple[Set[int], int]]:
    out: List[Tuple[Set[int], int]] = []
    for p in d.get("procs") or []:
        pids = set(int(x) for x in (p.get("group") or []))
        for key in ("pid", "nvml_pid"):
            if isinstance(p.get(key), int):
                pids.add(int(p[key]))
        out.append((pids, int(p.get("mem") or 0)))
    return out


def gpu_activity(facts: Dict[str, Any], tree: Set[int]) -> Tuple[Gpus, Optional[str]]:
    """What the benchmark's GPUs do (those its processes hold, else all), and its loaded model if any."""
    gpu = facts.get("gpu") or {}
    if gpu.get("state") != "ok":
        return Gpus("unknown", ""), None
    devices = [d for d in gpu.get("devices") or [] if not d.get("lost")]
    held = [d for d in devices if any(pids & tree for pids, _ in _holders(d))]
    # one process driving several GPUs (DataParallel) is listed on one of them only when NVML names no process
    # on the others (a container's PID namespace, an old driver): a GPU with memory in use and no process listed
    # is the benchmark's too when it holds one
    unlisted = [d for d in devices if held and d not in held and not _holders(d)
                and int(d.get("mem_used") or 0) >= MODEL_BYTES]
    mine = held + unlisted or devices
    model: Optional[str] = None
    for d in held:
        mem = sum(m for pids, m in _holders(d) if pids & tree) or int(d.get("mem_used") or 0)
        who = sorted(set().union(*(pids & tree for pids, _ in _holders(d))))
        model = "gpu%s: %s held by pid %s" % (d.get("index"), fmt_size(mem), ", ".join(str(p) for p in who[:3]))
        break
    if model is None and tree:
        big = [d for d in devices if int(d.get("mem_used") or 0) >= MODEL_BYTES]
        if big and not any(_holders(d) for d in devices):  # no process listed: memory in use is what we know
            model = "gpu%s: %s in use" % (big[0].get("index"), fmt_size(big[0].get("mem_used")))
    utils = [(d, d.get("util")) for d in mine if isinstance(d.get("util"), (int, float))]
    if not utils:
        return Gpus("unknown", ""), model
    parts = []
    for d, u in utils:
        share = _power_share(d)
        power = "" if d.get("power") is None else " at %.0f W" % float(d["power"])
        limit = "" if share is None else " of %.0f W" % float(d["power_limit"])
        parts.append("gpu%s %s%%%s%s" % (d.get("index"), u, power, limit))
    line = ", ".join(parts[:8])
    busy = [(d, u) for d, u in utils if u >= GPU_BUSY]
    if not busy:
        return Gpus("idle" if all(u <= 2 for _, u in utils) else "light", line), model
    shares = [_power_share(d) for d, _ in busy]
    if any(s is not None and s >= GPU_WORK_POWER for s in shares):
        return Gpus("work", line), model
    if all(u >= GPU_PINNED or (u >= SPIN_UTIL_LOW and s is not None and s < SPIN_POWER_LOW)
           for (_, u), s in zip(busy, shares)):
        # pinned: at low power a spin; without a power reading it cannot be told from work ("busy")
        return Gpus("spin" if all(s is not None for s in shares) else "busy", line), model
    return Gpus("light", line), model


def _serving_line(facts: Dict[str, Any], started: Optional[float]) -> Optional[str]:
    for log in facts.get("logs") or []:
        if log.get("error") or (started is not None and float(log.get("mtime") or 0.0) < started - 2.0):
            continue
        lines = log.get("lines") or []
        for text in reversed(lines[-400:]):
            if text and SERVING_RE.search(text):
                return "%s: %s" % (str(log["path"]).rsplit("/", 1)[-1], short(text.strip(), 80))
    return None


def assess(facts: Dict[str, Any], bench: List[Dict[str, Any]], bench_started: Optional[float]) -> Liveness:
    """The run's liveness from the facts (the ``activity`` facts may be missing: then CPU and I/O are unknown)."""
    processes = [r for r in facts.get("processes") or []]
    tree = _tree_pids(bench, processes) if bench else set()
    kind, why = guess_kind(facts, bench)
    activity = facts.get("activity")
    cpu: Optional[float] = None
    io_rate: Optional[float] = None
    listening: List[Tuple[int, int]] = []
    measured = isinstance(activity, dict) and bool(activity.get("procs"))
    if measured:
        assert isinstance(activity, dict)
        seconds = max(1e-3, float(activity.get("seconds") or 1.0))
        mine = [p for p in activity.get("procs") or [] if int(p["pid"]) in tree]
        cpu = sum(float(p.get("cpu") or 0.0) for p in mine) / seconds
        ios = [p["io"] for p in mine if p.get("io") is not None]
        if ios:  # syscalls (sockets and pipes too) or the block layer (mmap'd reads), whichever says more
            moved = sum(max(io.get("rchar", 0) + io.get("wchar", 0), io.get("read_bytes", 0) + io.get("write_bytes", 0))
                        for io in ios)
            io_rate = moved / seconds
        listening = [(int(p["pid"]), int(port)) for p in mine for port in p.get("listen") or []]
    gpus, model = gpu_activity(facts, tree)
    serving: Optional[str] = None
    if listening:
        serving = "listening on port %s" % ", ".join(str(port) for _, port in listening[:3])
    elif kind == "server":
        serving = _serving_line(facts, bench_started)
    return Liveness(kind, why, measured, cpu, io_rate, listening, gpus, model, serving)


def loading(progress: Dict[str, LogProgress], logs: Dict[str, Dict[str, Any]], stall: float
            ) -> Optional[Tuple[str, str, int]]:
    """The run is still loading what it needs: its latest progress is a load or download meter that moves, or
    its last words (a fresh log) say it loads. ``(the line, its log's path, its index)``, or None."""
    best: Optional[Tuple[float, str, str, int]] = None
    for path, prog in progress.items():
        log = logs.get(path)
        if log is None or prog.stuck_for > stall or prog.sample.done:
            continue
        lines = log.get("lines") or []
        text = lines[prog.at]
        context = " ".join(lines[max(0, prog.at - 2):prog.at + 1])
        if not (prog.sample.kind == "download" or LOADING_RE.search(text) or LOADING_RE.search(context)):
            return None  # the run's own work moves (steps, proofs): it is running, not starting
        if best is None or prog.stuck_for < best[0]:
            best = (prog.stuck_for, short(text.strip(), 100), path, prog.at)
    return best[1:] if best else None


def loading_words(logs: Dict[str, Dict[str, Any]], now: float, stall: float) -> Optional[Tuple[str, str, int]]:
    """No meter anywhere: the freshest log (written within ``stall``) ends with words that say the run loads,
    builds or warms up (ONNX Runtime's first run building a TensorRT engine, a JIT compile). ``(line, path,
    index)``, or None. The caller asks for the run's CPU to be busy too."""
    return _freshest_last_line_says(logs, now, stall, LOADING_RE)


def _freshest_last_line_says(logs: Dict[str, Dict[str, Any]], now: float, stall: float,
                             words: Pattern[str]) -> Optional[Tuple[str, str, int]]:
    """The freshest log written within ``stall`` whose last non-empty line matches ``words``: ``(line, path,
    index)``, else None (only the freshest log with a line is looked at)."""
    fresh = [lg for lg in logs.values() if lg.get("mtime") is not None and now - float(lg["mtime"]) <= stall]
    for log in sorted(fresh, key=lambda lg: -float(lg["mtime"])):
        lines = log.get("lines") or []
        at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), None)
        if at is not None:
            text = lines[at][:400]
            return (short(text.strip(), 100), log["path"], at) if words.search(text) else None
    return None


# the program says its next step takes long and prints nothing meanwhile: "This can take many minutes" (ONNX
# Runtime's TensorRT engine build), "this may take a while", "will take several minutes"
LONG_STEP_RE = re.compile(
    r"\b(?:can|could|may|might|will|would)\s+take\s+(?:up to\s+)?(?:a\s+)?(?:many|several|a few|some|long"
    r"|\d+(?:\s*-\s*\d+)?)\s+(?:minutes?|mins?|hours?|time)\b|\b(?:can|could|may|might|will)\s+take\s+a\s+"
    r"(?:long\s+)?while\b", re.IGNORECASE)
LONG_STEP_WAIT = 1800.0  # seconds: how long a step announced as long may stay silent and still be starting


def long_step_words(logs: Dict[str, Dict[str, Any]], now: float) -> Optional[Tuple[str, str, int]]:
    """The freshest log's last words (3 lines) announce a step that takes minutes, written within
    ``LONG_STEP_WAIT``: ``(line, path, index)``, or None. The caller asks for something to move (CPU, GPU, I/O)."""
    dated = [lg for lg in logs.values() if lg.get("mtime") is not None]
    if not dated:
        return None
    log = max(dated, key=lambda lg: float(lg["mtime"]))
    if now - float(log["mtime"]) > LONG_STEP_WAIT:
        return None
    lines = log.get("lines") or []
    last = [i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()][:3]
    for at in last:
        if LONG_STEP_RE.search(lines[at][:600]):
            return short(lines[at].strip(), 100), log["path"], at
    return None


BUILDING_RE = re.compile(r"\b(?:building|compiling)\b", re.IGNORECASE)


def building_line(logs: Dict[str, Dict[str, Any]]) -> Optional[Tuple[str, int]]:
    """The last line of the freshest log that says it builds (``Building extension module cpu_adam...``)."""
    for log in sorted(logs.values(), key=lambda lg: -float(lg.get("mtime") or 0.0)):
        lines = log.get("lines") or []
        for i in range(len(lines) - 1, max(-1, len(lines) - 30), -1):
            if BUILDING_RE.search(lines[i][:400]):
                return log["path"], i
    return None


def building(facts: Dict[str, Any], bench: List[Dict[str, Any]]) -> Optional[str]:
    """The run is still building what it needs: a compiler or build tool runs in the benchmark's process tree
    (DeepSpeed's JIT ``cpu_adam``: ninja and cc1plus under the trainer). Its program names, or None."""
    processes = facts.get("processes") or []
    tree = _tree_pids(bench, processes)
    names = {int(r["pid"]): program_name(r) for r in processes if int(r["pid"]) in tree}
    kids: Dict[int, List[int]] = {}
    for r in processes:
        if int(r["pid"]) in tree:
            kids.setdefault(int(r.get("ppid") or 0), []).append(int(r["pid"]))

    def runs_its_build(pid: int) -> bool:  # a tool whose child is the program it built (cargo test, make run)
        return any(not BUILD_PROGRAM_RE.match(names[k]) and not HELPER_RE.match(names[k]) for k in kids.get(pid, ()))
    tools = sorted({n for pid, n in names.items() if BUILD_PROGRAM_RE.match(n) and not runs_its_build(pid)})
    return ", ".join(tools) if tools else None


def saving(lines: List[str]) -> Optional[str]:
    """The log's last words say a checkpoint is being saved (the line), else None."""
    for text in reversed(lines[-5:]):
        if text and CHECKPOINT_RE.search(text):
            return short(text.strip(), 100)
    return None


def startup_words(logs: Dict[str, Dict[str, Any]], now: float, stall: float) -> Optional[Tuple[str, str, int]]:
    """The freshest log (written within ``stall``) ends with words that announce the program's start-up
    (``[ext: omni.kit.renderer.core] startup``, ``Initializing the renderer``): ``(line, path, index)``, or None.
    The caller asks for a young benchmark whose CPU is busy."""
    return _freshest_last_line_says(logs, now, stall, STARTUP_RE)


def queued_words(logs: Dict[str, Dict[str, Any]]) -> Optional[Tuple[str, str, int]]:
    """A log's last 40 lines say the job waits in a batch scheduler's queue and nothing after says it got its
    resources: ``(line, path, index)``, or None."""
    for log in sorted(logs.values(), key=lambda lg: -float(lg.get("mtime") or 0.0)):
        lines = log.get("lines") or []
        for i in range(len(lines) - 1, max(-1, len(lines) - 40), -1):
            if ALLOCATED_RE.search(lines[i][:400]):
                break
            if QUEUED_RE.search(lines[i][:400]):
                return short(lines[i].strip(), 100), log["path"], i
    return None
