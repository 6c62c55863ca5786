"""zsynth: a self-hosted, ElevenLabs-compatible speech server.

The package is in layers, each importing only those below it (import-linter checks them; docs/architecture.md):

- :mod:`zsynth.core`: the kernel the fronts share with the GPU workers (``workers``); it never imports aiohttp.
- :mod:`zsynth.services`: what the fronts run on: the Redis queue, the one owner of a job's life
  (:class:`~zsynth.services.synthesis.SynthesisService`), auth, voices, metrics.
- :mod:`zsynth.kit`: the server kit every HTTP server is built from.
- :mod:`zsynth.speech`, :mod:`zsynth.avatar`, :mod:`zsynth.demo`: the three servers.
- :mod:`zsynth.cli`: the ``zsynth`` command on top.

The speech front answers HTTP and WebSockets and queues jobs on Redis; one worker process per GPU runs a single
engine slot and streams audio back.
"""

__version__ = "0.1.0"
