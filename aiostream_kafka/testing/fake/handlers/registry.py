"""The table of what the fake broker serves: one :class:`ApiSpec` per API key, filled by
the ``@serve`` decorator in each handler module.

A handler is ``async def handle(ctx, request) -> response`` (``None``: send nothing, as
for Produce with ``acks=0``). Its response is encoded in the request's version by the
server, with the project's generated codec. ``fail`` builds the answer of a request the
control API fails on purpose (``Control.fail_next``); without one, a response whose
top-level ``error_code`` carries the code is made, where the response has such a field.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiostream_kafka.protocol.base import Request, Response
from aiostream_kafka.testing.fake.context import RequestContext

__all__ = ["REGISTRY", "ApiSpec", "Failer", "Handler", "error_response", "serve"]

Handler = Callable[[RequestContext, Any], Awaitable[Response | None]]
#: ``fail(request, version, error_code) -> response``
Failer = Callable[[Any, int, int], Response]
H = TypeVar("H", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One API the fake serves, between two versions (inclusive)."""

    request_type: type[Request]
    handle: Handler
    fail: Failer | None
    min_version: int
    max_version: int

    @property
    def api_key(self) -> int:
        return self.request_type.API_KEY


#: api key -> spec, in the order the handler modules registered them.
REGISTRY: dict[int, ApiSpec] = {}


def serve(
    request_type: type[Request],
    *,
    min_version: int | None = None,
    max_version: int | None = None,
    fail: Failer | None = None,
) -> Callable[[H], H]:
    """Register the decorated coroutine function as the handler of ``request_type``.

    The versions served default to those the codec has (up to the stable maximum).
    """

    def register(handler: H) -> H:
        low = request_type.MIN_VERSION if min_version is None else min_version
        high = request_type.MAX_STABLE_VERSION if max_version is None else max_version
        low = max(low, request_type.MIN_VERSION)
        high = min(high, request_type.MAX_VERSION)
        if request_type.API_KEY in REGISTRY:
            raise RuntimeError(f"{request_type.__name__} is served twice")
        REGISTRY[request_type.API_KEY] = ApiSpec(request_type, handler, fail, low, high)
        return handler

    return register


def error_response(spec: ApiSpec, request: Request, version: int, code: int) -> Response | None:
    """The response failing ``request`` with ``code``: the spec's own ``fail``, else the
    response with its top-level ``error_code`` set, else None (it cannot be expressed)."""
    if spec.fail is not None:
        return spec.fail(request, version, code)
    response_type = spec.request_type.RESPONSE_TYPE
    for info in response_type.FIELDS:
        if info.name == "error_code" and info.versions is not None:
            low, high = info.versions
            if low <= version <= high:
                response = response_type()
                response.error_code = code  # type: ignore[attr-defined]
                return response
    return None
