"""The OpenAPI documents, built without a running server (the same ones /openapi.json serves)."""

from zsynth.core.config import Settings
from zsynth.documents import build_document

speech_doc = build_document("speech", Settings.from_env())
avatar_doc = build_document("avatar")
print(len(speech_doc["paths"]), "speech paths,", len(avatar_doc["paths"]), "avatar paths")
