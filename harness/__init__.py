"""Everything that starts or measures a zsynth stack, for the tests and the benchmarks alike.

* ``base``: the repository root, free ports, waiting, front settings;
* ``stores``: redis-server and moto; ``sentinel``: a Redis master, replica and Sentinels; ``s3``: buckets;
* ``workers``: a ``zsynth worker`` child process; ``fronts``: a front as a child process or built in process;
* ``avatar``: a WebRTC viewer of the avatar; ``ws``, ``wyoming_client``: protocol clients;
* ``audio``, ``measure``, ``load``, ``probes``: audio checks, metrics, load generation, probe runs;
* inputs: ``voice_clips``, ``hostile_text``, ``upload_bodies``, ``offer_sdp``, ``tls_certs``, ``otlp``;
* ``bench``: every benchmark, as ``python -m harness.bench NAME``.

Tests and benchmarks import the harness; the harness imports neither (import-linter holds it).
"""
