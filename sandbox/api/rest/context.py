"""The REST app's shared state, and the per-request dependencies the routes take (caller, service)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sandbox.errors import Unauthenticated
from sandbox.service import Principal, SandboxService, TokenRegistry

TRANSPORT = "rest"
"""The ``transport`` label of this skin's metrics and log lines."""
_STATE_KEY = "sandbox_api"


@dataclass(frozen=True)
class Context:
    service: SandboxService
    tokens: TokenRegistry
    logger: logging.Logger


def install(app: FastAPI, context: Context) -> None:
    setattr(app.state, _STATE_KEY, context)


def context_of(request: Request) -> Context:
    context = getattr(request.app.state, _STATE_KEY)
    assert isinstance(context, Context)
    return context


_bearer = HTTPBearer(auto_error=False, description="A token from the server's token file.")


async def _caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    if credentials is None and request.headers.get("authorization"):
        raise Unauthenticated("the Authorization header must read 'Bearer <token>'")
    return context_of(request).tokens.authenticate(credentials.credentials if credentials else None)


async def _service(request: Request) -> SandboxService:
    return context_of(request).service


Caller = Annotated[Principal, Depends(_caller)]
"""The authenticated principal of the request."""
Service = Annotated[SandboxService, Depends(_service)]
"""The service layer the app was made over."""
