"""The operator tools: ``zsynth keys create|list|revoke`` and ``scripts/mint-token``, run as real processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid

import pytest

from harness.base import ROOT, make_settings
from zsynth.speech.app import create_app

pytestmark = pytest.mark.heavy


def zsynth_keys(*args: str, table: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ZSYNTH_API_KEYS_TABLE=table)
    return subprocess.run(
        [sys.executable, "-m", "zsynth", "keys", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )


async def mint_token(base_url: str, key: str | None, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ZSYNTH_API_KEY"}
    if key is not None:
        env["ZSYNTH_API_KEY"] = key
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "scripts" / "mint-token"),
        *args,
        base_url,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_keys_command_lifecycle(aiohttp_client, aws_endpoint, redis_url, data_dir, shared_workers):
    table = f"zsynth-cli-{uuid.uuid4().hex[:8]}"
    missing = await asyncio.to_thread(zsynth_keys, "list", table=table)
    assert missing.returncode == 1 and "does not exist" in missing.stderr

    created = await asyncio.to_thread(zsynth_keys, "create", "--name", "backend", table=table)
    assert created.returncode == 0, created.stderr
    assert f"created table {table}" in created.stderr
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in created.stdout.splitlines())}
    key, key_id = fields["key"], fields["id"]
    assert key.startswith("zsk_live_")

    listed = await asyncio.to_thread(zsynth_keys, "list", table=table)
    assert listed.returncode == 0 and key_id in listed.stdout and "backend" in listed.stdout
    assert key not in listed.stdout

    settings = make_settings(redis_url, data_dir, auth_keys_table=table, auth_cache_ttl_s=0.0)
    client = await aiohttp_client(create_app(settings))
    base = str(client.make_url("")).rstrip("/")
    code, out, err = await mint_token(base, key, "--ttl", "45")
    assert code == 0, err
    assert '"scope": "tts"' in out and "zsk_temp_" in out

    revoked = await asyncio.to_thread(zsynth_keys, "revoke", key_id, table=table)
    assert revoked.returncode == 0, revoked.stderr
    assert "2 record(s)" in revoked.stdout  # the key and the token it minted
    again = await asyncio.to_thread(zsynth_keys, "revoke", key_id, table=table)
    assert again.returncode == 1
    listed = await asyncio.to_thread(zsynth_keys, "list", "--all", table=table)
    assert "ephemeral" in listed.stdout

    # With the cache set to 0 s the revocation is seen at once.
    code, out, err = await mint_token(base, key)
    assert code == 1 and "HTTP 401" in err and "invalid_api_key" in err and out == ""


def test_keys_command_needs_a_table():
    env = {k: v for k, v in os.environ.items() if k != "ZSYNTH_API_KEYS_TABLE"}
    proc = subprocess.run(
        [sys.executable, "-m", "zsynth", "keys", "list"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "ZSYNTH_API_KEYS_TABLE" in proc.stderr


async def test_mint_token_script_failures(aiohttp_client, redis_url, data_dir, shared_workers):
    client = await aiohttp_client(create_app(make_settings(redis_url, data_dir, auth_api_key="only-static")))
    base = str(client.make_url("")).rstrip("/")
    code, _, err = await mint_token(base, None)
    assert code == 2 and "ZSYNTH_API_KEY" in err
    code, _, err = await mint_token(base, "only-static")
    assert code == 1 and "HTTP 501" in err and "not_supported" in err
    code, _, err = await mint_token(base, "wrong")
    assert code == 1 and "invalid_api_key" in err


async def test_keys_are_made_in_a_workspace_and_listed_with_it(aiohttp_client, aws_endpoint, redis_url, data_dir):
    table = f"zsynth-cli-{uuid.uuid4().hex[:8]}"
    bad = await asyncio.to_thread(zsynth_keys, "create", "--workspace", "Team_A", table=table)
    assert bad.returncode == 2 and "not a workspace name" in bad.stderr and "lowercase letters" in bad.stderr
    assert "key:" not in bad.stdout
    plain = await asyncio.to_thread(zsynth_keys, "create", "--name", "house", table=table)
    made = await asyncio.to_thread(zsynth_keys, "create", "--name", "agency", "--workspace", "team-a", table=table)
    assert plain.returncode == made.returncode == 0, (plain.stderr, made.stderr)
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in made.stdout.splitlines())}
    assert fields["workspace"] == "team-a"
    listed = await asyncio.to_thread(zsynth_keys, "list", table=table)
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert "WORKSPACE" in listed.stdout.splitlines()[0]
    assert rows[fields["id"]][2] == "team-a"
    assert [r[2] for k, r in rows.items() if k != fields["id"]] == ["default"]

    # The key acts in its workspace: a front that reads the table sees its token's workspace in the record too.
    settings = make_settings(redis_url, data_dir, auth_keys_table=table)
    client = await aiohttp_client(create_app(settings))
    minted = await client.post("/v1/tokens/ephemeral", json={}, headers={"xi-api-key": fields["key"]})
    assert minted.status == 200, await minted.text()
    listed = await asyncio.to_thread(zsynth_keys, "list", "--all", table=table)
    tokens = [line.split() for line in listed.stdout.splitlines()[1:] if "ephemeral" in line]
    assert len(tokens) == 1 and tokens[0][2] == "team-a"
