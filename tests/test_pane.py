"""One pane rendered on its own (widgets/pane.py): no App, no grid; the state is fed with real frames."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import pytest
from rich.style import Style
from textual.strip import Strip

from console.core.state import FleetState, InstanceState
from console.inventory import BenchmarkSpec, Instance
from tests.support import frames
from themes import DARK, LIGHT
from widgets.palette import Palette
from widgets.pane import MAX_GPU_LINES, pane_height, pane_strips

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_frame(utils: Sequence[int], full: bool = False, lost: Sequence[int] = (), temp: int = 50) -> Dict[str, Any]:
    devices = []
    for i, util in enumerate(utils):
        if i in lost:
            dev: Dict[str, Any] = {"index": i, "lost": True, "error": "GPU is lost", "procs": []}
            dev.update(dict.fromkeys(("util", "mem_util", "mem_used", "temp", "power", "sm_clock", "mem_clock")))
        else:
            dev = {"index": i, "util": util, "mem_util": 10, "mem_used": 20 * GIB, "temp": temp, "procs": []}
        if full:
            dev.update(name="NVIDIA H100", uuid="GPU-%d" % i, mem_total=80 * GIB, power_limit=700.0)
        devices.append(dev)
    return {
        "type": "gpu",
        "ts": 0,
        "state": "ok",
        "simulated": False,
        "driver": "550",
        "full": full,
        "devices": devices,
    }


def proc(pid: int, name: str = "python3", cmdline: str = "python3 bench.py", gpu_mem: Optional[int] = None) -> Dict:
    return {
        "pid": pid,
        "ppid": 1,
        "name": name,
        "cmdline": cmdline,
        "state": "S",
        "wchan": None,
        "cpu": 97.0,
        "rss": 10**6,
        "start": 1.0,
        "gpu_mem": gpu_mem,
    }


def live(name: str = "gpu-box", gpus: int = 2, **extra: Any) -> tuple[FleetState, InstanceState, Clock]:
    """A connected instance that sent hello, a full GPU frame, its processes and a log line."""
    clock = Clock()
    state = FleetState(clock=clock)
    state.add_instance(Instance(name=name, host="10.0.0.7", user="ubuntu", port=2222, tags=("h100",), **extra))
    state.set_link_status(name, "connected", "")
    state.apply_frame(name, {"type": "hello", "ts": 0, "v": 1, "pid": 4242, "features": {"gpu": "ok"}})
    state.apply_frame(name, gpu_frame([40, 50, 60, 70, 80, 90, 30, 20, 10, 5][:gpus], full=True))
    state.apply_frame(name, frames.procs([proc(31337, gpu_mem=12 * GIB)]))
    log = {"type": "log", "ts": 0, "path": "/tmp/bench.log", "lines": ["step 120 loss 0.93"], "first_line": 1}
    state.apply_frame(name, dict(log, backlog=False, event=None))
    return state, state.instances[name], clock


def render(
    inst: InstanceState,
    width: int,
    compact: bool,
    now: float,
    pal: Optional[Palette] = None,
    **marks: bool,
) -> List[Strip]:
    pal = pal or Palette.from_theme(DARK)
    height = pane_height(inst, compact)
    strips = pane_strips(inst, pal, width, height, now, compact=compact, **marks)
    assert len(strips) == height and all(s.cell_length == width for s in strips)
    return strips


def texts(strips: List[Strip]) -> List[str]:
    return [s.text for s in strips]


def style_of(strips: List[Strip], needle: str) -> Style:
    """The style of the segment whose text holds ``needle``."""
    for strip in strips:
        for seg in strip:
            if needle in seg.text:
                return seg.style or Style()
    raise AssertionError("%r not in the pane:\n%s" % (needle, "\n".join(texts(strips))))


@pytest.mark.parametrize("width", [80, 120])
def test_compact_pane_shows_name_badge_gpu_summary_and_the_busiest_process_with_the_last_log_line(width: int) -> None:
    _, inst, clock = live()
    pal = Palette.from_theme(DARK)
    strips = render(inst, width, True, clock.now, pal)
    head, second = texts(strips)
    assert head.startswith("  gpu-box  OK ")
    assert "2xGPU  45% mem  25%" in head  # mean util of 40 and 50, 20 of 80 GiB
    assert second.startswith("  31337 python3 cpu 97% gpu 12G │ step 120 loss 0.93")
    assert style_of(strips, " OK ") == pal.badge["ok"]
    assert style_of(strips, "45%").color == pal.util.color


@pytest.mark.parametrize("width", [80, 120])
def test_boxed_pane_shows_address_a_line_per_gpu_the_top_process_and_the_last_log_line(width: int) -> None:
    _, inst, clock = live()
    lines = texts(render(inst, width, False, clock.now))
    assert len(lines) == 7
    assert lines[0].startswith("╭  gpu-box  OK  ─") and lines[0].endswith("─╮")
    assert lines[1].startswith("│ ubuntu@10.0.0.7:2222 [h100]") and lines[1].endswith(" │")
    assert lines[2].startswith("│ 0 ") and " 40% m" in lines[2] and " 25%" in lines[2] and lines[2].endswith(" 50° │")
    assert lines[3].startswith("│ 1 ") and " 50% m" in lines[3]
    assert lines[4].startswith("│ top 31337 python3 cpu 97% gpu 12G")
    assert lines[5].startswith("│ step 120 loss 0.93") and lines[5].endswith(" │")
    assert lines[6].startswith("╰──") and lines[6].endswith("─╯")


def test_boxed_pane_keeps_the_last_log_line_above_its_border_when_the_row_is_taller() -> None:
    _, inst, clock = live()
    pal = Palette.from_theme(DARK)
    strips = pane_strips(inst, pal, 80, 9, clock.now, compact=False)
    lines = texts(strips)
    assert len(lines) == 9 and all(s.cell_length == 80 for s in strips)
    assert lines[5].startswith("│ step 120 loss 0.93")
    assert lines[6].strip("│ ") == "" and lines[7].strip("│ ") == ""
    assert lines[8].startswith("╰")


def test_a_hot_gpu_shows_its_temperature_as_a_warning() -> None:
    state, inst, clock = live(gpus=1)
    state.apply_frame("gpu-box", gpu_frame([99], temp=91))
    pal = Palette.from_theme(DARK)
    strips = render(inst, 80, False, clock.now, pal)
    assert style_of(strips, " 91°").color == pal.warn.color


@pytest.mark.parametrize("width", [80, 120])
def test_a_lost_gpu_is_flagged_and_its_line_says_lost(width: int) -> None:
    state, inst, clock = live(gpus=3)
    state.apply_frame("gpu-box", gpu_frame([40, 0, 60], lost=(1,)))
    pal = Palette.from_theme(DARK)
    compact = render(inst, width, True, clock.now, pal)
    assert "lost GPU 1" in compact[0].text
    assert style_of(compact, "lost GPU 1").color == pal.warn.color
    assert "3xGPU  50%" in compact[0].text  # the mean over the live GPUs only
    boxed = render(inst, width, False, clock.now, pal)
    assert "lost GPU 1" in boxed[1].text
    assert boxed[3].text.startswith("│ 1 LOST GPU is lost")
    assert style_of(boxed, "LOST") == pal.badge["failed"]
    assert style_of(boxed, "GPU is lost").color == pal.error.color


def test_a_failed_diagnosis_puts_the_verdict_on_the_second_line_in_the_error_colour() -> None:
    state, inst, clock = live()
    verdict = {"code": "broken_pipe", "severity": "error", "summary": "result upload: broken pipe"}
    state.set_diagnosis("gpu-box", {"verdict": verdict, "findings": [], "steps": []})
    pal = Palette.from_theme(DARK)
    compact = render(inst, 80, True, clock.now, pal)
    assert " FAILED " in compact[0].text
    assert compact[1].text.startswith("  result upload: broken pipe")
    assert "31337" not in compact[1].text  # the reason beats the process/log line
    assert style_of(compact, " FAILED ") == pal.badge["failed"]
    assert style_of(compact, "broken pipe").color == pal.status["failed"].color
    boxed = render(inst, 120, False, clock.now, pal)
    assert boxed[1].text.startswith("│ result upload: broken pipe")


def test_no_benchmark_process_reads_bench_down_with_its_reason() -> None:
    state, inst, clock = live(benchmark=BenchmarkSpec(match=(r"bench\.py",)))
    state.apply_frame("gpu-box", frames.procs_delta([], [31337]))
    lines = texts(render(inst, 80, True, clock.now))
    assert " BENCH DOWN " in lines[0]
    assert lines[1].startswith("  no benchmark process running")


def test_stale_data_counts_its_age_in_the_badge_and_the_reason() -> None:
    state, inst, clock = live()
    clock.now += 20  # three heartbeats (5 s) missed
    state.tick()
    pal = Palette.from_theme(DARK)
    compact = render(inst, 80, True, clock.now, pal)
    assert " STALE 20s " in compact[0].text
    assert compact[1].text.startswith("  no data for 20s")
    assert style_of(compact, "STALE") == pal.badge["stale"]
    assert style_of(compact, "no data for").color == pal.status["stale"].color
    assert "2xGPU  45%" in compact[0].text  # the last numbers stay on screen
    assert " STALE 25s " in render(inst, 80, True, clock.now + 5)[0].text  # the age is drawn at render time


@pytest.mark.parametrize("compact", [True, False])
def test_an_unreachable_host_shows_the_link_error(compact: bool) -> None:
    clock = Clock()
    state = FleetState(clock=clock)
    inst = state.add_instance(Instance(name="dead-box", host="10.0.0.9"))
    state.set_link_status("dead-box", "unreachable", "Connection refused")
    text = "\n".join(texts(render(inst, 80, compact, clock.now)))
    assert "dead-box  UNREACHABLE " in text
    assert "unreachable: Connection refused" in text
    if not compact:
        assert "no GPU data yet" in text and "no processes" in text and "no log lines" in text


def test_a_connecting_host_says_so() -> None:
    clock = Clock()
    state = FleetState(clock=clock)
    inst = state.add_instance(Instance(name="new-box", host="10.0.0.9"))
    lines = texts(render(inst, 80, True, clock.now))
    assert " CONNECTING " in lines[0] and "no GPU data yet" in lines[0]
    assert lines[1].startswith("  connecting…")


def test_cursor_and_selection_marks() -> None:
    _, inst, clock = live()
    pal = Palette.from_theme(DARK)
    compact = render(inst, 80, True, clock.now, pal, cursor=True, selected=True)
    assert compact[0].text.startswith("▶●gpu-box")
    for needle in ("gpu-box", "2xGPU", "31337", "step 120"):  # the cursor's background under both lines
        assert style_of(compact, needle).bgcolor == pal.cursor.bgcolor
    boxed = texts(render(inst, 80, False, clock.now, pal, cursor=True, selected=True))
    assert boxed[0].startswith("┏ ●gpu-box") and boxed[0].endswith("┓") and boxed[-1].startswith("┗")
    plain = texts(render(inst, 80, True, clock.now, pal))
    assert plain[0].startswith("  gpu-box")


def test_many_gpus_are_capped_with_a_count_of_the_rest() -> None:
    _, inst, clock = live(gpus=10)
    lines = texts(render(inst, 120, False, clock.now))
    assert pane_height(inst, False) == 5 + MAX_GPU_LINES + 1 == len(lines)
    assert lines[2 + MAX_GPU_LINES].startswith("│ +2 more GPUs")
    assert "10xGPU" in render(inst, 120, True, clock.now)[0].text


def test_long_lines_are_cut_with_an_ellipsis_at_the_pane_width() -> None:
    state, inst, clock = live()
    long_line = "x" * 300
    frame = {"type": "log", "ts": 0, "path": "/tmp/bench.log", "lines": [long_line], "first_line": 2}
    state.apply_frame("gpu-box", dict(frame, backlog=False, event=None))
    compact = texts(render(inst, 80, True, clock.now))
    assert compact[1].endswith("… ")  # the last column stays free between panes
    boxed = texts(render(inst, 80, False, clock.now))
    assert boxed[5].endswith("x… │")


def test_the_palette_follows_the_theme() -> None:
    _, inst, clock = live()
    dark, light = Palette.from_theme(DARK), Palette.from_theme(LIGHT)
    assert style_of(render(inst, 80, True, clock.now, dark), " OK ") == dark.badge["ok"]
    assert style_of(render(inst, 80, True, clock.now, light), " OK ") == light.badge["ok"]
    assert dark.badge["ok"] != light.badge["ok"]


FAILING_VERDICT = {"code": "broken_pipe", "severity": "error", "summary": "transport error: broken pipe"}


def benchmark_box() -> tuple[FleetState, InstanceState, Clock]:
    """A live instance whose benchmark (bench.py, started 100 s ago on the host's clock) got a failing verdict."""
    state, inst, clock = live(benchmark=BenchmarkSpec(match=(r"bench\.py",), log="/tmp/bench.log"))
    old = dict(proc(31337, gpu_mem=12 * GIB), start=clock.now - 100)
    state.apply_frame("gpu-box", frames.procs([old], clock.now))
    state.set_diagnosis("gpu-box", {"verdict": FAILING_VERDICT, "findings": [], "steps": []})
    assert inst.status == "failed"
    return state, inst, clock


def test_a_restart_clears_the_verdict_and_the_pane_says_restarted_until_the_next_verdict() -> None:
    state, inst, clock = benchmark_box()
    clock.now += 5
    state.note_restart("gpu-box")
    assert inst.status != "failed" and "transport error" not in inst.status_detail
    assert state.totals()["failed"] == 0
    clock.now += 40
    state.apply_frame("gpu-box", frames.heartbeat(seq=9, samples=9, sent=0))
    state.tick()
    lines = texts(render(inst, 80, True, clock.now))
    assert " FAILED " not in lines[0] and "restarted 40s ago" in "\n".join(lines)
    boxed = "\n".join(texts(render(inst, 120, False, clock.now)))
    assert "restarted 40s ago" in boxed
    state.set_diagnosis("gpu-box", {"verdict": {"code": "healthy", "severity": "info", "summary": "ok"}})
    assert "restarted" not in "\n".join(texts(render(inst, 80, True, clock.now)))


def test_a_verdict_stops_counting_once_the_benchmark_processes_started_after_it() -> None:
    state, inst, clock = benchmark_box()
    clock.now += 30
    new = dict(proc(40001, gpu_mem=12 * GIB), start=clock.now - 2)  # restarted by someone else
    state.apply_frame("gpu-box", frames.procs_delta([new], [31337], ts=clock.now))
    assert inst.status == "ok"
    assert inst.diagnosis is not None  # kept for the Diagnosis tab, no longer counted

def test_a_verdict_read_before_a_restart_does_not_count_when_it_arrives_after_it() -> None:
    """The benchmark went down, a diagnosis read the host (no benchmark), the operator started it again while the
    diagnosis ran: the verdict arrives after the new process is seen and is history at once (a status stuck at
    "benchmark down" with the benchmark up was the race)."""
    state, inst, clock = live(benchmark=BenchmarkSpec(match=(r"bench\.py",), log="/tmp/bench.log"))
    state.apply_frame("gpu-box", frames.procs([], clock.now))
    assert inst.status == "benchmark_down"
    facts_at = clock.now + 0.5  # the host's clock, like the process's start
    clock.now += 1.0
    new = dict(proc(40001, gpu_mem=12 * GIB), start=facts_at + 0.2)
    state.apply_frame("gpu-box", frames.procs_delta([new], [], ts=clock.now))
    assert inst.status == "ok"
    clock.now += 1.0
    down = {"code": "benchmark_not_running", "severity": "warning", "summary": "no benchmark process is running"}
    state.set_diagnosis("gpu-box", {"verdict": down, "findings": [], "steps": [], "time": facts_at})
    assert inst.status == "ok", inst.status_detail
    state.set_diagnosis("gpu-box", {"verdict": down, "findings": [], "steps": [], "time": facts_at + 1.0})
    assert inst.status == "benchmark_down"  # one that saw the new process and still says down counts



def test_a_verdict_stops_counting_once_the_benchmark_log_moved_on() -> None:
    state, inst, clock = benchmark_box()
    clock.now += 10
    frame = {"type": "log", "ts": 0, "path": "/tmp/bench.log", "first_line": 2, "backlog": False, "event": None,
             "lines": ["[fleet-agent] benchmark restarted at 2024-05-01T12:00:00+0000", "loading params"]}
    state.apply_frame("gpu-box", frame)
    assert inst.status != "failed"


def test_new_error_lines_in_the_log_keep_the_verdict() -> None:
    state, inst, clock = benchmark_box()
    clock.now += 10
    frame = {"type": "log", "ts": 0, "path": "/tmp/bench.log", "first_line": 2, "backlog": False, "event": None,
             "lines": ["ERROR CUDA error: out of memory"]}
    state.apply_frame("gpu-box", frame)
    assert inst.status == "failed"


@pytest.mark.parametrize("compact", [True, False])
def test_an_unreachable_host_dims_its_last_numbers_and_says_how_old_they_are(compact: bool) -> None:
    state, inst, clock = live()
    pal = Palette.from_theme(DARK)
    needle = "45%" if compact else "40%"  # the mean util, or GPU 0's
    live_style = style_of(render(inst, 120, compact, clock.now, pal), needle)
    clock.now += 125
    state.set_link_status("gpu-box", "unreachable", "Connection refused")
    strips = render(inst, 120, compact, clock.now, pal)
    text = "\n".join(texts(strips))
    assert "last seen 2m 05s ago" in text
    assert style_of(strips, needle) != live_style and style_of(strips, needle).color == pal.dim.color


def test_a_host_that_keeps_reconnecting_shows_a_flap_counter() -> None:
    state, inst, clock = live()
    for _ in range(3):
        clock.now += 20
        state.set_link_status("gpu-box", "unreachable", "Connection reset")
        clock.now += 5
        state.set_link_status("gpu-box", "connected", "")
    text = "\n".join(texts(render(inst, 80, True, clock.now)))
    assert "flapped 3x" in text
    clock.now += 3600
    assert "flapped" not in "\n".join(texts(render(inst, 80, True, clock.now)))


def test_an_idle_instance_says_how_long_in_minutes_not_raw_seconds() -> None:
    from widgets.instance_screen import header_text

    state, inst, clock = live()
    for _ in range(447):
        clock.now += 1.0
        state.apply_frame("gpu-box", gpu_frame([0, 0], full=True))
    assert inst.status == "gpu_idle"
    assert "447s" not in inst.status_detail and "7m 27s" in inst.status_detail
    assert "GPUs idle for 7m 27s" in header_text(inst, demo=False, read_only=False).plain


def _luminance(color) -> float:
    r, g, b = (c / 255 for c in color.get_truecolor())
    r, g, b = ((c / 12.92) if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(fg, bg) -> float:
    """The WCAG contrast ratio of two rich colours (1: the same, 21: black on white)."""
    a, b = sorted((_luminance(fg), _luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


def theme_palette(theme) -> Palette:
    """The palette as the grid builds it: the widget's base style carries the theme's fore- and background."""
    return Palette.from_theme(theme, Style(color=theme.foreground, bgcolor=theme.background))


def visible_cells(strips: List[Strip], base: Style):
    """(text, fg, bg) of every segment that draws something."""
    for strip in strips:
        for seg in strip:
            if seg.text.strip():
                style = base + (seg.style or Style())
                fg, bg = style.color, style.bgcolor
                yield seg.text, (bg if style.reverse else fg), (fg if style.reverse else bg)


@pytest.mark.parametrize("theme_name", ["dark", "light", "high-contrast"])
@pytest.mark.parametrize("compact", [True, False])
def test_every_theme_keeps_the_cursor_row_and_the_borders_readable(theme_name: str, compact: bool) -> None:
    from themes import THEMES

    theme = THEMES[theme_name]
    pal = theme_palette(theme)
    state, inst, clock = live()
    for k in range(20):  # a sparkline
        clock.now += 1
        state.apply_frame("gpu-box", gpu_frame([40 + k, 50], full=True))
    background = Style.parse(theme.background).color
    plain = render(inst, 120, compact, clock.now, pal)
    under = render(inst, 120, compact, clock.now, pal, cursor=True)
    # the cursor row is a row: its background is not the grid's
    cursor_bg = {bg.name for _, _, bg in visible_cells(under[:1], pal.base)} if compact else set()
    if compact:
        assert cursor_bg and all(contrast(Style.parse(c).color, background) >= 1.5 for c in cursor_bg), cursor_bg
    # and what it shows stays readable on it (util, the sparkline, the marker)
    for text, fg, bg in visible_cells(under, pal.base):
        assert fg is not None and bg is not None
        assert contrast(fg, bg) >= 3.0, (theme_name, text, fg.name, bg.name, round(contrast(fg, bg), 2))
    if not compact:  # a pane's border shows against the background (and the cursor's stronger)
        edge = style_of(plain, "╰")
        assert contrast(edge.color, background) >= 2.0, (theme_name, edge.color.name)
        assert contrast(style_of(under, "┗").color, background) >= 3.0
