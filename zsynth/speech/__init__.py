"""The speech front: the ElevenLabs- and OpenAI-compatible HTTP API (:mod:`.routes`), the realtime sockets
(:mod:`.ws`), their request models (:mod:`.schemas`) and the app factory (:mod:`.app`)."""
