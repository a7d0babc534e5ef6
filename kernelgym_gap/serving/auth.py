"""One token rule for both servers: the token travels in `Authorization: Bearer TOKEN` only (never a query
parameter, which lands in access logs, proxies' logs and shell history, nor a header of our own), is compared
in constant time, and a token the operator chose is never printed: only its fingerprint (the first 12 hex
digits of its SHA-256), which is enough to tell which token a server runs with."""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets

LOOPBACK_NAMES = ("localhost",)


class TokenRefused(Exception):
    """401 (no token) or 403 (a wrong one), with the message to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def bearer_of(headers) -> str | None:
    """The token of an `Authorization: Bearer` header (any case of `Bearer`), None without one."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return None


def check_bearer(headers, token: str, what: str = "this request") -> None:
    given = bearer_of(headers)
    if not given:
        raise TokenRefused(401, f"a token is required for {what} (Authorization: Bearer TOKEN)")
    if not hmac.compare_digest(given.encode("utf-8", "replace"), token.encode()):
        raise TokenRefused(403, "the token is not valid for this server")


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:12]


def new_token() -> str:
    return secrets.token_urlsafe(18)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def announce(token: str, generated: bool, host: str, env_name: str) -> list[str]:
    """What a server prints about its token and address at start: a generated token in full (the operator
    has no other way to learn it), a chosen one as its fingerprint; a warning when it listens beyond loopback."""
    lines = [f"write token: {token}  (generated; set --token or ${env_name})" if generated
             else f"write token: the one given (sha256 fingerprint {fingerprint(token)})"]
    if not is_loopback(host):
        lines.append(f"warning: listening on {host}, beyond this machine: anyone who can reach it may try the "
                     "token; the traffic (token included) is plain HTTP, so put it behind TLS or an SSH tunnel")
    return lines
