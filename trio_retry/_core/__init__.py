"""The pure retry-decision core: no trio, no sockets, no ssl, no h11/h2, no clock reads.

Everything here takes time and randomness as arguments, so that every decision can be asserted
exactly in synchronous tests. Imports go one way, down this list:

- ``evidence.py``    the vocabulary: how far an attempt got (``Stage``), what that proves
                     (``Evidence``), what kind of failure it was (``FailureCategory``)
- ``idempotency.py`` may the operation be repeated without a second side effect?
- ``secrecy.py``     the one rule for an error about a value that may hold a secret
- ``slots.py``       faster construction of the frozen, slotted records of every request
- ``checks.py``      the type checks of the core's public values
- ``decision.py``    what the engine can decide: retry, deny (and why), or "ambiguous"
- ``reconcile.py``   what a reconciliation of a request in doubt found (SPEC §19)
- ``replay.py``      can the exact same request body be sent again?
- ``hedging.py``     when a second copy of a slow request may go out
- ``throttle.py``    adaptive client-side throttling (a rate controller over a token bucket)
- ``breaker.py``     circuit breaking: stop sending to an upstream that is down
- ``backoff.py``     backoff delays and ``Retry-After``
- ``budget.py``      the per-upstream retry budget
- ``policy.py``      the retry policy and per-upstream settings, as plain values
- ``attempt.py``     the record of one wire attempt: what the wire observed, what was decided
- ``engine.py``      retry eligibility: the rules, in order, as data (the one decision)
- ``errors.py``      the failures that need nothing above the core to describe them
"""
