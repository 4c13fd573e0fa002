"""The ASGI application `tests.support.hypercorn_server` serves (in a hypercorn subprocess):
it records every request it executed as one JSON line in the ledger file named by the
``TRIO_RETRY_LEDGER`` environment variable, then answers.

- ``GET`` (any path): ``ok``;
- anything with a body: the body, echoed (``x-body-length`` says its size).

A ledger line: ``{"method", "path", "http_version", "body_length", "request_id"}``, written
(and flushed) once the whole body was read and before the response starts: a line is an
execution.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


async def app(
    scope: Scope,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return  # the client left before the body ended: not executed
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]}
    line = {
        "method": scope["method"],
        "path": scope["path"],
        "http_version": scope["http_version"],
        "body_length": len(body),
        "request_id": headers.get("x-request-id"),
    }
    with open(os.environ["TRIO_RETRY_LEDGER"], "a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(line) + "\n")
    reply = bytes(body) if body or scope["method"] != "GET" else b"ok"
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(len(reply)).encode()),
                (b"x-body-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": reply})
