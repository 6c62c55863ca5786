"""zsynth: a self-hosted, ElevenLabs-compatible speech server.

The front (``zsynth.speech.app``) answers HTTP and WebSockets and queues jobs on Redis (``zsynth.core.protocol``,
``zsynth.services.dispatch``); one worker process per GPU (``workers``) runs a single engine slot and streams audio
back.
"""

__version__ = "0.1.0"
