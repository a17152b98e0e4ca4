"""The preview proxy's header rewriting (hop-by-hop headers, credentials, Location and Set-Cookie), and what the
full-path form (``/apps/{port}/``) sends instead: the whole path, the app's own Location and Set-Cookie."""

from __future__ import annotations

from starlette.requests import Request

from sandbox.agent.ports import parse_listening, user_port_refusal
from sandbox.api.preview.proxy import _upstream_target, prefix_of
from sandbox.api.preview.rewrite import request_headers, response_headers, rewrite_location, rewrite_set_cookie
from sandbox.service.preview import port_path

P = "/v1/sandboxes/sb-1/ports/8000"
A = "/v1/sandboxes/sb-1/apps/8000"
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


def test_the_full_path_form_passes_location_and_set_cookie_as_the_app_wrote_them() -> None:
    app_wrote = [
        (b"Connection", b"close, X-Hop"), (b"X-Hop", b"1"), (b"Transfer-Encoding", b"chunked"),
        (b"Set-Cookie", b"_xsrf=1; Path=/"), (b"Set-Cookie", f"u=2; Path={A}/; Domain=localhost".encode()),
        (b"Location", b"/login"), (b"Location", b"http://127.0.0.1:8000/x"), (b"Content-Type", b"text/html"),
    ]  # fmt: skip
    assert response_headers(app_wrote, prefix=A, host=HOST, rewrite_paths=False) == [
        (b"set-cookie", b"_xsrf=1; Path=/"), (b"set-cookie", f"u=2; Path={A}/; Domain=localhost".encode()),
        (b"location", b"/login"), (b"location", b"http://127.0.0.1:8000/x"), (b"content-type", b"text/html"),
    ]  # fmt: skip
    rewritten = dict(response_headers(app_wrote[3:], prefix=A, host=HOST))  # the stripping form's default
    assert rewritten[b"location"] == f"{A}/x".encode()


def test_the_full_path_form_sends_the_whole_raw_path_and_the_same_forwarded_headers() -> None:
    assert port_path("sb-1", 8000) == P + "/" and prefix_of("sb-1", 8000) == P
    assert port_path("sb-1", 8000, full_path=True) == A + "/" and prefix_of("sb-1", 8000, full_path=True) == A

    def request(path: str, raw: str, query: bytes = b"") -> Request:
        return Request({"type": "http", "path": path, "raw_path": raw.encode(), "query_string": query, "headers": []})

    encoded = request(A + "/tree/a b", A + "/tree/a%20b", b"x=1&y=%2F")
    assert _upstream_target(encoded, A, full_path=True) == A + "/tree/a%20b?x=1&y=%2F"
    assert _upstream_target(request(P + "/tree/a b", P + "/tree/a%20b", b"x=1"), P) == "/tree/a%20b?x=1"
    assert _upstream_target(request(A + "/", A + "/"), A, full_path=True) == A + "/"
    assert _upstream_target(request(P + "/", P + "/"), P) == "/"
    sent = dict(request_headers([], prefix=A, host=HOST, scheme="http", client=None, strip_authorization=True))
    assert sent[b"x-forwarded-prefix"] == A.encode() and sent[b"x-forwarded-host"] == HOST.encode()


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
