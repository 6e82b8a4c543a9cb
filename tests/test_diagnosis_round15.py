"""Diagnosis classes learned from blind round 15 (tests/fixtures/incidents-blind/round-15), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, or ``analyze`` on built facts. The wordings are the class's other programs' where
there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from console.agent.diagnosis import codes, progress
from console.agent.diagnosis import diagnose as dg
from tests.test_diagnose import MIB, act, activity, code_of, gpu, logs_of, rec


def _facts(tmp_path: Path, logs: Dict[str, tuple], procs: List[Dict[str, Any]],
           devices: Optional[List[Dict[str, Any]]] = None, act_: Optional[Dict[str, Any]] = None,
           match: Optional[List[str]] = None, entry: Optional[List[str]] = None, stall: int = 60) -> Dict[str, Any]:
    now = time.time()
    for name, (text, age) in logs.items():
        log = tmp_path / name
        log.write_text(text)
        os.utime(log, (now - age, now - age))
    if devices is None:
        devices = [{"index": 0, "util": 0, "mem_used": 0, "power": 15.0, "power_limit": 250.0}]
    facts: Dict[str, Any] = {
        "now": now, "benchmark": {"match": match or [r"train\.py"], "entrypoint": entry or [r"entrypoint\.sh"]},
        "stall_seconds": stall, "processes": procs, "logs": logs_of(tmp_path), "files": [],
        "gpu": {"state": "ok", "devices": devices}}
    if act_ is not None:
        facts["activity"] = act_
    return facts


def _code(facts: Dict[str, Any]) -> str:
    return str(dg.analyze(facts)["verdict"]["code"])


def _steps(n: int, start: int = 100) -> str:
    return "".join("step %d/60000 loss 0.%04d\n" % (s, 900 - s // 100) for s in range(start, start + 20 * n, 20))


# -- (1) new codes: a cloud's preemption, a scheduler's time limit, a job no node can take --------------------------
@pytest.mark.parametrize("line, code", [
    # spot/preemptible reclaims: AWS's metadata and EventBridge wordings, GCP's, Azure's scheduled event
    ('spot-watcher: instance-action {"action": "terminate", "time": "2026-12-07T15:44:05Z"}', "preempted"),
    ('{"level":"warn","message":"Spot interruption payload received: {\\"action\\":\\"terminate\\",'
     '\\"time\\":\\"2025-03-31T16:34:24Z\\"}"}', "preempted"),  # runs-on
    ("Instance is going to be interrupted: EC2 Spot Instance Interruption Warning", "preempted"),
    ("termination-handler: received spot termination notice, draining node", "preempted"),
    ("systemevent-1746631209934 compute.instances.preempted us-central1-a/instances/gke-spot-1 200 DONE",
     "preempted"),
    ("google_metadata: instance/preempted = TRUE", "preempted"),
    ('scheduled-events: {"EventId": "A1B2", "EventType": "Preempt", "ResourceType": "VirtualMachine"}', "preempted"),
    # wall-time limits: Slurm, PBS/Torque, Moab, LSF, SGE
    ("slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT 2018-08-19T16:30:21 DUE TO TIME LIMIT ***",
     "time_limit"),
    ("slurmstepd: *** JOB 830329 CANCELLED AT 2018-08-06T17:21:44 DUE TO TIME LIMIT on n447 ***", "time_limit"),
    ("=>> PBS: job killed: walltime 3630 exceeded limit 3600", "time_limit"),
    ("MOAB_INFO:  job exceeded wallclock limit", "time_limit"),
    ("Exited with exit code 140. TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "time_limit"),
    ("job 4521 exceeded hard wallclock time - initiate terminate method", "time_limit"),
    # a job or pod no node can take: Kubernetes, Ray's autoscaler, Slurm
    ("Warning  FailedScheduling  40s (x2 over 40s)  default-scheduler  0/2 nodes are available: 1 Insufficient "
     "nvidia.com/gpu, 1 node(s) were unschedulable.", "unschedulable"),
    ("0/6 nodes are available: 3 node(s) didn't match node selector, 6 Insufficient nvidia.com/gpu.",
     "unschedulable"),
    ("PodUnschedulable Cannot schedule pods: Insufficient nvidia.", "unschedulable"),
    ("(autoscaler +1m) Error: No available node types can fulfill resource request {'GPU': 8.0}. Add suitable node "
     "types to this cluster to resolve this issue.", "unschedulable"),
    ("srun: error: Unable to allocate resources: Requested node configuration is not available", "unschedulable"),
    # Ray Tune's hedged warning names no refusal: it stays hung (blind round 10)
    ("WARNING insufficient_resources_manager.py:163 -- No trial is running and no new trial has been started within "
     "the last 60 seconds. This could be due to the cluster not having enough resources available.", "hung"),
    # no match: the words in other senses
    ("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod..", None),
    ("Setting time limit for slurm job to 12:00:00", None),
])
def test_preemption_time_limit_and_unschedulable_wordings(line: str, code: Optional[str]) -> None:
    assert code_of(line) == code, line


@pytest.mark.parametrize("code", ["preempted", "time_limit", "unschedulable"])
def test_the_new_codes_are_causes_with_a_remedy(code: str) -> None:
    assert codes.tier(code) == "cause" and codes.explanation(code) and codes.label(code) != code


def test_a_preemption_notice_outranks_a_watchers_closing_words(tmp_path: Path) -> None:
    watcher = "\n".join([
        "2026-12-07T13:02:00Z watcher: polling the metadata service every 5s",
        "2026-12-07T15:42:05Z watcher: compute.instances.preempted: instance was preempted, sending SIGTERM",
        "2026-12-07T15:42:32Z watcher: trainer exited (143); uploading checkpoints",
        "2026-12-07T15:42:58Z watcher: sync complete"]) + "\n"
    train = _steps(30) + "Received SIGTERM, saving checkpoint\ncheckpoint written\nexiting with code 143\n"
    now = time.time()
    procs = [rec(3, 1, "bash watcher.sh", start=now - 9000)]
    facts = _facts(tmp_path, {"train.log": (train, 60), "watcher.log": (watcher, 30)}, procs)
    assert _code(facts) == "preempted"


def test_a_time_limit_after_steps_is_time_limit(tmp_path: Path) -> None:
    text = _steps(30) + "\n".join([
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "=>> PBS: job killed: walltime 86430 exceeded limit 86400",
        "srun: error: node17: tasks 0-3: Terminated"]) + "\n"
    assert _code(_facts(tmp_path, {"train.log": (text, 35)}, [])) == "time_limit"


def test_a_pod_no_node_can_take_is_unschedulable_not_hung(tmp_path: Path) -> None:
    text = "".join([
        "Waiting for deployment \"svc\" rollout to finish: 1 old replicas are pending termination...\n",
        "Warning FailedScheduling pod/svc-7d9c 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.\n"] * 6)
    now = time.time()
    procs = [rec(2, 1, "bash deploy.sh", start=now - 1200),
             rec(3, 2, "kubectl rollout status deploy/svc --timeout=30m", start=now - 1100)]
    facts = _facts(tmp_path, {"deploy.log": (text, 25)}, procs, match=["kubectl"], entry=[r"deploy\.sh"], stall=120)
    assert _code(facts) == "unschedulable"


# -- (2) one process driving several GPUs, listed on one of them: the others pinned at low power are its spin -------
def _dataparallel(tmp_path: Path, others_power: float, cpu: float) -> Dict[str, Any]:
    now = time.time()
    held = gpu(0, 56.0, limit=250.0, mem=10050 * MIB, holder=7)  # the listed GPU: memory held, no work
    others = [gpu(100, others_power, limit=250.0, mem=9870 * MIB, index=i) for i in (1, 2, 3)]  # no process listed
    procs = [rec(7, 1, "python3 tools/train.py --bs 8", start=now - 7200)]
    return _facts(tmp_path, {"train.log": (_steps(40), 300)}, procs, devices=[held, *others],
                  act_=activity(act(7, cpu=cpu)), stall=120)


def test_gpus_no_process_is_listed_on_count_as_the_benchmarks_when_it_holds_one(tmp_path: Path) -> None:
    # three unlisted GPUs pinned at 28 % of their power: a spin; the process's trickle of CPU spins with them
    assert _code(_dataparallel(tmp_path, 70.0, 0.3)) == "hung"


def test_unlisted_gpus_drawing_real_power_keep_the_run_alive(tmp_path: Path) -> None:
    assert _code(_dataparallel(tmp_path, 230.0, 0.3)) == "healthy"


def test_a_cpu_bound_run_with_its_gpu_light_stays_alive(tmp_path: Path) -> None:
    # an RL collector at 9 % GPU util computing on the CPU, the log quiet between updates: alive
    now = time.time()
    procs = [rec(7, 1, "python3 train.py --envs 624", start=now - 7200)]
    facts = _facts(tmp_path, {"train.log": (_steps(40), 300)}, procs,
                   devices=[gpu(9, 60.0, limit=250.0, mem=3000 * MIB, holder=7)], act_=activity(act(7, cpu=6.0)),
                   stall=120)
    assert _code(facts) == "healthy"


# -- (3) a web UI up with its model held and no work queued is a server between requests ---------------------------
@pytest.mark.parametrize("cmdline", ["invokeai-web --root /srv/invokeai", "python3 webui.py --listen",
                                     "python3 launch_webui.py", "bash webui.sh"])
def test_an_idle_web_ui_with_its_model_held_is_healthy(tmp_path: Path, cmdline: str) -> None:
    polls = "".join('INFO --> 10.0.7.2%d:5100%d - "GET /api/v1/queue/default/status HTTP/1.1" 200\n' % (i % 3, i)
                    for i in range(20))
    now = time.time()
    prog = cmdline.split()[1] if cmdline.startswith(("python3", "bash")) else cmdline.split()[0]
    procs = [rec(41, 1, cmdline, start=now - 3600)]
    facts = _facts(tmp_path, {"ui.log": (polls, 3)}, procs,
                   devices=[gpu(0, 9.8, limit=70.0, mem=1812 * MIB, holder=41)],
                   act_=activity(act(41, listen=[39090])), match=[prog.replace(".", r"\.")], stall=120)
    assert _code(facts) == "healthy"


# -- (4) the cause under its symptom: the backend's failure the mount names under a reader's EIO; a prompt left waiting
@pytest.mark.parametrize("mount_line", [
    "WARN mountpoint_s3::fuse: read failed with errno 5: get object request failed: Client error: Forbidden: The "
    "provided token has expired.",
    "ERROR : sa1b/img.jpg: vfs cache: failed to download: vfs reader: failed to write to cache file: ExpiredToken: "
    "The provided token has expired.",
    'gcsfuse: ReadFile: input/output error, fh.reader.ReadAt: googleapi: Error 401: Invalid Credentials, authError',
])
def test_a_backend_failure_the_mount_names_outranks_the_readers_eio(tmp_path: Path, mount_line: str) -> None:
    train = _steps(30) + "\n".join([
        "Traceback (most recent call last):", '  File "/app/data.py", line 88, in __getitem__',
        "OSError: [Errno 5] Input/output error: '/mnt/s3/img/sa_4519221.jpg'"]) + "\n"
    mount = "INFO successfully mounted bucket data at /mnt/s3\n" + (mount_line + "\n") * 3
    facts = _facts(tmp_path, {"train.log": (train, 40), "mount.log": (mount, 45)}, [])
    facts["benchmark"]["log"] = str(tmp_path / "train.log")
    assert _code(facts) == "credentials_refused"


def test_a_readers_eio_with_no_backend_failure_named_stays_io_error(tmp_path: Path) -> None:
    train = _steps(30) + "OSError: [Errno 5] Input/output error: '/data/img/1.jpg'\n"
    other = "fetch: 401 Unauthorized from the registry\n"  # a refusal that names no mount
    facts = _facts(tmp_path, {"train.log": (train, 40), "other.log": (other, 45)}, [])
    facts["benchmark"]["log"] = str(tmp_path / "train.log")
    assert _code(facts) == "io_error"


@pytest.mark.parametrize("refusal, prompt", [
    ("Reauthentication required.", "Please enter your password: "),
    ("remote: Invalid username or password.", "Username for 'https://github.com': "),
    ("Your credentials are invalid. Please run", "wandb: Enter your choice: "),
])
def test_a_prompt_left_waiting_outranks_the_refusal_that_led_to_it(tmp_path: Path, refusal: str, prompt: str
                                                                   ) -> None:
    text = "training finished: step 48000\nuploading checkpoint\n%s\n%s" % (refusal, prompt)
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 9000), rec(6, 5, "gsutil cp -r ckpt gs://b/", start=now - 30)]
    facts = _facts(tmp_path, {"upload.log": (text, 20)}, procs, match=["gsutil"])
    assert _code(facts) == "waiting_input"


# -- (5) young runs still setting up: a compilation announced and counting, start-up words, a job queued -----------
@pytest.mark.parametrize("last", [
    "[Info] [rtx.rtpso.plugin] waiting for RtPso async group async compilation: 35 seconds so far",
    "vkd3d: waiting for pipeline compilation, 12 pipelines left",
    "Shader compilation in progress (1243/5000)",
])
def test_a_compilation_announced_and_waited_on_is_starting(tmp_path: Path, last: str) -> None:
    text = "[11.417s] app ready\n" + (last + "\n") * 3
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 7200), rec(6, 5, "python3 train.py --headless",
                                                                    start=now - 7200)]
    facts = _facts(tmp_path, {"train.log": (text, 2)}, procs, act_=activity(act(5), act(6, cpu=1.0)))
    assert _code(facts) == "starting"


@pytest.mark.parametrize("last", [
    "2026-12-07T15:34:02Z [2,040ms] [Info] [omni.ext.plugin] [ext: omni.kit.renderer.core-1.1.0] startup",
    "[Info] Initializing the RTX renderer (first launch, building the shader cache)",
])
def test_a_young_programs_start_up_words_are_starting(tmp_path: Path, last: str) -> None:
    text = "Starting Isaac Sim (headless)\n[Info] [carb] Loading plugins from /isaac-sim/kit/plugins\n%s\n" % last
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 70), rec(6, 5, "kit /isaac-sim/apps/full.kit",
                                                                  start=now - 68)]
    facts = _facts(tmp_path, {"kit.log": (text, 40)}, procs, act_=activity(act(5), act(6, cpu=1.0)),
                   match=["kit"], stall=120)
    assert _code(facts) == "starting"
    # the same words from a program older than stall_seconds are no start-up: quiet and busy, it runs
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 7200), rec(6, 5, "kit /isaac-sim/apps/full.kit",
                                                                    start=now - 7200)]
    facts = _facts(tmp_path, {"kit.log": (text, 40)}, procs, act_=activity(act(5), act(6, cpu=1.0)),
                   match=["kit"], stall=120)
    assert _code(facts) != "starting"


@pytest.mark.parametrize("queued", [
    "srun: job 1020391 queued and waiting for resources",
    "salloc: Pending job allocation 1020391",
    "qsub: waiting for job 4521.pbs01 to start",
    "<<Waiting for dispatch ...>>",
])
def test_a_job_waiting_in_a_schedulers_queue_is_starting(tmp_path: Path, queued: str) -> None:
    text = "+ srun --partition=gpu --gres=gpu:2 python DeepNet.py\n%s\n+ squeue -u me\n  JOBID ST (Resources)\n" % (
        queued)
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 300), rec(6, 5, "srun --gres=gpu:2 python DeepNet.py",
                                                                   start=now - 290)]
    facts = _facts(tmp_path, {"submit.log": (text, 45)}, procs, act_=activity(act(5), act(6)),
                   match=["srun", r"DeepNet\.py"], stall=120)
    facts["gpu"] = {"state": "error", "devices": []}
    assert _code(facts) == "starting"


def test_a_job_that_got_its_allocation_is_no_longer_queued(tmp_path: Path) -> None:
    text = "srun: job 1020391 queued and waiting for resources\nsrun: job 1020391 has been allocated resources\n"
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 3000), rec(6, 5, "srun python DeepNet.py", start=now - 2990)]
    facts = _facts(tmp_path, {"submit.log": (text, 1500)}, procs, act_=activity(act(5), act(6)),
                   match=["srun", r"DeepNet\.py"], stall=120)
    assert _code(facts) != "starting"


# -- the signature table's prefilter: a quantifier's bounds ({0,40}) are no literal a line must hold ----------------
@pytest.mark.parametrize("line", [
    "gcsfuse: ReadFile: input/output error, fh.reader.ReadAt: googleapi: Error 401: Invalid Credentials, authError",
    "Error: DAG epoch 612 (5.1 GB) won't fit in the GPU's free memory",
])
def test_the_prefilter_gives_match_lines_answer_across_bounded_gaps(line: str) -> None:
    from console.agent.diagnosis import signatures
    slow, fast = signatures.match_line(line), signatures.match_line_fast(line, signatures.builtin_plan())
    assert slow is not None and fast is not None and fast.code == slow.code, line


@pytest.mark.parametrize("tail", [
    ["srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
     "slurmstepd: error: *** JOB 494583 ON node7 CANCELLED AT 2026-12-07T15:40:37 DUE TO TIME LIMIT ***",
     "slurmstepd: error: *** STEP 494583.0 ON node7 CANCELLED AT 2026-12-07T15:40:37 DUE TO TIME LIMIT ***",
     "srun: error: node7: tasks 0-3: Terminated", "srun: Terminating job step 494583.0"],
])
def test_a_slurm_job_step_id_is_no_step_after_a_time_limit(tmp_path: Path, tail: List[str]) -> None:
    # Slurm's "STEP 494583.0" / "job step 494583.0" name the job's step, not a training step: no recovery
    assert progress.parse(tail[-1]) is None and progress.parse(tail[2]) is None
    text = _steps(30) + "\n".join(tail) + "\n"
    assert _code(_facts(tmp_path, {"train.log": (text, 35)}, [])) == "time_limit"
