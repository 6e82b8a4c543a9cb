"""``:`` command mode: the parser, completion and targets alone (a real FleetState), then the bar in the app
through Pilot on the real controller with local agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core.command_mode import Command, CommandError, Vocabulary, complete, completions, parse, targets
from console.core.state import FleetState
from console.inventory import Instance
from tests.support.app import all_live, make_app, screen_text, wait_until
from widgets.command_bar import CommandBar
from widgets.confirm_screen import ConfirmScreen
from widgets.fleet_table import FleetTable
from widgets.instance_screen import InstanceScreen

VOCAB = Vocabulary(names=["vast-3090-a", "vast-3090-b", "lambda-h100"], tags=["3090", "h100"],
                   probes=["disk", "nvidia-smi"], sort_keys=["status", "name", "util"], themes=["dark", "light"])


pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def test_parse_every_command() -> None:
    assert parse("open vast-3090-a", VOCAB) == Command("open", arg="vast-3090-a")
    assert parse(":open lambda", VOCAB) == Command("open", arg="lambda-h100")  # a unique prefix
    assert parse("diagnose status:failed tag:3090", VOCAB) == Command("diagnose", filter="status:failed tag:3090")
    restart = parse("restart name~vast", VOCAB)
    assert restart == Command("restart", filter="name~vast") and restart.destructive
    assert parse("probe disk tag:h100", VOCAB) == Command("probe", arg="disk", filter="tag:h100")
    assert parse("sort -util", VOCAB) == Command("sort", arg="util", reverse=True)
    assert parse("theme light", VOCAB) == Command("theme", arg="light")
    assert parse("d tag:3090", VOCAB).verb == "diagnose"


@pytest.mark.parametrize(
    ("line", "words"),
    [("", "type a command"), ("reboot all", "unknown command"), ("restart", "usage: restart FILTER"),
     ("open vast", "no instance 'vast'"), ("probe bogus x", "unknown probe"), ("sort speed", "unknown sort key"),
     ("theme neon", "unknown theme"), ("probe disk", "usage")],
)
def test_parse_errors_say_what_to_do(line: str, words: str) -> None:
    with pytest.raises(CommandError, match=words):
        parse(line, VOCAB)


def test_completion() -> None:
    assert complete("di", VOCAB) == ("diagnose ", ["diagnose"])
    assert complete("open va", VOCAB)[0] == "open vast-3090-"
    assert completions("open va", VOCAB) == ["open vast-3090-a", "open vast-3090-b"]
    assert complete("restart sta", VOCAB)[0] == "restart status:"
    assert "restart status:failed" in completions("restart status:f", VOCAB)
    assert complete("probe d", VOCAB) == ("probe disk ", ["probe disk"])
    assert complete("restart tag:h", VOCAB) == ("restart tag:h100 ", ["restart tag:h100"])
    assert complete("sort -u", VOCAB)[0] == "sort -util "
    assert complete("theme l", VOCAB)[0] == "theme light "
    assert complete("zzz", VOCAB) == ("zzz", [])


def test_targets_use_the_grid_filter_and_name_tilde() -> None:
    state = FleetState()
    for name, tags in (("vast-3090-a", ("3090",)), ("vast-h100", ("h100",)), ("lambda-3090", ("3090",))):
        state.add_instance(Instance(name=name, host="10.0.0.1", tags=tags))
    assert targets(state, "tag:3090") == ["lambda-3090", "vast-3090-a"]
    assert targets(state, "name~vast tag:3090") == ["vast-3090-a"]
    assert targets(state, "status:connecting name~h100") == ["vast-h100"]
    assert targets(state, "status:failed") == []


async def test_command_bar_opens_restarts_with_the_exact_targets_sorts_and_themes(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        bar = app.query_one(CommandBar)
        await pilot.press("colon")
        assert bar.has_focus and bar.display

        # tab completes the verb and the name
        await pilot.press("o", "p", "tab")
        assert bar.value == "open "
        await pilot.press("g", "a", "tab")
        assert bar.value == "open gamma "
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="gamma's screen")
        assert app.screen.instance_name == "gamma" and not bar.display
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, InstanceScreen), what="back on the grid")

        # a destructive command confirms with the exact target list; n sends nothing
        await pilot.press("colon", *"restart tag:eu", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        assert [line for line in app.screen.items if not line.startswith(" ")] == ["beta:"]  # beta's plan only
        await pilot.press("n")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="dialog closed")
        assert not [line for line in (tmp_path / "audit.jsonl").read_text().splitlines() if "restart" in line] \
            if (tmp_path / "audit.jsonl").exists() else True

        # an error keeps the bar open with the line to fix
        await pilot.press("colon", *"restart nothing-matches", "enter")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")

        await pilot.press("colon", *"sort -name", "enter")
        table = app.query_one(FleetTable)
        await wait_until(pilot, lambda: table.display, what="the table shown for :sort")
        assert table.sort_key == "name" and table.reverse
        assert table.visible_names == ["gamma", "beta", "alpha"]

        await pilot.press("colon", *"theme light", "enter")
        await wait_until(pilot, lambda: app.theme == "light", what="the light theme")
        assert table.has_focus  # the view shown takes the focus back


async def test_diagnose_filter_runs_on_every_target(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.press("colon", *"diagnose tag:us", "enter")
        await wait_until(pilot, lambda: all(app.state.instances[n].diagnosis for n in ("alpha", "gamma")),
                         timeout=60, what="alpha and gamma diagnosed")
        assert app.state.instances["beta"].diagnosis is None


def bar_row(app, bar: CommandBar) -> str:
    return screen_text(app).splitlines()[bar.region.y]


async def test_completions_and_errors_show_on_the_bar_row_and_tab_cycles(tmp_path: Path) -> None:
    """k9s-style: what Tab may complete to is listed after the text on the bar's own row, Tab again goes through
    the choices (shift+Tab back), and an error is said on that row too; none of it is a toast."""
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        bar = app.query_one(CommandBar)
        def bar_toasts() -> list:  # the fleet's own news ("Got worse": a demo GPU went idle) may toast meanwhile
            return [n for n in app.notices if n[1] != "Got worse"]

        before = len(bar_toasts())
        await pilot.press("colon", "o", "p", "tab")
        assert bar.value == "open "
        await pilot.pause(0.1)
        row = bar_row(app, bar)
        assert all(name in row for name in ("alpha", "beta", "gamma")), row
        await pilot.press("tab")
        assert bar.value == "open alpha"
        await pilot.press("tab")
        assert bar.value == "open beta"
        await pilot.press("tab", "tab")
        assert bar.value == "open alpha"  # round again
        await pilot.press("shift+tab")
        assert bar.value == "open gamma"
        await pilot.pause(0.1)
        assert "alpha" in bar_row(app, bar) and "beta" in bar_row(app, bar)  # the list stays while cycling
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="gamma's screen")
        assert app.screen.instance_name == "gamma"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, InstanceScreen), what="back on the grid")

        await pilot.press("colon", *"reboot all", "enter")
        await pilot.pause(0.1)
        assert bar.display and bar.has_focus
        assert "unknown command 'reboot'" in bar_row(app, bar)
        await pilot.press("backspace")
        await pilot.pause(0.1)
        assert "unknown command" not in bar_row(app, bar)  # the line changed: the error goes
        assert len(bar_toasts()) == before, "completions or errors came as toasts: %r" % bar_toasts()[before:]
