"""Pronunciation dictionaries: rules (alias and phoneme) and PLS lexicons (:mod:`.rules`), one pass of them all over a
text (:mod:`.matcher`), durable versioned storage (:mod:`.store`) and its cache (:mod:`.cache`).
:mod:`zsynth.services.dictionaries` opens the speech front's store."""

__all__ = ["cache", "matcher", "rules", "store"]
