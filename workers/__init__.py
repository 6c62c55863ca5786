"""Worker processes: one long-lived process per GPU, one engine, one job at a time.

Nothing here imports aiohttp; the worker talks to the front only through Redis (``zsynth.protocol``).
"""
