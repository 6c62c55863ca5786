"""``zsynth voices list [--workspace W | --all]``: the cloned voices on this box's disk, with the workspace of each."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from zsynth.core import workspaces
from zsynth.core.config import Settings
from zsynth.core.voices.store import VoiceStore


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``voices`` subcommand to the zsynth command line."""
    voices = sub.add_parser("voices", help="list the cloned voices on this box (ZSYNTH_DATA_DIR)")
    actions = voices.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="list cloned voices with their workspace (default: the default one)")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("--workspace", help="only this workspace's clones")
    which.add_argument("--all", action="store_true", help="every workspace's clones")


def run_voices(settings: Settings, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one ``zsynth voices`` action; returns the exit status.

    It reads this box's disk, the voice library's cache of the bucket (with ``ZSYNTH_VOICES_BUCKET`` a box that is
    caught up holds every voice; the front's start-up fetches what it lacks)."""
    workspace = None if args.all else (args.workspace or workspaces.DEFAULT)
    if workspace is not None:
        try:
            workspaces.check_name(workspace)
        except ValueError as err:
            print(f"zsynth voices: --workspace {err}", file=sys.stderr)
            return 2
    if not settings.voices_dir.is_dir():
        print(f"zsynth voices: no voice library at {settings.voices_dir}", file=sys.stderr)
        return 1
    voices = sorted(
        VoiceStore(settings.voices_dir).all().values(),
        key=lambda v: (workspaces.owner_of(v.meta), int(v.meta.get("created_at_unix", 0)), v.voice_id),
    )
    print(f"{'VOICE_ID':<32}{'WORKSPACE':<20}{'CREATED':<22}NAME", file=out)
    for voice in voices:
        owner = workspaces.owner_of(voice.meta)
        if workspace is not None and owner != workspace:
            continue
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(voice.meta.get("created_at_unix", 0))))
        print(f"{voice.voice_id:<32}{owner:<20}{created:<22}{voice.meta.get('name', '')}", file=out)
    return 0
