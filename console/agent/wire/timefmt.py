"""How long ago something happened, as the diagnosis and the console both write it.

One formatter for the whole project: "95s" under two minutes, "3m 05s" under two hours, then "2h 03m".
Seconds stay whole seconds up to 119 so a short wait reads exactly; the two-unit forms keep the smaller
unit zero-padded so columns of ages line up.
"""

from __future__ import annotations


def fmt_age(seconds: float) -> str:
    """``seconds`` (clamped at 0) as "95s", "3m 05s" or "2h 03m"."""
    whole = max(0, int(seconds))
    if whole < 120:
        return "%ds" % whole
    if whole < 7200:
        return "%dm %02ds" % (whole // 60, whole % 60)
    return "%dh %02dm" % (whole // 3600, (whole % 3600) // 60)
