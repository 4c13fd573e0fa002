"""How large a QPACK field section decodes to, known before it is decoded.

One job: :func:`decoded_size_at_least`, a lower bound of the size a field section decodes to
(RFC 9114 §4.2.2: each field's name and value, plus 32 bytes), read from its encoded bytes
without decoding them, so that a section past ``max_header_bytes`` is refused before the
decoder builds it. Why it is needed: a decoder given a section of a few kilobytes can be made
to build a hundred times that (every byte a reference to a long entry of a table), and
``pylsqpack`` returns the whole field list at once, with no limit of its own. The client
advertises a dynamic table of capacity 0 (``shims.py``), which removes the worst of it (one
byte naming a 4 KiB entry); the static table is left (one byte naming up to 69 bytes:
measured, a 64 KiB section of such bytes built 12.5 MiB of Python objects).

Only what the client allows is read: field lines naming the static table, literal names and
values (RFC 9204 §4.5.2, §4.5.4, §4.5.6). A section that refers to the dynamic table, or that
ends before its last field line does, gets ``None``: the decoder refuses it (a connection error,
QPACK_DECOMPRESSION_FAILED), as the RFC asks of a decoder with no dynamic table. A Huffman-coded
string counts as the fewest characters its bits can code (8 bits for every 30: the longest code
of RFC 7541 Appendix B is 30 bits), so the bound never exceeds the true size; the true size is
checked after decoding (``driver.py``).

The static table's sizes are read from ``pylsqpack`` itself, once (:func:`_static_sizes`): a
section of all 99 references decoded; no copy of RFC 9204 Appendix A here.
"""

from __future__ import annotations

from functools import cache

__all__ = ["FIELD_OVERHEAD", "decoded_size_at_least"]

#: Bytes counted per field on top of its name and value (RFC 9114 §4.2.2, as HTTP/2's
#: SETTINGS_MAX_HEADER_LIST_SIZE counts them).
FIELD_OVERHEAD = 32
_STATIC_ENTRIES = 99  # RFC 9204 Appendix A: indices 0 to 98


@cache
def _static_sizes() -> tuple[tuple[int, int], ...]:
    """``(len(name), len(value))`` of each static table entry, by index."""
    import pylsqpack

    section = bytearray(b"\x00\x00")  # Required Insert Count 0, Base 0
    for index in range(_STATIC_ENTRIES):
        section += _integer(index, 6, 0xC0)  # an indexed field line, T=1: the static table
    _, fields = pylsqpack.Decoder(0, 0).feed_header(0, bytes(section))
    return tuple((len(name), len(value)) for name, value in fields)


def _integer(value: int, bits: int, first: int) -> bytes:
    """``value`` as a prefixed integer (RFC 7541 §5.1) in the low ``bits`` of ``first``."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_integer(data: bytes | bytearray, at: int, bits: int) -> tuple[int, int]:
    """The prefixed integer at ``at`` (its low ``bits``) and the offset after it; raises
    ``IndexError`` when ``data`` ends first, ``ValueError`` past 62 bits."""
    limit = (1 << bits) - 1
    value = data[at] & limit
    at += 1
    if value < limit:
        return value, at
    shift = 0
    while True:
        byte = data[at]
        at += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 62:
            raise ValueError("an integer longer than QPACK allows")


def _read_string(data: bytes | bytearray, at: int, bits: int) -> tuple[int, int]:
    """The least decoded length of the string literal at ``at`` (its Huffman flag is the bit
    above its ``bits``-bit length prefix) and the offset after it."""
    huffman = data[at] & (1 << bits)
    length, at = _read_integer(data, at, bits)
    end = at + length
    if end > len(data):
        raise IndexError("a string past the section's end")
    return (length * 8 // 30 if huffman else length), end


def decoded_size_at_least(section: bytes | bytearray, stop: int) -> int | None:
    """A lower bound of the size ``section`` (a QPACK-encoded field section) decodes to, read
    until it passes ``stop`` (then returned at once); ``None`` when the section refers to the
    dynamic table or is cut short (the decoder refuses those). See the module docstring."""
    static = _static_sizes()
    size = 0
    try:
        required, at = _read_integer(section, 0, 8)
        if required:
            return None  # (it needs inserts into a dynamic table)
        _, at = _read_integer(section, at, 7)  # Base: meaningless without a dynamic table
        end = len(section)
        while at < end:
            first = section[at]
            if first & 0x80:  # 1Txxxxxx: an indexed field line
                if not first & 0x40:
                    return None
                index, at = _read_integer(section, at, 6)
                name, value = static[index]
            elif first & 0x40:  # 01NTxxxx: a literal value, its name from a table
                if not first & 0x10:
                    return None
                index, at = _read_integer(section, at, 4)
                name = static[index][0]
                value, at = _read_string(section, at, 7)
            elif first & 0x20:  # 001NHxxx: a literal name and value
                name, at = _read_string(section, at, 3)
                value, at = _read_string(section, at, 7)
            else:  # 0001xxxx, 0000Nxxx: the dynamic table, after the Base
                return None
            size += name + value + FIELD_OVERHEAD
            if size > stop:
                return size
    except (IndexError, ValueError):
        return None
    return size
