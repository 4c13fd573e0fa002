"""The wire: Trio I/O around the sans-IO protocol objects, and the proof of each stage.

Only this layer can prove ``NOT_SENT``: it records, before each await that crosses a stage, how
far the request got (``progress.AttemptProgress``), and raises one exception type,
``progress.WireError``, classified where the proof is. Each module has one job:

- ``progress.py``     the attempt's progress (its stage and counts) and ``WireError``
- ``timeout_words.py`` what a timeout says: the bound that fired, as the caller sets it
- ``clock.py``        the one owner of time: every wait's bound (lanes or cancel scopes), the
                      fixed limits (``FIXED``), the call's effective deadline
- ``clock_shapes.py`` the shapes the bounds are written against (a target, limits, a timekeeper)
- ``timekeeper.py``   the client's timekeeper: its lanes of armed waits and the task expiring them
- ``park.py``         a task parked on one of our objects (a pool waiter, a stream), trio's private
                      names for it behind a probe
- ``exchange.py``     the contract HTTP/1.1, HTTP/2 and HTTP/3 share: the wire request and response,
                      body framing, Trio's errors as ``WireError``
- ``contract.py``     the connection contract: what the pool needs of every connection, and what
                      HTTP/2 and HTTP/3 share (the stream proof, the idle PING, request fields)
- ``transport.py``    DNS, TCP (happy eyeballs), proxies, TLS and ALPN, each failure tagged
- ``connect_backup.py`` a connect to one address, and its backup when its SYN has no answer
- ``rawsock.py``      a byte stream over a socket with fewer layers than ``trio.SocketStream``
- ``tlsread.py``      a TLS read that takes every record already received (trio's gives one)
- ``tlssock.py``      TLS on the socket itself (OpenSSL reads and writes it)
- ``tlserrors.py``    OpenSSL's reports on its own socket as trio.SSLStream's errors
- ``tlschoice.py``    which TLS stream a connection gets: ``tlssock.py`` or ``trio.SSLStream``
- ``socks.py``        the SOCKS5 handshake (extra ``socks``)
- ``dialer.py``       the seam where ``Client(transport=...)`` supplies the byte stream
- ``virtual.py``      what the HTTP layers need of a socket, for a connection that has none
- ``http11.py``       one HTTP/1.1 connection over h11: one send path, one receive path
- ``http11_reader.py`` what a response's bytes mean: the fast parser, or h11, and the hand-over
- ``http11_rules.py`` h11's bytes for a request, what the connection refuses, and its words
- ``fast11.py``       the strict HTTP/1.1 fast path, differential-tested against h11
- ``http2/``          HTTP/2 over h2 (its ``__init__`` is its own map)
- ``http3/``          HTTP/3 over aioquic's QUIC, the same shape (extra ``http3``; its own map)
- ``pool.py``         the connection pool: acquire and release, openings (async)
- ``pool_book.py``    the pool's rules, applied synchronously (``PoolBook``)
- ``pool_ledger.py``  the pool's counts and orders

Layering: ``_wire`` imports ``_core`` (stages, evidence, categories) and nothing of ``_call``;
it never calls back into ``_call``. No protocol imports another (``http11*.py``, ``http2/``,
``http3/``): what they share is in ``exchange.py`` and ``contract.py``.
"""
