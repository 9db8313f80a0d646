"""Plumbing shared by the endpoints: SSE responses, disconnect watching, merging several request streams."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import msgspec
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

T = TypeVar("T")

DONE_EVENT = b"data: [DONE]\n\n"
_json = msgspec.json.Encoder()


def sse_event(payload: Any) -> bytes:
    """One ``data:`` event with ``payload`` as JSON."""
    return b"data: " + _json.encode(payload) + b"\n\n"


def typed_sse_event(payload: dict[str, Any]) -> bytes:
    """One ``event: <payload["type"]>`` + ``data:`` event (Anthropic's and the Responses API's framing)."""
    return b"event: " + payload["type"].encode() + b"\ndata: " + _json.encode(payload) + b"\n\n"


def encode_json(payload: Any) -> bytes:
    """Compact JSON bytes (msgspec: fast enough for the per-token path)."""
    return _json.encode(payload)


def json_response(payload: Any) -> Response:
    """A JSON response of ``payload`` (encoded by :func:`encode_json`)."""
    return Response(encode_json(payload), media_type="application/json")


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    """A ``text/event-stream`` response; a client disconnect cancels ``events`` (which aborts its requests)."""
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class ClientDisconnected(Exception):
    """The client went away before its (non-streaming) response was ready."""


async def _wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; if the client disconnects first, cancel it (its requests abort) and raise."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise ClientDisconnected()


async def json_reply(request: Request, work: Awaitable[Any]) -> Response:
    """The JSON answer of a non-streaming request once ``work`` is done; 499 (nothing sent) when the client
    leaves first (``work`` is cancelled, which aborts its requests)."""
    try:
        return json_response(await until_disconnect(request, work))
    except ClientDisconnected:
        return Response(status_code=499)


async def close_stream(stream: AsyncIterator[Any]) -> None:
    """Close ``stream`` if it can be closed (an engine stream closed early aborts its request)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


async def merge_streams(streams: list[AsyncIterator[T]]) -> AsyncIterator[tuple[int, T]]:
    """Yield ``(stream index, item)`` from several async iterators as items arrive.

    Leaving early (or being cancelled) cancels the pumps, so every underlying request is aborted.
    """
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any, BaseException | None]] = asyncio.Queue()
    end = object()

    async def pump(index: int, stream: AsyncIterator[T]) -> None:
        try:
            async for item in stream:
                queue.put_nowait((index, item, None))
            queue.put_nowait((index, end, None))
        except Exception as exc:
            queue.put_nowait((index, end, exc))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    remaining = len(tasks)
    try:
        while remaining:
            index, item, error = await queue.get()
            if error is not None:
                raise error
            if item is end:
                remaining -= 1
                continue
            yield index, item
    finally:
        for task in tasks:
            task.cancel()


async def chain_first(first: T, rest: AsyncIterator[T]) -> AsyncIterator[T]:
    """``first``, then the items of ``rest`` (a stream whose first item was already taken)."""
    yield first
    async for item in rest:
        yield item


async def prime_streams(request: Request, streams: list[AsyncIterator[T]]) -> list[AsyncIterator[T]]:
    """Wait for every stream's first item before a streaming response starts.

    A request the engine rejects then fails as a plain HTTP error (400 with OpenAI's body) rather than as an
    error event inside a 200 stream. If one stream fails, or the client leaves meanwhile, all are closed
    (which aborts their requests).
    """
    async def first_of_all() -> list:
        return await asyncio.gather(*(anext(s) for s in streams), return_exceptions=True)

    try:
        firsts = await until_disconnect(request, first_of_all())
    except BaseException:
        await _close_all(streams)
        raise
    error = next((f for f in firsts if isinstance(f, BaseException)), None)
    if error is not None:
        await _close_all(streams)
        if isinstance(error, StopAsyncIteration):
            raise RuntimeError("the engine finished a request without any output")
        raise error
    return [chain_first(first, stream) for first, stream in zip(firsts, streams, strict=True)]


async def _close_all(streams: list[AsyncIterator]) -> None:
    for stream in streams:
        try:
            await close_stream(stream)
        except Exception:  # a stream that already failed has nothing left to close
            pass
