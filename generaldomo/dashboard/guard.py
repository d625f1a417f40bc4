"""Who may see the dashboard and change what it shows: the Host check, the token, the checks against cross-site
requests, and the headers every answer carries.

Rules of this module (an ASGI middleware in front of the whole app):

- **Host**: the request's ``Host`` must name one of the allowed hosts (by default the loopback names), so a
  page of another site that has its own name resolve to this machine (DNS rebinding) is refused (``400``).
- **Token**: when the dashboard has one (always when it listens beyond loopback), every request carries it:
  ``Authorization: Bearer TOKEN``, or the cookie that opening ``/?token=TOKEN`` sets (``HttpOnly``,
  ``SameSite=Strict``; the address is then redirected to ``/`` so that the token leaves the location bar).
  Otherwise ``401``. Tokens are compared in constant time. A token is any printable text of at least
  :data:`MIN_TOKEN` characters (spaces and non-ASCII letters too, UTF-8 on the wire), without spaces at its
  ends; the cookie holds a value derived from it (an HMAC), never the token, so any such token signs in.
- **Redirects** go to this dashboard's own paths only: the address that carried the token is answered with
  its own path (leading slashes collapsed, percent-encoded), never another site's.
- **Cross-site requests**: a request that changes something (any method but GET and HEAD) must come from the
  page itself: its ``Origin`` equal to the dashboard's own, ``Sec-Fetch-Site`` (when the browser sends it)
  ``same-origin``, and an ``X-CSRF-Token`` header equal to the token the page was served with. Otherwise
  ``403``. The page is never framed by another site (``frame-ancestors 'none'``).
- Every answer says: no caching of the API, no framing, no sniffing, no referrer, scripts and styles from this
  origin only (Content-Security-Policy).

It knows nothing of the broker or of what the routes do.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final
from urllib.parse import parse_qsl, quote, urlencode

import attrs

__all__ = [
    "CSRF_HEADER",
    "HEADERS",
    "LOOPBACK_HOSTS",
    "MIN_TOKEN",
    "SAFE_METHODS",
    "ASGIApp",
    "ASGISend",
    "Guard",
    "Policy",
    "Receive",
    "Scope",
    "cookie_value",
    "host_name",
    "is_loopback",
    "new_token",
    "own_path",
    "token_problem",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, ASGISend], Awaitable[None]]

LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
CSRF_HEADER: Final = "x-csrf-token"
SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
MIN_TOKEN: Final = 16  # characters a token must have at least
HEADERS: Final = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    ),
)


def is_loopback(host: str) -> bool:
    """True when ``host`` (a name or an address, IPv6 with or without brackets) is this machine's loopback."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A fresh random token (for the dashboard's address, or its CSRF token)."""
    return secrets.token_urlsafe(24)


def host_name(header: str) -> str:
    """The host of a ``Host`` header, without its port and brackets, in lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _same(given: str | bytes | None, expected: str) -> bool:
    if given is None:
        return False
    return hmac.compare_digest(given.encode() if isinstance(given, str) else given, expected.encode())


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a dashboard token (None: it can)."""
    if len(token) < MIN_TOKEN:
        return f"a dashboard token needs at least {MIN_TOKEN} characters"
    if not token.isprintable() or token != token.strip():
        return (
            "a dashboard token may hold any printable characters (spaces inside it too), but no control "
            "characters and no spaces at its ends"
        )
    return None


def cookie_value(token: str) -> str:
    """What the sign-in cookie holds for ``token``: derived from it, cookie-safe whatever its characters."""
    return hmac.new(token.encode(), b"generaldomo-dashboard-cookie", hashlib.sha256).hexdigest()


def own_path(path: str) -> str:
    """``path`` as a redirect target that stays on this site: one leading slash, percent-encoded."""
    return quote("/" + path.lstrip("/\\"), safe="/")


def _query(scope: Scope) -> dict[str, str]:
    """The request's query parameters (percent-escapes read as UTF-8)."""
    return dict(parse_qsl(scope.get("query_string", b"").decode("utf-8", "replace")))


@attrs.frozen
class Policy:
    """What the guard enforces: the allowed host names, the token (None: none needed) and the CSRF token."""

    hosts: frozenset[str] = LOOPBACK_HOSTS
    token: str | None = None
    csrf: str = attrs.field(factory=new_token)

    @classmethod
    def of(cls, hosts: Iterable[str] = (), token: str | None = None) -> Policy:
        """The policy for the loopback names and ``hosts``; ValueError for a token that cannot be one."""
        problem = None if token is None else token_problem(token)
        if problem is not None:
            raise ValueError(problem)
        return cls(LOOPBACK_HOSTS | {host_name(h) for h in hosts}, token)


class Guard:
    """The ASGI middleware that enforces a :class:`Policy` in front of ``app``; see the module docstring."""

    def __init__(self, app: ASGIApp, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: ASGISend) -> None:
        if scope["type"] == "websocket":  # the dashboard has none: refused before any check
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _answer(send, *refusal)
            return
        query = _query(scope)
        if self.policy.token is not None and "token" in query:  # a good token in the address: keep it in a cookie
            rest = urlencode({k: v for k, v in query.items() if k != "token"})
            cookie = f"{self._cookie(scope)}={cookie_value(self.policy.token)}; Path=/; HttpOnly; SameSite=Strict"
            extra = [
                (b"location", (own_path(scope["path"]) + (f"?{rest}" if rest else "")).encode()),
                (b"set-cookie", cookie.encode()),
            ]
            await _answer(send, 303, "signed in", extra)
            return

        async def guarded(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self.app(scope, receive, guarded)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """The status and text that refuse this request, or None when it may go on."""
        host = headers.get("host", "")
        if host_name(host) not in self.policy.hosts:
            return 400, "this dashboard does not answer to that host name (see --allow-host)"
        if self.policy.token is not None and not self._signed_in(scope, headers):
            return 401, "this dashboard needs its token: open the address with ?token=... that it printed"
        if scope["method"] not in SAFE_METHODS:
            origin = f"{scope.get('scheme', 'http')}://{host}"
            if headers.get("origin") != origin or headers.get("sec-fetch-site", "same-origin") != "same-origin":
                return 403, "cross-site request refused"
            if not _same(headers.get(CSRF_HEADER), self.policy.csrf):
                return 403, "missing or wrong CSRF token (reload the page)"
        return None

    def _signed_in(self, scope: Scope, headers: dict[str, str]) -> bool:
        token = self.policy.token
        assert token is not None
        authorization = headers.get("authorization", "")
        given = authorization[7:].strip().encode("latin-1")  # the header's bytes: the token's UTF-8
        if authorization.lower().startswith("bearer ") and _same(given, token):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed Cookie header signs nobody in
            return False
        morsel = cookie.get(self._cookie(scope))
        if morsel is not None and _same(morsel.value, cookie_value(token)):
            return True
        return _same(_query(scope).get("token"), token)

    @staticmethod
    def _cookie(scope: Scope) -> str:
        """The token's cookie name, one per port (cookies are not kept apart by port)."""
        server = scope.get("server") or ("", 0)
        return f"generaldomo-dashboard-{server[1]}"


async def _answer(send: ASGISend, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = (text + "\n").encode()
    start = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*start, *HEADERS, *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
