"""Testing HTTP clients, and code that uses trio_retry: a fault server, an in-memory
transport, and pytest fixtures.

`FaultServer` answers each request with the next scripted action (`Respond`, `Stall`,
`PartialBody`, `CloseBeforeRead`, `CloseAfterHead`, `CloseAfterBody`, `RefuseStream`,
`GoAway`, `StreamedBody`, for hostile-server tests `Raw` and `EndlessBody`, or a `Handler` that
computes the action from the request; `EventSource` and `StaticFile` are ready-made handlers:
a server-sent events endpoint and a file served with validators and byte ranges;
`IdempotencyStore` an endpoint that deduplicates on ``Idempotency-Key``, with the
request-status route a reconciler asks) and records
every request it received in `FaultServer.requests`, with whether it was executed, so a test
can count side effects. `refused_port` gives a port nobody listens on. `MockTransport` runs a
real `trio_retry.Client` against a `FaultServer` over in-memory streams
(``Client(transport=MockTransport(server))``); `ConnectFailure` scripts the connect stages it
cannot model. The pytest plugin (`trio_retry.testing.pytest_plugin`, registered by the
package's entry point) provides ready fixtures.
See docs/testing.md.

The modules (for contributors; the names above are the API). Imports go one way, down this
list:

- ``_certs.py``         one throwaway certificate authority and the certificate it signed
- ``_memory.py``        an in-memory byte stream that ends the way a TCP connection ends
- ``_replies.py``       how a scripted response is shaped on the wire (its checked headers)
- ``_frame_faults.py``  the frame-level faults of an HTTP/2 or HTTP/3 stream
- ``_h2_frames.py``     hand-made HTTP/2 frames (``_h3_frames.py``: HTTP/3's)
- ``_script.py``        the fault scripts, as plain data, and the recorded requests
- ``_routes.py``        which request takes which scripted action, and what was left
- ``_common.py``        what the three protocols' connection handlers share
- ``_event_source.py``  `EventSource`, a scripted server-sent events endpoint
- ``_static_file.py``   `StaticFile`, a body served with validators and byte ranges
- ``_idempotency.py``   `IdempotencyStore`, an endpoint deduplicating on ``Idempotency-Key``
                        (the draft's 409, 422, replay marker, expiry) and its status route
- ``_stream_server.py`` what the HTTP/2 and HTTP/3 request streams share
- ``_h1.py``            one HTTP/1.1 connection (h11)
- ``_h2.py``            one HTTP/2 connection (h2), a task per stream
- ``_h3_actions.py``    what each action means on HTTP/3 where it differs from HTTP/2
- ``_h3_conn.py``       one HTTP/3 connection (aioquic, extra ``http3``)
- ``_h3.py``            the HTTP/3 endpoint: the UDP socket and its connections
- ``_transport.py``     the server's TCP (or in-memory) connection
- ``_server.py``        `FaultServer`: accept, pick the protocol, end each connection
- ``_mock.py``          `MockTransport`: the real client and the scripts, no socket
- ``pytest_plugin.py``  the fixtures
"""

from ._event_source import EventSource as EventSource
from ._idempotency import IdempotencyStore as IdempotencyStore
from ._mock import ConnectFailure as ConnectFailure
from ._mock import MockTransport as MockTransport
from ._script import Action as Action
from ._script import AfterBody as AfterBody
from ._script import CloseAfterBody as CloseAfterBody
from ._script import CloseAfterHead as CloseAfterHead
from ._script import CloseBeforeRead as CloseBeforeRead
from ._script import EndlessBody as EndlessBody
from ._script import GoAway as GoAway
from ._script import Handler as Handler
from ._script import PartialBody as PartialBody
from ._script import Raw as Raw
from ._script import RecordedRequest as RecordedRequest
from ._script import RefuseStream as RefuseStream
from ._script import RequestHandler as RequestHandler
from ._script import Respond as Respond
from ._script import ScriptError as ScriptError
from ._script import Stall as Stall
from ._script import StreamedBody as StreamedBody
from ._server import FaultServer as FaultServer
from ._server import UnusedScriptError as UnusedScriptError
from ._server import refused_port as refused_port
from ._static_file import StaticFile as StaticFile

__all__ = [
    "Action",
    "AfterBody",
    "CloseAfterBody",
    "CloseAfterHead",
    "CloseBeforeRead",
    "ConnectFailure",
    "EndlessBody",
    "EventSource",
    "FaultServer",
    "GoAway",
    "Handler",
    "IdempotencyStore",
    "MockTransport",
    "PartialBody",
    "Raw",
    "RecordedRequest",
    "RefuseStream",
    "RequestHandler",
    "Respond",
    "ScriptError",
    "Stall",
    "StaticFile",
    "StreamedBody",
    "UnusedScriptError",
    "refused_port",
]
