"""One call, from options to the caller's answer. Each module has one job:

- :mod:`.options`: the check of every option (shared by ``Client(...)`` and each call);
- :mod:`.client_options`: the options of ``Client(...)``, written once (``ClientOptions``:
  names, types, defaults), the table the constructor and ``configure`` take;
- :mod:`.config`: the client's configuration, a value built once from that table and checked
  there (``configure`` -> ``ClientConfig``);
- :mod:`.alpn`: what a caller's ``SSLContext`` offers by ALPN (read from its ClientHello);
- :mod:`.request_options`: the options of each call, written once (``RequestOptions``), the
  table the verbs' signatures name;
- :mod:`.prepare`: options -> :class:`~.prepare.PreparedRequest` (pure: validation, headers,
  body, idempotency; also the next request of a redirect);
- :mod:`.loop`: the retry loop and the redirect chain; it asks ``_core/engine.py`` whether to
  send again, and only it, and executes what it is told;
- :mod:`.attempt`: one attempt, :class:`~.attempt.AttemptRun` (admission, a pooled connection,
  this attempt's headers, the exchange, within the call deadline);
- :mod:`.result`: how an attempt ended, a frozen value (:class:`~.result.AttemptResult`) its
  run returns and the loop reads, never writes; and the attempt's record from it;
- :mod:`.headers`: the header block of one attempt (hooks, ``Host``, auth, cookies, proxy
  credentials, trace context);
- :mod:`.notify`: telling of each attempt as it is recorded (span, DEBUG log, ``on_attempt``);
- :mod:`.answer`: the end of a request's loop: the response, or the exception it means;
- :mod:`.hedge`: hedged copies of an attempt, and learning from each attempt;
- :mod:`.resilience`: per-upstream hedging, throttling and breaking state (the decisions are
  ``_core``'s);
- :mod:`.upstream`: per-upstream state (budget, bulkhead) and the admission step;
- :mod:`.connect`: opening connections (transport, TLS, ALPN, proxy, QUIC) and the pool key;
- :mod:`.h3route`: which origins go over HTTP/3 (``Upstream(http3=)``, ``Alt-Svc``), and
  which are reached over TCP for a while after a failed QUIC handshake;
- :mod:`.streaming`: what ``client.stream(...)`` returns (``async with`` only; any other use
  a ``TypeError`` that says so);
- :mod:`.body`: the one response-body reader, buffered or streamed (one limit, one decoding);
- :mod:`.resumable`: whether a response's body can be continued if it breaks (the request's
  side and the head's, SPEC §18);
- :mod:`.resume`: carrying a body the loop hands over, and continuing it with a range request
  when it breaks (each continuation an attempt the engine decides on);
- :mod:`.sse`: ``client.sse(url)``'s event stream, reopened with ``Last-Event-ID`` where it
  broke (each reopening decided by the engine);
- :mod:`.failures`: the public exception a final failure becomes;
- :mod:`.keys`: idempotency keys: the one a call generates, and the client's memory of the
  keys it sent (never one key with two payloads);
- :mod:`.reconcile`: asking a call's reconciler where the call would end ambiguous (SPEC §19);
- :mod:`.runtime`: the client's mutable state a call reads (lifecycle, drain, pool, timekeeper).

Layering: these modules import ``_core``, ``_wire`` and the value modules, never ``_client``.
Every wait of an attempt, its call deadline included (and a streamed body's), is bounded
through ``_wire/clock.py``; what is decided here is only how long a backoff sleeps (within the
deadline) and how long a throttle lets a call wait.
"""
