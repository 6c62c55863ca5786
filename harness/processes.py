"""Processes a side-by-side run handles itself: the environment its servers inherit, a server's children (which
of them are zsynth workers), and stopping one with a grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path


def drop_zsynth_settings() -> None:
    """Remove every ZSYNTH_* variable from this process's environment, which every server started here inherits.

    Each column then runs with zsynth's defaults except what it sets itself (the harness starts
    its children with os.environ, so it is cleaned here rather than per child).
    """
    for key in [key for key in os.environ if key.startswith("ZSYNTH_")]:
        del os.environ[key]


def stop_process(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def child_pids(parent: int) -> list[int]:
    """The pids whose parent is ``parent`` (from /proc)."""
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # The command name may hold spaces and parentheses: the fields after its closing one are fixed.
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == parent:
                    children.append(int(entry.name))
    return children


def is_worker(pid: int) -> bool:
    """True when the process runs ``zsynth worker``."""
    with contextlib.suppress(OSError):
        argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        return any(argv[i : i + 2] == [b"zsynth", b"worker"] for i in range(len(argv)))
    return False
