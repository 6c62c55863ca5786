"""English text normalization: numbers, money, times, dates, phone numbers, units, abbreviations and symbols as words.

Number words come from ``num2words``; this module holds the English rules around them. Each rule rewrites only text
no earlier rule (or dictionary) has replaced, so the order below is the order of precedence: addresses and dates
before the bare numbers inside them.

When it runs is the request's ``apply_text_normalization`` (see :func:`wants_normalization`).

Hostile text costs time in proportion to its length: a pattern that starts with a number starts only where a number
does (not after a digit, nor after a digit and a comma), so a long digit run is scanned once, not again from each of
its digits; a whole number of more than :data:`MAX_NUMBER_DIGITS` digits is read digit by digit and never reaches
``num2words``; and a rule that fails on some text leaves that text as written (logged), never failing the request.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Final

from num2words import num2words

from zsynth.core.engines import profile
from zsynth.core.text.spoken import Spoken

logger = logging.getLogger(__name__)

MODES: Final = ("auto", "on", "off")

_MONTHS: Final = ("January February March April May June July August September October November December").split()
_DIGITS: Final = "zero one two three four five six seven eight nine".split()
_CURRENCIES: Final = {
    "$": ("dollar", "dollars", "cent", "cents"),
    "€": ("euro", "euros", "cent", "cents"),
    "£": ("pound", "pounds", "penny", "pence"),
}
_SCALES: Final = {
    "k": "thousand",
    "thousand": "thousand",
    "m": "million",
    "million": "million",
    "bn": "billion",
    "billion": "billion",
}
# Units read after a number; the one-letter ones only when written against it ("5m", not "5 m").
_UNITS: Final = {
    "km": ("kilometer", "kilometers"),
    "kg": ("kilogram", "kilograms"),
    "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"),
    "mg": ("milligram", "milligrams"),
    "ml": ("milliliter", "milliliters"),
    "mph": ("mile per hour", "miles per hour"),
    "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"),
    "lb": ("pound", "pounds"),
    "lbs": ("pound", "pounds"),
    "ft": ("foot", "feet"),
    "mi": ("mile", "miles"),
    "oz": ("ounce", "ounces"),
    "°C": ("degree Celsius", "degrees Celsius"),
    "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"),
    "GB": ("gigabyte", "gigabytes"),
    "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"),
    "kHz": ("kilohertz", "kilohertz"),
    "kW": ("kilowatt", "kilowatts"),
    "ms": ("millisecond", "milliseconds"),
}
_ATTACHED_UNITS: Final = {
    "m": ("meter", "meters"),
    "g": ("gram", "grams"),
    "s": ("second", "seconds"),
    "h": ("hour", "hours"),
    "l": ("liter", "liters"),
}
# Abbreviations before a name (never the end of a sentence) and the others (whose period may also end one).
_TITLES: Final = {"Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor", "Gen": "General"}
_ABBREVIATIONS: Final = {
    "Jr": "Junior",
    "Sr": "Senior",
    "Ave": "Avenue",
    "Blvd": "Boulevard",
    "Rd": "Road",
    "Mt": "Mount",
    "etc": "et cetera",
    "vs": "versus",
    "approx": "approximately",
    "dept": "department",
    "e.g": "for example",
    "i.e": "that is",
}
_ABBREVIATION_WORDS: Final = {word.lower(): spoken for word, spoken in _ABBREVIATIONS.items()}

# Longest whole number read as one ("nine hundred and ninety-nine trillion, ..."); longer ones are read digit by digit,
# as people read long codes. num2words is slow on huge numbers, and int() refuses more than 4,300 digits.
MAX_NUMBER_DIGITS: Final = 15
_NUMBER: Final = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# Where a number may start: not inside a digit run, nor inside a comma-grouped one ("1,000,000"). Without it, a
# pattern with no other left anchor would rescan the rest of a long run from each of its digits.
_START: Final = r"(?<!\d)(?<!\d,)"


def wants_normalization(mode: str, engine: str) -> bool:
    """Whether text is normalized: ``on`` always, ``off`` never, ``auto`` where the engine's profile needs it.

    Chatterbox-Turbo is a language model over text tokens with no normalizer of its own; Piper goes through espeak-ng,
    which reads numbers, currency and the common abbreviations itself and keeps its own alignment on the caller's
    words, so auto leaves its text alone.
    """
    if mode == "on":
        return True
    if mode == "off":
        return False
    return profile(engine).needs_normalization


@functools.lru_cache(maxsize=4096)
def _words(value: int, to: str = "cardinal") -> str:
    """``value`` in words (cached: hostile text repeats the same small numbers thousands of times)."""
    return str(num2words(value, lang="en", to=to))


def cardinal(raw: str) -> str:
    """A written number ("1,234.5") in words; decimals, and whole numbers past MAX_NUMBER_DIGITS, digit by digit."""
    whole, _, fraction = raw.replace(",", "").partition(".")
    words = _words(int(whole)) if whole.isdecimal() and len(whole) <= MAX_NUMBER_DIGITS else _digits(whole)
    if fraction:
        words += " point " + _digits(fraction)
    return words


def _digits(raw: str) -> str:
    return " ".join(_DIGITS[int(d)] for d in raw if d.isdecimal())


def _year(value: int) -> str:
    return _words(value, "year")


def _ordinal(value: int) -> str:
    return _words(value, "ordinal")


def _ordinal_of(raw: str) -> str:
    """ "21" as "twenty-first"; past MAX_NUMBER_DIGITS, the digits one by one and the last as an ordinal."""
    if len(raw) <= MAX_NUMBER_DIGITS:
        return _ordinal(int(raw))
    return f"{_digits(raw[:-1])} {_ordinal(int(raw[-1]))}"


def _date(year: int, month: int, day: int) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return f"{_MONTHS[month - 1]} {_ordinal(day)}, {_year(year)}"


def _money(match: re.Match[str]) -> str:
    symbol, amount, scale = match.group("cur"), match.group("amount"), match.group("scale")
    one, many, cent, cents = _CURRENCIES[symbol]
    if scale:
        return f"{cardinal(amount)} {_SCALES[scale.lower()]} {many}"
    whole, _, fraction = amount.replace(",", "").partition(".")
    if len(whole) > MAX_NUMBER_DIGITS:
        return f"{cardinal(amount)} {many}"
    units = int(whole)
    hundredths = int((fraction + "0")[:2]) if fraction else 0
    if len(fraction) > 2:
        return f"{cardinal(amount)} {many}"
    parts = []
    if units or not hundredths:
        parts.append(f"{_words(units)} {one if units == 1 else many}")
    if hundredths:
        parts.append(f"{_words(hundredths)} {cent if hundredths == 1 else cents}")
    return " and ".join(parts)


def _time(match: re.Match[str]) -> str | None:
    hour, minute, half = int(match.group("h")), int(match.group("m") or 0), match.group("ampm")
    if hour > 23 or minute > 59:
        return None
    if minute == 0:
        words = _words(hour) + ("" if half else " o'clock")
    elif minute < 10:
        words = f"{_words(hour)} oh {_words(minute)}"
    else:
        words = f"{_words(hour)} {_words(minute)}"
    if half:
        words += " A M" if half[0] in "aA" else " P M"
        if half.endswith(".") and _ends_sentence(match):
            words += "."  # "p.m." also ended the sentence
    return words


def _unit(table: dict[str, tuple[str, str]]) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        one, many = table[match.group("unit")]
        amount = match.group("n")
        return f"{cardinal(amount)} {one if amount == '1' else many}"

    return replace


def _address(text: str) -> str:
    """An e-mail address or a host and path, the way people read them out."""
    spoken = text.replace(".", " dot ").replace("@", " at ").replace("/", " slash ")
    spoken = spoken.replace("-", " dash ").replace("_", " underscore ")
    return " ".join(spoken.split())


def _url(match: re.Match[str]) -> str:
    url = re.sub(r"^https?://", "", match.group(0), flags=re.IGNORECASE).rstrip("/")
    return _address(url)


# Read at the match's end, in place: slicing the rest of the text for every abbreviation would be quadratic.
_END_OF_TEXT: Final = re.compile(r"\s*\Z")
_CAPITAL_NEXT: Final = re.compile(r"\s+[A-Z]")


def _ends_sentence(match: re.Match[str]) -> bool:
    """The abbreviation's period also ends a sentence: nothing, or white space and a capital letter, follows it."""
    text, end = match.string, match.end()
    return bool(_END_OF_TEXT.match(text, end) or _CAPITAL_NEXT.match(text, end))


def _abbreviation(match: re.Match[str]) -> str:
    # The pattern ignores case, so "jr." and "BLVD." arrive here too.
    expansion = _ABBREVIATION_WORDS[match.group("abbr").lower()]
    return expansion + ("." if _ends_sentence(match) else "")


def _saint_or_street(match: re.Match[str]) -> str:
    """ "St." before a name with no capitalised word in front is Saint ("St. Louis"); otherwise Street."""
    # The last two words are all it needs: look back a bounded window, not the whole text before each "St.".
    before = match.string[max(0, match.start() - 256) : match.start()].rsplit(maxsplit=2)
    # A capitalised word right before is a street's name ("Main St."), unless it starts a sentence itself.
    named = len(before) >= 2 and before[-1][:1].isupper() and before[-2][-1:] not in ".!?"
    if _CAPITAL_NEXT.match(match.string, match.end()) and not named:
        return "Saint"
    return "Street" + ("." if _ends_sentence(match) else "")


_RULES: Final[list[tuple[re.Pattern[str], Callable[[re.Match[str]], str | None]]]] = [
    (re.compile(r"\b(?:https?://|www\.)[^\s<>\"']+[^\s<>\"'.,;:!?)]", re.IGNORECASE), _url),
    # Anchored at the start of the run: "1.1.1.1..." is otherwise rescanned from each of its dots.
    (re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b"), lambda m: _address(m.group(0))),
    (
        re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b"),
        lambda m: _date(int(m["y"]), int(m["m"]), int(m["d"])),
    ),
    (
        re.compile(r"\b(?P<m>\d{1,2})/(?P<d>\d{1,2})/(?P<y>\d{4})\b"),
        lambda m: _date(int(m["y"]), int(m["m"]), int(m["d"])),
    ),
    (
        re.compile(r"(?<![\w+])(?:(?:\+?1[-. ])?(?:\(\d{3}\) ?|\d{3}[-. ])\d{3}[-. ]\d{4}|\d{3}-\d{4})\b"),
        lambda m: ", ".join(_digits(part) for part in re.split(r"[-. ()]+", m.group(0).lstrip("+")) if part),
    ),
    (re.compile(r"\b(?P<h>\d{1,2}):(?P<m>\d{2})(?:\s?(?P<ampm>[AaPp](?:\.[Mm]\.|[Mm]))(?!\w))?"), _time),
    (re.compile(r"\b(?P<h>\d{1,2})(?P<m>)\s?(?P<ampm>[AaPp](?:\.[Mm]\.|[Mm]))(?!\w)"), _time),
    (
        re.compile(
            rf"(?P<cur>[$€£])\s?(?P<amount>{_NUMBER})(?:\s?(?P<scale>k|thousand|million|billion|bn|m)\b)?",
            re.IGNORECASE,
        ),
        _money,
    ),
    (re.compile(rf"{_START}(?P<n>{_NUMBER})\s?%"), lambda m: f"{cardinal(m['n'])} percent"),
    (
        re.compile(rf"{_START}\b(?P<n>{_NUMBER})\s?(?P<unit>{'|'.join(map(re.escape, _UNITS))})(?![\w/])"),
        _unit(_UNITS),
    ),
    (re.compile(rf"{_START}\b(?P<n>{_NUMBER})(?P<unit>[mgshl])\b"), _unit(_ATTACHED_UNITS)),
    (re.compile(r"#(\d+)\b"), lambda m: "number " + cardinal(m.group(1))),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b", re.IGNORECASE), lambda m: _ordinal_of(m.group(1))),
    (re.compile(r"(?<![\d,.])\b(1[1-9]\d\d|20\d\d)\b(?![\d,]|\.\d)"), lambda m: _year(int(m.group(0)))),
    (re.compile(rf"(?<![\w.])-(?P<n>{_NUMBER})\b"), lambda m: "minus " + cardinal(m["n"])),
    (re.compile(rf"(?<![\w.])(?:{_NUMBER})(?![\w])"), lambda m: cardinal(m.group(0))),
    (re.compile(rf"\b(?P<t>{'|'.join(_TITLES)})\.(?=\s)"), lambda m: _TITLES[m["t"]]),
    (re.compile(r"\bSt\."), _saint_or_street),
    (re.compile(rf"(?<!\w)(?P<abbr>{'|'.join(re.escape(a) for a in _ABBREVIATIONS)})\.", re.IGNORECASE), _abbreviation),
    (re.compile(r"\s&\s"), lambda m: " and "),
]


def _guarded(
    replace: Callable[[re.Match[str]], str | None], failures: list[str]
) -> Callable[[re.Match[str]], str | None]:
    """``replace``, but a match it fails on is left as written (and noted in ``failures``)."""

    def guarded(match: re.Match[str]) -> str | None:
        try:
            return replace(match)
        except Exception as err:  # a defect in one rule must not fail the request: that text is spoken as written
            failures.append(f"{match.re.pattern[:40]!r} on {len(match.group(0))} characters: {err!r}"[:300])
            return None

    return guarded


def normalize(spoken: Spoken) -> None:
    """Rewrite the kept segments of ``spoken`` with the English rules; never raises for any text."""
    failures: list[str] = []
    for pattern, replace in _RULES:
        spoken.rewrite(pattern, _guarded(replace, failures))
    if failures:
        # One line per request, however many matches failed.
        logger.warning("normalization left %d matches as written; the first: %s", len(failures), failures[0])


def normalize_text(text: str) -> str:
    """``text`` normalized (a convenience for tests and tools)."""
    spoken = Spoken(text)
    normalize(spoken)
    return spoken.text
