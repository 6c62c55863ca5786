"""Hostile upload bodies for the edge tests and harness/bench/edge_uploads.py: multipart floods and lexicon bombs."""

from __future__ import annotations

import aiohttp

PLS_NS = "http://www.w3.org/2005/01/pronunciation-lexicon"


def empty_parts(count: int, boundary: str = "x") -> bytes:
    """A multipart body of ``count`` parts with no headers and no data (9 bytes each with a one-letter boundary)."""
    return f"--{boundary}\r\n\r\n\r\n".encode() * count + f"--{boundary}--\r\n".encode()


def inflating_pls(pad: int = 900_000) -> bytes:
    """A PLS lexicon under 1 MB whose DTD expands one grapheme to 80 MB.

    expat limits entity amplification only once the output passes 8 MiB, and then to 100 times the input: the
    padding comment keeps this one at about 89 times.
    """
    entities = ['<!ENTITY a0 "' + "x" * 1000 + '">']
    entities += [f'<!ENTITY a{i} "' + f"&a{i - 1};" * 10 + '">' for i in range(1, 5)]
    entities.append('<!ENTITY a5 "' + "&a4;" * 8 + '">')
    return (
        '<?xml version="1.0"?><!DOCTYPE lexicon [' + "".join(entities) + "]>"
        f'<lexicon xmlns="{PLS_NS}" alphabet="ipa"><!-- {"p" * pad} -->'
        "<lexeme><grapheme>&a5;</grapheme><alias>x</alias></lexeme></lexicon>"
    ).encode()


def lexicon(*lexemes: str, doctype: str = "") -> bytes:
    """A PLS lexicon of the given ``<lexeme>`` bodies."""
    body = "".join(f"<lexeme>{lexeme}</lexeme>" for lexeme in lexemes)
    return f'<?xml version="1.0"?>{doctype}<lexicon xmlns="{PLS_NS}" alphabet="ipa">{body}</lexicon>'.encode()


def lexicon_form(name: str, pls: bytes) -> aiohttp.FormData:
    """The multipart form of ``add-from-file``."""
    form = aiohttp.FormData()
    form.add_field("name", name)
    form.add_field("file", pls, filename="l.pls", content_type="application/pls+xml")
    return form
