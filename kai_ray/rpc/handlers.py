"""Rewrapping grpc's method handlers: what the server's interceptors (tokens, undecodable
requests) have in common.

An interceptor of grpc's asyncio server returns a handler; changing what a call does means
building a handler of the same shape around the original behavior.  Behaviors are coroutines
for unary responses and async generators for streamed ones, and a wrapper must be the same kind.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

__all__ = ["Behavior", "Prelude", "replace_behavior", "with_prelude"]

Behavior = Callable[[Any, Any], Any]
"""A handler's behavior: (request, context) → response, or an async iterator of responses."""
Prelude = Callable[[Any, Any], Awaitable[contextlib.AbstractContextManager[Any]]]
"""Run before a behavior (it may abort the call); the context it returns is held around it."""


def with_prelude(behavior: Behavior, prelude: Prelude) -> Behavior:
    """``behavior`` run inside what ``prelude`` returns, keeping its kind (coroutine or stream)."""
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            with await prelude(request, context):
                async for item in behavior(request, context):
                    yield item

        return stream

    async def call(request: Any, context: Any) -> Any:
        with await prelude(request, context):
            return await behavior(request, context)

    return call


def replace_behavior(
    handler: Any, wrap: Callable[[Behavior], Behavior], *, deserializer: Callable[[bytes], Any] | None = None
) -> Any:
    """A copy of ``handler`` (a grpc.RpcMethodHandler) with its one behavior replaced, and its
    request deserializer when one is given."""
    make = {
        (False, False): (grpc.unary_unary_rpc_method_handler, handler.unary_unary),
        (False, True): (grpc.unary_stream_rpc_method_handler, handler.unary_stream),
        (True, False): (grpc.stream_unary_rpc_method_handler, handler.stream_unary),
        (True, True): (grpc.stream_stream_rpc_method_handler, handler.stream_stream),
    }
    factory, behavior = make[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return factory(
        wrap(behavior),
        request_deserializer=deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
