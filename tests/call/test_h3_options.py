"""The HTTP/3 options are checked at construction (SPEC §16): types, combinations, the extra."""

from __future__ import annotations

import ssl
import subprocess
import sys
import textwrap

import pytest
import trustme
from aioquic.quic.configuration import QuicConfiguration

from trio_retry import Client, InsecureTLSWarning, Upstream
from trio_retry._wire.http3.quic import quic_configuration

from ..support.without import without


def quic_for(client: Client, server_name: str) -> QuicConfiguration:
    """The QUIC configuration ``client``'s connections to ``server_name`` would use."""
    trust = client._rt.connector._quic_trust
    assert trust is not None
    return quic_configuration(trust, server_name, None)


def test_wrong_types_name_the_option() -> None:
    with pytest.raises(TypeError, match="http3"):
        Client(http3="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="early_data"):
        Client(http3=True, early_data=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Upstream\.http3"):
        Upstream(http3="on")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Upstream\.early_data"):
        Upstream(early_data=None)  # type: ignore[arg-type]


def test_early_data_needs_http3() -> None:
    with pytest.raises(ValueError, match="early_data=True needs HTTP/3"):
        Client(early_data=True)
    Client(early_data=True, upstreams={"https://a.example": Upstream(http3=True)})
    Client(http3=True, early_data=True)


def test_http3_cannot_go_through_a_transport_or_a_unix_socket() -> None:
    with pytest.raises(ValueError, match="uds="):
        Client(http3=True, uds="/tmp/nothing.sock")


def test_a_missing_extra_is_named() -> None:
    # In a fresh process: in this one, aioquic and the HTTP/3 modules are already imported.
    code = without("aioquic") + textwrap.dedent("""
        import sys

        from trio_retry import Client, MissingExtra, Upstream

        def refused(**options):
            try:
                Client(**options)
            except MissingExtra as exc:  # an ImportError, not a bare ModuleNotFoundError
                assert isinstance(exc, ImportError)
                return str(exc)
            raise AssertionError(f"Client({options}) was accepted without aioquic")

        for options in (
            {"http3": True},
            {"upstreams": {"https://a.example": Upstream(http3=True)}},
            {"default_upstream": Upstream(http3=True)},
        ):
            print(refused(**options))
        Client()  # a client without HTTP/3 never needs it
        Upstream(http3=True)  # a value: checked when a client is given it
        assert not [m for m in sys.modules if m.startswith("aioquic")]
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    expected = "HTTP/3 needs aioquic, the 'http3' extra: pip install 'trio_retry[http3]'"
    assert done.stdout.splitlines() == [expected] * 3


def test_quic_leaves_the_check_to_the_clients_context() -> None:
    """aioquic's own check (certifi when it is handed no CA) is off: the client's context
    checks every chain (``shims.CheckedQuicConnection``), and SNI is sent as over TCP."""
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    client = Client(ssl_context=context, http3=True)
    quic = quic_for(client, "localhost")
    assert quic.verify_mode == ssl.CERT_NONE
    assert (quic.cadata, quic.cafile, quic.capath) == (None, None, None)
    assert quic.server_name == "localhost"
    assert quic.alpn_protocols == ["h3"]
    assert client._rt.connector._quic_trust is not None
    assert client._rt.connector._quic_trust.context is context


def test_quic_does_not_verify_when_the_client_does_not() -> None:
    with pytest.warns(InsecureTLSWarning):
        client = Client(verify=False, http3=True)
    trust = client._rt.connector._quic_trust
    assert trust is not None
    assert not trust.verify


def test_a_context_without_tls13_is_refused_for_http3() -> None:
    """QUIC is TLS 1.3 only: a context that allows no TLS 1.3 cannot be honoured over it."""
    context = ssl.create_default_context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ValueError, match=r"HTTP/3 needs TLS 1\.3.*maximum_version=TLSv1_2"):
        Client(ssl_context=context, http3=True)
    Client(ssl_context=context)  # over TCP it is the caller's choice
