"""What ``client.stream(...)`` returns: an async context manager, and nothing else.

``client.stream(...)`` used as httpx's ``send(..., stream=True)`` or as a plain iterator
(``await client.stream(...)``, ``async for ... in client.stream(...)``, ``with
client.stream(...)``) would get Python's own ``TypeError`` about
``_AsyncGeneratorContextManager``, which names neither the mistake nor the fix. Each of those
uses is a ``TypeError`` saying ``async with client.stream(...) as response:``. The methods that
raise it exist at run time only (not for a type checker), so a user's type checker still
reports ``await client.stream(...)`` as an error and still sees ``async with`` as the one use.

Nothing is prepared or sent until ``async with`` enters: a misuse sends nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, NoReturn

from .._models import Response

__all__ = ["StreamCall"]

_USE = (
    "client.stream(...) is an async context manager: use `async with client.stream(method, "
    "url) as response:` and read the body inside the block (`async for chunk in "
    "response.aiter_bytes():`)"
)


class StreamCall(AbstractAsyncContextManager[Response]):
    """The streamed call of ``client.stream(...)``: ``async with`` runs it (the call starts on
    entering, the body is closed on leaving); any other use is a ``TypeError`` that says so."""

    __slots__ = ("_manager", "_open")

    def __init__(self, open_call: Callable[[], AbstractAsyncContextManager[Response]]) -> None:
        self._open = open_call
        self._manager: AbstractAsyncContextManager[Response] | None = None

    async def __aenter__(self) -> Response:
        if self._manager is not None:
            raise RuntimeError("a client.stream(...) call can be entered once: call it again")
        self._manager = self._open()
        return await self._manager.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._manager is not None  # (Python calls __aexit__ only after __aenter__)
        return await self._manager.__aexit__(exc_type, exc, traceback)

    if not TYPE_CHECKING:  # run-time hints only: a type checker keeps reporting these uses

        def __await__(self) -> NoReturn:
            raise TypeError(
                f"{_USE}; it cannot be awaited (for the whole body at once, `await "
                "client.request(method, url)` or `await client.get(url)`)"
            )

        def __aiter__(self) -> NoReturn:
            raise TypeError(f"{_USE}; the call itself is not iterable")

        def __iter__(self) -> NoReturn:
            raise TypeError(f"{_USE}; the call itself is not iterable")

        def __enter__(self) -> NoReturn:
            raise TypeError(f"{_USE}, not `with`")

        def __exit__(self, *exc_info: object) -> None:  # (Python needs it to call __enter__)
            return None
