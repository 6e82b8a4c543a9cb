"""Numeric filter predicates (issue 35 item 27): one parser for the grid's `/`, the `:` commands and MCP; a bad
predicate is one line naming the word; GPU predicates hold together on one GPU of the instance."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core import predicates
from console.core.command_mode import CommandError, parse, targets
from tests.support.app import make_app, screen_text, wait_until
from widgets.fleet_grid import FleetGrid


@pytest.mark.parametrize("query,field,op,value", [
    ("util<5", "util", "<", 5.0), ("power > 300", "power", ">", 300.0), ("temp>85", "temp", ">", 85.0),
    ("mem>90%", "mem", ">", 90.0), ("idle>10m", "idle", ">", 600.0), ("idle>=2h", "idle", ">=", 7200.0),
    ("$/h>1", "$/h", ">", 1.0), ("mem>20G", "mem", ">", 20.0)])
def test_each_predicate_parses(query: str, field: str, op: str, value: float) -> None:
    (pred,) = predicates.parse_query(query).predicates
    assert (pred.field, pred.op, pred.value) == (field, op, value)


def test_predicates_and_words_join_with_ampersand() -> None:
    q = predicates.parse_query("util<5 & power>300 tag:3090")
    assert [p.field for p in q.predicates] == ["util", "power"] and q.plain == "tag:3090"


@pytest.mark.parametrize("query,says", [
    ("bogus>1", "unknown field 'bogus'"), ("util<abc", "'abc' is not a number"), ("temp>>3", "one operator"),
    ("idle>10y", "idle takes seconds"), ("mem>9X", "mem takes a percentage"), ("$/h>1", "no prices yet")])
def test_bad_predicates_are_one_clear_line(query: str, says: str) -> None:
    error = predicates.check(query)
    assert error and says in error and "\n" not in error, error


async def test_grid_filter_takes_predicates_and_says_what_is_wrong(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(FleetGrid)
        await wait_until(pilot, lambda: all(i.gpus for i in app.state.instances.values()), what="GPUs")
        await pilot.press("slash", *"util>=0 & tag:us")
        await wait_until(pilot, lambda: sorted(grid.visible_names) == ["alpha", "gamma"], what="util>=0 & tag:us")
        await pilot.press("escape", "slash", *"temp>1000")
        await wait_until(pilot, lambda: grid.visible_names == [], what="temp>1000 hides all")
        await pilot.press("escape", "slash", *"bogus>1")
        text = await wait_until(pilot, lambda: "unknown field 'bogus'" in screen_text(app) and screen_text(app),
                                what="the bad predicate's line")
        assert "Traceback" not in text


def test_colon_commands_take_predicates_and_refuse_bad_ones(tmp_path: Path) -> None:
    from console.core.state import FleetState
    from console.inventory import Instance

    state = FleetState()
    state.add_instance(Instance(name="a", host="h"))
    assert parse("diagnose util>=0 & temp<1000").filter == "util>=0 & temp<1000"
    assert targets(state, "temp>1000") == []
    with pytest.raises(CommandError, match="unknown field 'bogus'"):
        parse("restart bogus>1")
    with pytest.raises(CommandError, match="no prices yet"):
        parse("diagnose $/h>1")
