"""QUIC, TLS and HTTP/3 error codes in words.

One job: the tables that turn a code a QUIC connection or an HTTP/3 stream ended with into
what a person reads ("TLS alert 80 (internal error)", not "error 0x150"). Every message of
``_wire/http3`` that carries such a code takes its words from here.

The code spaces (a CONNECTION_CLOSE frame says which one its code is in):

- QUIC transport errors (RFC 9000 §20.1; 0x11 from RFC 9368), in a transport close (frame
  type 0x1c). Among them ``CRYPTO_ERROR``, 0x0100 + a TLS alert (RFC 9001 §4.8): the TLS
  alert descriptions are RFC 8446 §6 (and RFC 8446 §B.2's registry).
- Application errors, in an application close (0x1d) and in a stream's RESET_STREAM or
  STOP_SENDING: HTTP/3's (RFC 9114 §8.1) and QPACK's (RFC 9204 §6).
"""

from __future__ import annotations

__all__ = [
    "CERTIFICATE_ALERTS",
    "H3_EXCESSIVE_LOAD",
    "H3_FRAME_ERROR",
    "H3_ID_ERROR",
    "H3_INTERNAL_ERROR",
    "H3_MESSAGE_ERROR",
    "H3_NO_ERROR",
    "H3_REQUEST_CANCELLED",
    "H3_REQUEST_REJECTED",
    "H3_STREAM_CREATION_ERROR",
    "application_error",
    "closed_words",
    "tls_alert",
    "transport_error",
]

#: RFC 9000 §20.1 (and RFC 9368 §5 for 0x11).
TRANSPORT_ERRORS = {
    0x00: "NO_ERROR",
    0x01: "INTERNAL_ERROR",
    0x02: "CONNECTION_REFUSED",
    0x03: "FLOW_CONTROL_ERROR",
    0x04: "STREAM_LIMIT_ERROR",
    0x05: "STREAM_STATE_ERROR",
    0x06: "FINAL_SIZE_ERROR",
    0x07: "FRAME_ENCODING_ERROR",
    0x08: "TRANSPORT_PARAMETER_ERROR",
    0x09: "CONNECTION_ID_LIMIT_ERROR",
    0x0A: "PROTOCOL_VIOLATION",
    0x0B: "INVALID_TOKEN",
    0x0C: "APPLICATION_ERROR",
    0x0D: "CRYPTO_BUFFER_EXCEEDED",
    0x0E: "KEY_UPDATE_ERROR",
    0x0F: "AEAD_LIMIT_REACHED",
    0x10: "NO_VIABLE_PATH",
    0x11: "VERSION_NEGOTIATION_ERROR",
}

#: TLS alert descriptions (RFC 8446 §6, the TLS Alerts registry).
TLS_ALERTS = {
    0: "close notify",
    10: "unexpected message",
    20: "bad record MAC",
    22: "record overflow",
    40: "handshake failure",
    42: "bad certificate",
    43: "unsupported certificate",
    44: "certificate revoked",
    45: "certificate expired",
    46: "certificate unknown",
    47: "illegal parameter",
    48: "unknown CA",
    49: "access denied",
    50: "decode error",
    51: "decrypt error",
    70: "protocol version",
    71: "insufficient security",
    80: "internal error",
    86: "inappropriate fallback",
    90: "user canceled",
    109: "missing extension",
    110: "unsupported extension",
    112: "unrecognized name",
    113: "bad certificate status response",
    115: "unknown PSK identity",
    116: "certificate required",
    120: "no application protocol",
}

#: The alerts that mean a certificate was refused (RFC 8446 §6.2).
CERTIFICATE_ALERTS = frozenset({42, 43, 44, 45, 46, 48})

#: The HTTP/3 codes the client sends, or tells apart (RFC 9114 §8.1).
H3_NO_ERROR = 0x100
H3_INTERNAL_ERROR = 0x102
H3_STREAM_CREATION_ERROR = 0x103
H3_FRAME_ERROR = 0x106
H3_EXCESSIVE_LOAD = 0x107
H3_ID_ERROR = 0x108
H3_REQUEST_REJECTED = 0x10B
H3_REQUEST_CANCELLED = 0x10C
H3_MESSAGE_ERROR = 0x10E

#: HTTP/3 (RFC 9114 §8.1) and QPACK (RFC 9204 §6) error codes.
APPLICATION_ERRORS = {
    0x100: "H3_NO_ERROR",
    0x101: "H3_GENERAL_PROTOCOL_ERROR",
    0x102: "H3_INTERNAL_ERROR",
    0x103: "H3_STREAM_CREATION_ERROR",
    0x104: "H3_CLOSED_CRITICAL_STREAM",
    0x105: "H3_FRAME_UNEXPECTED",
    0x106: "H3_FRAME_ERROR",
    0x107: "H3_EXCESSIVE_LOAD",
    0x108: "H3_ID_ERROR",
    0x109: "H3_SETTINGS_ERROR",
    0x10A: "H3_MISSING_SETTINGS",
    0x10B: "H3_REQUEST_REJECTED",
    0x10C: "H3_REQUEST_CANCELLED",
    0x10D: "H3_REQUEST_INCOMPLETE",
    0x10E: "H3_MESSAGE_ERROR",
    0x10F: "H3_CONNECT_ERROR",
    0x110: "H3_VERSION_FALLBACK",
    0x200: "QPACK_DECOMPRESSION_FAILED",
    0x201: "QPACK_ENCODER_STREAM_ERROR",
    0x202: "QPACK_DECODER_STREAM_ERROR",
}

_CRYPTO_ERROR = 0x100


def tls_alert(code: int, frame_type: int | None) -> int | None:
    """The TLS alert a connection close carries (a transport close whose code is
    ``CRYPTO_ERROR``), else ``None``. ``frame_type`` is ``None`` for an application close."""
    if frame_type is None or not _CRYPTO_ERROR <= code < _CRYPTO_ERROR + 0x100:
        return None
    return code - _CRYPTO_ERROR


def transport_error(code: int) -> str:
    """A QUIC transport error code in words: ``"TLS alert 80 (internal error)"``,
    ``"PROTOCOL_VIOLATION (0xa)"``."""
    if _CRYPTO_ERROR <= code < _CRYPTO_ERROR + 0x100:
        alert = code - _CRYPTO_ERROR
        return f"TLS alert {alert} ({TLS_ALERTS.get(alert, 'unknown alert')})"
    name = TRANSPORT_ERRORS.get(code)
    return f"QUIC error 0x{code:x}" if name is None else f"{name} (0x{code:x})"


def application_error(code: int) -> str:
    """An HTTP/3 or QPACK error code in words: ``"H3_REQUEST_REJECTED (0x10b)"``."""
    name = APPLICATION_ERRORS.get(code)
    return f"application error 0x{code:x}" if name is None else f"{name} (0x{code:x})"


def closed_words(code: int, frame_type: int | None, reason: str) -> str:
    """A connection close in words, from its code, its frame type (``None``: an application
    close) and the peer's reason phrase if any."""
    words = application_error(code) if frame_type is None else transport_error(code)
    return f"{words}: {reason}" if reason else words
