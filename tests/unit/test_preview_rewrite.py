"""The preview proxy's header rewriting: hop-by-hop headers, credentials, Location and Set-Cookie."""

from __future__ import annotations

from sandbox.agent.ports import parse_listening, user_port_refusal
from sandbox.api.preview_rewrite import request_headers, response_headers, rewrite_location, rewrite_set_cookie

P = "/v1/sandboxes/sb-1/ports/8000"
HOST = "cp.example:8080"


def test_request_headers_drop_hop_by_hop_credentials_and_the_preview_cookie() -> None:
    out = dict(
        request_headers(
            [
                (b"Connection", b"keep-alive, X-Secret"), (b"X-Secret", b"1"), (b"Keep-Alive", b"5"),
                (b"Authorization", b"Bearer t"), (b"Cookie", b"a=1; sandbox_preview=zzz; b=2"),
                (b"X-Forwarded-Prefix", b"/evil"), (b"Accept", b"text/html"), (b"X-Forwarded-For", b"10.0.0.1"),
            ],
            prefix=P, host=HOST, scheme="https", client="127.0.0.1", strip_authorization=True,
        )
    )  # fmt: skip
    assert out[b"accept"] == b"text/html"
    assert out[b"cookie"] == b"a=1; b=2"
    assert out[b"x-forwarded-prefix"] == P.encode()
    assert out[b"x-forwarded-host"] == HOST.encode() and out[b"x-forwarded-proto"] == b"https"
    assert out[b"x-forwarded-for"] == b"10.0.0.1, 127.0.0.1"
    for gone in (b"connection", b"x-secret", b"keep-alive", b"authorization"):
        assert gone not in out


def test_only_the_preview_cookie_leaves() -> None:
    out = dict(request_headers([(b"cookie", b"sandbox_preview=x")], prefix=P, host=HOST, scheme="http",
                               client=None, strip_authorization=True))  # fmt: skip
    assert b"cookie" not in out and b"x-forwarded-for" not in out


def test_locations_from_the_root_move_into_the_prefix() -> None:
    assert rewrite_location("/login?next=/a", prefix=P, host=HOST) == P + "/login?next=/a"
    assert rewrite_location(P + "/already", prefix=P, host=HOST) == P + "/already"
    assert rewrite_location("relative/x", prefix=P, host=HOST) == "relative/x"
    assert rewrite_location("//other.example/x", prefix=P, host=HOST) == "//other.example/x"
    assert rewrite_location(f"https://{HOST}/x", prefix=P, host=HOST) == f"https://{HOST}{P}/x"
    assert rewrite_location("http://127.0.0.1:8000/x?y=1", prefix=P, host=HOST) == P + "/x?y=1"
    assert rewrite_location("https://example.org/x", prefix=P, host=HOST) == "https://example.org/x"


def test_set_cookie_paths_move_into_the_prefix_and_domains_go() -> None:
    assert rewrite_set_cookie("s=1; Path=/; HttpOnly", prefix=P) == f"s=1; Path={P}/; HttpOnly"
    assert rewrite_set_cookie("s=1; Path=/api; Domain=localhost", prefix=P) == f"s=1; Path={P}/api"
    assert rewrite_set_cookie("s=1", prefix=P) == f"s=1; Path={P}/"


def test_response_headers_keep_repeats_and_drop_hop_by_hop() -> None:
    out = response_headers(
        [(b"Transfer-Encoding", b"chunked"), (b"Set-Cookie", b"a=1"), (b"Set-Cookie", b"b=2; Path=/x"),
         (b"Location", b"/next"), (b"Content-Type", b"text/plain")],
        prefix=P, host=HOST,
    )  # fmt: skip
    assert out == [
        (b"set-cookie", f"a=1; Path={P}/".encode()), (b"set-cookie", f"b=2; Path={P}/x".encode()),
        (b"location", f"{P}/next".encode()), (b"content-type", b"text/plain"),
    ]  # fmt: skip


def test_user_ports_and_the_proc_listing() -> None:
    assert user_port_refusal(8000, {5900}) is None
    assert user_port_refusal(5900, {5900}) is not None
    assert user_port_refusal(80, set()) is not None
    text = (
        "  sl  local_address rem_address   st\n"
        "   0: 0100007F:1F40 00000000:0000 0A 0\n"
        "   1: 0100007F:1F41 0100007F:9C40 01 0\n"
    )
    assert parse_listening(text) == [("127.0.0.1", 8000)]
    six = "h\n   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A 0\n"
    assert parse_listening(six) == [("::1", 8000)]
