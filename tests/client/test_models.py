"""Values the client builds on every call: what is cached must follow every change."""

from __future__ import annotations

import pytest

from trio_retry import Evidence, Headers, InvalidRequest, Response
from trio_retry._models import URL


def test_headers_encoding_and_names_follow_every_change() -> None:
    headers = Headers({"Accept": "*/*"})
    assert "accept" in headers
    assert headers.raw() == [(b"Accept", b"*/*")]
    headers.add("X-One", "1")
    assert "x-one" in headers
    assert headers.raw() == [(b"Accept", b"*/*"), (b"X-One", b"1")]
    headers.set("accept", "text/html")
    assert headers.raw() == [(b"X-One", b"1"), (b"accept", b"text/html")]
    headers.remove("X-ONE")
    assert "x-one" not in headers
    assert headers.raw() == [(b"accept", b"text/html")]


def test_a_copy_and_a_returned_list_never_change_the_original() -> None:
    original = Headers({"A": "1"})
    assert original.raw() == [(b"A", b"1")]  # encoded and cached
    copy = original.copy()
    copy.add("B", "2")
    assert "b" not in original
    assert original.raw() == [(b"A", b"1")]
    assert copy.raw() == [(b"A", b"1"), (b"B", b"2")]
    extended = original.raw()
    extended.append((b"host", b"example"))
    assert original.raw() == [(b"A", b"1")]


def test_response_headers_from_the_wire_are_decoded_when_read() -> None:
    url = URL("http://example.test/")
    wire = [(b"Content-Type", b"text/plain; charset=latin-1"), (b"X-Caf\xe9", b"cr\xe8me")]
    response = Response(status=200, reason="OK", headers=wire, http_version="HTTP/1.1",
                        url=url, request_method="GET", content=b"x")  # fmt: skip
    assert response.headers["x-caf\u00e9"] == "cr\u00e8me"
    assert response.headers is response.headers  # decoded once
    assert response.encoding == "latin-1"
    given = Headers({"A": "1"})
    assert Response(status=204, reason="", headers=given, http_version="HTTP/2", url=url,
                    request_method="GET", content=b"").headers is given  # fmt: skip


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("http://a.test/x", "a.test"),
        ("http://a.test:80/", "a.test"),
        ("http://a.test:8080/", "a.test:8080"),
        ("https://a.test:443/", "a.test"),
        ("https://[::1]/", "[::1]"),
        ("https://[::1]:8443/p?q=1", "[::1]:8443"),
    ],
)
def test_the_host_header_of_a_url(url: str, host: str) -> None:
    assert URL(url).host_header == host
    assert URL(URL(url)).host_header == host
    assert URL(url).with_params({"k": "v"}).host_header == host


# -- internationalised host names (SPEC §17): the IDNA A-label from parsing on ------------------


@pytest.mark.parametrize(
    ("url", "host", "shown"),
    [
        ("http://bücher.example/", "xn--bcher-kva.example", "http://xn--bcher-kva.example/"),
        ("http://BÜCHER.example/", "xn--bcher-kva.example", "http://xn--bcher-kva.example/"),
        # IDNA 2008 (UTS #46, nontransitional): ß is kept, not mapped to "ss" as IDNA 2003 does
        ("https://straße.de:8443/p?q=1", "xn--strae-oqa.de", "https://xn--strae-oqa.de:8443/p?q=1"),
        ("http://例え.テスト./", "xn--r8jz45g.xn--zckzah.", "http://xn--r8jz45g.xn--zckzah./"),
    ],
)
def test_an_international_host_is_its_a_label(url: str, host: str, shown: str) -> None:
    parsed = URL(url)
    assert parsed.host == host
    assert parsed.origin.host == host
    port = parsed.port
    assert parsed.host_header == (host if port in (80, 443) else f"{host}:{port}")
    assert str(parsed) == shown  # str() and Response.url show the A-label too
    assert URL(str(parsed)) == parsed == URL(parsed)
    assert parsed.join("/other").host == host


@pytest.mark.parametrize(
    "host",
    # (an xn-- label is the exception: it is decoded and checked, tests/client/test_host_names)
    ["a.test", "127.0.0.1", "[::1]", "example.com.", "_srv.example", "r3---sn-ab.example"],
)
def test_an_ascii_host_is_kept_without_idna(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import idna

    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("idna called for an ASCII host")

    monkeypatch.setattr(idna, "encode", refuse)
    assert URL(f"http://{host}/").host == host.strip("[]")


@pytest.mark.parametrize(
    "url",
    [
        "http://a..b/",
        "http://.a/",
        "http://" + "x" * 64 + ".example/",
        "http://" + ".".join(["abcdefghi"] * 26) + "/",  # over 253 characters
        "http://☃.net/",  # a code point IDNA 2008 disallows
        "http://bücher..example/",
        "http://ü" + "x" * 63 + ".example/",
    ],
)
def test_a_host_that_cannot_be_encoded_is_invalid_request(url: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        URL(url)
    assert caught.value.evidence is Evidence.NOT_SENT
    assert "host" in str(caught.value)
