"""When did a log line happen? An estimate on this host's clock, so events of several logs and the kernel
log can be put in one order.

A log's own timestamps say how far apart its lines are, not when they were written by this host's clock
(containers log in UTC or local time, some stamps carry no year). So each log is anchored at its mtime:
its last stamped line was written at (or just before) the mtime, and an earlier stamped line that many
seconds before. A line without a stamp takes the time of the next stamped line (it was written no later);
a log without stamps has every line at its mtime (an upper bound too). Upper bounds keep a precise event
(the kernel's) from looking later than the log lines it explains. Only the stamp format of the log's last stamped line
is read, so mixed formats (a launcher's and a library's) never mix scales.
"""

from __future__ import annotations

import calendar
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

MAX_SPAN = 7 * 86400.0  # stamps further apart than this are not believed
LOOKBACK = 400  # lines searched for a stamped predecessor

_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}  # noqa: SIM905


def _iso(m: re.Match[str]) -> float:
    y, mo, d, h, mi, s = (int(x) for x in m.group(1, 2, 3, 4, 5, 6))
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + float("0." + (m.group(7) or "0"))


def _us(m: re.Match[str]) -> float:
    mo, d, y, h, mi, s = (int(x) for x in m.group(1, 2, 3, 4, 5, 6))
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))


def _md(m: re.Match[str]) -> float:  # month-day stamps without a year (glog, vLLM): one year's scale
    mo, d, h, mi, s = (int(x) for x in m.group(1, 2, 3, 4, 5))
    return calendar.timegm((2000, mo, d, h, mi, s, 0, 0, 0)) + float("0." + (m.group(6) or "0"))


def _syslog(m: re.Match[str]) -> float:
    mo = _MONTHS.get(m.group(1), 1)
    d, h, mi, s = (int(x) for x in m.group(2, 3, 4, 5))
    return calendar.timegm((2000, mo, d, h, mi, s, 0, 0, 0))


FORMATS: List[Tuple[str, re.Pattern[str], Callable[[re.Match[str]], float]]] = [
    # ... and "2026-02-03 - 10:51:00" (Gin's layout with dashes)
    ("iso", re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:[T _]| - )(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"), _iso),
    # Go's log package and the programs that keep its layout (rclone, Gin): 2025/02/12 18:30:03, 2024/08/19 - 14:11:31
    ("ymd", re.compile(r"(\d{4})/(\d\d)/(\d\d)(?: -)? (\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"), _iso),
    ("us", re.compile(r"\b(\d\d)/(\d\d)/(\d{4}),? (\d\d):(\d\d):(\d\d)"), _us),
    ("glog", re.compile(r"(?:^|[\[:])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?"), _md),
    ("vllm", re.compile(r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)()"), _md),
    ("syslog", re.compile(r"^(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(\d+) (\d\d):(\d\d):(\d\d)"),
     _syslog),
]


def _stamp(text: str, only: Optional[int] = None) -> Optional[Tuple[int, float]]:
    head = text[:120]
    for i, (_, rx, conv) in enumerate(FORMATS):
        if only is not None and i != only:
            continue
        m = rx.search(head)
        if m:
            try:
                return i, conv(m)
            except (ValueError, OverflowError):
                return None
    return None


class Timeline:
    """Estimated host times of one log's lines (lazily, only for the lines asked about)."""

    def __init__(self, log: Dict[str, Any], now: float) -> None:
        self.lines: List[str] = log.get("lines") or []
        mtime = log.get("mtime")
        self.mtime = float(mtime) if mtime is not None else now
        self.format: Optional[int] = None
        self.anchor: Optional[float] = None
        for text in reversed(self.lines[-LOOKBACK:]):
            found = _stamp(text)
            if found is not None:
                self.format, self.anchor = found
                break
        self._cache: Dict[int, float] = {}
        self._stamps: Dict[int, Optional[Tuple[int, float]]] = {}

    def _stamp_at(self, i: int) -> Optional[Tuple[int, float]]:
        if i not in self._stamps:
            self._stamps[i] = _stamp(self.lines[i], self.format)
        return self._stamps[i]

    def stamp(self, index: int) -> Optional[float]:
        """The host time of a line that carries its own stamp (None: it carries none)."""
        if self.anchor is None or self.format is None or self._stamp_at(index) is None:
            return None
        return self.at(index)

    def at(self, index: int) -> float:
        if self.anchor is None or self.format is None:
            return self.mtime
        if index in self._cache:
            return self._cache[index]
        value = None  # the line's own stamp, else the next stamped line's: an upper bound, as the mtime is
        for i in range(index, min(len(self.lines), index + LOOKBACK)):
            found = self._stamp_at(i)
            if found is not None:
                value = found[1]
                break
        when = self.mtime if value is None else self.mtime - min(MAX_SPAN, max(0.0, self.anchor - value))
        self._cache[index] = when
        return when
