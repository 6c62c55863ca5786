"""``zsynth keys create|list|revoke``: manage full ``zsk_live_`` keys in the portal keys table."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from zsynth.core import workspaces
from zsynth.core.config import Settings
from zsynth.services.auth import Authenticator
from zsynth.services.keystore import KeyStore, KeyStoreError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``keys`` subcommand to the zsynth command line."""
    keys = sub.add_parser("keys", help="manage full API keys in the keys table (ZSYNTH_API_KEYS_TABLE)")
    keys.add_argument("--table", help="overrides ZSYNTH_API_KEYS_TABLE")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a zsk_live_ key (creates the table if missing); shown once")
    create.add_argument("--name", default="", help="a label shown by 'list'")
    create.add_argument(
        "--workspace",
        default=workspaces.DEFAULT,
        help="the workspace the key is in: its cloned voices and dictionaries are that workspace's (lowercase "
        f"letters, digits and '-', at most {workspaces.MAX_NAME_CHARS}; default: {workspaces.DEFAULT})",
    )
    listing = actions.add_parser("list", help="list keys (never their secrets)")
    listing.add_argument("--all", action="store_true", help="include ephemeral tokens")
    revoke = actions.add_parser("revoke", help="revoke a key (and the tokens it minted) by its id")
    revoke.add_argument("key_id", help="the id shown by 'create' and 'list'")


# Wide enough for most workspace names; a longer one pushes its row's later columns right.
_WS_COLUMN = 20


def _when(ts: int | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)) if ts is not None else "-"


async def run_keys(settings: Settings, args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Run one ``zsynth keys`` action; returns the exit status."""
    table = args.table or settings.auth.keys_table
    if not table:
        print("zsynth keys: set ZSYNTH_API_KEYS_TABLE or pass --table", file=sys.stderr)
        return 2
    if args.action == "create":
        try:
            workspaces.check_name(args.workspace)
        except ValueError as err:
            print(f"zsynth keys: --workspace {err}", file=sys.stderr)
            return 2
    store = KeyStore(table)
    try:
        await store.open()
        if args.action == "create":
            if await store.ensure_table():
                print(f"created table {table}", file=sys.stderr)
            key, record = await Authenticator(store=store).create_key(args.name, args.workspace)
            print(f"id:  {record.key_id}", file=out)
            print(f"key: {key}", file=out)
            print(f"workspace: {record.workspace}", file=out)
            print("Store this key now: it is not kept anywhere and cannot be shown again.", file=sys.stderr)
            return 0
        if not await store.exists():
            print(f"zsynth keys: table {table} does not exist ('zsynth keys create' makes it)", file=sys.stderr)
            return 1
        if args.action == "list":
            rows = sorted((r for _, r in await store.scan()), key=lambda r: r.created_at)
            head = f"{'ID':<14}{'KIND':<11}{'WORKSPACE':<{_WS_COLUMN}}{'CREATED':<22}{'EXPIRES':<22}{'REVOKED':<22}NAME"
            print(head, file=out)
            for r in rows:
                if r.kind == "full" or args.all:
                    workspace = r.workspace or workspaces.DEFAULT  # rows from before workspaces
                    line = f"{r.key_id:<14}{r.kind:<11}{workspace:<{_WS_COLUMN}}"
                    line += f"{_when(r.created_at):<22}{_when(r.expires_at):<22}"
                    print(f"{line}{_when(r.revoked_at):<22}{r.name}", file=out)
            return 0
        changed = await store.revoke(args.key_id, int(time.time()))
        if not changed:
            print(f"zsynth keys: no active key with id {args.key_id}", file=sys.stderr)
            return 1
        print(
            f"revoked {args.key_id} ({changed} record(s), tokens it minted included); fronts honour it within "
            f"{settings.auth.cache_ttl_s:g} s",
            file=out,
        )
        return 0
    except KeyStoreError as err:
        print(f"zsynth keys: {err}", file=sys.stderr)
        return 1
    finally:
        await store.close()
