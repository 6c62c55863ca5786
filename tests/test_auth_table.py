"""A7: the credentials table of docs/auth.md is generated from the route declarations and the access check, so it
cannot drift from them: the audit found ``zsk_temp_`` tokens passing on the dialogue routes, ``/v1/vapi/tts`` and the
pickers, and single-use tokens on the dialogue sockets, none of which the hand-written table named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.base import make_settings
from zsynth.avatar.app import create_avatar_app
from zsynth.avatar.routes import TABLES as AVATAR_TABLES
from zsynth.documents import credentials_table, main, with_credentials_table
from zsynth.kit.endpoints import Access
from zsynth.speech.app import create_app
from zsynth.speech.routes import TABLES as SPEECH_TABLES

DOC = Path(__file__).resolve().parent.parent / "docs" / "auth.md"
KEY = "auth-table-key"


def rows() -> dict[str, list[str]]:
    """The generated table as {first words of the credential: [its speech cell, its avatar cell]}."""
    found = {}
    for line in credentials_table().splitlines()[2:]:
        label, speech, avatar = (cell.strip() for cell in line.strip("|").split(" | "))
        found[" ".join(label.split()[:2])] = [speech, avatar]
    return found


def routes_in(cell: str) -> set[str]:
    return set(re.findall(r"`([A-Z]+ /[^`]*)`", cell))


@pytest.mark.unit
def test_the_doc_holds_the_table_the_declarations_make():
    text = DOC.read_text(encoding="utf-8")
    assert with_credentials_table(text, credentials_table()) == text, (
        "docs/auth.md's credentials table differs from the route declarations: run "
        "`python -m zsynth.documents auth-table --write`"
    )


@pytest.mark.unit
def test_the_table_names_the_routes_the_audit_found_unlisted():
    table = rows()
    assert {"GET /v1/audio/voices", "GET /v1/audio/models"} <= routes_in(table["none"][0])
    assert table["full key"] == ["every route", "every route"]
    ephemeral = routes_in(table["ephemeral token"][0])
    assert {"POST /v1/vapi/tts", "POST /v1/text-to-dialogue", "POST /v1/text-to-dialogue/stream/with-timestamps"} <= (
        ephemeral
    )
    assert "WebSocket `/v1/text-to-dialogue/stream-input`" in table["ephemeral token"][0]
    assert not ephemeral & {"POST /v1/tokens/ephemeral", "GET /metrics", "POST /voices", "GET /v1/models"}
    assert table["ephemeral token"][1] == "none"
    single_use = table["single-use token"][0].split("<br>")
    assert "WebSocket `/v1/text-to-dialogue/multi-stream-input`" in single_use and len(single_use) == 4
    assert table["avatar session"] == ["none", "`POST /connect`<br>WebSocket `/control/{session_id}`"]


@pytest.mark.unit
def test_the_command_rewrites_a_stale_table(tmp_path, capsys):
    doc = tmp_path / "auth.md"
    doc.write_text(with_credentials_table(DOC.read_text(encoding="utf-8"), "| stale | table |"), encoding="utf-8")
    assert main(["auth-table", "--write", "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")
    assert main(["auth-table", "--write", "--doc", str(doc)]) == 0
    assert "already up to date" in capsys.readouterr().out
    doc.write_text("no markers here", encoding="utf-8")
    assert main(["auth-table", "--write", "--doc", str(doc)]) == 1


async def call(client, method: str, path: str, token: str):
    return await client.request(method, re.sub(r"\{[^}]+\}", "x", path), json={}, headers={"X-Api-Key": token})


@pytest.mark.stack
async def test_each_token_reaches_exactly_the_http_routes_its_row_names(
    aiohttp_client, redis_url, data_dir, keys_table
):
    """What the table says is what the servers do: a token gets past auth on every HTTP route its row names and 401
    ``insufficient_scope`` on every other route that needs a credential."""
    settings = make_settings(redis_url, data_dir, auth_api_key=KEY, auth_keys_table=keys_table)
    speech = await aiohttp_client(create_app(settings))
    avatar = await aiohttp_client(create_avatar_app(settings))
    resp = await speech.post("/v1/tokens/ephemeral", json={}, headers={"xi-api-key": KEY})
    speech_token = (await resp.json())["token"]
    resp = await avatar.post("/v1/streaming.create_token", json={}, headers={"X-Api-Key": KEY})
    avatar_token = (await resp.json())["data"]["token"]
    table = rows()
    checked: list[set[str]] = [set(), set()]  # per server
    for label, token in (("ephemeral token", speech_token), ("avatar session", avatar_token)):
        for column, (client, document) in enumerate(((speech, "/openapi.json"), (avatar, "/openapi.json"))):
            reached = routes_in(table[label][column])
            paths = (await (await client.get(document)).json())["paths"]
            for path, operations in paths.items():
                for method in operations:
                    route = f"{method.upper()} {path}"
                    if route in routes_in(table["none"][column]):
                        continue
                    resp = await call(client, method.upper(), path, token)
                    body = await resp.text()
                    if route in reached:
                        assert resp.status != 401, (label, route, body)
                    else:
                        assert resp.status == 401 and "insufficient_scope" in body, (label, route, body)
                    checked[column].add(route)
    # Every declared HTTP route that needs a credential was tried (the OpenAPI documents hold them all).
    for column, tables in enumerate((SPEECH_TABLES, AVATAR_TABLES)):
        declared = {
            f"{e.method} {e.path}" for t in tables for e in t if not e.websocket and e.access is not Access.PUBLIC
        }
        assert checked[column] == declared
