"""Workspaces: whose cloned voices and pronunciation dictionaries a caller sees. The one rule, for every transport.

Every full key belongs to one workspace (``zsynth keys create --workspace NAME``; static keys, keys made without a
workspace and an open server are in :data:`DEFAULT`), and every token acts in its minting key's. A clone or a
dictionary belongs to the workspace that made it: its metadata (``meta.json``, on disk and in the bucket) names it
under :data:`FIELD`. What was stored before workspaces existed names none and belongs to :data:`DEFAULT`.

Another workspace's clone or dictionary is, to a caller, exactly an id that never existed (:func:`visible`): not
listed, 404 on every route, and refused by synthesis as an unknown id is. Built-in voices and the swap-out voice have
no owner: every workspace shares them. This module is the kernel's, so the voice library, the dictionary store and
the text stage apply the same rule as the services and the routes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

#: The workspace of static keys, keys made without one, an open server, and everything stored before workspaces.
DEFAULT: Final = "default"
#: The metadata field that names a clone's or a dictionary's workspace.
FIELD: Final = "workspace"
MAX_NAME_CHARS: Final = 64
_NAME_RE: Final = re.compile(r"[a-z0-9-]{1,64}")


def check_name(name: str) -> str:
    """``name`` when it is a workspace name (lowercase letters, digits and ``-``, 1 to 64); ValueError otherwise."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"{name!r} is not a workspace name: use 1 to {MAX_NAME_CHARS} lowercase letters, digits and '-'"
        )
    return name


def owner_of(meta: Mapping[str, Any]) -> str:
    """The workspace a clone's or dictionary's metadata names; :data:`DEFAULT` for one stored before workspaces
    (and for a value that is not a workspace name: nobody else can claim it)."""
    value = meta.get(FIELD)
    if isinstance(value, str) and _NAME_RE.fullmatch(value) is not None:
        return value
    return DEFAULT


def visible(meta: Mapping[str, Any], workspace: str) -> bool:
    """Whether a caller acting in ``workspace`` may see (list, read, use, change) what ``meta`` describes."""
    return owner_of(meta) == workspace


def queue_owner(workspace: str) -> str:
    """The queue owner (fair shares) of callers that carry no key of their own, such as Wyoming's connections: one
    share per workspace."""
    return f"workspace:{workspace}"
