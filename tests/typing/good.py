# pyright: strict
"""User-style code that must type-check cleanly under mypy --strict and pyright strict.

Not collected by pytest (no test_ prefix): tests/test_typing.py runs both checkers on it.
"""

from __future__ import annotations

import trio

import trio_retry
from trio_retry import Backoff, Idempotency, RetryPolicy, StageTimeouts


async def main(base: str) -> None:
    async with trio_retry.Client(
        deadline=5.0,
        auth=("user", "password"),
        stage_timeouts=StageTimeouts(connect=2.0),
        headers={"X-Service": "billing"},
    ) as client:
        response = await client.get(
            f"{base}/search",
            headers={"X-Request-Id": "r-1"},
            params={"page": 2, "tag": ["a", "b"], "draft": None, "exact": True},
            deadline=2,
            retry=RetryPolicy(max_attempts=2, backoff=Backoff(initial=0.01)),
        )
        status: int = response.status
        await client.post(
            f"{base}/pay", json={"amount": 10}, idempotency_key=True, follow_redirects=False
        )
        await client.put(f"{base}/doc", content=b"...", idempotency=Idempotency.IDEMPOTENT)
        await client.patch(f"{base}/doc", data={"name": "x", "ids": [1, 2]})
        await client.delete(f"{base}/doc/1", idempotency_key="order-17")
        await client.head(f"{base}/doc", params=[("a", "1"), ("b", 2)])
        await client.options(f"{base}/", headers=[("Accept", "*/*")])
        await client.request("GET", f"{base}/", content="text body")
        async with client.stream("GET", f"{base}/big", deadline=10.0) as streamed:
            async for chunk in streamed.aiter_bytes():
                print(len(chunk), status)
        async with client.stream("GET", f"{base}/big") as streamed:
            async for piece in streamed.aiter_bytes(chunk_size=1 << 20):
                print(len(piece))
        async with client.stream("GET", f"{base}/text") as streamed:
            async for text in streamed.aiter_text(chunk_size=None):
                print(text)


if __name__ == "__main__":
    trio.run(main, "http://127.0.0.1:8080")
