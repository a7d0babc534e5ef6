"""What the leaderboard accepts from the network: the token check, body limits and the validation of a
submission's fields. Everything refused raises Rejected (a 4xx status and a message) before anything is
stored. `s` is the app's Settings (token, registry, backend, max_source_bytes)."""
from __future__ import annotations

import hmac
import re
from typing import TYPE_CHECKING

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.core.task import DSLS

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._:@/+()-]{0,99}$")
SUBMISSION_FIELDS = {"task", "name", "source", "dsl", "backend", "remeasure"}

if TYPE_CHECKING:
    from starlette.requests import Request


class Rejected(Exception):
    """A submission the server refuses; nothing was stored."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def check_token(s, given: str | None) -> None:
    if not given:
        raise Rejected(401, "a token is required to submit (Authorization: Bearer TOKEN)")
    if not hmac.compare_digest(given.encode(), s.token.encode()):
        raise Rejected(403, "the token is not valid for this server")


def bearer(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return request.headers.get("x-token") or None


def check_length(request: Request, limit: int) -> None:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise Rejected(400, "invalid Content-Length") from None
        if n > limit:
            raise Rejected(413, f"the request body is {n} bytes; the limit is {limit}")


async def read_body(request: Request, limit: int) -> bytes:
    check_length(request, limit)
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise Rejected(413, f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def validate(s, data) -> dict:
    """A clean submission from untrusted fields, or Rejected (4xx). Stores nothing."""
    if not isinstance(data, dict):
        raise Rejected(400, "the body must be a JSON object")
    unknown = set(data) - SUBMISSION_FIELDS
    if unknown:
        raise Rejected(422, f"unknown field(s) {sorted(unknown)}; expected {sorted(SUBMISSION_FIELDS)}")
    for field in ("task", "name", "source"):
        value = data.get(field)
        if field == "source" and isinstance(value, bytes) and value.strip():   # an uploaded file, as is
            continue
        if not isinstance(value, str) or not value.strip():
            raise Rejected(422, f"field {field!r} is required and must be a non-empty string")
    raw = data["source"]
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise Rejected(422, "the source is not valid UTF-8 (it contains lone surrogates)") from None
    if len(raw) > s.max_source_bytes:
        raise Rejected(413, f"the source is {len(raw)} bytes; the limit is {s.max_source_bytes}")
    name = data["name"].strip()
    if not NAME_RE.match(name):
        raise Rejected(422, "name must be 1-100 characters: letters, digits, space and ._:@/+()- "
                            "(starting with a letter or digit)")
    try:
        task = s.registry.get(data["task"].strip())
    except KernelGymError as e:
        raise Rejected(422, str(e)) from None
    dsl = data.get("dsl") or "triton"
    if dsl not in DSLS:
        raise Rejected(422, f"unknown dsl {dsl!r}: choose one of {', '.join(DSLS)}")
    backend = data.get("backend") or s.backend
    allowed = sorted({"cpu", s.backend})
    if backend not in allowed:
        raise Rejected(422, f"this server evaluates on {' or '.join(allowed)}, not {backend!r}")
    remeasure = data.get("remeasure", False)
    if not isinstance(remeasure, bool):
        raise Rejected(422, "remeasure must be true or false")
    return {"task_id": task.id, "submitter": name, "source": raw, "dsl": dsl, "backend": backend,
            "remeasure": remeasure}
