"""``zsynth demo``: a browser page for speech, realtime speech, cloning and the avatar, with a token-minting backend."""
