"""`IdempotencyStore`: an endpoint that deduplicates on ``Idempotency-Key`` the way
draft-ietf-httpapi-idempotency-key-header says, and the request-status route a reconciler asks
(SPEC §19), for `FaultServer.route`. A handler: each request's record in, an action out.

Per key (the header's RFC 8941 sf-string unquoted, or the value as sent when it is not one):

- first request: executed (`executions` counts it), its answer kept; while it is being processed
  (`processing` seconds) the same key is answered ``409`` with ``Retry-After``;
- the same key again with the same method, path and body: the kept answer, marked
  ``Idempotent-Replayed: true``, not executed again;
- the same key with another method, path or body: ``422``;
- a key older than `expires_after` seconds is forgotten: the request is executed as new;
- no key: executed every time, or ``400`` naming the missing key when `require_key`.

Faults a test scripts: `lose_answers` (the next executions do the work and drop the
connection without answering: the outcome a client cannot know) and `refuse` (the next
requests are dropped after their head, never executed).

`status` is the status route (``server.route("GET", "/requests/{id}", store.status)``): ``200``
with ``{"id", "state": "executed", "status", "body"}`` for an executed request (by key, or by
``X-Request-Id`` for an unkeyed one), ``202`` ``{"state": "in progress"}`` while it runs, ``404``
``{"state": "not found"}`` for one never executed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import trio

from ._script import CloseAfterBody, CloseAfterHead, RecordedRequest, Respond

__all__ = ["IdempotencyStore"]

_PROBLEM = (("content-type", "application/problem+json"),)


@dataclass
class _Entry:
    fingerprint: tuple[str, str, bytes]
    started: float
    answer: Respond | None = None  # None while in progress


def _key(request: RecordedRequest) -> str | None:
    value = request.header("idempotency-key")
    if value is None:
        return None
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def _problem(status: int, title: str, *extra: tuple[str, str]) -> Respond:
    body = json.dumps({"title": title, "status": status}).encode()
    return Respond(status, headers=_PROBLEM + extra, body=body)


class IdempotencyStore:
    """A deduplicating endpoint (see the module): ``server.route("POST", "/payments", store)``.

    `respond` is the answer of an execution (its body is kept and replayed); `processing` how
    long an execution takes (the window of ``409``); `retry_after` the ``Retry-After`` of a
    ``409``; `expires_after` the key lifetime (``None``: forever); `require_key` answers a
    request without a key ``400``. `executions` lists the id of every execution (the key, else
    the ``X-Request-Id``, else ``""``), so a test counts what ran twice.
    """

    def __init__(
        self,
        respond: Respond | None = None,
        *,
        processing: float = 0.0,
        retry_after: int = 1,
        expires_after: float | None = None,
        require_key: bool = False,
    ) -> None:
        self.respond = respond if respond is not None else Respond(201, body=b'{"ok": true}')
        self.processing = processing
        self.retry_after = retry_after
        self.expires_after = expires_after
        self.require_key = require_key
        self.executions: list[str] = []
        self._entries: dict[str, _Entry] = {}
        self._unkeyed: dict[str, _Entry] = {}  # by X-Request-Id, for `status`
        self._lose = 0
        self._refuse = 0

    def lose_answers(self, count: int = 1) -> None:
        """The next `count` executions do the work and drop the connection unanswered."""
        self._lose += count

    def refuse(self, count: int = 1) -> None:
        """The next `count` requests are dropped after their head, never executed."""
        self._refuse += count

    def executed(self, request_id: str) -> int:
        """How many times the request with this key (or ``X-Request-Id``) was executed."""
        return self.executions.count(request_id)

    async def __call__(self, request: RecordedRequest) -> Respond | CloseAfterBody | CloseAfterHead:
        if self._refuse:
            self._refuse -= 1
            return CloseAfterHead()
        key = _key(request)
        if key is None:
            if self.require_key:
                return _problem(400, "Idempotency-Key is missing")
            request_id = request.header("x-request-id") or ""
            unkeyed = _Entry((request.method, request.path, request.body), trio.current_time())
            if request_id:
                self._unkeyed[request_id] = unkeyed
            return await self._execute(request, request_id, unkeyed)
        now = trio.current_time()
        entry: _Entry | None = self._entries.get(key)
        if entry is not None and self.expires_after is not None:
            if now - entry.started > self.expires_after and entry.answer is not None:
                del self._entries[key]  # forgotten: the request is new again
                entry = None
        fingerprint = (request.method, request.path, request.body)
        if entry is None:
            entry = self._entries[key] = _Entry(fingerprint, now)
            return await self._execute(request, key, entry)
        if entry.fingerprint != fingerprint:
            return _problem(422, "Idempotency-Key reused with another payload")
        if entry.answer is None:
            return _problem(
                409, "a request with this Idempotency-Key is in progress",
                ("retry-after", str(self.retry_after)),
            )  # fmt: skip
        answer = entry.answer
        return Respond(
            answer.status, headers=(*answer.headers, ("idempotent-replayed", "true")),
            body=answer.body,
        )  # fmt: skip

    async def _execute(
        self, request: RecordedRequest, request_id: str, entry: _Entry
    ) -> Respond | CloseAfterBody:
        if self.processing:
            await trio.sleep(self.processing)
        self.executions.append(request_id)
        answer = entry.answer = self.respond
        if self._lose:
            self._lose -= 1
            return CloseAfterBody()
        return answer

    def status(self, request: RecordedRequest) -> Respond:
        """The status route: what became of the request with key (or ``X-Request-Id``)
        ``{id}`` (see the module)."""
        request_id = request.params.get("id", "")
        entry = self._entries.get(request_id) or self._unkeyed.get(request_id)
        answer = entry.answer if entry is not None else None
        if entry is not None and answer is None:
            return _json(202, {"id": request_id, "state": "in progress"})
        if answer is None:
            return _json(404, {"id": request_id, "state": "not found"})
        return _json(
            200,
            {
                "id": request_id,
                "state": "executed",
                "status": answer.status,
                "body": answer.body.decode("utf-8", "replace"),
            },
        )


def _json(status: int, value: object) -> Respond:
    return Respond(
        status, headers=(("content-type", "application/json"),), body=json.dumps(value).encode()
    )
