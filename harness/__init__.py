"""Everything that starts or measures a zsynth stack, for the tests and the benchmarks alike.

* ``stack``: Redis, workers and fronts booted together (``local_stack``), from their parts: ``stores`` (redis-server
  and moto), ``workers`` (a ``zsynth worker`` child), ``fronts`` (a front as a child, or built in process);
  ``sentinel``: a Redis master, replica and Sentinels; ``s3``: buckets; ``processes``: children, stopping them;
* ``base``: the repository root, free ports, waiting, front settings;
* ``avatar``: a WebRTC viewer of the avatar; ``ws``, ``wyoming_client``: protocol clients;
* ``audio``: decoding and "is this speech"; ``measure``: metrics, CPU and memory, loop stalls, percentiles;
  ``load``: the load generator; ``probes``: several benchmarks in a row;
* inputs: ``voice_clips``, ``hostile_text``, ``upload_bodies``, ``offer_sdp``, ``tls_certs``, ``otlp``;
* ``bench``: every benchmark, as ``python -m harness.bench NAME``; ``gpu_run``, ``gpu_graphs_check``: the device
  runs of ``./scripts/gpu-run``; ``dashboard``: the Grafana dashboard's source.

Tests and benchmarks import the harness; the harness imports neither (import-linter holds it).
"""
