"""All of a request's pronunciation dictionaries applied to its text in one pass.

A dictionary version becomes a :class:`Lexicon` once, when a front first reads or writes it (the store keeps it with
the version): its rules are grouped by how they match (case sensitivity, word boundaries, alias or phoneme), and
each group is compiled into one regular expression shaped as a trie of its strings, so finding every rule's matches
costs one scan of the text per group, whatever the number of rules.

Which rule applies where: the text is read left to right; where several rules match, the one that starts first
wins, then the longest, then the first named (locator order, then rule order). Text a rule replaced is never
matched again. Identical strings in one group are one entry (the first rule's), so duplicates cost nothing.
``case_sensitive: false`` compares characters by their lower case; ``word_boundaries`` wants no letter, digit or
underscore right before and after the string in the caller's text.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from zsynth.core.engines import profile
from zsynth.core.text import marks
from zsynth.core.text.dictionaries.rules import MAX_STRING_CHARS, Rule, RuleError
from zsynth.core.text.spoken import Spoken

# At most this many alternatives are tried one by one at a node of a trie: past it they are split into groups, each
# behind a test of the next character (a node of 10,000 children costs some 100 tests per position, not 10,000).
FANOUT: Final = 32
# One search call reads at most this many characters past where it starts (plus the longest string): the regular
# expression engine holds the GIL while it runs, so a thread doing this pass never blocks the event loop long.
WINDOW: Final = 2048
_END: Final = ""  # the trie's key for "a string ends here" (no string is empty)
_WORD_START: Final = r"(?<!\w)"
_WORD_END: Final = r"(?!\w)"
# str.lower() keeps every character one character, except U+0130 (capital I with dot above): "i" + a combining dot.
_ONE_FOR_ONE: Final = str.maketrans({"\u0130": "i"})

_Trie: TypeAlias = dict[str, "_Trie"]  # each next character to its node; _END marks where a string ends


def fold(text: str) -> str:
    """``text`` in lower case, one character for each (so an offset into it is an offset into ``text``)."""
    return text.translate(_ONE_FOR_ONE).lower() if "\u0130" in text else text.lower()


def _spoken(rule: Rule) -> str:
    if rule.type == "alias":
        return str(rule.alias)
    return marks.phonemes(str(rule.alphabet), str(rule.phoneme))


@dataclass(frozen=True, slots=True)
class _Group:
    """One compiled trie: the rules that match the same way (matched on the folded text when ``folded``)."""

    pattern: re.Pattern[str]
    folded: bool
    phoneme: bool
    found: dict[str, tuple[int, str]]  # the matched string (folded when ``folded``): (rule index, what is spoken)


class Lexicon:
    """A dictionary version's rules, compiled for matching (built once per version, shared by every request)."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        kinds: dict[tuple[bool, bool, bool], dict[str, tuple[int, str]]] = {}
        for index, rule in enumerate(self.rules):
            string = rule.string_to_replace if rule.case_sensitive else fold(rule.string_to_replace)
            kind = (rule.case_sensitive, rule.word_boundaries, rule.type == "phoneme")
            kinds.setdefault(kind, {}).setdefault(string, (index, _spoken(rule)))
        try:
            self.groups = tuple(
                _Group(re.compile(trie_pattern(found, word_boundaries)), not case_sensitive, phoneme, found)
                for (case_sensitive, word_boundaries, phoneme), found in kinds.items()
            )
        except RecursionError as err:  # the parser of expressions recurses per nested group: none measured fails
            raise RuleError("These rules' strings share prefixes too deeply to be compiled; use fewer.") from err
        self.nbytes = sum(sys.getsizeof(group.pattern) + sys.getsizeof(group.found) for group in self.groups)


def trie_pattern(strings: Iterable[str], word_boundaries: bool) -> str:
    """One regular expression that finds any of ``strings``, the longest where several start at one place."""
    root: _Trie = {}
    for string in strings:
        node = root
        for char in string:
            node = node.setdefault(char, {})
        node[_END] = {}
    out: list[str] = [_WORD_START] if word_boundaries else []
    _node(root, _WORD_END if word_boundaries else "", out)
    return "".join(out)


def _node(node: _Trie, end: str, out: list[str]) -> None:
    """The expression of a trie node: a run of single children as one literal, then its alternatives, the end last
    (tried after every longer string: the engine backtracks to it only when they fail)."""
    while len(node) == 1 and _END not in node:
        char, node = next(iter(node.items()))
        out.append(re.escape(char))
    children = sorted(char for char in node if char != _END)
    if not children:
        out.append(end)
        return
    # Strings that end one character further are one character class (cheaper to compile than an alternative each).
    leaves = [char for char in children if len(node[char]) == 1 and _END in node[char]]
    out.append("(?:")
    if len(leaves) > 1:
        out.append(_class(leaves) + end)
        _alternatives(node, [char for char in children if char not in set(leaves)], end, out, True)
    else:
        _alternatives(node, children, end, out, False)
    if _END in node:
        out.append("|" + end)
    out.append(")")


def _class(chars: list[str]) -> str:
    return "[" + "".join(map(re.escape, chars)) + "]"


def _alternatives(node: _Trie, children: list[str], end: str, out: list[str], after: bool) -> None:
    """One alternative per child (``after``: behind one already written), in groups of at most :data:`FANOUT`."""
    if len(children) > FANOUT:
        size = -(-len(children) // FANOUT)
        for first in range(0, len(children), size):
            part = children[first : first + size]
            out.append(("|" if after else "") + "(?=" + _class(part) + ")(?:")
            _alternatives(node, part, end, out, False)
            out.append(")")
            after = True
        return
    for char in children:
        out.append(("|" if after else "") + re.escape(char))
        _node(node[char], end, out)
        after = True


def _search(pattern: re.Pattern[str], text: str, pos: int) -> re.Match[str] | None:
    """The first match at or after ``pos``, read a window at a time (a match never reaches past the window's end
    plus the longest string, so one found to start inside the window is the one a whole search finds)."""
    while pos < len(text):
        stop = pos + WINDOW
        if stop + MAX_STRING_CHARS >= len(text):
            return pattern.search(text, pos)
        match = pattern.search(text, pos, stop + MAX_STRING_CHARS + 1)
        if match is not None and match.start() < stop:
            return match
        pos = stop
    return None


def _matches(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """Every match of ``pattern``, left to right and not overlapping, read a window at a time (as :func:`_search`)."""
    pos = 0
    while pos < len(text):
        stop = pos + WINDOW
        if stop + MAX_STRING_CHARS >= len(text):
            yield from pattern.finditer(text, pos)
            return
        for match in pattern.finditer(text, pos, stop + MAX_STRING_CHARS + 1):
            if match.start() >= stop:
                break
            yield match
            pos = match.end()
        pos = max(pos, stop)


def find(text: str, lexicons: Sequence[Lexicon], phonemes: bool) -> Iterator[tuple[int, int, str]]:
    """Each stretch of ``text`` a rule replaces, in order: ``(start, end, what is spoken)``."""
    groups = [(order, group) for order, lexicon in enumerate(lexicons) for group in lexicon.groups]
    groups = [(order, group) for order, group in groups if phonemes or not group.phoneme]
    if len(groups) == 1:  # the common case (one dictionary of one kind of rule): its matches are the answer
        group = groups[0][1]
        for match in _matches(group.pattern, fold(text) if group.folded else text):
            yield match.start(), match.end(), group.found[match.group()][1]
        return
    folded: str | None = None
    heads: list[tuple[re.Match[str], int, _Group, str]] = []  # each group's next match, its lexicon's place, source
    for order, group in groups:
        if group.folded and folded is None:
            folded = fold(text)
        source = folded if group.folded and folded is not None else text
        first = _search(group.pattern, source, 0)
        if first is not None:
            heads.append((first, order, group, source))
    pos = 0
    while heads:
        best: tuple[int, int, int, int] | None = None
        spoken = ""
        for number in range(len(heads) - 1, -1, -1):
            match, order, group, source = heads[number]
            if match.start() < pos:  # overlapped by the stretch replaced last: its next match from there
                found = _search(group.pattern, source, pos)
                if found is None:
                    del heads[number]
                    continue
                match = found
                heads[number] = (match, order, group, source)
            index, replacement = group.found[match.group()]
            key = (match.start(), match.start() - match.end(), order, index)
            if best is None or key < best:
                best, spoken = key, replacement
        if best is None:
            return
        start, end = best[0], best[0] - best[1]
        yield start, end, spoken
        pos = end


def apply_lexicons(spoken: Spoken, lexicons: Sequence[Lexicon], engine: str) -> None:
    """Apply ``lexicons`` (in the order of the request's locators) to the text of ``spoken`` still as written;
    phoneme rules only on engines that speak phonemes."""
    if not any(lexicon.groups for lexicon in lexicons):
        return
    phonemes = profile(engine).phoneme_dictionaries
    spoken.substitute(lambda text: find(text, lexicons, phonemes))


def apply_rules(spoken: Spoken, rules: Sequence[Rule], engine: str) -> None:
    """Apply one list of rules (compiled for this call only; requests use the store's :class:`Lexicon`)."""
    apply_lexicons(spoken, [Lexicon(rules)], engine)
