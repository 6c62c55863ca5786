"""Home Assistant's protocol: a Wyoming TTS listener inside the speech front (ZSYNTH_WYOMING_URI).

It only parses and renders around :meth:`~zsynth.services.synthesis.SynthesisService.speak`, the one synthesis path
every transport uses: :mod:`.events` (the framing, bounded), :mod:`.info` (``describe``), :mod:`.text` (streamed text
into sentences), :mod:`.session` (one connection) and :mod:`.listener` (the server, access, zeroconf).
"""

from __future__ import annotations

from zsynth.speech.wyoming.listener import LISTENER, wyoming_context

__all__ = ["LISTENER", "wyoming_context"]
