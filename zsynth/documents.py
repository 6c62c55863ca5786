"""Documents generated from the route declarations: the OpenAPI 3.1 documents of zsynth's HTTP servers, and the
table of which credential reaches which route (``docs/auth.md``).

:mod:`zsynth.kit.openapi` turns declarations (:mod:`zsynth.kit.endpoints`) into operations and component schemas;
:mod:`zsynth.speech.openapi` and :mod:`zsynth.avatar.openapi` add each server's info, security schemes and error
envelope; each server serves its own. This module builds either for the command line, the docs and the tests. To
document a route, declare it (its models and OpenAPI fields) on its module's ``Endpoints`` table. WebSocket routes are
outside OpenAPI.

:func:`credentials_table` asks the access check itself (:func:`zsynth.kit.gate.may_call`) about every declared route
of both servers, for each kind of credential; ``python -m zsynth.documents auth-table --write`` puts it in
``docs/auth.md`` between :data:`TABLE_START` and :data:`TABLE_END`, and a test fails when the two differ.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from zsynth.core.config import Settings

if TYPE_CHECKING:
    from zsynth.kit.endpoints import Endpoint, Endpoints
    from zsynth.services.auth import TokenServer

Kind = Literal["speech", "avatar"]


def build_document(kind: Kind = "speech", settings: Settings | None = None) -> dict[str, Any]:
    """A fresh OpenAPI 3.1 document of the ``kind`` server, with the limits of ``settings`` when given."""
    # Each server's module is imported on demand, so the speech front never loads the avatar's routes (and aiortc).
    if kind == "speech":
        from zsynth.speech import openapi as speech

        return speech.build(settings)
    if kind == "avatar":
        from zsynth.avatar import openapi as avatar

        return avatar.build(settings)
    raise ValueError(f"unknown server kind {kind!r}")


# ----- the credentials table of docs/auth.md ------------------------------------------------------------------------

TABLE_START: Final = (
    "<!-- The credentials table: generated from the route declarations by `python -m zsynth.documents auth-table "
    "--write`; tests/test_auth_table.py fails when it differs. Do not edit by hand. -->"
)
TABLE_END: Final = "<!-- End of the generated credentials table. -->"


@dataclass(frozen=True, slots=True)
class _Server:
    title: str
    tables: tuple[Endpoints, ...]
    name: TokenServer


@dataclass(frozen=True, slots=True)
class _Row:
    label: str
    #: Whether a route of the named server admits this row's credential.
    admits: Callable[[Endpoint, TokenServer], bool]


def _servers() -> tuple[_Server, ...]:
    # Imported here: the speech front never loads the avatar's routes (and aiortc), and this module is a command's.
    from zsynth.avatar.routes import TABLES as AVATAR_TABLES
    from zsynth.services.auth import AVATAR_SERVER, SPEECH_SERVER
    from zsynth.speech.routes import TABLES as SPEECH_TABLES

    return _Server("Speech API", SPEECH_TABLES, SPEECH_SERVER), _Server("Avatar server", AVATAR_TABLES, AVATAR_SERVER)


def _rows() -> tuple[_Row, ...]:
    from zsynth.kit.endpoints import Access
    from zsynth.kit.gate import may_call
    from zsynth.services.auth import AVATAR_SERVER, SPEECH_SCOPE, SPEECH_SERVER, Credential

    def token(server: TokenServer) -> Credential:
        # What the auth core makes of a token's record (Authenticator.verify, single_use.redeem).
        return Credential("ephemeral", "sample", scope=SPEECH_SCOPE, server=server)

    def reaches(credential: Credential) -> Callable[[Endpoint, TokenServer], bool]:
        # The routes that need no credential have their own row.
        def admits(endpoint: Endpoint, server: TokenServer) -> bool:
            return endpoint.access is not Access.PUBLIC and may_call(credential, endpoint.access, server)

        return admits

    speech_token = reaches(token(SPEECH_SERVER))
    return (
        _Row("none", lambda endpoint, _: endpoint.access is Access.PUBLIC),
        _Row("full key (static or `zsk_live_…`)", reaches(Credential("full", "sample"))),
        _Row("ephemeral token `zsk_temp_…` from `POST /v1/tokens/ephemeral`", speech_token),
        # Only in-band authentication (the realtime sockets) reads ?single_use_token=; on HTTP it is no key at all.
        _Row(
            "single-use token `sutkn_…` from `POST /v1/single-use-token/tts_websocket`: one socket, as "
            "`?single_use_token=`",
            lambda endpoint, server: endpoint.access is Access.IN_BAND and speech_token(endpoint, server),
        ),
        _Row("avatar session token `zsk_temp_…` from `POST /v1/streaming.create_token`", reaches(token(AVATAR_SERVER))),
    )


def _route(endpoint: Endpoint) -> str:
    return f"WebSocket `{endpoint.path}`" if endpoint.websocket else f"`{endpoint.method} {endpoint.path}`"


def _cell(row: _Row, server: _Server) -> str:
    from zsynth.kit.endpoints import Access

    # By path, so a resource's routes (and its socket) stand together.
    endpoints = sorted((e for table in server.tables for e in table), key=lambda e: (e.path, e.websocket, e.method))
    reached = [endpoint for endpoint in endpoints if row.admits(endpoint, server.name)]
    if not reached:
        return "none"
    if len(reached) == sum(endpoint.access is not Access.PUBLIC for endpoint in endpoints):
        return "every route"
    return "<br>".join(_route(endpoint) for endpoint in reached)


def credentials_table() -> str:
    """The Markdown table of the routes each kind of credential reaches on each server, from the declarations and the
    access check (the routes that need no credential, first row, are open to every credential and left out of the
    others)."""
    servers = _servers()
    lines = [
        "| Credential | " + " | ".join(server.title for server in servers) + " |",
        "|---|" + "---|" * len(servers),
    ]
    for row in _rows():
        lines.append(f"| {row.label} | " + " | ".join(_cell(row, server) for server in servers) + " |")
    return "\n".join(lines)


def with_credentials_table(text: str, table: str) -> str:
    """``text`` (docs/auth.md) with ``table`` between its :data:`TABLE_START` and :data:`TABLE_END` lines;
    ValueError when it lacks them."""
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError("the credentials table's markers are missing")
    # Blank lines around the table: a Markdown HTML block (the comment) runs on until one.
    return text[: start + len(TABLE_START)] + "\n\n" + table + "\n\n" + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zsynth.documents auth-table [--write] [--doc docs/auth.md]``: print the credentials table, or
    put it in the doc."""
    parser = argparse.ArgumentParser(prog="python -m zsynth.documents")
    sub = parser.add_subparsers(dest="document", required=True)
    auth = sub.add_parser("auth-table", help="the credentials table of docs/auth.md, from the route declarations")
    auth.add_argument("--write", action="store_true", help="rewrite the table in the doc instead of printing it")
    auth.add_argument("--doc", type=Path, default=Path("docs/auth.md"), help="the doc (default: docs/auth.md)")
    args = parser.parse_args(argv)
    table = credentials_table()
    if not args.write:
        print(table)
        return 0
    text = args.doc.read_text(encoding="utf-8")
    try:
        updated = with_credentials_table(text, table)
    except ValueError as err:
        print(f"{args.doc}: {err}", file=sys.stderr)
        return 1
    if updated != text:
        args.doc.write_text(updated, encoding="utf-8")
    print(f"{args.doc}: {'updated' if updated != text else 'already up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
