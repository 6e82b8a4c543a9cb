"""The incident corpus end to end (tests/fixtures/incidents, run by tests/incidents.py): real-world failures
replayed through a real sshd and the real CLI. What the engine answers right (BASELINE.txt) must stay right,
and issue 11's goal holds: >= 95 % right, no failure called healthy, no healthy or finished run called a
failure (docs/diagnosis.md has the table; ``make incidents`` prints it).

The blind rounds (tests/fixtures/incidents-blind/round-N: incidents written by someone who never read the
engine, scored first-seen before any rule changed) run in the same pass, all but the cases that must wait
longer than ``CI_MAX_SETTLE`` s before they can be diagnosed (hangs and stalls aged minutes, and programs
shown busy for as long: their stand-ins spin a core all that time, which starves the tests running beside
this module; ``bench/incidents.py --whole`` runs every case), and what runs must stay at ``CI_GOAL`` % right."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.incidents import CORPUS, Incident, Outcome, load_incidents, read_baseline, run_corpus, score, table
from tests.support.sshd import find_sshd

pytestmark = [
    pytest.mark.skipif(find_sshd() is None, reason="sshd not installed (make test installs it)"),
    # the module's corpus run (ours and most of the blind rounds: ~300 cases, a few minutes on 2 cores) is set up
    # inside the first test
    pytest.mark.timeout(1500),
]

INCIDENTS = load_incidents()
CI_MAX_SETTLE = 5.0  # seconds a blind case may wait before its diagnosis and still run in CI
# Rounds scored first-seen (their FIRST_SEEN.txt) whose misses are not fixed yet: CI guards what was fixed against
# regressions, and an unfixed round's misses are the next session's work, not regressions. A round joins CI in the
# change that fixes it.
NOT_YET_FIXED: frozenset[str] = frozenset()
ROUNDS: dict[str, list[Incident]] = {
    path.name: [i for i in load_incidents(path) if float(i.spec.get("settle", 0.3)) <= CI_MAX_SETTLE]
    for path in sorted((CORPUS.parent / "incidents-blind").glob("round-*"))
    if path.name not in NOT_YET_FIXED
}
WORKERS = 3  # incidents at once (2 cores, beside the other tests): more starves them and times diagnoses out
CI_GOAL = 96.0  # % right over what runs here (issue 29 asks 97 % of the whole corpus; the floor leaves a margin)


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[Outcome]]]:
    """Outcomes by corpus: "own", then each blind round, from one run over one sshd."""
    names = ["own", *ROUNDS]
    corpora = [INCIDENTS, *ROUNDS.values()]
    results = run_corpus([i for c in corpora for i in c], tmp_path_factory.mktemp("incidents"), workers=WORKERS)
    out: dict[str, list[Outcome]] = {}
    at = 0
    for name, corpus in zip(names, corpora, strict=True):
        out[name] = results[at:at + len(corpus)]
        at += len(corpus)
    print("\n" + table(out["own"]))
    for name in ROUNDS:
        s = score(out[name])
        print(f"{name}: {s.right}/{s.total} right, failures called healthy {s.false_healthy}, "
              f"fine runs called failures {s.false_alarms}")
    yield out


@pytest.fixture(scope="module")
def outcomes(everything: dict[str, list[Outcome]]) -> dict[str, Outcome]:
    return {o.slug: o for o in everything["own"]}


def test_the_corpus_is_well_formed() -> None:
    assert len(INCIDENTS) >= 48
    fine = [i for i in INCIDENTS if not i.is_failure]
    assert len(fine) >= 8, "at least 8 healthy, starting or finished incidents"
    for incident in INCIDENTS:
        expect = incident.expect
        assert {"code", "evidence_file", "evidence_contains"} <= set(expect), incident.slug
        assert incident.spec.get("summary"), incident.slug
        if expect["evidence_file"] and expect["evidence_file"] != "dmesg" and ":" not in expect["evidence_file"]:
            log = incident.path / "tmp" / expect["evidence_file"]
            assert log.is_file(), f"{incident.slug}: no {log}"
            assert expect["evidence_contains"] in log.read_text(errors="replace"), incident.slug
        if expect["evidence_file"] == "dmesg":
            texts = [d["text"] if isinstance(d, dict) else d for d in incident.spec.get("dmesg") or []]
            assert any(expect["evidence_contains"] in t for t in texts), incident.slug
    baseline = read_baseline()
    assert set(baseline) <= {i.slug for i in INCIDENTS}, "BASELINE.txt names an incident that does not exist"


def test_no_incident_fails_to_run(outcomes: dict[str, Outcome]) -> None:
    broken = {slug: o.error for slug, o in outcomes.items() if o.error}
    assert not broken, broken


def test_the_seed_case_stays_right(outcomes: dict[str, Outcome]) -> None:
    seed = outcomes["seed-warmup-broken-pipe"]
    assert seed.got == "transport_error", seed.summary
    assert seed.evidence_ok
    assert "warmup proof" in seed.summary.lower()


@pytest.mark.parametrize("slug", read_baseline())
def test_what_is_right_today_stays_right(outcomes: dict[str, Outcome], slug: str) -> None:
    o = outcomes[slug]
    if o.skipped:
        pytest.skip(o.skipped)
    assert o.got == o.expected, f"{slug}: expected {o.expected}, got {o.got}: {o.summary}"


def test_the_goal_of_issue_11(outcomes: dict[str, Outcome]) -> None:
    s = score(list(outcomes.values()))
    reason = (
        f"{s.right}/{s.total} right ({s.right_pct:.1f} %), {len(s.false_healthy)} failures called healthy, "
        f"{len(s.false_alarms)} healthy/finished runs called failures"
    )
    assert s.right_pct >= 95.0, reason
    assert not s.false_healthy, f"failures called healthy: {s.false_healthy}"
    assert not s.false_alarms, f"healthy/finished runs called failures: {s.false_alarms}"


def test_every_blind_round_runs(everything: dict[str, list[Outcome]]) -> None:
    assert len(ROUNDS) >= 8
    broken = {f"{name}/{o.slug}": o.error for name in ROUNDS for o in everything[name] if o.error}
    assert not broken, broken


def test_the_corpus_goal_of_issue_29(everything: dict[str, list[Outcome]]) -> None:
    """Ours and the blind rounds together: >= 150 incidents, >= 50 of them fine, >= CI_GOAL % right."""
    whole = [o for outcomes in everything.values() for o in outcomes]
    s = score(whole)
    fine = [i for corpus in (INCIDENTS, *ROUNDS.values()) for i in corpus if not i.is_failure]
    assert s.total >= 150 and len(fine) >= 50, (s.total, len(fine))
    by_round = {name: "%d/%d" % (score(o).right, score(o).total) for name, o in everything.items()}
    assert s.right_pct >= CI_GOAL, (
        f"{s.right}/{s.total} right ({s.right_pct:.1f} %), by corpus {by_round}; failures called healthy "
        f"{s.false_healthy}, fine runs called failures {s.false_alarms}")
