"""The ``zsynth`` command: ``serve`` (one front), ``worker`` (one worker), ``avatar`` (the avatar server),
``demo`` (the demo page), ``dev`` (everything on one box), ``keys`` (the keys table), ``voices`` (the clones on
this box and their workspaces)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from zsynth.core.config import Settings, SettingsError
from zsynth.core.logs import setup_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zsynth", description="Self-hosted, ElevenLabs-compatible speech server.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run one front process (HTTP API and WebSockets)")
    worker = sub.add_parser("worker", help="run one worker process (one engine slot)")
    worker.add_argument("--worker-id", help="overrides ZSYNTH_WORKER_ID")
    worker.add_argument("--check", action="store_true", help="exit 0 if this worker's heartbeat is fresh, else 1")
    sub.add_parser("avatar", help="run the avatar streaming server (WebRTC, port ZSYNTH_AVATAR_PORT)")
    sub.add_parser("demo", help="serve the demo page and its token-minting backend (port ZSYNTH_DEMO_PORT)")
    dev = sub.add_parser("dev", help="redis-server (if none answers), front, workers, avatar and demo on this box")
    dev.add_argument(
        "--workers", type=int, help="number of worker processes (default: ZSYNTH_WORKERS, else one per core for Piper)"
    )
    from zsynth import keyadmin, voiceadmin

    keyadmin.add_parser(sub)
    voiceadmin.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the chosen process."""
    args = _parser().parse_args(argv)
    try:
        overrides = {"worker_id": args.worker_id} if getattr(args, "worker_id", None) else {}
        settings = Settings.from_env(**overrides)
    except SettingsError as err:
        print(f"zsynth: {err}", file=sys.stderr)
        raise SystemExit(2) from err
    if args.command == "serve":
        setup_logging(settings, "front")
        from zsynth.speech.app import run

        run(settings)
    elif args.command == "avatar":
        setup_logging(settings, "avatar")
        from zsynth.avatar.app import run_avatar

        run_avatar(settings)
    elif args.command == "demo":
        setup_logging(settings, "demo")
        from zsynth.demo.app import run_demo

        run_demo(settings)
    elif args.command == "worker":
        if args.check:
            from workers.main import check

            raise SystemExit(0 if asyncio.run(check(settings)) else 1)
        setup_logging(settings, f"worker[{settings.worker.id}]")
        from workers.main import run as run_worker

        run_worker(settings)
    elif args.command == "dev":
        setup_logging(settings, "dev")
        from zsynth.dev import run_dev

        raise SystemExit(run_dev(settings, workers=args.workers or settings.worker_count))
    elif args.command == "keys":
        from zsynth.keyadmin import run_keys

        raise SystemExit(asyncio.run(run_keys(settings, args)))
    elif args.command == "voices":
        from zsynth.voiceadmin import run_voices

        raise SystemExit(run_voices(settings, args))
