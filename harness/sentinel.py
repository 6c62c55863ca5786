"""A real Sentinel-managed Redis on loopback: a master, a replica and three sentinels, with short timeouts.

Debian's ``redis-server`` and ``redis-sentinel`` packages (``scripts/install`` installs both) run every part. The
failover test and ``harness/bench/chaos_soak.py`` use it: kill the master, wait for the promotion, bring the old master
back (Sentinel turns it into a replica of the new one).

    with SentinelSet() as redis_set:
        url = redis_set.url          # redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/zsynth/0
        redis_set.kill_master()      # SIGKILL, no warning
        redis_set.wait_promoted()    # the sentinels name another master
        redis_set.restart_killed()   # the old master comes back and is made a replica
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from harness.base import free_port, wait_for

SERVICE = "zsynth"
#: Sentinel's own down-after time for the test set: a master silent this long is subjectively down.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 4000


class SentinelSet:
    """Two redis-server processes (one master, one replica) watched by three redis-sentinel processes."""

    def __init__(self, *, down_after_ms: int = DOWN_AFTER_MS, service: str = SERVICE) -> None:
        self.service = service
        self.down_after_ms = down_after_ms
        self._dir = tempfile.TemporaryDirectory(prefix="zsynth-sentinel-")
        self.dir = Path(self._dir.name)
        self.data_ports = [free_port(), free_port()]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.servers: dict[int, subprocess.Popen[bytes]] = {}
        self.sentinels: list[subprocess.Popen[bytes]] = []
        self.killed: int | None = None  # the port of the master killed last

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL zsynth takes (database 0)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    # ----- start and stop --------------------------------------------------------------------------------------

    def start(self) -> SentinelSet:
        """Start the master, the replica (synced) and the three sentinels (each seeing the other two)."""
        master, replica = self.data_ports
        self._start_server(master)
        self._start_server(replica, "--replicaof", "127.0.0.1", str(master))
        wait_for(lambda: self._role(replica) == ("slave", "up"), 20, "the replica to sync")
        for port in self.sentinel_ports:
            conf = self.dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {self.dir}\n"
                f"sentinel monitor {self.service} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}\n"
                f"sentinel failover-timeout {self.service} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {self.service} 1\n"
            )
            self.sentinels.append(
                subprocess.Popen(["redis-sentinel", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        wait_for(self._sentinels_agree, 20, "three sentinels that know each other and the replica", 0.1)
        return self

    def close(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL) and remove the working directory."""
        for proc in [*self.sentinels, *self.servers.values()]:
            if proc.poll() is None:
                proc.terminate()
        for proc in [*self.sentinels, *self.servers.values()]:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._dir.cleanup()

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # ----- what the sentinels say ------------------------------------------------------------------------------

    def master_port(self) -> int | None:
        """The master's port as the first sentinel that answers names it."""
        for port in self.sentinel_ports:
            with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=0.5) as sentinel:
                address = sentinel.sentinel_get_master_addr_by_name(self.service)
                if address:
                    return int(address[1])
        return None

    def master_url(self) -> str:
        """A plain ``redis://`` URL of the current master (for a test's own look at the data)."""
        return f"redis://127.0.0.1:{self.master_port()}/0"

    def wait_promoted(self, old_port: int, timeout: float = 30.0) -> float:
        """Block until every sentinel names a master other than ``old_port`` that answers as one; return seconds."""
        started = time.monotonic()

        def promoted() -> bool:
            ports = set()
            for port in self.sentinel_ports:
                with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=0.5) as sentinel:
                    address = sentinel.sentinel_get_master_addr_by_name(self.service)
                    ports.add(int(address[1]) if address else None)
            new = ports.pop() if len(ports) == 1 else None
            return new is not None and new != old_port and self._role(new)[0] == "master"

        wait_for(promoted, timeout, "a promotion", 0.05)
        return time.monotonic() - started

    # ----- faults ----------------------------------------------------------------------------------------------

    def kill_master(self) -> int:
        """SIGKILL the current master; return its port."""
        port = self.master_port()
        assert port is not None, "no sentinel names a master"
        self.servers[port].send_signal(signal.SIGKILL)
        self.servers[port].wait(10)
        self.killed = port
        return port

    def restart_killed(self) -> None:
        """Start the last killed master again, empty; the sentinels make it a replica of the new master."""
        assert self.killed is not None
        self._start_server(self.killed)
        port, self.killed = self.killed, None
        wait_for(lambda: self._role(port)[0] == "slave", 30, "the old master to rejoin as a replica", 0.1)

    # ----- internals -------------------------------------------------------------------------------------------

    def _start_server(self, port: int, *args: str) -> None:
        self.servers[port] = subprocess.Popen(
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--dbfilename",
                f"dump-{port}.rdb",
                # A replica's first sync starts at once instead of after diskless sync's usual 5 s of waiting.
                "--repl-diskless-sync-delay",
                "0",
                *args,
            ],
            stdout=subprocess.DEVNULL,
        )

        def up() -> bool:
            with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=0.5) as client:
                return bool(client.ping())
            return False

        wait_for(up, 10, f"redis-server on {port}")

    def _role(self, port: int) -> tuple[str, str]:
        """('master', '') or ('slave', link state) for the server on ``port``; ('', '') when it does not answer."""
        with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=0.5) as client:
            info = client.info("replication")
            return str(info["role"]), str(info.get("master_link_status", ""))
        return "", ""

    def _sentinels_agree(self) -> bool:
        for port in self.sentinel_ports:
            with contextlib.suppress(redis.RedisError), redis.Redis(port=port, socket_timeout=0.5) as sentinel:
                state = sentinel.sentinel_master(self.service)
                if int(state.get("num-other-sentinels", 0)) < 2 or int(state.get("num-slaves", 0)) < 1:
                    return False
                continue
            return False
        return True
