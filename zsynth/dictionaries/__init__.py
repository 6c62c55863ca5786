"""Pronunciation dictionaries: rules (alias and phoneme), PLS lexicons, durable versioned storage."""
