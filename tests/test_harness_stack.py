"""The benchmarks' one stack boot (harness.stack.local_stack), on the simulated engine: it starts what it is asked
for, ready, and leaves nothing running."""

from __future__ import annotations

import json
import urllib.request

import pytest

from harness.stack import local_stack

pytestmark = pytest.mark.heavy

SIMULATED = {"ZSYNTH_ENGINE": "simulated", "ZSYNTH_LOAD_TEST_ONLY": "1"}


def test_local_stack_boots_ready_parts_and_stops_them_all():
    with local_stack(workers=2, worker_env=SIMULATED, name="boot") as stack:
        assert [w.worker_id for w in stack.workers] == ["boot-0", "boot-1"]
        with urllib.request.urlopen(f"{stack.base}/healthz", timeout=10) as reply:
            assert reply.status == 200
            health = json.loads(reply.read())
        added = stack.add_worker()
        assert added.worker_id == "boot-2" and added.proc.poll() is None
        processes = [stack.front, *(w.proc for w in stack.workers)]
        assert stack.redis.proc is not None
        processes.append(stack.redis.proc)
        data_dir = stack.data_dir
        assert data_dir.is_dir()
    assert health, "the front answered its health check"
    assert all(proc.poll() is not None for proc in processes), "a part still runs after the block"
    assert not data_dir.exists()


def test_local_stack_without_a_front():
    with local_stack(fronts=0, worker_env=SIMULATED) as stack:
        assert stack.fronts == [] and len(stack.workers) == 1
