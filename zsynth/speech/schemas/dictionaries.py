"""The pronunciation dictionary routes' shapes: the rules, the response models and the multipart schema of the PLS
upload (``zsynth.speech.routes.dictionaries`` declares the routes and their request models).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import BaseModel, Field, RootModel

from zsynth.services.dictionaries import MAX_STRING_CHARS, Rule
from zsynth.speech.schemas.apidoc import optional

#: A dictionary's name is 1 to this many characters.
MAX_NAME_CHARS: Final = 200
#: The values ``workspace_access`` may take (checked and ignored: a dictionary belongs to whoever holds a full key).
WORKSPACE_ACCESS: Final = ("admin", "editor", "commenter", "viewer")


RuleText = Annotated[str, Field(pattern=r"\S", max_length=MAX_STRING_CHARS)]


class AliasRule(BaseModel):
    """Replace a string with another before speaking."""

    type: Literal["alias"]
    string_to_replace: RuleText
    alias: RuleText
    case_sensitive: bool | None = True
    word_boundaries: bool | None = True


class PhonemeRule(BaseModel):
    """Speak a string with the given phonemes."""

    type: Literal["phoneme"]
    string_to_replace: RuleText
    phoneme: RuleText
    alphabet: Literal["ipa", "cmu-arpabet"]
    case_sensitive: bool | None = True
    word_boundaries: bool | None = True


class PronunciationRule(RootModel[Annotated[AliasRule | PhonemeRule, Field(discriminator="type")]]):
    """One rule of a dictionary."""

    def to_rule(self) -> Rule:
        """The rule as the store keeps it."""
        return Rule(**self.root.model_dump())


class DictionaryCreated(BaseModel):
    """A new dictionary and its first version."""

    id: str
    name: str
    created_by: str
    creation_time_unix: int
    version_id: str
    version_rules_num: int
    description: str | None = None
    permission_on_resource: str = optional()


class DictionaryMetadata(BaseModel):
    """A dictionary as listed."""

    id: str
    latest_version_id: str
    latest_version_rules_num: int
    name: str
    permission_on_resource: str = optional()
    created_by: str
    creation_time_unix: int
    archived_time_unix: int | None = None
    description: str | None = None


class DictionaryWithRules(DictionaryMetadata):
    """A dictionary and its latest version's rules."""

    rules: list[PronunciationRule]


class DictionaryPage(BaseModel):
    """One page of dictionaries."""

    pronunciation_dictionaries: list[DictionaryMetadata]
    next_cursor: str | None = None
    has_more: bool


class DictionaryVersion(BaseModel):
    """A new version."""

    id: str
    version_id: str
    version_rules_num: int


class DictionaryDeleted(BaseModel):
    """The dictionary is gone."""

    status: Literal["ok"]


# A multipart upload, not a JSON body: no request model validates it, so its schema is written here.
#: The multipart body of ``POST /v1/pronunciation-dictionaries/add-from-file``.
ADD_FROM_FILE_BODY: Final = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["name", "file"],
                "properties": {
                    "name": {"type": "string", "pattern": "\\S", "maxLength": MAX_NAME_CHARS},
                    "file": {
                        "type": "string",
                        "contentMediaType": "application/pls+xml",
                        "description": "A PLS lexicon.",
                    },
                    "description": {"type": "string", "maxLength": 4000},
                    "workspace_access": {"enum": list(WORKSPACE_ACCESS), "description": "Checked and ignored."},
                },
            }
        }
    },
}
