# pyright: strict
"""Ordinary mistakes that both checkers must report, each exactly once, on its own line.

Every line ending in ``# error: <option>`` must get an error from mypy --strict and from
pyright strict, and no other line may (tests/test_typing.py compares the line sets).
"""

from __future__ import annotations

import trio_retry


async def main(base: str) -> None:
    async with trio_retry.Client() as client:
        await client.get(base, timeout=5)  # error: timeout
        await client.get(base, header={"X-A": "1"})  # error: header
        await client.get(base, deadline="2")  # error: deadline
        await client.post(base, idempotency_key=5)  # error: idempotency_key
        await client.post(base, idempotency_key=b"key")  # error: idempotency_key
        await client.get(base, retry=3)  # error: retry
        await client.post(base, idempotency="IDEMPOTENT")  # error: idempotency
        await client.get(base, headers={"X-A": None})  # error: headers
        await client.get(base, params={"a": object()})  # error: params
        await client.post(base, data=b"raw")  # error: data
        await client.post(base, content=42)  # error: content
        await client.get(base, follow_redirects="yes")  # error: follow_redirects
        await client.request("GET", base, timeout=5)  # error: timeout
        async with client.stream("GET", base, deadline="2") as _:  # error: deadline
            pass
        async with client.stream("GET", base) as response:
            response.aiter_bytes(chunk_size="1MB")  # error: chunk_size
            response.aiter_text(chunk_size=1.5)  # error: chunk_size
        await client.stream("GET", base)  # error: stream
        async for _ in client.stream("GET", base):  # error: stream
            pass
        with client.stream("GET", base):  # error: stream
            pass
    trio_retry.Client(deadline="2")  # error: deadline
    trio_retry.Client(retry=3)  # error: retry
    trio_retry.Client(auth="user:password")  # error: auth
    trio_retry.Client(timeout=5.0)  # error: timeout
    trio_retry.Client(follow_redirect=True)  # error: follow_redirect
    trio_retry.Client(max_connections="10")  # error: max_connections
    trio_retry.Client(stage_timeouts=5.0)  # error: stage_timeouts
    trio_retry.Client(http2="yes")  # error: http2
    trio_retry.Client(cookies={"sid": "1"})  # error: cookies
