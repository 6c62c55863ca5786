"""The kernel: what the fronts and the GPU workers share. Nothing here imports aiohttp (an import-linter contract).

- :mod:`.config`: the typed settings every process reads from its environment.
- :mod:`.protocol`: the job, its events and its error codes, as they travel over Redis.
- :mod:`.audio`: output formats and encoders; :mod:`.alignment`: character timing.
- :mod:`.languages`: the languages each engine speaks, and the check of a request's ``language_code``.
- :mod:`.text`: everything done to a text before it is spoken.
- :mod:`.voices`: cloned voices on disk and in the bucket.
- :mod:`.redis_link`: how every process reaches Redis (a plain URL, or the master Sentinel names).
- :mod:`.tracing`: OpenTelemetry spans, optional (nothing imported without ZSYNTH_OTLP_ENDPOINT).
- :mod:`.supervise`, :mod:`.logs`, :mod:`.aws`, :mod:`.sdnotify`, :mod:`.ratelimit`, :mod:`.voice_settings`: small
  shared utilities.
"""

__all__ = [
    "alignment",
    "audio",
    "aws",
    "config",
    "languages",
    "logs",
    "protocol",
    "ratelimit",
    "redis_link",
    "runtime",
    "sdnotify",
    "supervise",
    "text",
    "tracing",
    "voice_settings",
    "voices",
]
