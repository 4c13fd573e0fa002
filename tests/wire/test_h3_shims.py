"""The probes behind ``_wire/http3/shims.py``: the client wraps aioquic's private handlers (its
stream errors) only when this aioquic has each, taking what it is given there; otherwise it
runs aioquic's own (a malformed response closes the connection: safe, not isolated). Its limits
(no QPACK dynamic table, the field-section limit advertised) are set on aioquic's private
names, or the connection is not used (``LimitsUnsupported``)."""

from __future__ import annotations

import pytest
from aioquic.h3.connection import H3Connection
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

from trio_retry._wire.http3 import shims


def quic() -> QuicConnection:
    return QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=["h3"]))


def test_this_aioquic_has_what_is_wrapped() -> None:
    assert shims._wrappable()
    made = shims.client_h3(quic(), max_header_bytes=65536)
    assert isinstance(made, shims.StreamErrorsH3Connection)


@pytest.mark.parametrize("name", sorted(shims._WRAPPED))
def test_a_missing_handler_means_aioquics_own(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.delattr(H3Connection, name)
    assert not shims._wrappable()


def test_a_handler_taking_other_parameters_means_aioquics_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def renamed(self: H3Connection, stream: object, data: bytes, ended: bool) -> list[object]:
        return []

    monkeypatch.setattr(H3Connection, "_receive_request_or_push_data", renamed)
    assert not shims._wrappable()


def test_without_the_wrappers_the_client_is_pushless_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shims, "_STREAM_ERRORS", False)
    made = shims.client_h3(quic(), max_header_bytes=65536)
    assert type(made) is shims.PushlessH3Connection


def test_the_limits_are_in_the_settings_sent() -> None:
    made = shims.client_h3(quic(), max_header_bytes=12_345)
    sent = made.sent_settings or {}
    assert {key: sent.get(key) for key in (0x1, 0x6, 0x7)} == {0x1: 0, 0x6: 12_345, 0x7: 0}


def test_an_aioquic_without_the_decoder_replaced_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aioquic's QPACK decoder is made in its constructor under the name ``_decoder``; one
    that is not there (or is no ``pylsqpack.Decoder``) cannot be given capacity 0."""
    import types

    import aioquic.h3.connection

    class Elsewhere:
        def __init__(self, *args: object) -> None:
            pass

    # An aioquic whose decoder is made by something else than pylsqpack's Decoder.
    other = types.SimpleNamespace(
        Decoder=Elsewhere, Encoder=aioquic.h3.connection.pylsqpack.Encoder
    )
    monkeypatch.setattr(aioquic.h3.connection, "pylsqpack", other)
    with pytest.raises(shims.LimitsUnsupported, match="_decoder"):
        shims.client_h3(quic(), max_header_bytes=65536)
