"""Multipart bodies read within bounds: one reader for every multipart route.

Voice cloning and editing, PLS lexicons and the demo's clone proxy all read their uploads through
:class:`BoundedMultipart`. aiohttp's ``client_max_size`` does not apply to ``request.multipart()``, and its parser
spends about 0.1 ms of event loop on each part, however small. So here:

* every byte of the body counts against the route's limit, boundaries, part headers and empty parts included (what
  arrived on the request's stream, not only the parts' data): 413 ``request_too_large``;
* a body with more than ``ZSYNTH_MAX_MULTIPART_PARTS`` parts is refused when the next part begins: 413
  ``too_many_parts``;
* the event loop gets a turn every :data:`YIELD_EVERY` parts, so other requests are answered meanwhile;
* a part aiohttp cannot read (a bad header, a nested multipart) is 400 ``invalid_multipart``.
"""

from __future__ import annotations

import asyncio
from typing import Final

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from zsynth.core.codes import ApiCode
from zsynth.kit.errors import ApiError

#: Parts parsed between two turns given to the event loop.
YIELD_EVERY: Final = 4
CHUNK_BYTES: Final = 32 * 1024


class BoundedMultipart:
    """One request's multipart body, read part by part within a byte limit and a part cap."""

    def __init__(self, request: web.Request, *, max_bytes: int, max_parts: int) -> None:
        self.request = request
        self.max_bytes = max_bytes
        self.max_parts = max_parts
        self.parts_read = 0
        self._reader: MultipartReader | None = None

    def too_large(self) -> ApiError:
        """The refusal of a body over the limit."""
        return ApiError(
            413, ApiCode.REQUEST_TOO_LARGE, f"The request body is larger than the limit of {self.max_bytes} bytes."
        )

    def check_size(self) -> None:
        """Refuse the body once more bytes of it arrived than the limit allows (whatever they were)."""
        # total_bytes counts the body as it arrives, before the multipart parser sees it: boundaries, headers and
        # the bytes of parts nobody read all count. It runs ahead of what was parsed by at most the stream's buffer.
        if self.request.content.total_bytes > self.max_bytes:
            raise self.too_large()

    async def next(self) -> BodyPartReader | None:
        """The next part (None after the last); too many bytes or parts, or a part that cannot be read, is a 4xx."""
        try:
            if self._reader is None:
                if self.request.content_length is not None and self.request.content_length > self.max_bytes:
                    raise self.too_large()
                self._reader = await self.request.multipart()
            part = await self._reader.next()
        except (ValueError, HttpProcessingError) as err:
            raise _unreadable(err) from err
        if part is None:
            return None
        self.parts_read += 1
        self.check_size()
        if self.parts_read > self.max_parts:
            raise ApiError(413, ApiCode.TOO_MANY_PARTS, f"A multipart body may hold at most {self.max_parts} parts.")
        if self.parts_read % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        if not isinstance(part, BodyPartReader):
            raise ApiError(400, ApiCode.INVALID_MULTIPART, "A part may not itself be a multipart body.")
        return part

    async def read(self, part: BodyPartReader, limit: int, too_large: ApiError) -> bytes:
        """A part's data (``too_large`` past ``limit`` bytes), counted against the body's limit as it arrives."""
        data = bytearray()
        try:
            while chunk := await part.read_chunk(CHUNK_BYTES):
                data.extend(chunk)
                if len(data) > limit:
                    raise too_large
                self.check_size()
        except (ValueError, HttpProcessingError) as err:
            raise _unreadable(err) from err
        return bytes(data)


def _unreadable(err: ValueError | HttpProcessingError) -> ApiError:
    # A part header aiohttp rejects (a control character in a field name) raises InvalidHeader, an
    # HttpProcessingError: a bad request, not a server error.
    message = getattr(err, "message", None) or str(err)
    return ApiError(400, ApiCode.INVALID_MULTIPART, f"The multipart body could not be read: {message}")
