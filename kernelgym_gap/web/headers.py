"""Security headers on every response of the leaderboard app (errors included)."""
from __future__ import annotations


SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"script-src 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Pure ASGI middleware, outside everything else (500s, 413s and 503s included): every response forbids
    scripts, framing and MIME sniffing (pages show submitted source: it is escaped by Jinja2, and would not
    run even if it were not)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in SECURITY_HEADERS if k not in names]
            await send(message)
        await self.app(scope, receive, send_with_headers)
