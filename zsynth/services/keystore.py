"""The portal keys table: full keys and ephemeral tokens in DynamoDB, reached with aioboto3.

Only a SHA-256 hash of each secret is stored (the partition key ``key_hash``), never the secret itself, with the
record's kind, scope, creation time and expiry. The endpoint, region and credentials come from the standard AWS
variables (``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``, ``AWS_ACCESS_KEY_ID``, ...), so a DynamoDB-compatible server
on loopback works unchanged. Secrets carry at least 128 random bits, so a fast hash is enough: nobody can guess a
preimage, and a slow hash would cost milliseconds per cold look-up.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from zsynth.core.aws import client_config
from zsynth.core.optional import botocore_error, client_error, load

if TYPE_CHECKING:
    from botocore.config import Config

logger = logging.getLogger(__name__)

HASH_ATTR: Final = "key_hash"
# DynamoDB's own TTL sweeper may remove expired tokens eventually (up to days later); the server never relies on it.
TTL_ATTR: Final = "expires_at"


class KeyStoreError(Exception):
    """The keys table could not be reached or answered with an error."""


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One row of the keys table (a full key or an ephemeral token), without its secret."""

    key_id: str  # a short public id derived from the hash; shown by `zsynth keys list`, used to revoke
    kind: str  # "full" or "ephemeral"
    scope: str  # "all" or "tts"
    created_at: int
    expires_at: int | None = None
    revoked_at: int | None = None
    name: str = ""
    parent: str | None = None  # key id of the full key that minted a token
    parent_hash: str | None = None  # its table hash: a token is refused once that row is revoked

    def to_item(self, key_hash: str) -> dict[str, dict[str, Any]]:
        """The DynamoDB item for this record."""
        item: dict[str, dict[str, Any]] = {
            HASH_ATTR: {"S": key_hash},
            "key_id": {"S": self.key_id},
            "kind": {"S": self.kind},
            "scope": {"S": self.scope},
            "created_at": {"N": str(self.created_at)},
        }
        if self.expires_at is not None:
            item[TTL_ATTR] = {"N": str(self.expires_at)}
        if self.revoked_at is not None:
            item["revoked_at"] = {"N": str(self.revoked_at)}
        if self.name:
            item["name"] = {"S": self.name}
        if self.parent:
            item["parent"] = {"S": self.parent}
        if self.parent_hash:
            item["parent_hash"] = {"S": self.parent_hash}
        return item

    @classmethod
    def from_item(cls, item: dict[str, dict[str, Any]]) -> KeyRecord:
        """Parse a DynamoDB item; raises KeyError/ValueError on a malformed one."""

        def num(name: str) -> int | None:
            return int(item[name]["N"]) if name in item else None

        return cls(
            key_id=item["key_id"]["S"],
            kind=item["kind"]["S"],
            scope=item["scope"]["S"],
            created_at=int(item["created_at"]["N"]),
            expires_at=num(TTL_ATTR),
            revoked_at=num("revoked_at"),
            name=item.get("name", {}).get("S", ""),
            parent=item.get("parent", {}).get("S"),
            parent_hash=item.get("parent_hash", {}).get("S"),
        )


class KeyStore:
    """Reads and writes the keys table through one long-lived aioboto3 client."""

    def __init__(self, table: str, session: Any = None, config: Config | None = None) -> None:
        self.table = table
        self._session = session or load("aioboto3", f"the keys table {table}").Session()
        self.config = config or client_config()  # timeouts and retries: zsynth/core/aws.py
        self._stack = AsyncExitStack()
        self._client: Any = None

    async def open(self) -> None:
        """Open the client (endpoint and credentials from the standard AWS variables)."""
        if self._client is None:
            self._client = await self._stack.enter_async_context(self._session.client("dynamodb", config=self.config))

    async def close(self) -> None:
        """Close the client."""
        self._client = None
        await self._stack.aclose()

    @property
    def client(self) -> Any:
        """The open DynamoDB client."""
        if self._client is None:
            raise KeyStoreError("the keys table client is not open")
        return self._client

    async def exists(self) -> bool:
        """Whether the table exists."""
        try:
            await self.client.describe_table(TableName=self.table)
        except client_error() as err:
            if err.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return False
            raise KeyStoreError(f"describe_table {self.table}: {err}") from err
        except botocore_error() as err:
            raise KeyStoreError(f"describe_table {self.table}: {err}") from err
        return True

    async def ensure_table(self) -> bool:
        """Create the table (on-demand billing, TTL on ``expires_at``) unless it exists; True when created."""
        if await self.exists():
            return False
        try:
            await self.client.create_table(
                TableName=self.table,
                KeySchema=[{"AttributeName": HASH_ATTR, "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": HASH_ATTR, "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            for _ in range(120):
                desc = await self.client.describe_table(TableName=self.table)
                if desc["Table"]["TableStatus"] == "ACTIVE":
                    break
                await asyncio.sleep(0.5)
            await self.client.update_time_to_live(
                TableName=self.table, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTR}
            )
        except (client_error(), botocore_error()) as err:
            raise KeyStoreError(f"create_table {self.table}: {err}") from err
        logger.info("created keys table %s", self.table)
        return True

    async def get(self, key_hash: str) -> KeyRecord | None:
        """The record stored under ``key_hash``, or None."""
        # Strongly consistent: a token minted on another front a moment ago must be found.
        key = {HASH_ATTR: {"S": key_hash}}
        try:
            resp = await self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True)
        except (client_error(), botocore_error()) as err:
            raise KeyStoreError(f"get_item {self.table}: {err}") from err
        item = resp.get("Item")
        if item is None:
            return None
        try:
            return KeyRecord.from_item(item)
        except (KeyError, ValueError) as err:
            logger.warning("keys table %s: malformed record %s", self.table, item.get("key_id", {}).get("S", "?"))
            raise KeyStoreError("malformed record in the keys table") from err

    async def put(self, key_hash: str, record: KeyRecord) -> None:
        """Store a new record; never overwrites an existing one."""
        try:
            await self.client.put_item(
                TableName=self.table,
                Item=record.to_item(key_hash),
                ConditionExpression="attribute_not_exists(#h)",
                ExpressionAttributeNames={"#h": HASH_ATTR},
            )
        except (client_error(), botocore_error()) as err:
            raise KeyStoreError(f"put_item {self.table}: {err}") from err

    async def scan(self) -> list[tuple[str, KeyRecord]]:
        """Every (hash, record) in the table; for the admin command, not the request path."""
        rows: list[tuple[str, KeyRecord]] = []
        kwargs: dict[str, Any] = {"TableName": self.table}
        try:
            while True:
                resp = await self.client.scan(**kwargs)
                for item in resp.get("Items", []):
                    rows.append((item[HASH_ATTR]["S"], KeyRecord.from_item(item)))
                if "LastEvaluatedKey" not in resp:
                    return rows
                kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        except (client_error(), botocore_error()) as err:
            raise KeyStoreError(f"scan {self.table}: {err}") from err

    async def revoke(self, key_id: str, now: int) -> int:
        """Mark the full key ``key_id`` and every token it minted as revoked; returns how many rows changed."""
        changed = 0
        for key_hash, record in await self.scan():
            if record.revoked_at is not None or key_id not in (record.key_id, record.parent):
                continue
            try:
                await self.client.update_item(
                    TableName=self.table,
                    Key={HASH_ATTR: {"S": key_hash}},
                    UpdateExpression="SET revoked_at = :now",
                    ExpressionAttributeValues={":now": {"N": str(now)}},
                )
            except (client_error(), botocore_error()) as err:
                raise KeyStoreError(f"update_item {self.table}: {err}") from err
            changed += 1
        return changed
