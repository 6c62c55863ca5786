"""The services both servers (speech front and avatar) run on: the Redis queue and its dispatcher, the one
:class:`~zsynth.services.synthesis.SynthesisService` that owns a job's life, authentication and keys, metrics, the
voice catalog and the application keys they are found under. No HTTP routing or rendering lives here.
"""
