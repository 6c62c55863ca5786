"""zsynth: a self-hosted, ElevenLabs-compatible speech server.

The front (``zsynth.app``) answers HTTP and WebSockets and queues jobs on Redis (``zsynth.protocol``,
``zsynth.dispatch``); one worker process per GPU (``workers``) runs a single engine slot and streams audio back.
"""

__version__ = "0.1.0"
