"""The OpenAPI documents, built without a running server (the same ones /openapi.json serves)."""

from zsynth.config import Settings
from zsynth.openapi import build_document

speech_doc = build_document("speech", Settings.from_env())
avatar_doc = build_document("avatar")
print(len(speech_doc["paths"]), "speech paths,", len(avatar_doc["paths"]), "avatar paths")
