"""Pronunciation dictionaries: create (from rules or a PLS file), list, read, rename or archive, change rules, download.

Also the request fields every synthesis route shares for text: ``apply_text_normalization`` and
``pronunciation_dictionary_locators`` (:data:`TEXT_FIELDS`).
"""

from __future__ import annotations

from typing import Any, Final

from .components import (
    JSON,
    PathItems,
    Schema,
    json_body,
    nullable,
    operation,
    path_param,
    query_param,
    ref,
    responses,
)

BASE: Final = "/v1/pronunciation-dictionaries"

#: The text fields of every synthesis request body (ElevenLabs' names).
TEXT_FIELDS: Final[dict[str, Schema]] = {
    "apply_text_normalization": nullable(
        {
            "enum": ["auto", "on", "off"],
            "default": "auto",
            "description": "Spell out numbers, money, times, dates, units and abbreviations (English) before "
            "speaking: on, off, or auto (the engines that need it: Chatterbox-Turbo).",
        }
    ),
    "pronunciation_dictionary_locators": nullable(
        {
            "type": "array",
            "maxItems": 3,
            "description": "Dictionaries whose rules apply, in order; each must exist (404 otherwise).",
            "items": ref("PronunciationDictionaryLocator"),
        }
    ),
}

_RULE_FLAGS: Final[dict[str, Schema]] = {
    "case_sensitive": nullable({"type": "boolean", "default": True}),
    "word_boundaries": nullable({"type": "boolean", "default": True}),
}
_STRING: Final[Schema] = {"type": "string", "pattern": "\\S", "maxLength": 200}

SCHEMAS: Final[dict[str, Schema]] = {
    "PronunciationDictionaryLocator": {
        "type": "object",
        "required": ["pronunciation_dictionary_id"],
        "properties": {
            "pronunciation_dictionary_id": {"type": "string"},
            "version_id": nullable({"type": "string", "description": "None: the latest version."}),
        },
    },
    "PronunciationRule": {
        "oneOf": [
            {
                "type": "object",
                "required": ["type", "string_to_replace", "alias"],
                "properties": {
                    "type": {"const": "alias"},
                    "string_to_replace": _STRING,
                    "alias": _STRING,
                    **_RULE_FLAGS,
                },
            },
            {
                "type": "object",
                "required": ["type", "string_to_replace", "phoneme", "alphabet"],
                "properties": {
                    "type": {"const": "phoneme"},
                    "string_to_replace": _STRING,
                    "phoneme": _STRING,
                    "alphabet": {"enum": ["ipa", "cmu-arpabet"]},
                    **_RULE_FLAGS,
                },
            },
        ]
    },
    "AddFromRulesRequest": {
        "type": "object",
        "required": ["name", "rules"],
        "properties": {
            "name": {"type": "string", "pattern": "\\S", "maxLength": 200},
            "rules": {"type": "array", "items": ref("PronunciationRule")},
            "description": nullable({"type": "string", "maxLength": 4000}),
            "workspace_access": nullable(
                {"enum": ["admin", "editor", "commenter", "viewer"], "description": "Checked and ignored."}
            ),
        },
    },
    "AddFromFileRequest": {
        "type": "object",
        "required": ["name", "file"],
        "properties": {
            "name": {"type": "string", "pattern": "\\S", "maxLength": 200},
            "file": {"type": "string", "contentMediaType": "application/pls+xml", "description": "A PLS lexicon."},
            "description": {"type": "string", "maxLength": 4000},
            "workspace_access": {
                "enum": ["admin", "editor", "commenter", "viewer"],
                "description": "Checked and ignored.",
            },
        },
    },
    "DictionaryCreated": {
        "type": "object",
        "required": ["id", "name", "created_by", "creation_time_unix", "version_id", "version_rules_num"],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "created_by": {"type": "string"},
            "creation_time_unix": {"type": "integer"},
            "version_id": {"type": "string"},
            "version_rules_num": {"type": "integer"},
            "description": nullable({"type": "string"}),
            "permission_on_resource": {"type": "string"},
        },
    },
    "DictionaryMetadata": {
        "type": "object",
        "required": [
            "id",
            "latest_version_id",
            "latest_version_rules_num",
            "name",
            "created_by",
            "creation_time_unix",
        ],
        "properties": {
            "id": {"type": "string"},
            "latest_version_id": {"type": "string"},
            "latest_version_rules_num": {"type": "integer"},
            "name": {"type": "string"},
            "permission_on_resource": {"type": "string"},
            "created_by": {"type": "string"},
            "creation_time_unix": {"type": "integer"},
            "archived_time_unix": nullable({"type": "integer"}),
            "description": nullable({"type": "string"}),
        },
    },
    "DictionaryWithRules": {
        "allOf": [
            ref("DictionaryMetadata"),
            {
                "type": "object",
                "required": ["rules"],
                "properties": {"rules": {"type": "array", "items": ref("PronunciationRule")}},
            },
        ]
    },
    "DictionaryPage": {
        "type": "object",
        "required": ["pronunciation_dictionaries", "has_more"],
        "properties": {
            "pronunciation_dictionaries": {"type": "array", "items": ref("DictionaryMetadata")},
            "next_cursor": nullable({"type": "string"}),
            "has_more": {"type": "boolean"},
        },
    },
    "DictionaryVersion": {
        "type": "object",
        "required": ["id", "version_id", "version_rules_num"],
        "properties": {
            "id": {"type": "string"},
            "version_id": {"type": "string"},
            "version_rules_num": {"type": "integer"},
        },
    },
    "RulesRequest": {
        "type": "object",
        "required": ["rules"],
        "properties": {"rules": {"type": "array", "items": ref("PronunciationRule")}},
    },
    "RemoveRulesRequest": {
        "type": "object",
        "required": ["rule_strings"],
        "properties": {"rule_strings": {"type": "array", "items": {"type": "string"}}},
    },
    "DictionaryUpdate": {
        "type": "object",
        "properties": {
            "name": nullable({"type": "string", "pattern": "\\S", "maxLength": 200}),
            "archived": nullable({"type": "boolean"}),
        },
    },
}

_ID: Final = path_param("dictionary_id", "The dictionary's id.")
TAG: Final = "pronunciation dictionaries"


def _json(schema: str) -> Schema:
    return {"required": True, "content": {JSON: {"schema": ref(schema)}}}


def _rules_op(op_id: str, summary: str, body: str) -> dict[str, Any]:
    ok = json_body("The new version.", ref("DictionaryVersion"))
    return {
        "post": operation(op_id, TAG, summary, responses({200: ok}, 400, 404, 422), parameters=[_ID], body=_json(body))
    }


def paths() -> PathItems:
    """The dictionary routes (full keys only: tokens get 401 insufficient_scope)."""
    created = json_body("The new dictionary and its first version.", ref("DictionaryCreated"))
    with_rules = json_body("The dictionary and its latest rules.", ref("DictionaryWithRules"))
    pls = {
        "description": "The version as a PLS lexicon.",
        "content": {"application/pls+xml": {"schema": {"type": "string"}}},
    }
    file_body = {"required": True, "content": {"multipart/form-data": {"schema": ref("AddFromFileRequest")}}}
    listing = [
        query_param("cursor", {"type": "string"}, "The next_cursor of the previous page."),
        query_param("page_size", {"type": "integer", "minimum": 1, "maximum": 100, "default": 30}, "Page size."),
        query_param("sort", {"enum": ["creation_time_unix", "name"]}, "Sort key (default creation time)."),
        query_param("sort_direction", {"enum": ["ASCENDING", "DESCENDING"]}, "Default DESCENDING."),
        query_param("include_archived", {"type": "boolean"}, "List archived dictionaries too."),
    ]
    return {
        f"{BASE}/add-from-file": {
            "post": operation(
                "add_dictionary_from_file",
                TAG,
                "A new dictionary from a PLS lexicon.",
                responses({200: created}, 400, 413, 422),
                body=file_body,
            )
        },
        f"{BASE}/add-from-rules": {
            "post": operation(
                "add_dictionary_from_rules",
                TAG,
                "A new dictionary from a list of rules.",
                responses({200: created}, 400, 413, 422),
                body=_json("AddFromRulesRequest"),
            )
        },
        BASE: {
            "get": operation(
                "list_dictionaries",
                TAG,
                "Dictionaries, paged.",
                responses({200: json_body("One page.", ref("DictionaryPage"))}, 422),
                parameters=listing,
            )
        },
        BASE + "/{dictionary_id}": {
            "get": operation(
                "get_dictionary",
                TAG,
                "A dictionary with its latest rules.",
                responses({200: with_rules}, 404),
                parameters=[_ID],
            ),
            "patch": operation(
                "update_dictionary",
                TAG,
                "Rename or archive a dictionary (no new version).",
                responses({200: with_rules}, 400, 404, 422),
                parameters=[_ID],
                body=_json("DictionaryUpdate"),
            ),
        },
        BASE + "/{dictionary_id}/add-rules": _rules_op(
            "add_dictionary_rules", "A new version with these rules added (same string: replaced).", "RulesRequest"
        ),
        BASE + "/{dictionary_id}/set-rules": _rules_op(
            "set_dictionary_rules", "A new version holding exactly these rules.", "RulesRequest"
        ),
        BASE + "/{dictionary_id}/remove-rules": _rules_op(
            "remove_dictionary_rules", "A new version without the rules for these strings.", "RemoveRulesRequest"
        ),
        BASE + "/{dictionary_id}/{version_id}/download": {
            "get": operation(
                "download_dictionary_version",
                TAG,
                "One version as a PLS lexicon.",
                responses({200: pls}, 404),
                parameters=[_ID, path_param("version_id", "The version's id.")],
            )
        },
    }
