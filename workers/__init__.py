"""Worker processes: one long-lived process per GPU, one engine, one job at a time.

The worker serves no HTTP and talks to the front only through Redis (``zsynth.core.protocol``). aiohttp is still loaded:
the shared modules it uses (the start-up in ``zsynth.kit.server``, the voice catalog's app key) import ``aiohttp.web``.
"""
