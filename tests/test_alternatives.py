"""Top-3: the verdict plus up to two other explanations, from the agent through the link's contract to the
Diagnosis tab, the CLI and MCP."""

from __future__ import annotations

from pathlib import Path

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.alternatives import alternatives
from console.commands import format_diagnosis
from console.core.state import FleetState
from console.inventory import Instance
from console.link.validate import check_result
from console.mcp.tools import diagnosis_view, render_diagnosis
from tests.test_diagnose import seed_facts, seed_tmp  # noqa: F401  (the seed case's logs, as a fixture)
from widgets.diagnosis_text import diagnosis_text


def test_the_seed_case_offers_other_explanations_than_its_verdict(seed_tmp: Path) -> None:  # noqa: F811
    result = dg.analyze(seed_facts(seed_tmp))
    assert result["verdict"]["code"] == "transport_error"
    alts = alternatives(result)
    codes = [a["code"] for a in alts]
    assert 1 <= len(alts) <= 2 and "transport_error" not in codes
    assert "missing_input" not in codes  # an input that was downloaded after all (info) is no explanation
    assert codes[0] == "benchmark_not_running"  # not explained away by the verdict: the operator's next look
    assert all(a["evidence"] and a["label"] for a in alts)


def test_a_finding_the_verdict_explains_comes_after_one_it_does_not() -> None:
    ev = [{"path": "/tmp/a.log", "line": 3, "text": "x"}]
    result = {
        "verdict": {"code": "cuda_oom", "severity": "error", "summary": "CUDA out of memory"},
        "findings": [
            {"code": "cuda_oom", "severity": "error", "summary": "oom", "evidence": ev},
            {"code": "transport_error", "severity": "error", "summary": "broken pipe", "evidence": ev,
             "caused_by": "cuda_oom"},
            {"code": "gpu_idle", "severity": "warning", "summary": "GPUs idle", "evidence": ev},
            {"code": "disk_full", "severity": "warning", "summary": "no space", "evidence": ev},
        ],
        "steps": [],
    }
    assert [a["code"] for a in alternatives(result)] == ["disk_full", "gpu_idle"]  # causes first, then symptoms


def test_alternatives_reach_the_console_and_every_view(seed_tmp: Path) -> None:  # noqa: F811
    result = dg.analyze(seed_facts(seed_tmp))
    result["alternatives"] = alternatives(result)
    data = check_result("diagnose", result)  # the link's typed contract keeps them
    assert [a["code"] for a in data["alternatives"]] == [a["code"] for a in result["alternatives"]]
    first = data["alternatives"][0]

    state = FleetState()
    state.add_instance(Instance("box", "127.0.0.1"))
    state.set_diagnosis("box", data)
    inst = state.instances["box"]
    tab = diagnosis_text(inst).plain
    assert "Also possible" in tab and first["label"] in tab and first["evidence"][0]["text"] in tab

    assert f"also possible: {first['code']}" in format_diagnosis("box", data)
    view = diagnosis_view("box", data)
    assert view["alternatives"][0]["code"] == first["code"]
    assert f"also possible: {first['code']}" in render_diagnosis(view)
