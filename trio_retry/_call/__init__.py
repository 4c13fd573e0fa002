"""One call, from options to the caller's answer. Each module has one job:

- :mod:`.config`: the client's configuration, a frozen value built once (``ClientConfig``);
- :mod:`.prepare`: options -> :class:`~.prepare.PreparedRequest` (pure: validation, headers,
  body, idempotency; also the next request of a redirect);
- :mod:`.loop`: the retry loop and the redirect chain (engine, budget, backoff, drain);
- :mod:`.attempt`: one attempt: admission, pooled connection, the headers finalised for this
  attempt, the exchange; its :class:`~.attempt.Outcome` and :class:`Attempt` record;
- :mod:`.upstream`: per-upstream state (budget, bulkhead) and the admission step;
- :mod:`.connect`: opening connections (transport, TLS, ALPN, proxy) and the pool key;
- :mod:`.body`: the one response-body reader, buffered or streamed (one limit, one decoding);
- :mod:`.failures`: the public exception a final failure becomes.

Layering: these modules import ``_core``, ``_wire`` and the value modules, never ``_client``.
"""
