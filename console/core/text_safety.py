"""Host text made harmless to show: terminal escape sequences and control characters removed.

Everything an instance sends (log lines and file names, process names and command lines, GPU names and
errors, probe output, error texts, verdicts and their evidence) is data written by whoever controls that
host. Written to the operator's terminal as is, it could set the title, write the clipboard (OSC 52: a
command plus newline that runs on paste), leave the alternate screen or move the cursor. So it is cleaned
once, where it enters the fleet state (``console/core/frame_handlers.py``, ``state.py``) and where the MCP
server hands it out (``console/mcp/safe.py``):

- ANSI/VT escape sequences (CSI, OSC, DCS, SOS/PM/APC, two-byte ESC sequences, and their 8-bit C1 forms)
  are removed with their bodies; SGR colours go too (the console draws its own).
- Other C0/C1 controls and DEL are dropped (``\\t`` stays; ``\\n`` stays only where asked, else it becomes
  a space); bidirectional overrides (the "Trojan Source" characters) are dropped.
- ``\\r`` keeps what a terminal would show: the text after the last one on a line.

Markup (``[link=...]``, ``[@click=...]``) is a separate matter: host text is never parsed as Rich/Textual
markup (the widgets build ``Text`` objects and pass ``markup=False``); see ``tests/test_text_safety.py``.

Printable text, the common case, costs one ``str.isprintable`` call and is returned as is.
"""

from __future__ import annotations

import re
from typing import Any, List

# Sequences with a body that runs to a terminator: OSC/DCS/SOS/PM/APC, 7-bit (ESC ] P X ^ _) or 8-bit
# (0x9d 0x90 0x98 0x9e 0x9f), ended by BEL, ST (ESC \\ or 0x9c), or the end of the line when unterminated.
_STRING_SEQ = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c|(?=[\x1b\n])|$)"
# CSI: ESC [ or 0x9b, parameter and intermediate bytes, one final byte.
_CSI = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
# Any other escape: ESC, intermediate bytes, one final byte (ESC ( B, ESC 7, ESC c ...), or a lone ESC.
_ESC = r"\x1b[\x20-\x2f]*[\x30-\x7e]?"
_SEQUENCES = re.compile("|".join((_STRING_SEQ, _CSI, _ESC)))
# Left-over controls: C0 but tab and newline, DEL, C1; and the bidi embedding/override/isolate characters.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: Any, keep_newlines: bool = False) -> str:
    """``text`` (``str()`` of a non-string; ``""`` for None) without escape sequences or control characters."""
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case: nothing to strip (tab and newline are not printable: they go below)
        return s
    s = _SEQUENCES.sub("", s)
    if "\r" in s:  # per line: a CRLF ending goes, then what a terminal shows (the text after the last \r)
        s = "\n".join(part.rstrip("\r").rsplit("\r", 1)[-1] for part in s.split("\n"))
    s = _CONTROLS.sub("", s)
    if not keep_newlines:
        s = s.strip("\n").replace("\n", " ")
    return s


def clean_opt(text: Any) -> Any:
    """``clean(text)`` for a string, None kept as None (optional frame fields)."""
    if text is None or (type(text) is str and text.isprintable()):
        return text
    return clean(text)


def clean_lines(lines: Any) -> List[str]:
    """A list of host lines, each cleaned (the hot path: printable lines come back as the same list)."""
    if not lines:
        return []
    if type(lines) is list:
        try:
            if "".join(lines).isprintable():  # one C-level pass over the whole frame: the usual answer
                return lines
        except TypeError:  # a non-string line: cleaned one by one below
            pass
    else:
        lines = list(lines) if isinstance(lines, (tuple, set)) else [lines]
    return [s if type(s) is str and s.isprintable() else clean(s) for s in lines]


def clean_deep(value: Any, keep_newlines: bool = False) -> Any:
    """Every string inside ``value`` (dicts, lists, tuples; keys too) cleaned; other values kept.

    For rare, structured host data: a diagnosis result, a probe result, a hello frame.
    """
    if isinstance(value, str):
        return value if value.isprintable() else clean(value, keep_newlines)
    if isinstance(value, dict):
        return {clean_deep(k): clean_deep(v, keep_newlines) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_deep(v, keep_newlines) for v in value]
    return value


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters; a cut text ends with ``…``."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


def one_line(text: Any, limit: int = 200) -> str:
    """``clean(text)`` as one printable line of at most ``limit`` characters: tabs, line and paragraph separators
    and other non-printables become spaces, runs of spaces one, the ends trimmed (a name, a reason in a log)."""
    s = clean(text)
    if not s.isprintable():
        s = "".join(c if c.isprintable() else " " for c in s)
    if "  " in s or s[:1] == " " or s[-1:] == " ":
        s = " ".join(s.split())
    return clip(s, limit)


def url_origin(url: str, path: bool = False) -> str:
    """``scheme://host[:port]`` of ``url`` (with its path when ``path``): never its user, password or query, so a
    secret in a URL stays out of logs, metric labels and task names. Printable even for a malformed URL."""
    from urllib.parse import urlsplit  # not on the hot path

    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a bad port, an unclosed [
        host, port = "", None
    if not host:  # what follows the user part, up to the path
        scheme, sep, rest = url.partition("://")
        netloc = re.split(r"[/?#]", rest if sep else scheme, maxsplit=1)[0].rsplit("@", 1)[-1]
        return one_line(f"{scheme}://{netloc}" if sep else netloc, 300)
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    return one_line(shown + parts.path if path else shown, 300)
