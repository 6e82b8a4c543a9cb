"""The incident corpus runner: real-world failures replayed end to end through a real sshd and the real CLI.

Each folder under ``tests/fixtures/incidents/<slug>/`` holds one incident: the logs as the real program
printed them (``tmp/*.log``) and ``incident.json``:

``summary``      what happened, in one line.
``expect``       ``{"code", "evidence_file", "evidence_contains"}``: the verdict code, and one evidence line of the
                 verdict's finding: its file's basename (``dmesg`` for the kernel log, ``gpu:N`` for a device) and a
                 substring of its text. ``evidence_file: null`` checks only the code.
``processes``    stand-ins started for the diagnosis, each ``{"argv0", "args", "state", "script", "children"}``:
                 ``argv0`` is the program's name (a compiled stand-in is named so, so that its ``comm``, ``exe``
                 basename and ``argv[0]`` all read that name), or an interpreter (``python3``, ``bash``) that runs
                 ``script`` (a stand-in script of that name written into the run folder). ``state``: ``sleep``
                 (default), ``busy`` (spins a CPU, niced), ``stopped`` (SIGSTOP), ``zombie`` (exits, never reaped),
                 ``exit`` (ran and was reaped: gone), ``wait`` (a bash script blocked in ``wait`` on its children),
                 ``listen`` (listens on 127.0.0.1:``port``, then sleeps: a server up), ``write`` (writes about
                 4 MiB/s into ``file``, default a file in the run folder outside the watched dirs: a checkpoint save).
                 ``children`` are started by their parent, so the tree is real. ``$tmp`` / ``$run`` in ``args``
                 become the run's log folder / run folder.
``gpu``          the fake NVML state (the schema of ``tests/fakes/nvml.py``): ``{"driver", "cuda_driver_version",
                 "init_error", "devices": [...]}``; device fields left out get defaults; a process ``pid`` may be
                 ``"$proc:N"`` (the N-th top-level process, from 0) or ``"$proc:NAME"`` (by program/script name).
``needs_nvml``   true when the expectation depends on the GPU facts (skipped without the fake NVML library).
``dmesg``        kernel lines served by ``tests/fakes/bin/dmesg``: a string as is, or ``{"ago": S, "text": T}``
                 (stamped ``[uptime - S]``); ``null``: dmesg is "not permitted".
``ages``         ``{"<log basename>": seconds since last modified}`` (default 1 s).
``settle``       seconds between starting the stand-ins and setting the log times (default 0.3): a log that the
                 running process wrote must not look older than the process.
``stall_seconds`` the instance's ``stall_seconds`` (default 120).
``benchmark``    overrides of the fleet's ``[benchmark]`` (``match``, ``entrypoint``, ``log``, ``progress``, ``kind``).
``logs``         configured ``logs`` (default: none; ``watch_dirs`` is the run's log folder).

Per incident, the GPU state, the kernel log and the environment reach the agent through the instance's
``python``: a small wrapper that sets ``PATH`` (fake ``dmesg`` first), ``FAKE_DMESG``, ``FAKE_NVML_STATE`` and
``LD_LIBRARY_PATH`` (the fake ``libnvidia-ml.so.1``) and execs the interpreter, so one sshd serves every
incident with its own facts. Incidents run one after another (their stand-ins share program names).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "fixtures" / "incidents"
FAKE_BIN = ROOT / "tests" / "fakes" / "bin"
BASELINE = CORPUS / "BASELINE.txt"

FINE_CODES = frozenset(("healthy", "finished", "starting"))  # verdicts that say "nothing to fix"
DEFAULT_BENCHMARK: dict[str, Any] = {
    "match": ["cuzk-daemon", "cuzk-bench", r"benchmark\.sh"],
    "entrypoint": [r"entrypoint\.sh"],
    "log": "$tmp/benchmark-full.log",
}
INTERPRETERS = ("python3", "python", "bash", "sh")

# A program stand-in: its name is the file's name; STANDIN_STATE says how it behaves.
STANDIN_C = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
static void on_child(int sig) { (void)sig; }
int main(void) {
    const char *st = getenv("STANDIN_STATE");
    if (st && !strcmp(st, "init")) {  /* pid 1 of the incident: run each line of $STANDIN_INIT, reap forever */
        FILE *f = fopen(getenv("STANDIN_INIT"), "r");
        char *line = NULL;
        size_t cap = 0;
        signal(SIGCHLD, on_child);
        while (f && getline(&line, &cap, f) > 0) {
            line[strcspn(line, "\n")] = 0;
            if (fork() == 0) { execl("/bin/bash", "bash", "-c", line, (char *)0); _exit(127); }
            usleep(20000);  /* keep the start order (and so the pid order) of the top-level processes */
        }
        for (;;) if (wait(NULL) < 0) pause();
    }
    if (st && !strcmp(st, "stopped")) raise(SIGSTOP);
    if (st && (!strcmp(st, "exit") || !strcmp(st, "zombie"))) {
        const char *code = getenv("STANDIN_CODE");
        return code ? atoi(code) : 0;
    }
    if (st && !strcmp(st, "busy")) { volatile unsigned long n = 0; for (;;) n++; }
    if (st && !strcmp(st, "listen") && getenv("STANDIN_PORT")) {  /* a server up: listens, serves nothing */
        int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons((unsigned short)atoi(getenv("STANDIN_PORT")));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, (struct sockaddr *)&a, sizeof a) == 0) listen(s, 16);
    }
    if (st && !strcmp(st, "write") && getenv("STANDIN_FILE")) {  /* ~4 MiB/s into one file, rewritten */
        static char buf[65536];
        memset(buf, 'x', sizeof buf);
        for (;;) {
            int fd = open(getenv("STANDIN_FILE"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
            for (int i = 0; i < 16 && fd >= 0; i++) if (write(fd, buf, sizeof buf) < 0) break;
            if (fd >= 0) close(fd);
            usleep(250000);
        }
    }
    for (;;) pause();
}
"""

STANDIN_PY = """import os, signal, sys, time
state = os.environ.get("STANDIN_STATE", "sleep")
if state == "stopped":
    os.kill(os.getpid(), signal.SIGSTOP)
if state in ("exit", "zombie"):
    sys.exit(int(os.environ.get("STANDIN_CODE", "0")))
if state == "busy":
    while True:
        pass
if state == "listen" and os.environ.get("STANDIN_PORT"):
    import socket
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", int(os.environ["STANDIN_PORT"])))
        server.listen(16)
    except OSError:
        pass
if state == "write" and os.environ.get("STANDIN_FILE"):
    block = b"x" * 65536
    while True:
        with open(os.environ["STANDIN_FILE"], "wb") as out:
            for _ in range(16):
                out.write(block)
        time.sleep(0.25)
while True:
    time.sleep(3600)
"""

GPU_DEFAULTS: dict[str, Any] = {
    "name": "NVIDIA GeForce RTX 3090",
    "mem_total_mib": 24576,
    "mem_used_mib": 0,
    "util": 0,
    "mem_util": 0,
    "temp": 35,
    "power_mw": 30000,
    "power_limit_mw": 350000,
    "sm_clock": 210,
    "mem_clock": 405,
    "fan": 30,
    "error": None,
    "not_supported": [],
    "processes": [],
    "mig": None,
}


# -- the corpus -----------------------------------------------------------------------------------------
@dataclass
class Incident:
    slug: str
    path: Path
    spec: dict[str, Any]

    @property
    def expect(self) -> dict[str, Any]:
        return self.spec["expect"]

    @property
    def expected_code(self) -> str:
        return str(self.expect["code"])

    @property
    def is_failure(self) -> bool:
        return self.expected_code not in FINE_CODES


def load_incidents(root: Path = CORPUS, only: list[str] | None = None) -> list[Incident]:
    """Every incident folder (one with an ``incident.json``), sorted by slug; ``only`` picks some."""
    out = []
    for spec_path in sorted(root.glob("*/incident.json")):
        slug = spec_path.parent.name
        if only and slug not in only:
            continue
        out.append(Incident(slug, spec_path.parent, json.loads(spec_path.read_text())))
    return out


@dataclass
class Outcome:
    slug: str
    expected: str
    got: str | None = None
    exit_code: int | None = None
    evidence_ok: bool = False
    summary: str = ""
    error: str | None = None
    skipped: str | None = None
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return self.got == self.expected

    @property
    def top3(self) -> bool:
        """The expected code is the verdict or one of its alternatives."""
        alts = [a.get("code") for a in self.data.get("alternatives") or [] if isinstance(a, dict)]
        return self.ok or self.expected in alts[:2]

    @property
    def false_healthy(self) -> bool:
        """A failure the diagnosis called fine."""
        return self.expected not in FINE_CODES and self.got in FINE_CODES

    @property
    def false_alarm(self) -> bool:
        """A healthy or finished run the diagnosis called a failure (or could not diagnose)."""
        return self.expected in FINE_CODES and self.got not in FINE_CODES


def check_evidence(expect: dict[str, Any], data: dict[str, Any]) -> bool:
    """Does the verdict's finding carry the expected evidence line (file basename + substring)?"""
    code = (data.get("verdict") or {}).get("code")
    if code != expect.get("code"):
        return False
    want_file = expect.get("evidence_file")
    want_text = expect.get("evidence_contains") or ""
    if want_file is None and not want_text:
        return True
    for finding in data.get("findings") or []:
        if finding.get("code") != code:
            continue
        for ev in finding.get("evidence") or []:
            path = str(ev.get("path") or "")
            name = path if path in ("dmesg",) or path.startswith("gpu:") else os.path.basename(path)
            if want_file is not None and name != want_file:
                continue
            if want_text in str(ev.get("text") or ""):
                return True
    return False


# -- running ---------------------------------------------------------------------------------------------
def fake_nvml_builder() -> Any:
    """``tests.fakes.nvml.build_libnvml`` when that helper exists (the fake ``libnvidia-ml.so.1``), else None."""
    try:
        from tests.fakes.nvml import build_libnvml
    except Exception:
        return None
    return build_libnvml


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def _subst(text: str, run: Path) -> str:
    return text.replace("$tmp", str(run / "tmp")).replace("$run", str(run))


class Runner:
    """One sshd, one compiled stand-in, and a fresh run folder per incident; ``with Runner(dir) as r``."""

    def __init__(self, workdir: Path, cli_timeout: float = 60.0) -> None:
        self.workdir = workdir
        self.cli_timeout = cli_timeout
        self.sshd: Any = None
        self.nvml_dir: Path | None = None
        self.progress_key = False  # does the fleet file accept ``[benchmark] progress`` yet?
        self.kind_key = False  # ... and ``[benchmark] kind``? (an older engine scored on a newer corpus)
        self._count = 0
        self._writers = 0
        self._lock = threading.Lock()
        self.isolate = False  # a PID namespace per incident (root, util-linux unshare/nsenter)

    # setup / teardown
    def __enter__(self) -> Runner:
        from tests.support.sshd import Sshd

        self.workdir.mkdir(parents=True, exist_ok=True)
        self.standin = self.workdir / "standin"
        subprocess.run(
            ["cc", "-O1", "-o", str(self.standin), "-x", "c", "-"],
            input=STANDIN_C.encode(),
            check=True,
            capture_output=True,
        )
        builder = fake_nvml_builder()
        if builder is not None:
            dest = self.workdir / "nvml"
            dest.mkdir(exist_ok=True)
            built = Path(builder(dest))
            self.nvml_dir = built if built.is_dir() else built.parent
        self.progress_key = self._accepts('progress = "x"')
        self.kind_key = self._accepts('kind = "batch"')
        self.isolate = _can_isolate()
        self.sshd = Sshd(self.workdir / "sshd")
        self.sshd.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sshd is not None:
            self.sshd.stop()

    def _accepts(self, benchmark_line: str) -> bool:
        """Does the fleet file accept this ``[benchmark]`` line?"""
        from console.inventory import ConfigError, load_fleet

        probe = self.workdir / "probe-fleet.toml"
        probe.write_text(f'[benchmark]\n{benchmark_line}\n\n[[instance]]\nname = "p"\nhost = "127.0.0.1"\n')
        try:
            load_fleet(probe)
        except ConfigError:
            return False
        return True

    # one incident
    def run(self, incident: Incident) -> Outcome:
        out = Outcome(incident.slug, incident.expected_code)
        if incident.spec.get("needs_nvml") and self.nvml_dir is None:
            out.skipped = "needs the fake libnvidia-ml.so.1 (tests/fakes/nvml.py)"
            return out
        started = time.monotonic()
        with self._lock:
            self._count += 1
            run = self.workdir / "runs" / f"i{self._count:03d}"  # not the slug: no program name in any path
        if run.exists():
            shutil.rmtree(run)
        live = _Live()
        try:
            self._lay_out(incident, run)
            pids = self._start_processes(incident, run, live)
            time.sleep(float(incident.spec.get("settle", 0.3)))
            self._write_gpu_state(incident, run, pids)
            self._set_ages(incident, run)
            fleet = self._write_fleet(incident, run)
            self._diagnose(incident, run, fleet, out)
        except Exception as exc:  # one broken incident must not stop the corpus
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            live.stop()
            out.seconds = time.monotonic() - started
        return out

    def _lay_out(self, incident: Incident, run: Path) -> None:
        shutil.copytree(incident.path, run, ignore=shutil.ignore_patterns("incident.json", "README*"))
        (run / "tmp").mkdir(exist_ok=True)
        (run / "procs").mkdir(exist_ok=True)
        dmesg = incident.spec.get("dmesg", [])
        lines = []
        for item in dmesg or []:
            if isinstance(item, dict):
                lines.append("%s\t%s" % (float(item.get("ago", 0)), item["text"]))
            else:
                lines.append(str(item))
        (run / "dmesg.txt").write_text("".join(line + "\n" for line in lines))
        env = {
            "PATH": f"{FAKE_BIN}:$PATH",
            "FAKE_DMESG": str(run / "dmesg.txt"),
            "FAKE_NVML_STATE": str(run / "nvml.json"),
        }
        if dmesg is None:
            env["FAKE_DMESG_DENY"] = "1"
        if self.nvml_dir is not None:
            env["LD_LIBRARY_PATH"] = f"{self.nvml_dir}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"
        wrapper = run / "python3"
        body = "".join(f'{k}="{v}"; export {k}\n' for k, v in env.items())
        enter = ""
        if self.isolate:  # the agent runs inside the incident's PID namespace: it sees only its processes
            body += f"HOLDER=$(cat {shlex.quote(str(run / 'holder.pid'))})\n"
            # a loaded box can fail one setns: try the entry first (a failed exec would read as "python broken")
            log = shlex.quote(str(run / "nsenter.log"))
            body += (
                'n=0; until nsenter --target "$HOLDER" --pid --mount true 2>>' + log + "; do\n"
                '  n=$((n+1)); [ "$n" -ge 30 ] && break; sleep 0.1\ndone\n'
            )
            enter = 'nsenter --target "$HOLDER" --pid --mount --wd="$PWD" -- '
        wrapper.write_text(f'#!/bin/sh\n{body}exec {enter}{shlex.quote(sys.executable)} "$@"\n')
        wrapper.chmod(0o755)

    # processes
    def _exe(self, spec: dict[str, Any], run: Path) -> tuple[str, list[str]]:
        """The file to exec and the argv after argv[0] for one stand-in."""
        argv0 = str(spec["argv0"])
        args = [_subst(str(a), run) for a in spec.get("args", [])]
        name = os.path.basename(argv0)
        script = spec.get("script")
        if script:
            path = run / "procs" / os.path.basename(str(script))
            if name.startswith("python"):
                path.write_text(STANDIN_PY)
                exe = shutil.which(name) or sys.executable
            else:
                path.write_text(self._shell_script(spec, run))
                exe = shutil.which(name) or "/bin/bash"
            return exe, [str(path), *args]
        bindir = run / "bin"
        bindir.mkdir(exist_ok=True)
        path = bindir / name
        if not path.exists():
            shutil.copy2(self.standin, path)
        return str(path), args

    def _shell_script(self, spec: dict[str, Any], run: Path) -> str:
        """A bash stand-in: starts its children in the background, then waits (entrypoint.sh, benchmark.sh); one
        whose state is ``exit`` (or ``zombie``) ends with its ``exit_code`` instead, its children left running."""
        lines = ["#!/bin/bash"]
        for child in spec.get("children", []):
            lines.append(self._launch_line(child, run) + " &")
        if spec.get("state") in ("exit", "zombie"):
            lines.append(f"exit {int(spec.get('exit_code', 0))}")
            return "\n".join(lines) + "\n"
        if not spec.get("children"):
            lines.append("sleep 100000 &")
        lines.append("wait")
        lines.append("sleep 100000")  # never ends on its own: a finished child leaves it waiting here
        return "\n".join(lines) + "\n"

    def _launch_line(self, spec: dict[str, Any], run: Path) -> str:
        """One shell command, in parentheses, that becomes this process (after starting its children)."""
        exe, args = self._exe(spec, run)
        argv0 = str(spec["argv0"])
        state = spec.get("state", "sleep")
        env = f"STANDIN_STATE={shlex.quote(state)} STANDIN_CODE={int(spec.get('exit_code', 0))}"
        if state == "listen":
            env += f" STANDIN_PORT={int(spec.get('port', 0))}"
        if state == "write":
            with self._lock:
                self._writers += 1
                n = self._writers
            target = _subst(str(spec.get("file") or f"$run/written-{n}.bin"), run)
            env += f" STANDIN_FILE={shlex.quote(target)}"
        is_script_parent = spec.get("script") and not argv0.startswith("python")
        children = (
            "" if is_script_parent else "".join(self._launch_line(c, run) + " & " for c in spec.get("children", []))
        )
        argv = " ".join(shlex.quote(a) for a in [exe, *args])
        return f"({children}{env} exec -a {shlex.quote(argv0)} {argv})"

    def _start_processes(self, incident: Incident, run: Path, live: _Live) -> list[int]:
        """Start the stand-ins under their own init (in a new PID namespace when possible); their host pids."""
        specs = incident.spec.get("processes", [])
        lines = [self._launch_line(spec, run)[1:-1] for spec in specs]
        init = run / "bin" / "docker-init"
        init.parent.mkdir(exist_ok=True)
        shutil.copy2(self.standin, init)
        (run / "init.lines").write_text("".join(line + "\n" for line in lines))
        argv = [str(init)]
        if self.isolate:
            argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--", *argv]
        # niced from their first instruction: a busy stand-in (a spinning hang) started at normal priority starved
        # the other incidents' starts on a small machine until the loop below reniced it (10 workers on 2 cores:
        # an init not forked, a child not exec'd within 10 s)
        argv = ["nice", "-n", "19", *argv]
        with (run / "init.err").open("wb") as complaints:  # unshare's and the init's, for the error below
            proc = subprocess.Popen(
                argv,
                cwd=run,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=complaints,
                start_new_session=True,
                env=dict(os.environ, STANDIN_STATE="init", STANDIN_INIT=str(run / "init.lines")),
            )
        live.procs.append(proc)
        holder = proc.pid
        deadline = time.monotonic() + 10
        while self.isolate:  # unshare forks the namespace's pid 1
            kids = _children(proc.pid)
            if kids:
                holder = kids[0]
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                said = (run / "init.err").read_text(errors="replace").strip()[-300:]
                raise RuntimeError("unshare did not start the incident's init (%s)"
                                   % (f"exit {proc.returncode}: {said}" if proc.returncode is not None
                                      else "no child in 10 s"))
            time.sleep(0.01)
        live.holder = holder
        (run / "holder.pid").write_text(str(holder))
        if self.isolate:
            _wait_enterable(holder, proc)
        deadline = time.monotonic() + 10
        while len(_children(holder)) < sum(1 for s in specs if s.get("state") != "exit"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        time.sleep(0.15)  # let the execs and the children's forks happen
        tops = sorted(_children(holder))
        for pid in _descendants([holder]):  # busy stand-ins must not starve the agent on a small machine
            try:
                os.setpriority(os.PRIO_PROCESS, pid, 19)
            except OSError:
                pass
        return tops

    def _resolve_pid(self, ref: Any, pids: list[int]) -> int:
        if not isinstance(ref, str) or not ref.startswith("$proc:"):
            return int(ref)
        key = ref[len("$proc:") :]
        if key.isdigit():
            return _ns_pid(pids[int(key)])
        deadline = time.monotonic() + 10  # a loaded machine may not have exec'd the children yet
        while True:
            for pid in _descendants(pids):
                cmd = _cmdline(pid)
                names = {_comm(pid)} | {os.path.basename(a) for a in cmd[:2]}
                if key in names:
                    return _ns_pid(pid)
            if time.monotonic() > deadline:
                raise LookupError(f"no started process named {key!r}")
            time.sleep(0.05)

    def _write_gpu_state(self, incident: Incident, run: Path, pids: list[int]) -> None:
        gpu = incident.spec.get("gpu")
        if gpu is None:
            gpu = {"init_error": "LIBRARY_NOT_FOUND", "devices": []}
        state = {"driver": "550.54.15", "cuda_driver_version": 12040, "init_error": None}
        state.update({k: v for k, v in gpu.items() if k != "devices"})
        devices = []
        for i, dev in enumerate(gpu.get("devices", [])):
            full = dict(GPU_DEFAULTS)
            full.update({"uuid": f"GPU-{incident.slug[:8]:0<8}-0000-4000-8000-{i:012d}", "minor": i})
            full.update(dev)
            full["processes"] = [
                {"pid": self._resolve_pid(p["pid"], pids), "mem_mib": p.get("mem_mib")} for p in full["processes"]
            ]
            devices.append(full)
        state["devices"] = devices
        (run / "nvml.json").write_text(json.dumps(state, indent=1))

    def _set_ages(self, incident: Incident, run: Path) -> None:
        ages = incident.spec.get("ages", {})
        now = time.time()
        for path in sorted((run / "tmp").rglob("*")):
            if path.is_file():
                age = float(ages.get(path.name, ages.get(str(path.relative_to(run / "tmp")), 1.0)))
                os.utime(path, (now - age, now - age))

    def _write_fleet(self, incident: Incident, run: Path) -> Path:
        bench = dict(DEFAULT_BENCHMARK)
        bench.update(incident.spec.get("benchmark") or {})
        if not self.progress_key:
            bench.pop("progress", None)
        if not self.kind_key:
            bench.pop("kind", None)
        lines = ["[benchmark]"]
        for key, value in bench.items():
            if key == "log":
                value = _subst(str(value), run)
            lines.append(f"{key} = {_toml(value)}")
        server = self.sshd
        inst: dict[str, Any] = {
            "name": incident.slug,
            "host": "127.0.0.1",
            "port": server.port,
            "user": server.user,
            "key": str(server.client_key_path),
            "known_hosts": str(server.known_hosts),
            "python": str(run / "python3"),
            "watch_dirs": [str(run / "tmp")],
            "logs": [_subst(str(p), run) for p in incident.spec.get("logs", [])],
            "stall_seconds": float(incident.spec.get("stall_seconds", 120)),
        }
        lines += ["", "[[instance]]"] + [f"{k} = {_toml(v)}" for k, v in inst.items()]
        fleet = run / "fleet.toml"
        fleet.write_text("\n".join(lines) + "\n")
        return fleet

    def _diagnose(self, incident: Incident, run: Path, fleet: Path, out: Outcome) -> None:
        env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(self.workdir / "state"), PYTHONPATH=str(ROOT))
        cmd = [
            sys.executable,
            "-m",
            "console",
            "diagnose",
            incident.slug,
            "--json",
            "--fleet",
            str(fleet),
            "--timeout",
            "20",
        ]
        result = subprocess.run(
            cmd, capture_output=True, text=True, timeout=self.cli_timeout, env=env, cwd=run, stdin=subprocess.DEVNULL
        )
        out.exit_code = result.returncode
        if result.returncode not in (0, 1):
            out.error = f"exit {result.returncode}: {result.stderr.strip()[-300:]}"
            out.error += _harness_note(run)
            return
        data = json.loads(result.stdout)
        out.data = data
        verdict = data.get("verdict") or {}
        out.got = verdict.get("code")
        out.summary = str(verdict.get("summary") or "") + _harness_note(run)
        out.evidence_ok = check_evidence(incident.expect, data)


class _Live:
    """What one incident started: its init (and the unshare above it); ``stop()`` kills all of it."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.holder: int | None = None

    def stop(self) -> None:
        if self.holder is not None:  # the namespace's init and everything below it
            for pid in reversed(_descendants([self.holder])):
                for sig in (signal.SIGKILL, signal.SIGCONT):
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
            self.holder = None
        for proc in self.procs:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except OSError:
                    pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def _can_isolate() -> bool:
    """Can this user start a PID namespace (and enter it again with nsenter)?"""
    if os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    try:
        done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _harness_note(run: Path) -> str:
    """What nsenter said when the wrapper had to retry: the harness, not the product, stumbled."""
    log = run / "nsenter.log"
    if not log.exists() or not log.stat().st_size:
        return ""
    return f" (harness: nsenter retried: {log.read_text(errors='replace').strip()[-200:]})"


def _wait_enterable(holder: int, unshare: subprocess.Popen[bytes]) -> None:
    """Wait until nsenter can enter the incident's namespaces (its init has mounted its own /proc)."""
    deadline = time.monotonic() + 10
    err = b""
    while time.monotonic() < deadline and unshare.poll() is None:
        done = subprocess.run(
            ["nsenter", "--target", str(holder), "--pid", "--mount", "--", "test", "-r", "/proc/1/stat"],
            capture_output=True,
            timeout=10,
        )
        if done.returncode == 0:
            return
        err = done.stderr
        time.sleep(0.05)
    raise RuntimeError(f"cannot enter the incident's namespace: {err.decode(errors='replace').strip()[-200:]}")


def _ns_pid(pid: int) -> int:
    """A host pid as the incident's PID namespace sees it (the last NSpid field), or itself."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return [c for c in _descendants([pid]) if c != pid and _ppid(c) == pid]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descendants(roots: list[int]) -> list[int]:
    """The roots and every process below them, roots first (from /proc)."""
    kids: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    out, todo = [], list(roots)
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(kids.get(pid, [])))
    return out


def run_corpus(
    incidents: list[Incident], workdir: Path, progress: Any = None, workers: int | None = None
) -> list[Outcome]:
    """Run every incident against one sshd; outcomes in corpus order; ``progress(outcome)`` is called after each.

    With PID namespaces (root) several incidents run at once (``workers``, default 3): each agent sees
    only its own incident's processes; the ones that wait longest (``settle``) start first, so that a long
    wait overlaps the short cases instead of ending the run alone. Without, one at a time.
    """
    with Runner(workdir) as runner:
        n = 1 if not runner.isolate else (workers or 3)

        def one(incident: Incident) -> Outcome:
            outcome = runner.run(incident)
            if progress is not None:
                progress(outcome)
            return outcome

        if n <= 1:
            return [one(i) for i in incidents]
        order = sorted(range(len(incidents)), key=lambda k: -float(incidents[k].spec.get("settle", 0.3)))
        with ThreadPoolExecutor(max_workers=n) as pool:
            futures = {k: pool.submit(one, incidents[k]) for k in order}
            return [futures[k].result() for k in range(len(incidents))]


# -- scoring ---------------------------------------------------------------------------------------------
@dataclass
class Score:
    total: int
    right: int
    top3: int
    evidence: int
    skipped: int
    false_healthy: list[str]
    false_alarms: list[str]
    errors: list[str]

    @property
    def right_pct(self) -> float:
        return 100.0 * self.right / self.total if self.total else 0.0


def score(outcomes: list[Outcome]) -> Score:
    ran = [o for o in outcomes if not o.skipped]
    return Score(
        total=len(ran),
        right=sum(o.ok for o in ran),
        top3=sum(o.top3 for o in ran),
        evidence=sum(o.ok and o.evidence_ok for o in ran),
        skipped=len(outcomes) - len(ran),
        false_healthy=[o.slug for o in ran if o.false_healthy],
        false_alarms=[o.slug for o in ran if o.false_alarm],
        errors=[o.slug for o in ran if o.error],
    )


def table(outcomes: list[Outcome]) -> str:
    """The score table: one row per incident, then the totals."""
    width = max([len(o.slug) for o in outcomes] + [8])
    rows = [f"{'incident':<{width}}  {'expected':<22} {'got':<22} ok  evidence  top-3"]
    for o in outcomes:
        if o.skipped:
            rows.append(f"{o.slug:<{width}}  {o.expected:<22} {'-':<22} --  skipped: {o.skipped}")
            continue
        got = o.got if o.got is not None else "ERROR"
        mark = "ok" if o.ok else "NO"
        ev = ("ok" if o.evidence_ok else "no") if o.ok else "-"
        tail = f"  ({o.error})" if o.error else ""
        top3 = "ok" if o.top3 else "NO"
        rows.append(f"{o.slug:<{width}}  {o.expected:<22} {got:<22} {mark}  {ev:<8}  {top3}{tail}")
    s = score(outcomes)
    rows.append("")
    rows.append(
        f"right: {s.right}/{s.total} ({s.right_pct:.1f} %), with the expected evidence: {s.evidence}; "
        f"top-3: {s.top3}/{s.total} ({100.0 * s.top3 / s.total if s.total else 0.0:.1f} %); skipped: {s.skipped}"
    )
    fails = sum(1 for o in outcomes if not o.skipped and o.expected not in FINE_CODES)
    fines = s.total - fails
    rows.append(f"false healthy on failures: {len(s.false_healthy)}/{fails} {' '.join(s.false_healthy)}".rstrip())
    rows.append(
        f"failures called on healthy/finished runs: {len(s.false_alarms)}/{fines} {' '.join(s.false_alarms)}".rstrip()
    )
    if s.errors:
        rows.append(f"could not diagnose: {' '.join(s.errors)}")
    return "\n".join(rows)


def read_baseline(path: Path = BASELINE) -> list[str]:
    """The incidents the engine got right when the baseline was taken (one slug a line, # comments)."""
    if not path.exists():
        return []
    return [ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines() if ln.split("#", 1)[0].strip()]
