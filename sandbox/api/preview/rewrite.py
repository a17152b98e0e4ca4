"""What a preview URL's proxy changes in the headers that pass through it (pure functions, no I/O).

Requests: hop-by-hop headers go (RFC 9110 §7.6.1: the fixed ones and any the Connection header names), and so do
the platform's credentials (the bearer token, the preview cookie): the app in the sandbox never sees them. The
app is told where it is served with ``X-Forwarded-Prefix`` (and ``-Host``, ``-Proto``, ``-For``).

Responses: hop-by-hop headers go; a ``Location`` that points at the app's root (``/x``, or an absolute URL on the
control plane's own host outside the prefix) is moved into the prefix; a ``Set-Cookie``'s ``Path`` is moved into
the prefix too (and its ``Domain`` dropped), so an app's cookies stay with that app. The full-path form
(``/apps/{port}/``: the app is told its base path and gets the whole path) keeps both as the app wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
PREVIEW_COOKIE = "sandbox_preview"
FORWARDED = (b"x-forwarded-prefix", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-for")

Headers = list[tuple[bytes, bytes]]


def _hop_by_hop(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    named = {
        token.strip().lower()
        for name, value in headers
        if name.lower() == b"connection"
        for token in value.split(b",")
        if token.strip()
    }
    return HOP_BY_HOP | named


def request_headers(
    headers: Iterable[tuple[bytes, bytes]],
    *,
    prefix: str,
    host: str,
    scheme: str,
    client: str | None,
    strip_authorization: bool,
) -> Headers:
    """The headers to send the app: ``headers`` less hop-by-hop ones and the platform's credentials, plus the
    ``X-Forwarded-*`` ones (replacing any the caller sent)."""
    headers = list(headers)
    drop = _hop_by_hop(headers) | set(FORWARDED)
    out: Headers = []
    for name, value in headers:
        lower = name.lower()
        if lower in drop or (strip_authorization and lower == b"authorization"):
            continue
        if lower == b"cookie":
            kept = strip_cookie(value.decode("latin-1"), PREVIEW_COOKIE)
            if kept:
                out.append((b"cookie", kept.encode("latin-1")))
            continue
        out.append((lower, value))
    forwarded_for = [v for n, v in headers if n.lower() == b"x-forwarded-for"]
    chain = b", ".join([*forwarded_for, *([client.encode()] if client else [])])
    out += [(b"x-forwarded-prefix", prefix.encode()), (b"x-forwarded-host", host.encode())]
    out.append((b"x-forwarded-proto", scheme.encode()))
    if chain:
        out.append((b"x-forwarded-for", chain))
    return out


def strip_cookie(header: str, name: str) -> str:
    """A Cookie header without the cookie ``name``."""
    parts = [p.strip() for p in header.split(";")]
    return "; ".join(p for p in parts if p and p.split("=", 1)[0].strip() != name)


def response_headers(
    headers: Iterable[tuple[bytes, bytes]], *, prefix: str, host: str, rewrite_paths: bool = True
) -> Headers:
    """The app's response headers as the caller gets them: hop-by-hop ones dropped, Location and Set-Cookie paths
    moved into ``prefix`` (the proxy's path prefix, no trailing slash); ``host`` is the control plane's Host.
    ``rewrite_paths=False`` (the full-path form, whose app knows its base path) passes Location and Set-Cookie on
    as the app wrote them."""
    headers = list(headers)
    drop = _hop_by_hop(headers)
    out: Headers = []
    for name, value in headers:
        lower = name.lower()
        if lower in drop:
            continue
        if rewrite_paths and lower == b"location":
            value = rewrite_location(value.decode("latin-1"), prefix=prefix, host=host).encode("latin-1")
        elif rewrite_paths and lower == b"set-cookie":
            value = rewrite_set_cookie(value.decode("latin-1"), prefix=prefix).encode("latin-1")
        out.append((lower, value))
    return out


def rewrite_location(location: str, *, prefix: str, host: str) -> str:
    """``location`` moved into ``prefix`` when it points at the app's root: a path from ``/`` (not ``//host``), or
    an absolute URL on ``host`` (the control plane's, which the app was told in Host) or on the app's loopback."""
    if location.startswith("/") and not location.startswith("//"):
        return location if _inside(location, prefix) else prefix + location
    parts = urlsplit(location)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return location
    path = parts.path or "/"
    if parts.hostname in ("localhost", "127.0.0.1", "::1"):  # the app's own loopback: only the proxy reaches it
        return urlunsplit(("", "", path if _inside(path, prefix) else prefix + path, parts.query, parts.fragment))
    if parts.netloc.rsplit("@", 1)[-1] == host and not _inside(path, prefix):
        return urlunsplit((parts.scheme, parts.netloc, prefix + path, parts.query, parts.fragment))
    return location


def _inside(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def rewrite_set_cookie(value: str, *, prefix: str) -> str:
    """A Set-Cookie whose ``Path`` (``/`` when absent) is moved into ``prefix`` and whose ``Domain`` is dropped."""
    attributes = [a.strip() for a in value.split(";")]
    out = [attributes[0]]
    path = "/"
    for attribute in attributes[1:]:
        key = attribute.split("=", 1)[0].strip().lower()
        if key == "path":
            path = attribute.split("=", 1)[1].strip() if "=" in attribute else "/"
            if not path.startswith("/"):
                path = "/"
        elif key != "domain" and attribute:
            out.append(attribute)
    out.insert(1, "Path=" + (path if _inside(path, prefix) else prefix + (path if path != "/" else "/")))
    return "; ".join(out)
