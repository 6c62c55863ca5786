"""The text options of a realtime socket: ``apply_text_normalization`` and pronunciation dictionaries.

``apply_text_normalization`` is a query parameter of both sockets (as upstream); it may also be given in the first
message. ``pronunciation_dictionary_locators`` is read from the first message only (on multi-stream-input, from the
first message of each context, else the socket's first message). A dictionary that does not exist ends the socket
with ``pronunciation_dictionary_not_found`` before anything is spoken.
"""

from __future__ import annotations

from typing import Any

from zsynth.core.text.bounds import UNBOUNDED
from zsynth.core.text.prepare import TextOptionError, TextOptions, parse_options, prepare
from zsynth.services.auth import workspace_of
from zsynth.services.dictionaries import StorageUnavailable
from zsynth.services.keys import DICTIONARIES, SETTINGS
from zsynth.services.synthesis import classify
from zsynth.speech.ws.connection import Connection, StreamParams, WsError


async def socket_text_options(conn: Connection, params: StreamParams, message: dict[str, Any]) -> TextOptions:
    """The options of a first message (and the socket's query), with every named dictionary checked."""
    request = conn.request
    try:
        options = parse_options(message, params.normalization)
        workspace = workspace_of(conn.credential)  # another workspace's dictionary: as unknown as a made-up one
        await prepare(
            "",
            options,
            request.app[SETTINGS].engine,
            request.app.get(DICTIONARIES),
            workspace=workspace,
            limits=UNBOUNDED,
        )
    except (TextOptionError, StorageUnavailable) as err:
        failure = classify(err)
        raise WsError(failure.realtime_code, failure.message) from err
    return options
