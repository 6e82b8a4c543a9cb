"""``:`` command mode (k9s-style): parse a command line, complete its words, pick its targets. Pure: no Textual.

Commands: ``open NAME``, ``diagnose FILTER``, ``restart FILTER``, ``stop FILTER``, ``probe PROBE FILTER``, ``sort KEY``
(``-KEY`` reverses), ``theme NAME``. FILTER is the grid's filter (``console/core/state.py`` ``matches``: words of the
name, host or a tag, ``tag:x``, ``status:x``, numeric predicates ``util<5 & power>300``) plus ``name~x`` (the name
alone). A command that changes hosts
(``restart``, ``stop``) is marked ``destructive``: the caller confirms it with the exact target list first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Tuple

from console.core import predicates
from console.core.state import FleetState, InstanceState, matches
from console.core.status import STATUSES

VERBS = ("open", "diagnose", "restart", "stop", "probe", "sort", "theme")
USAGE = {
    "open": "open NAME",
    "diagnose": "diagnose FILTER",
    "restart": "restart FILTER",
    "stop": "stop FILTER (the rentals: [actions] stop)",
    "probe": "probe PROBE FILTER",
    "sort": "sort KEY (-KEY reverses)",
    "theme": "theme NAME",
}
DESTRUCTIVE = frozenset(("restart", "stop"))
ALIASES = {"o": "open", "d": "diagnose", "diag": "diagnose", "r": "restart", "p": "probe"}


class CommandError(ValueError):
    """What is wrong with the line, in words the operator can act on."""


@dataclass(frozen=True)
class Command:
    verb: str
    arg: str = ""  # open: the instance; probe: the probe; sort: the key; theme: the theme
    filter: str = ""  # diagnose, restart, probe: the instances
    reverse: bool = False  # sort: -KEY

    @property
    def destructive(self) -> bool:
        return self.verb in DESTRUCTIVE


@dataclass
class Vocabulary:
    """What the words may be: instance names and tags, probe names, sort keys, themes."""

    names: Sequence[str] = ()
    tags: Sequence[str] = ()
    probes: Sequence[str] = ()
    sort_keys: Sequence[str] = ()
    themes: Sequence[str] = ()
    statuses: Sequence[str] = field(default_factory=lambda: list(STATUSES))
    prices: bool = False  # the fleet has rental prices (``$/h>1`` can be answered)


def parse(line: str, vocab: Optional[Vocabulary] = None) -> Command:
    """``line`` (without the ``:``) as a Command; ``CommandError`` says what is missing or unknown."""
    words = line.strip().lstrip(":").split()
    if not words:
        raise CommandError("type a command: " + ", ".join(VERBS))
    verb = ALIASES.get(words[0].lower(), words[0].lower())
    if verb not in VERBS:
        hint = [v for v in VERBS if v.startswith(verb[:1])]
        raise CommandError("unknown command %r (%s)" % (words[0], ", ".join(hint or VERBS)))
    rest = words[1:]
    vocab = vocab or Vocabulary()
    if verb in ("diagnose", "restart", "stop"):
        if not rest:
            raise CommandError("usage: %s (e.g. status:failed, tag:3090, name~vast, util<5 & power>300)" % USAGE[verb])
        return Command(verb, filter=_checked(" ".join(rest), vocab.prices))
    if verb == "probe":
        if len(rest) < 2:
            raise CommandError("usage: " + USAGE[verb])
        if vocab.probes and rest[0] not in vocab.probes:
            raise CommandError("unknown probe %r (%s)" % (rest[0], ", ".join(vocab.probes)))
        return Command(verb, arg=rest[0], filter=_checked(" ".join(rest[1:]), vocab.prices))
    if len(rest) != 1:
        raise CommandError("usage: " + USAGE[verb])
    arg = rest[0]
    if verb == "open":
        if vocab.names and arg not in vocab.names:
            found = [n for n in vocab.names if n.startswith(arg)]
            if len(found) != 1:
                raise CommandError("no instance %r%s" % (arg, (" (%s…)" % ", ".join(found[:5])) if found else ""))
            arg = found[0]
        return Command(verb, arg=arg)
    if verb == "sort":
        reverse = arg.startswith("-")
        key = arg.lstrip("-").lower()
        if vocab.sort_keys and key not in vocab.sort_keys:
            raise CommandError("unknown sort key %r (%s)" % (key, ", ".join(vocab.sort_keys)))
        return Command(verb, arg=key, reverse=reverse)
    if vocab.themes and arg not in vocab.themes:
        raise CommandError("unknown theme %r (%s)" % (arg, ", ".join(vocab.themes)))
    return Command(verb, arg=arg)


def _checked(query: str, prices: bool = True) -> str:
    """``query`` when its predicates parse (console/core/predicates.py); else CommandError with the one line."""
    error = predicates.check(query, prices)
    if error:
        raise CommandError(error)
    return query


def _match(inst: InstanceState, query: str) -> bool:
    """The grid's filter, plus ``name~x`` (a substring of the name alone)."""
    plain = []
    for word in query.lower().split():
        if word.startswith("name~"):
            if word[5:] not in inst.name.lower():
                return False
        else:
            plain.append(word)
    return matches(inst, " ".join(plain))


def targets(state: FleetState, query: str) -> List[str]:
    """The instances ``query`` picks, in the grid's order (trouble first)."""
    return [i.name for i in state.ordered() if _match(i, query)]


def _candidates(words: List[str], vocab: Vocabulary) -> Tuple[int, List[str]]:
    """(index of the word being completed, what it may become)."""
    index = len(words) - 1
    if index == 0:
        return 0, list(VERBS)
    verb = ALIASES.get(words[0].lower(), words[0].lower())
    if verb == "open":
        return index, list(vocab.names) if index == 1 else []
    if verb == "sort":
        return index, list(vocab.sort_keys) + ["-" + k for k in vocab.sort_keys] if index == 1 else []
    if verb == "theme":
        return index, list(vocab.themes) if index == 1 else []
    if verb == "probe" and index == 1:
        return index, list(vocab.probes)
    if verb in ("diagnose", "restart", "stop", "probe"):  # filter words
        return index, (["status:" + s for s in vocab.statuses] + ["tag:" + t for t in vocab.tags]
                       + ["name~" + n for n in vocab.names] + list(vocab.names))
    return index, []


def completions(line: str, vocab: Vocabulary) -> List[str]:
    """The whole lines the last word of ``line`` may complete to (sorted, unique)."""
    words = line.lstrip(":").split(" ")
    index, options = _candidates(words, vocab)
    word = words[index]
    head = " ".join(words[:index])
    out = sorted({o for o in options if o.startswith(word) and o != word} | ({word} if word in options else set()))
    return [(head + " " if head else "") + o for o in out]


def complete(line: str, vocab: Vocabulary) -> Tuple[str, List[str]]:
    """Tab: the line completed as far as it is unambiguous (a space after a finished word), and the choices."""
    found = completions(line, vocab)
    if not found:
        return line, []
    if len(found) == 1:
        done = found[0]
        return (done if done.endswith((":", "~")) else done + " "), found
    prefix = found[0]
    for other in found[1:]:
        while not other.startswith(prefix):
            prefix = prefix[:-1]
    return (prefix if len(prefix) > len(line) else line), found


def usage_hint(line: str) -> str:
    """What the verb on ``line`` takes (``usage: restart FILTER``), "" before a known verb is typed."""
    words = line.lstrip(":").split()
    verb = ALIASES.get(words[0].lower(), words[0].lower()) if words else ""
    return "usage: " + USAGE[verb] if verb in USAGE else ""


def vocabulary(state: FleetState, probes: Iterable[str] = (), sort_keys: Iterable[str] = (),
               themes: Iterable[str] = ()) -> Vocabulary:
    insts = list(state.instances.values())
    return Vocabulary(
        names=sorted(i.name for i in insts),
        tags=sorted({t for i in insts for t in i.tags}),
        probes=list(probes),
        sort_keys=list(sort_keys),
        themes=sorted(themes),
        prices=any(getattr(i.instance, "price_per_hour", None) is not None for i in insts),
    )


__all__ = ["DESTRUCTIVE", "USAGE", "VERBS", "Command", "CommandError", "Vocabulary", "complete", "completions",
           "parse", "targets", "usage_hint", "vocabulary"]
