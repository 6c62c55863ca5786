"""Text handling, in one place: what a request's text becomes before an engine speaks it.

:mod:`.prepare` is the one text stage every job goes through (break tags, pronunciation dictionaries,
normalization, word bounds); :mod:`.spoken` keeps the map from spoken characters back to the caller's;
:mod:`.sentences` splits and packs sentences (the workers use it); :mod:`.marks` reads break tags;
:mod:`.normalize` reads numbers and symbols aloud; :mod:`.bounds` caps the pauses and audio one request asks for;
:mod:`.dictionaries` stores and applies pronunciation dictionaries.
"""

__all__ = ["bounds", "dictionaries", "marks", "normalize", "prepare", "sentences", "spoken"]
