"""Pronunciation dictionaries: rules (alias and phoneme), PLS lexicons, durable versioned storage (``.lifecycle``
opens the speech front's store)."""
