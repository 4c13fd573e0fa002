"""``client.sse`` through a real nginx (``proxy_buffering off``) in front of an event source
that drops its streams (FaultServer's `EventSource` as nginx's backend): five drops, every
event exactly once and in order, and the backend saw ``Last-Event-ID`` on every reopening;
nginx's access log counts the streams it carried."""

from __future__ import annotations

import pytest
import trio

import trio_retry
from tests.support.fixtures import StartNginx
from trio_retry import SSEEvent
from trio_retry.testing import EventSource, FaultServer

EVENTS = [SSEEvent(event="tick", data=f"{i}", id=f"e{i}") for i in range(1, 13)]
SERVERS = """
    server {
        listen {{host}}:{{sse}};
        location /events {
            proxy_pass http://{{host}}:{{backend}};
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 30s;
        }
    }
    server {
        listen {{host}}:{{sse_tls}} ssl http2;
{{tls}}
        location /events {
            proxy_pass http://{{host}}:{{backend}};
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 30s;
        }
    }
"""


@pytest.mark.parametrize("listener", ["sse", "sse_tls"])
@pytest.mark.parametrize("end", ["break", "finish"])
async def test_five_backend_drops_every_event_once(
    nginx: StartNginx, listener: str, end: str
) -> None:
    source = EventSource(EVENTS, per_connection=2, end=end, interval=0.01)
    backend = FaultServer(http2=False)
    backend.route("GET", "/events", source)
    got: list[SSEEvent] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(backend.serve)
        server = nginx(
            servers=SERVERS, listeners=("sse", "sse_tls"), values={"backend": backend.port}
        )
        options: dict[str, object] = {
            "retry": trio_retry.RetryPolicy(backoff=trio_retry.Backoff(initial=0.01))
        }
        if listener == "sse_tls":
            options.update(http2=True, ssl_context=server.ssl_context())
        url = server.url(listener, "/events")
        with trio.fail_after(30):
            async with trio_retry.Client(**options) as client:  # type: ignore[arg-type]
                async with client.sse(url) as events:
                    async for event in events:
                        got.append(event)
        nursery.cancel_scope.cancel()
    assert [(e.event, e.id, e.data) for e in got] == [(e.event, e.id, e.data) for e in EVENTS]
    # six streams (five dropped), then the 204 after the last event
    assert source.last_event_ids == [None, "e2", "e4", "e6", "e8", "e10", "e12"]
    assert events.reconnects == 6
    log = server.log(expect=7)
    assert [entry.status for entry in log.entries if entry.uri == "/events"] == [200] * 6 + [204]
