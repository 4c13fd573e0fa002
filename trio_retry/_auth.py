"""Ready-made credentials: ``BasicAuth`` and ``BearerAuth`` (both ``RefreshableAuth``).

Their ``repr`` never shows the secret. ``BearerAuth`` can take a token *provider* (an async
callable) so that the 401 refresh-and-replay rule fetches a fresh token.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping

__all__ = ["BasicAuth", "BearerAuth"]


class BasicAuth:
    """HTTP Basic credentials (RFC 7617). ``refresh()`` does nothing: they cannot change."""

    __slots__ = ("_header",)

    def __init__(self, username: str, password: str) -> None:
        if ":" in username:
            raise ValueError("a Basic auth username cannot contain ':'")
        token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
        self._header = f"Basic {token}"

    async def headers(self) -> Mapping[str, str]:
        return {"Authorization": self._header}

    async def refresh(self) -> None:
        return None

    def __repr__(self) -> str:
        return "BasicAuth([redacted])"


class BearerAuth:
    """A bearer token, fixed or from ``provider`` (awaited again on ``refresh()``)."""

    __slots__ = ("_provider", "_token")

    def __init__(
        self, token: str | None = None, *, provider: Callable[[], Awaitable[str]] | None = None
    ) -> None:
        if token is None and provider is None:
            raise ValueError("BearerAuth needs a token or a provider")
        self._token = token
        self._provider = provider

    async def headers(self) -> Mapping[str, str]:
        if self._token is None:
            await self.refresh()
        return {"Authorization": f"Bearer {self._token}"}

    async def refresh(self) -> None:
        if self._provider is not None:
            self._token = await self._provider()

    def __repr__(self) -> str:
        return "BearerAuth([redacted])"
