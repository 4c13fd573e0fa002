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
from trio_retry._wire.http3.quic import TrustSource, quic_configuration, quic_trust

from ..support.without import without


def quic_for(client: Client, server_name: str) -> QuicConfiguration:
    """The QUIC configuration ``client``'s connections to ``server_name`` would use."""
    config = client._config
    source = TrustSource(config.ssl_context, config.verify, config.cert, config.owns_ssl_context)
    return quic_configuration(quic_trust(source), server_name, None)


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


def test_quic_trusts_what_the_clients_context_trusts() -> None:
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    config = quic_configuration(
        quic_trust(TrustSource(context, verify=context, owns_context=False)), "localhost", None
    )
    assert config.verify_mode == ssl.CERT_REQUIRED
    assert config.server_name == "localhost"
    assert config.cadata is not None
    assert ca.cert_pem.bytes().strip() in config.cadata
    assert config.alpn_protocols == ["h3"]


def test_quic_does_not_verify_when_the_client_does_not() -> None:
    with pytest.warns(InsecureTLSWarning):
        client = Client(verify=False)
    quic = quic_for(client, "localhost")
    assert quic.verify_mode == ssl.CERT_NONE


def test_a_ca_bundle_path_is_handed_to_quic(tmp_path: object) -> None:
    ca = trustme.CA()
    path = f"{tmp_path}/ca.pem"
    ca.cert_pem.write_to_path(path)
    client = Client(verify=path)
    quic = quic_for(client, "h.example")
    assert quic.cafile == path
    assert quic.cadata is None


def test_certificates_the_library_warns_about_are_left_out() -> None:
    """A store may hold a certificate with a negative serial number (RFC 5280 forbids it; the
    certificate library warns): it is not handed to aioquic, which would warn at every
    handshake (an error under -W error)."""
    ca = trustme.CA()
    context = ssl.create_default_context()
    ca.configure_trust(context)
    listed = context.get_ca_certs(binary_form=True)
    trust = quic_trust(TrustSource(context, verify=context, owns_context=False))
    assert trust.cadata is not None
    assert ca.cert_pem.bytes().strip() in trust.cadata
    kept = trust.cadata.count(b"-----BEGIN CERTIFICATE-----")
    assert 1 <= kept <= len(listed)
