"""Phonemes for Piper's phoneme input: CMU ARPAbet spelled in the IPA symbols espeak-ng (and Piper's voices) use."""

from __future__ import annotations

from typing import Final

_ARPABET: Final = {
    "AA": "ɑː", "AE": "æ", "AH": "ʌ", "AO": "ɔː", "AW": "aʊ", "AY": "aɪ", "B": "b", "CH": "tʃ", "D": "d",
    "DH": "ð", "EH": "ɛ", "ER": "ɜː", "EY": "eɪ", "F": "f", "G": "ɡ", "HH": "h", "IH": "ɪ", "IY": "iː",
    "JH": "dʒ", "K": "k", "L": "l", "M": "m", "N": "n", "NG": "ŋ", "OW": "oʊ", "OY": "ɔɪ", "P": "p", "R": "ɹ",
    "S": "s", "SH": "ʃ", "T": "t", "TH": "θ", "UH": "ʊ", "UW": "uː", "V": "v", "W": "w", "Y": "j", "Z": "z",
    "ZH": "ʒ",
}  # fmt: skip


def arpabet_to_ipa(spelled: str) -> str:
    """ARPAbet ("T AH0 M EY1 T OW0") as IPA ("tʌmˈeɪtoʊ"): stress 1 marks primary, 2 secondary; unknown symbols drop."""
    out: list[str] = []
    for symbol in spelled.upper().split():
        stress = symbol[-1] if symbol[-1:].isdigit() else ""
        ipa = _ARPABET.get(symbol.rstrip("012"))
        if ipa is None:
            continue
        if stress == "0" and ipa == "ʌ":
            ipa = "ə"  # an unstressed AH is a schwa
        out.append({"1": "ˈ", "2": "ˌ"}.get(stress, "") + ipa)
    return "".join(out)
