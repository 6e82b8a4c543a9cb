"""How the console and the agent say counts, durations and code names to an operator.

One place for the words: ``plural(1, "GPU")`` is "1 GPU", ``plural(3, "process")`` "3 processes" (no "(es)"),
``duration`` is the one age format (timefmt), ``code_words("no_gpu")`` is "no GPU", and a verdict's line says
its code once. Lives in the wire layer so the agent (Python 3.8, on the host) and the console share it.
"""

from __future__ import annotations

import re
from typing import Optional

from .timefmt import fmt_age as duration

IRREGULAR = {"process": "processes", "match": "matches", "occurrence": "occurrences", "was": "were",
             "is": "are", "this": "these", "has": "have", "root": "roots", "gap": "gaps", "tail": "tails",
             "entry": "entries", "child": "children"}
CODE_WORDS = {"no_gpu": "no GPU", "ok": "ok", "gpu_idle": "GPU idle", "gpu_lost": "GPU lost",
              "benchmark_down": "benchmark down", "needs_action": "needs action", "oom": "out of memory"}
_PATTERNS = re.compile(r"\s*\(patterns?: .*?\)(?=;|$)")


def plural_of(noun: str) -> str:
    """``noun``'s plural: the irregular table, else -es after s/x/ch/sh, else -s."""
    if noun in IRREGULAR:
        return IRREGULAR[noun]
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def plural(count: int, noun: str, many: Optional[str] = None) -> str:
    """``"1 GPU"``, ``"2 GPUs"``, ``"0 instances"``: the count and the noun agreeing with it."""
    return "%d %s" % (count, noun if count == 1 else (many or plural_of(noun)))


def code_words(code: object) -> str:
    """A code name as words: ``no_gpu`` -> "no GPU", ``benchmark_down`` -> "benchmark down"."""
    text = str(code)
    return CODE_WORDS.get(text, text.replace("_", " "))


def operator_text(summary: str) -> str:
    """A verdict line as the operator reads it: the match regexes ("(patterns: ...)", fleet.toml's) left out."""
    return _PATTERNS.sub("", summary)


def verdict_line(code: str, summary: str, label: str = "") -> str:
    """``summary`` without a repeated leading code (``healthy: healthy: x`` -> ``healthy: x``), regexes out."""
    text = operator_text(summary or code or "?")
    for word in {code, code.replace("_", " "), label} - {""}:
        prefix = word.lower() + ": "
        while text.lower().startswith(prefix + prefix):
            text = text[len(prefix):]
    return text


def without_code(code: str, summary: str) -> str:
    """``summary`` with its leading ``code: `` (and any repeat of it) and its regexes left out."""
    text = verdict_line(code, summary)
    prefix = code.lower() + ": "
    return text[len(prefix):] if code and text.lower().startswith(prefix) else text


def code_and_summary(code: str, summary: str) -> str:
    """``code: summary`` said once: a summary that already starts with its code is not prefixed again."""
    rest = without_code(code, summary)
    return "%s: %s" % (code, rest) if code and rest else (code or rest)


def clip_words(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut at a word's end (``…`` marks the cut), never inside a word."""
    if len(text) <= limit:
        return text
    head = text[: max(0, limit - 1)]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip(" ,;:") + "…"


def lost_reason(reason: object) -> str:
    """"connection lost" and why, without saying it twice (asyncssh's reason is often "Connection lost")."""
    why = str(reason).strip()
    return "connection lost" if not why or why.lower().rstrip(".") == "connection lost" else "connection lost: " + why


__all__ = ["clip_words", "code_and_summary", "code_words", "duration", "lost_reason", "operator_text", "plural",
           "plural_of", "verdict_line", "without_code"]
