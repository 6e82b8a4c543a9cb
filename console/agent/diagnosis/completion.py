"""Did the run complete? Its last words say so (pure: reads one log's lines).

A completion is a line among a log's *last words* (its last ``LAST_WORDS`` non-empty lines) that says the run
ended well, with nothing after it that says otherwise:

- the run says it ended: ``Training completed``, ``benchmark finished``, Lightning's ``Trainer.fit stopped:
  max_epochs=N reached``, ``Done.``, ``finished successfully``, an ``exit code: 0`` / ``exited with status 0``;
- it wrote its results: ``Saved model to``, ``model weights saved in``, a results or summary block
  (``results (v28) ...``, ``==== benchmark summary ====``, ``Benchmark results:``), final or eval metrics
  (``***** train metrics *****``, ``final accuracy``, Lightning's ``Test metric`` table);
- a results table ends the log (``| Tasks | Version | ... |`` rows with numbers: lm-evaluation-harness,
  llama-bench);
- a retried job's last attempt ``succeeded``; a summary figure among the very last lines (``# Avg bus
  bandwidth : 92.34``, ``mean latency = 3.2 ms``);
- its progress is complete: ``proof 10/10 done``, ``step 500/500`` (not a tqdm bar: an epoch's bar says nothing
  of the run), and the built-in ``signatures.COMPLETED`` lines.

Read backwards from the end, a failure stops the search (what came before is not how the run ended): a
signature of error severity (a traceback, a kill, an OOM...), a non-zero exit status, or a progress line that
shows the work under way (``step 120/500``, a bar at 40 %): the run went on after any earlier "saved".
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Pattern

from . import signatures
from .events import SEVERITY_LEVEL, capped, level_cap
from .progress import parse

LAST_WORDS = 30  # non-empty lines at the end of a log that count as its last words
_I = re.IGNORECASE
COMPLETION: List[Pattern[str]] = [re.compile(p, _I) for p in (
    # the run says it ended
    r"\b(?:training|fine-?tuning|pre-?training|evaluation|eval|inference|generation|benchmark(?:ing)?|sealing"
    r"|proving|run|job|export|conversion|burn-?in)\s+(?:is\s+|has\s+|was\s+)?(?:complete|completed|finished|done"
    r"|ended|succeeded)\b",
    # a backup's or a sync's end: "backup of /srv/ckpt complete", "sync finished" (not one layer's or file's "Download
    # complete": docker, aria2c)
    r"\b(?:backup|sync|restore|mirror|snapshot|stage-?(?:in|out))\b(?: of \S+(?: \S+)?)?"
    r"\s+(?:is\s+|was\s+|has\s+)?(?:complete|completed|finished|done|succeeded)\b(?!\s+with errors)",
    r"\b(?:finished|completed|done)\s+(?:training|fine-?tuning|evaluation|benchmark(?:ing)?|the run"
    r"|all (?:steps|epochs|iterations|jobs|tasks|runs))\b",
    r"\b(?:finished|completed|ended|exited) (?:successfully|ok|normally|cleanly|without errors?)\b",
    # "Done running 1 fold jobs.", "Finished processing 5 files": the closing word, then what was done
    r"^\W*(?:all\s+)?(?:done|finished|completed)\s+(?:running|processing|writing|transcribing|generating"
    r"|converting|building|installing|downloading|pulling|predicting|folding|evaluating)\b",
    # a program's closing word after its logger's or script's name: "INFO:main:Done!" (Python's logging),
    # "batch_transcribe.sh: done, 5 files, 0 failed", "run.sh: finished."
    r"^\s*(?:(?:DEBUG|INFO|NOTICE):[\w.]+:|[\w./-]+:)\s*(?:all\s+)?(?:done|finished|complete|completed)\b"
    r"\s*(?:[.!]*\s*$|,\s+\w)",
    # an exit status of 0 in parentheses or as a return code: "finished (exit 0)", "(exit code 0)", "rc=0"
    r"\((?:exit(?:ed)?|exit code|exit status|rc|return code)\s*[:=]?\s*0\)"
    r"|\b(?:rc|returncode|return code)\s*[:=]\s*0\b",
    # a package manager's closing word: pip's "Successfully installed flash-attn-2.0.4", conda's "Executing
    # transaction: done", a pull's lone "success" (ollama, docker's "Status: Downloaded newer image"); not the
    # packaging tools' own upgrade ("Successfully installed pip-24.2 wheel-0.44.0": a first step)
    r"^\s*Successfully installed\s+(?!(?:(?:pip|wheel|setuptools|packaging)-[\w.]+\s*)+$)\S",
    r"^\s*(?:Executing transaction|Verifying transaction|Preparing transaction)\s*:\s*done\b",
    r"^\s*(?:success|successful|succeeded)\s*[.!]*\s*$",
    r"^\s*Status:\s*(?:Downloaded newer image|Image is up to date)\b",
    # MLPerf: loadgen's "Result is : VALID", MLLOG's run_stop with status success
    r"\bResult is\s*:\s*VALID\b",
    r"\"key\"\s*:\s*\"run_stop\".*\"status\"\s*:\s*\"success\"",
    r"\bmax_(?:epochs|steps|iters?|iterations|time)\W{0,3}=\W{0,3}[\w:.]+\W{0,3}\s*reached\b",
    r"\b(?:reached|hit) (?:the )?(?:max(?:imum)?|total|target) (?:number of )?(?:epochs|steps|iterations)\b",
    r"\b\d+ (?:epochs?|steps|iterations|iters) (?:completed|finished|done)\b",
    r"^\s*(?:\[[^\]]{1,40}\]\s*)?(?:all )?(?:done|finished|complete|completed)\s*[.!]*\s*$",
    r"\bexit(?:ed)?(?:\s+with)?\s+(?:code|status)\s*[:=]?\s*0\b(?!\.\d)",
    # "Done: 1 file(s), 292.1 s of audio in 51.6 s", "[INFO] Done in 12.3s": the run's own closing word, first on its
    # line after a log prefix at most
    r"(?:^|^\W*[\d:.,/ T-]{8,}\s*(?:\w+\s+)?|\]\s*|\b(?:INFO|NOTICE)\b:?\s*)(?:all )?(?:done|finished)"
    r"(?:\s*:\s+\w|\s+in\s+[\d.:]+\s*(?:ms|s|sec|secs|seconds|m|min|mins|minutes|h|hours)?\b)",
    # the work counted to its total: "Progress.....: 14344384/14344384 (100.00%)" (hashcat), "24/24 frames written"
    r"\b([1-9]\d*)\s*/\s*\1\b(?![\d.])\s*(?:\(\s*100(?:\.0+)?\s*%\s*\)|(?:[\w()-]+\s+){1,3}?(?:written|saved"
    r"|rendered|processed|done|completed|finished|uploaded|transferred|converted|exported|transcribed|encoded"
    r"|generated|verified|passed|succeeded|synthesi[sz]ed|downloaded|copied|backed up|fetched|built|installed"
    r"|tested|evaluated|computed|proved|indexed|mirrored|synced|restored)\b)",
    r"\b(?:wrote|saved|rendered|processed|completed|finished|uploaded|transferred|converted|exported|transcribed"
    r"|encoded|generated|verified|passed)\s+([1-9]\d*)\s*/\s*\1\b(?![\d.])",
    # a workflow manager's closing tally: Nextflow's "Succeeded   : 40" (printed on success only), Snakemake's "41 of
    # 41 steps (100%) done"
    r"^\s*Succeeded\s*:\s*[1-9]\d*\s*$",
    r"\b([1-9]\d*) of \1 steps \(100\s*%\) done\b",
    # it wrote its results
    # ... counted: "Wrote 2000 completions to out/x.jsonl", "Saved 500 images to renders/"
    r"\b(?:wrote|saved|written|exported|stored)\s+[1-9][\d,]*\s+(?:[\w-]+\s+){0,2}?(?:to|into)\s+\S",
    r"\b(?:saved|wrote|written|exported|stored)\s+(?:the\s+)?(?:final\s+|trained\s+|fine-?tuned\s+|best\s+)?"
    r"(?:model|weights|adapter|checkpoint|results?|outputs?|predictions|report|summary|metrics)\s+(?:to|at|in|into)\b",
    r"\b(?:final\s+|trained\s+)?(?:model|weights|adapter|results?|outputs?|predictions|report|metrics)\s+(?:saved|written"
    r"|exported|stored)\s+(?:to|at|in|into)\b",
    r"^[\s#=*\-|>]*(?:[\w()/-]+ ){0,3}(?:results?|summary)\s*(?:$|[:(=*\-|])",
    r"\bfinal (?:metrics|results|scores?|accuracy|loss|eval(?:uation)?|test|perplexity|report)\b",
    # a benchmark's result line: "Result 5min: 50ms 19prove/s", "Final result: 812.4 tokens/s"
    r"^\s*(?:final |total |overall |average |benchmark )?results?\b[^:=]{0,30}[:=]\s*\S*\d",
    r"^\s*(?:test|eval|evaluation|validation|benchmark) (?:results|metrics|scores?)\b",
    r"^[\s*=#-]*(?:train|eval|test|predict) metrics[\s*=#-]*$",
    r"^\s*[\u2502\u2503|]?\s*Test metric\s+[\u2502\u2503|]?\s*DataLoader",
    # a retried job's last attempt says so: "Attempt 2/3 succeeded", "upload succeeded."
    r"(?<!\b0 )(?<!\bnot )(?<!\bnone )(?<!\bnever )(?<!\bnothing )\bsucceeded\s*[.!]*\s*$",
    # a job's final status: "Final Job Status: Completed" (azcopy), "status: success"
    r"\b(?:final |job |overall |run )*status\s*[:=]\s*(?:completed|complete|succeeded|success|successful|done|ok)\b",
    # one step says it is done: "setup done", "training finished."
    r"^\s*[\w-]+ (?:done|finished|complete|completed)\s*[.!]*\s*$",
    # a test program's closing words: HPL's "End of Tests." after "1 tests completed and passed residual checks"
    r"^\s*end of (?:tests?|runs?|jobs?|benchmarks?|program|training|script)\s*[.!]*\s*$",
    r"\b[1-9]\d* tests? (?:completed and )?passed\b|\ball (?:\d+ )?tests? passed\b|\.{3,}\s*PASSED\s*$",
    # a diagnostic's or a benchmark's verdict: bandwidthTest's "Result = PASS", "Test PASSED", TensorRT's "&&&& PASSED",
    # gpu-burn's "GPU 0: OK (...)", nccl-tests' "# Out of bounds values : 0 OK", a script's "<command> exit 0"
    r"^\s*&&&& PASSED\b|\b(?:test|tests|result|check|diag(?:nostics?)?|verdict|status)\s*(?:[:=]\s*)?PASS(?:ED)?\b"
    r"|^\s*GPU\s*\d+\s*:\s*OK\b|[:=]\s*0\s+OK\s*$|\bexit(?:ed)?\s*[:=]?\s*0\s*[.!]?\s*$",
    # a verification passed: "proof verified in 0.41s", "[INFO]  snarkJS: OK!", "verification: passed"
    r"(?<!\bnot )(?<!\bun)\bverified\b(?! false)|\bverification (?:ok|passed|succeeded|successful|true)\b|:\s*OK!?\s*$",
    r"\bverification (?:status|result)\s*[:=]\s*(?:true|ok|passed|success|valid)\b",
    # the last save says so: torchtune's "has been saved successfully", "checkpoint saved successfully"
    r"\b(?:has been|have been|was|were) saved successfully\b|\bsaved successfully\b",
    # an install check's verdict: "PaddlePaddle is installed successfully!", "installation successful"
    r"\b(?:is|was|has been|have been) (?:installed|set up) successfully\b"
    r"|\binstallation (?:was )?(?:successful|succeeded)\b",
)]
# a summary figure that closes the log (only among its last CLOSING_LINES lines: the same words early in a log
# are a model's size or a warm-up's figure): nccl-tests' "# Avg bus bandwidth : 92.34", "mean latency = 3.2 ms"
CLOSING_LINES = 5
CLOSING_SUMMARY = re.compile(
    r"(?:^|[#:>\]]\s*)(?:avg|average|mean|overall|aggregate|total)\b[\w ()/.-]{0,40}?\s*[:=]\s*[-+]?\d"
    # ... or a total with no colon: nvbandwidth's "SUM device_to_device_memcpy_read_ce 715.53", "TOTAL all 12.3 GB/s"
    r"|^\s*(?:sum|total|average|avg|mean|aggregate)\s+[\w./:-]+\s+[-+]?\d[\d.,]*(?:\s*[A-Za-z/]+)?\s*$"
    # ... or a tool's own timing summary: Coqui TTS's "> Real-time factor: 0.236", "Processing time: 1.08"
    r"|(?:^|[#:>\]]\s*)(?:real[- ]time factor|RTF|processing time)"
    r"\s*[:=]\s*[\d.]+", _I)
# ... and a report of what failed is no results block: Paddle's "Error Message Summary:", pytest's "short test
# summary info" under FAILED lines, "Failure summary", "Warnings summary"
NOT_COMPLETION = re.compile(r"(?<!\b0 )(?-i:\bFAIL(?:ED)?\b)"
                            r"|\bsummary at\b|\bresults? (?:will|would|are being|is being)\b|\bno results\b"
                            r"|\b(?:errors?|failures?|failed|exceptions?|warnings?|crash)\W+(?:\w+ )?summary\b", _I)
NONZERO_EXIT = re.compile(
    r"\bexit(?:ed)?(?:\s+with)?(?:\s+(?:code|status))?\s*[:=]?\s*-?[1-9]\d*\b|returned non-zero exit status"
    r"|\bfailed with exit (?:code|status)\b|\bnon-zero exit (?:code|status)\b",
    _I,
)
# a script that says the non-zero status it got is no failure: "rsync exit 24 (vanished files) treated as success",
# "exit code 1 ignored", "robocopy exit 3 (files copied) is success"
ACCEPTED_EXIT = re.compile(r"\b(?:treated|treating|counted|counts?|taken|regarded|considered|accepted) as (?:a )?"
                           r"(?:success|successful|ok|complete)\b"
                           r"|\b(?:exit|return) (?:code|status) \d+ (?:ignored|accepted)\b"
                           r"|\bignor(?:e|ed|ing) (?:the )?(?:non-zero )?(?:exit|return) (?:code|status)\b"
                           r"|\bis (?:not an error|success)\b", _I)
# a line that reports a failure in words or by its level, though no signature names it ("[ERROR] Download aborted",
# "parameter fetch failed", "ERR" rows are caught by their log's own words); "0 failed", "no errors" are not
FAILED_WORDS = re.compile(
    r"\[(?:ERROR|FATAL|CRITICAL)\]|^\s*(?:\S+\s+){0,3}(?:ERROR|FATAL|CRITICAL)\b|(?<!\b0 )(?<!\bno )(?<!% )"
    r"\b(?:failed|aborted|not complete|error occurred|FAILURE|FAULTY)\b(?!\s*[:=]\s*0\b)",
)


def is_completion_line(text: str) -> bool:
    """Does this line say the run ended well (taken alone)?"""
    if signatures.is_completion(text):
        return True
    if NOT_COMPLETION.search(text):
        return False
    return any(p.search(text) for p in COMPLETION)


def last_words(log: Dict[str, Any], bench_re: Optional[Pattern[str]] = None,
               failure: Optional[Callable[[str], bool]] = None) -> List[int]:
    """Indexes of the completion lines among the log's last words, oldest first ([]: none, or a failure among
    the last words after them). ``failure(text)`` says a line is one (default: a signature of error severity
    or above, a non-zero exit status, a line that says it failed)."""
    lines: List[str] = log.get("lines") or []
    failed = failure or is_failure
    found: List[int] = []
    seen = 0
    table = _closing_table(lines)
    if table is not None:
        found.append(table)
    for i in range(len(lines) - 1, -1, -1):
        text = lines[i]
        if not text.strip():
            continue
        seen += 1
        if seen > LAST_WORDS:
            break
        if table is not None and i >= table:
            continue
        if i > 0 and FRAME.match(lines[i - 1]):
            continue  # a source line a traceback quotes ("result = _VF.lstm(..."): the program's code, not its words
        if (failed(text) or NONZERO_EXIT.search(text) or FAILED_WORDS.search(text)) and not ACCEPTED_EXIT.search(text):
            if not found:
                return []  # the run's last words report a failure: whatever it printed before, it failed
            break  # a failure before the completion (the caller weighs the findings of the last words)
        sample = parse(text, bench_re) if len(text) <= 4000 else None
        if is_completion_line(text) or (seen <= CLOSING_LINES and CLOSING_SUMMARY.search(text)):
            found.append(i)
            continue
        if sample is None:
            continue
        if sample.done:
            if sample.kind == "steps" and "/" in text and "%|" not in text:
                found.append(i)  # proof 10/10 done, step 500/500
            continue
        if sample.percent is not None or _has_total(text, sample.amount):
            break  # the work was under way after anything earlier
    return sorted(found)


# a traceback's frame line: the next line quotes the program's source
FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
BORDER_ROW = re.compile(r"^\s*\+[-=+ \w]*\+\s*$")  # "+-----  Stress  ----+----+": a box table's border
TABLE_ROW = re.compile(r"^\s*[|\u2502\u2503].*[|\u2502\u2503]\s*$|" + BORDER_ROW.pattern)
# a verdict table's cells: every test passed ("| PCIe | Pass - All |", dcgmi diag), or one did not
PASS_CELL = re.compile(r"[|\u2502]\s*(?:Pass(?:ed)?|PASS(?:ED)?|OK|Success)\b")
FAIL_CELL = re.compile(r"[|\u2502]\s*(?:Fail(?:ed|ure)?|FAIL(?:ED)?|Warn(?:ing)?|WARN|Error|ERROR)\b")


def _closing_table(lines: List[str]) -> Optional[int]:
    """The first row of a results table that ends the log (3 rows at least, numbers in it), else None."""
    rows: List[int] = []
    for i in range(len(lines) - 1, max(-1, len(lines) - 200), -1):
        text = lines[i]
        if not text.strip():
            if rows and i > 0 and not TABLE_ROW.match(lines[i - 1]):
                break  # a blank line ends the table block (two tables in a row stay one block)
            continue
        if not TABLE_ROW.match(text):
            break
        rows.append(i)
    if len(rows) < 3 or (BORDER_ROW.match(lines[rows[0]]) and not any(PASS_CELL.search(lines[i]) for i in rows)):
        return _numeric_table(lines)  # a boxed table closes a run as a verdict table only (not nvidia-smi's box)
    if any(FAIL_CELL.search(lines[i]) for i in rows):
        return None  # a test in the table did not pass
    if not any(re.search(r"\d", lines[i]) or PASS_CELL.search(lines[i]) for i in rows):
        return None  # numbers, or a verdict table whose tests passed
    if any(FAILED_WORDS.search(lines[i]) or NONZERO_EXIT.search(lines[i]) for i in rows):
        return None
    return rows[-1]


# a row of numbers only, in columns: "1048576    332.95" (OSU's latency table, a benchmark's sweep)
NUMERIC_ROW = re.compile(r"^\s*[-+]?\d[\d.,]*(?:e[-+]?\d+)?(?:\s+[-+]?\d[\d.,]*(?:e[-+]?\d+)?)+\s*$", _I)


def _numeric_table(lines: List[str]) -> Optional[int]:
    """The first row of a table of numbers that ends the log (4 rows at least, under a header line of words)."""
    rows: List[int] = []
    for i in range(len(lines) - 1, max(-1, len(lines) - 400), -1):
        if not lines[i].strip():
            if rows:
                break
            continue
        if not NUMERIC_ROW.match(lines[i]):
            break
        rows.append(i)
    head = lines[rows[-1] - 1] if rows and rows[-1] > 0 else ""
    if len(rows) < 4 or not re.search(r"[A-Za-z]{2}\S*\s+\S*[A-Za-z]{2}", head) or is_failure(head) \
            or FAILED_WORDS.search(head) or NONZERO_EXIT.search(head):
        return None  # a header of column names over the numbers (not an error's message)
    return rows[-1]


def closing_table(lines: List[str]) -> Optional[int]:
    """The first row of the results table that ends the log, if one does (a failure before it did not end the run:
    the program went on to measure and print its results)."""
    return _closing_table(lines)


def words_start(lines: List[str]) -> int:
    """The index of the first line of a log's last words."""
    seen = 0
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            seen += 1
            if seen >= LAST_WORDS:
                return i
    return 0


def _has_total(text: str, amount: str) -> bool:
    return bool(re.search(r"\b%s\s*/\s*\d+" % re.escape(amount), text))


def is_failure(text: str) -> bool:
    sig = signatures.match_line_fast(text, signatures.builtin_plan()) if text else None
    return sig is not None and SEVERITY_LEVEL[capped(sig.severity, level_cap(text))] >= 2 \
        and not signatures.is_harmless(text)
