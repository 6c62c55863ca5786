"""The libraries a process imports only when it first needs them, and the clear error when one is missing.

The front and the workers serve speech without PyAV (OpenAI's ``aac`` alone needs it), without aioboto3, aiobotocore
and botocore (a voices bucket, a dictionaries bucket or a keys table needs them) and without cryptography (TLS needs
it): each is imported where it is used, through :func:`load`, so a machine that lacks one (the device kit of
``scripts/gpu-run``, docs/gpu-run.md) starts and serves everything else. The heavy imports also stay off the start.

botocore's exception classes are caught in many places; :func:`aws_errors` gives them only once botocore is loaded,
since before that none of them can have been raised.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from botocore.exceptions import ClientError

#: The distribution to install for each optional top-level module.
PACKAGES: Final = {
    "av": "av",
    "aioboto3": "aioboto3",
    "aiobotocore": "aiobotocore",
    "boto3": "boto3",
    "botocore": "botocore",
    "cryptography": "cryptography",
}


class MissingLibrary(ImportError):
    """An optional library that a configured feature needs is not installed."""


def load(module: str, needed_for: str) -> ModuleType:
    """Import ``module`` (``needed_for`` says which feature asked, for the error) or raise :class:`MissingLibrary`."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = PACKAGES.get(module.split(".")[0], module.split(".")[0])
        raise MissingLibrary(
            f"{needed_for} needs the Python package {package!r}, which this installation lacks "
            f"(pip install {package}): {err}"
        ) from err


@functools.cache
def available(module: str) -> bool:
    """Whether ``module`` imports (it is imported to find out, once per process)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def aws_errors(*also: type[BaseException]) -> tuple[type[BaseException], ...]:
    """What a call to S3 or DynamoDB raises when the service cannot be reached or refuses: botocore's
    ``BotoCoreError`` and ``ClientError`` (once botocore is loaded), ``OSError`` and timeouts; and ``also``."""
    exceptions = sys.modules.get("botocore.exceptions")
    if exceptions is None:  # no AWS client was ever made here, so no botocore error can be in flight
        return (OSError, asyncio.TimeoutError, *also)
    return (exceptions.BotoCoreError, exceptions.ClientError, OSError, asyncio.TimeoutError, *also)


def client_error() -> type[ClientError]:
    """botocore's ``ClientError``, for the code that holds an AWS client (so botocore is loaded)."""
    exceptions = load("botocore.exceptions", "an AWS client")
    error: type[ClientError] = exceptions.ClientError
    return error


def botocore_error() -> type[BaseException]:
    """botocore's ``BotoCoreError``, for the code that holds an AWS client (so botocore is loaded)."""
    exceptions = load("botocore.exceptions", "an AWS client")
    error: type[BaseException] = exceptions.BotoCoreError
    return error


def is_client_error(err: BaseException) -> bool:
    """Whether ``err`` is botocore's ``ClientError`` (False, without importing it, while botocore is not loaded)."""
    exceptions = sys.modules.get("botocore.exceptions")
    return exceptions is not None and isinstance(err, exceptions.ClientError)
