"""The incident corpus score table: every incident in tests/fixtures/incidents replayed end to end (stand-in
processes, fake NVML and dmesg, a real sshd on 127.0.0.1, the real ``fleet-console diagnose --json``).

    .venv/bin/python bench/incidents.py [--only SLUG ...] [--workers N] [--json FILE] [--write-baseline]
                                        [--corpus DIR ... | --whole]

Prints one row per incident (expected verdict, the verdict given, right or not, the expected evidence line
present or not) and the totals: right %, failures called healthy, healthy/finished runs called failures.
``--write-baseline`` rewrites tests/fixtures/incidents/BASELINE.txt with the incidents answered right now
(tests/test_incidents.py keeps those right). ``--corpus DIR`` replays another folder of incidents in the same
format instead (a blind round: tests/fixtures/incidents-blind/round-N, docs/diagnosis.md); several folders run
in one pass. ``--whole``: ours and every blind round in one pass (what tests/test_incidents.py scores in CI),
with a total per folder and for the whole corpus.
"""

from __future__ import annotations

import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser

from tests.incidents import BASELINE, CORPUS, load_incidents, run_corpus, score, table


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--only", nargs="+", metavar="SLUG", help="run only these incidents")
    parser.add_argument("--workers", type=int, default=None, help="incidents at once (default 3, 1 without root)")
    parser.add_argument("--json", metavar="FILE", help="also write every outcome (with the diagnosis) as JSON")
    parser.add_argument("--write-baseline", action="store_true", help="rewrite BASELINE.txt from this run")
    parser.add_argument("--corpus", type=Path, nargs="+", default=[CORPUS], metavar="DIR",
                        help="the folders of incidents (default tests/fixtures/incidents)")
    parser.add_argument("--whole", action="store_true",
                        help="ours and every tests/fixtures/incidents-blind/round-N in one pass")
    args = parser.parse_args(argv)
    # `timeout` or a closed terminal: exit through the cases' cleanup (each stops its stand-ins and sshd), never
    # leaving stand-ins that spin a core for hours (SIGTERM's default ends Python without any `finally`)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    signal.signal(signal.SIGHUP, lambda signum, frame: sys.exit(128 + signum))
    if args.whole:
        args.corpus = [CORPUS, *sorted((CORPUS.parent / "incidents-blind").glob("round-*"))]
    if args.write_baseline and [c.resolve() for c in args.corpus] != [CORPUS.resolve()]:
        parser.error("--write-baseline is the default corpus's baseline: not with --corpus or --whole")

    folders = [(folder, load_incidents(folder, only=args.only)) for folder in args.corpus]
    incidents = [i for _, found in folders for i in found]
    if not incidents:
        print("no incidents found", file=sys.stderr)
        return 2
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="incidents-") as tmp:
        outcomes = run_corpus(
            incidents,
            Path(tmp),
            workers=args.workers,
            progress=lambda o: print(f"  {o.slug}: {o.got or o.skipped or o.error}", file=sys.stderr, flush=True),
        )
    print(table(outcomes))
    if len(folders) > 1:
        at = 0
        for folder, found in folders:
            part = score(outcomes[at:at + len(found)])
            at += len(found)
            print(f"{folder.name}: {part.right}/{part.total} right ({part.right_pct:.1f} %), failures called "
                  f"healthy {len(part.false_healthy)}, fine runs called failures {len(part.false_alarms)}")
    print(f"({len(incidents)} incidents in {time.monotonic() - started:.0f} s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        "slug": o.slug,
                        "expected": o.expected,
                        "got": o.got,
                        "ok": o.ok,
                        "evidence_ok": o.evidence_ok,
                        "summary": o.summary,
                        "error": o.error,
                        "skipped": o.skipped,
                        "diagnosis": o.data,
                    }
                    for o in outcomes
                ],
                indent=1,
            )
        )
    if args.write_baseline:
        right = sorted(o.slug for o in outcomes if o.ok)
        BASELINE.write_text(
            "# Incidents the diagnosis engine answers right (verdict code); tests/test_incidents.py keeps them right.\n"
            "# Regenerate with: .venv/bin/python bench/incidents.py --write-baseline\n"
            + "".join(slug + "\n" for slug in right)
        )
    s = score(outcomes)
    return 0 if s.right == s.total else 1


if __name__ == "__main__":
    sys.exit(main())
