"""Propagation against a server we did not write: nginx, started here on loopback
(:mod:`tests.support.nginx`), logs the ``traceparent`` of every request it executed; each must be
the context of one of our spans.

Skipped when nginx is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import trio_retry
from tests.support.fixtures import StartNginx
from tests.support.fixtures import nginx as nginx
from trio_retry import Backoff, RetryPolicy

from .conftest import Otel

#: /busy answers 503, anything else 200.
SERVER = """
    server {
        listen {{host}}:{{traced}};
        location /busy { return 503 "busy\\n"; }
        location / { return 200 "ok\\n"; }
    }
"""


async def test_nginx_logs_one_traceparent_per_attempt(nginx: StartNginx, otel: Otel) -> None:
    server = nginx(servers=SERVER, listeners=("traced",))
    url = server.url("traced", "")
    policy = RetryPolicy(max_attempts=3, backoff=Backoff(initial=0.0, jitter="none"))
    async with trio_retry.Client(retry=policy, telemetry=otel.telemetry) as client:
        busy = await client.get(url + "/busy")
        fine = await client.get(url + "/")
    assert (busy.status, fine.status) == (503, 200)
    spans = otel.spans()
    assert [dict(s.attributes or {})["http.response.status_code"] for s in spans] == [
        503,
        503,
        503,
        200,
    ]
    logged = server.log(expect=4).entries
    assert [(e.method, e.uri, str(e.status)) for e in logged] == [
        ("GET", "/busy", "503"),
        ("GET", "/busy", "503"),
        ("GET", "/busy", "503"),
        ("GET", "/", "200"),
    ]
    sent = [(e.traceparent or "").split("-") for e in logged]
    ours = [(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans]
    assert [(trace_id, span_id) for _, trace_id, span_id, _ in sent] == ours
    assert len({span_id for _, span_id in ours}) == 4
