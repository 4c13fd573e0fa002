"""The probe behind ``_wire/http3/shims.py``'s stream errors: the client wraps aioquic's private
handlers only when this aioquic has each, taking what it is given there; otherwise it runs
aioquic's own (a malformed response closes the connection: safe, not isolated)."""

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
    made = shims.client_h3(quic())
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
    made = shims.client_h3(quic())
    assert type(made) is shims.PushlessH3Connection
