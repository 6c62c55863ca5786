"""Dictionary rules: checking them, reading and writing PLS lexicons, and applying them to a request's text.

* ``alias`` rules replace the matched text on every engine.
* ``phoneme`` rules (``ipa``, ``cmu-arpabet``) become a phoneme marker (:mod:`zsynth.core.text.marks`) on engines that
  speak phonemes (Piper, through its phoneme input); other engines ignore them and speak the text as written, as the
  ElevenLabs service does on models without phoneme support.

Matching follows each rule's ``case_sensitive`` (default true) and ``word_boundaries`` (default true); a dictionary
holds one rule per string (:func:`unique`), at most :data:`MAX_RULES`. :mod:`.matcher` applies them: where rules
overlap, the one that starts first wins, then the longest, then the first named.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Final

from defusedxml import DTDForbidden, EntitiesForbidden, ExternalReferenceForbidden
from defusedxml import ElementTree as defused

from zsynth.core.text import marks

RULE_TYPES: Final = ("alias", "phoneme")
MAX_RULES: Final = 10_000
MAX_STRING_CHARS: Final = 200
PLS_NS: Final = "http://www.w3.org/2005/01/pronunciation-lexicon"


class RuleError(ValueError):
    """A rule or lexicon that cannot be used; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of a dictionary version."""

    string_to_replace: str
    type: str
    alias: str | None = None
    phoneme: str | None = None
    alphabet: str | None = None
    case_sensitive: bool = True
    word_boundaries: bool = True

    def to_json(self) -> dict[str, Any]:
        """The rule as the API shows it."""
        body: dict[str, Any] = {
            "type": self.type,
            "string_to_replace": self.string_to_replace,
            "case_sensitive": self.case_sensitive,
            "word_boundaries": self.word_boundaries,
        }
        if self.type == "alias":
            body["alias"] = self.alias
        else:
            body["phoneme"] = self.phoneme
            body["alphabet"] = self.alphabet
        return body


def _text(raw: dict[str, Any], name: str, index: int, *, required: bool = True) -> str | None:
    value = raw.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_STRING_CHARS:
        raise RuleError(f"rules[{index}].{name} must be a non-empty string of at most {MAX_STRING_CHARS} characters.")
    return value


def _flag(raw: dict[str, Any], name: str, index: int) -> bool:
    value = raw.get(name, True)
    if value is None:
        return True
    if not isinstance(value, bool):
        raise RuleError(f"rules[{index}].{name} must be true or false.")
    return value


def parse_rule(raw: object, index: int = 0) -> Rule:
    """A rule from its JSON form; RuleError names the bad field."""
    if not isinstance(raw, dict):
        raise RuleError(f"rules[{index}] must be an object.")
    kind = raw.get("type")
    if kind not in RULE_TYPES:
        raise RuleError(f"rules[{index}].type must be 'alias' or 'phoneme'.")
    string = _text(raw, "string_to_replace", index)
    assert string is not None
    case_sensitive, word_boundaries = _flag(raw, "case_sensitive", index), _flag(raw, "word_boundaries", index)
    if kind == "alias":
        return Rule(
            string,
            "alias",
            alias=_text(raw, "alias", index),
            case_sensitive=case_sensitive,
            word_boundaries=word_boundaries,
        )
    alphabet = raw.get("alphabet")
    if not isinstance(alphabet, str) or alphabet not in marks.ALPHABETS:
        raise RuleError(f"rules[{index}].alphabet must be 'ipa' or 'cmu-arpabet'.")
    return Rule(
        string,
        "phoneme",
        phoneme=_text(raw, "phoneme", index),
        alphabet=str(alphabet),
        case_sensitive=case_sensitive,
        word_boundaries=word_boundaries,
    )


def parse_rules(raw: object) -> list[Rule]:
    """A list of rules from JSON (at most :data:`MAX_RULES`), one per string (:func:`unique`)."""
    if not isinstance(raw, list):
        raise RuleError("Field 'rules' must be a list of rules.")
    if len(raw) > MAX_RULES:
        raise RuleError(f"A dictionary holds at most {MAX_RULES} rules; this list has {len(raw)}.")
    return unique([parse_rule(item, index) for index, item in enumerate(raw)])


def unique(rules: list[Rule]) -> list[Rule]:
    """``rules`` with one rule per ``string_to_replace``: the first (the one that applies; ``add-rules`` and
    ``remove-rules`` name a rule by its string, as upstream)."""
    kept: dict[str, Rule] = {}
    for rule in rules:
        kept.setdefault(rule.string_to_replace, rule)
    return list(kept.values()) if len(kept) < len(rules) else rules


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _lexicon_root(data: bytes) -> ET.Element:
    try:
        # No DTD at all: entities declared in one are how a lexicon under 1 MiB becomes gigabytes (expat limits
        # amplification only past 8 MiB of output), and external ones reach files and URLs.
        root: ET.Element = defused.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DTDForbidden as err:
        raise RuleError("The PLS lexicon declares a DTD (<!DOCTYPE ...>); lexicons with a DTD are refused.") from err
    except (EntitiesForbidden, ExternalReferenceForbidden) as err:
        raise RuleError("The PLS lexicon declares entities; lexicons with entity declarations are refused.") from err
    except ET.ParseError as err:
        raise RuleError(f"The file is not a PLS lexicon: {err}.") from err
    if _local(root.tag) != "lexicon":
        raise RuleError("The file is not a PLS lexicon: its root element must be <lexicon>.")
    return root


def _lexeme_rules(lexeme: ET.Element, alphabet: str) -> list[dict[str, Any]]:
    """A lexeme's rules in their JSON form: each grapheme gets the first alias, or else the first phoneme."""
    graphemes = [(el.text or "").strip() for el in lexeme if _local(el.tag) == "grapheme"]
    aliases = [(el.text or "").strip() for el in lexeme if _local(el.tag) == "alias"]
    phonemes = [el for el in lexeme if _local(el.tag) == "phoneme" and (el.text or "").strip()]
    found: list[dict[str, Any]] = []
    for grapheme in filter(None, graphemes):
        if aliases and aliases[0]:
            found.append({"type": "alias", "string_to_replace": grapheme, "alias": aliases[0]})
        elif phonemes:
            own = (phonemes[0].get("alphabet") or "").lower()
            kind = _alphabet(own) if own else alphabet
            phoneme = str(phonemes[0].text).strip()
            found.append({"type": "phoneme", "string_to_replace": grapheme, "phoneme": phoneme, "alphabet": kind})
    return found


def _alphabet(declared: str) -> str:
    return "cmu-arpabet" if "cmu" in declared or "arpabet" in declared else "ipa"


def parse_pls(data: bytes) -> list[Rule]:
    """The rules of a PLS lexicon: each grapheme of a lexeme gets its alias, or else its phoneme.

    The lexicon's ``alphabet`` names the phoneme alphabet (``ipa``, or ``x-cmu``/``cmu-arpabet`` for ARPAbet).
    PLS matching is case-sensitive on whole words, so the rules are too. Each rule passes the checks of a rule sent
    as JSON (:func:`parse_rule`); a lexicon with a DTD is refused.
    """
    root = _lexicon_root(data)
    alphabet = _alphabet((root.get("alphabet") or "ipa").lower())
    rules: list[Rule] = []
    lexemes = (el for el in root if _local(el.tag) == "lexeme")
    for number, lexeme in enumerate(lexemes, start=1):
        for raw in _lexeme_rules(lexeme, alphabet):
            if len(rules) >= MAX_RULES:
                raise RuleError(f"A dictionary holds at most {MAX_RULES} rules.")
            try:
                rules.append(parse_rule(raw, len(rules)))
            except RuleError as err:
                raise RuleError(f"Lexeme {number} of the PLS lexicon: {err}") from err
    if not rules:
        raise RuleError("The PLS lexicon holds no lexeme with a grapheme and an alias or a phoneme.")
    return unique(rules)


def to_pls(rules: list[Rule]) -> bytes:
    """A PLS lexicon of ``rules`` (one lexeme per rule; ARPAbet rules declare their alphabet on the phoneme)."""
    ET.register_namespace("", PLS_NS)
    root = ET.Element(
        f"{{{PLS_NS}}}lexicon",
        {"version": "1.0", "alphabet": "ipa", "{http://www.w3.org/XML/1998/namespace}lang": "en-US"},
    )
    for rule in rules:
        lexeme = ET.SubElement(root, f"{{{PLS_NS}}}lexeme")
        ET.SubElement(lexeme, f"{{{PLS_NS}}}grapheme").text = rule.string_to_replace
        if rule.type == "alias":
            ET.SubElement(lexeme, f"{{{PLS_NS}}}alias").text = rule.alias
        else:
            attrs = {"alphabet": "x-cmu"} if rule.alphabet == "cmu-arpabet" else {}
            ET.SubElement(lexeme, f"{{{PLS_NS}}}phoneme", attrs).text = rule.phoneme
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body
