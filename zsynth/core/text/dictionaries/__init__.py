"""Pronunciation dictionaries: rules (alias and phoneme) and PLS lexicons (:mod:`.rules`), durable versioned storage
(:mod:`.store`) and its cache (:mod:`.cache`). :mod:`zsynth.services.dictionaries` opens the speech front's store."""

__all__ = ["cache", "rules", "store"]
