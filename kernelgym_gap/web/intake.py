"""What the leaderboard accepts from the network: the token check, body limits, the form reader and the
validation of a submission's fields. Everything refused raises Rejected (a 4xx status and a message) before
anything is stored. `s` is the app's Settings (token, registry, backend, max_source_bytes).

Order of checks on a write: the body's declared length (limits.BodyLimit, before the app reads a byte),
the token of the `Authorization: Bearer` header (before the body is read), then the body while it streams:
never more than the limit is read (chunked bodies included), nothing is spooled to disk, and the form's
token is checked as soon as its part has arrived (the Submit page sends it before the file).
"""
from __future__ import annotations

import hmac
from typing import TYPE_CHECKING
from urllib.parse import unquote_to_bytes

from kernelgym_gap.core.errors import KernelGymError
from kernelgym_gap.core.task import DSLS
from kernelgym_gap.store.names import InvalidName, submitter_name

from .limits import BodyTooLarge

SUBMISSION_FIELDS = {"task", "name", "source", "dsl", "backend", "remeasure"}
FORM_FIELDS = ("task", "name", "dsl", "source", "token", "file")
MAX_FORM_PARTS = 16

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
    """The token of the `Authorization: Bearer` header (the only header that carries one)."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    return None


def check_length(request: Request, limit: int) -> None:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise Rejected(400, "invalid Content-Length") from None
        if n > limit:
            raise Rejected(413, f"the request body is {n} bytes; the limit is {limit}")


async def _chunks(request: Request, limit: int):
    """The body as it arrives, refused with 413 as soon as it passes `limit` (whatever Content-Length said)."""
    check_length(request, limit)
    n = 0
    try:
        async for chunk in request.stream():
            n += len(chunk)
            if n > limit:
                raise Rejected(413, f"the request body is over the limit of {limit} bytes")
            yield chunk
    except BodyTooLarge as e:
        raise Rejected(413, str(e)) from None


async def read_body(request: Request, limit: int) -> bytes:
    return b"".join([chunk async for chunk in _chunks(request, limit)])


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


async def read_form(request: Request, s, limit: int, token_checked: bool, fields: dict | None = None) -> dict:
    """The Submit form's fields as the exact bytes sent (`source`, the textarea, and `file` included), in
    `fields` as they arrive (so a refusal can show the form again). Unless `token_checked` (a valid
    Authorization header), the `token` field is checked as soon as it has arrived, before the rest of the
    body is read."""
    fields = {} if fields is None else fields
    ctype = request.headers.get("content-type", "")
    kind = ctype.split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        for pair in (await read_body(request, limit)).split(b"&"):
            if pair:
                k, _, v = pair.partition(b"=")
                name = _text(unquote_to_bytes(k.replace(b"+", b" ")))
                if name in FORM_FIELDS and name not in fields:
                    fields[name] = unquote_to_bytes(v.replace(b"+", b" "))
        if not token_checked:
            check_token(s, _text(fields.get("token", b"")).strip() or None)
        return fields
    if kind != "multipart/form-data":
        raise Rejected(415, "send the form as multipart/form-data or application/x-www-form-urlencoded")
    from python_multipart.exceptions import FormParserError
    from python_multipart.multipart import MultipartParser, parse_options_header
    _, params = parse_options_header(ctype)
    boundary = params.get(b"boundary")
    if not boundary:
        raise Rejected(400, "malformed form: no multipart boundary")
    part_limit = s.max_source_bytes + 1        # a larger part is refused while it streams
    state = {"headers": [], "hname": b"", "hvalue": b"", "name": None, "data": bytearray(), "parts": 0}
    done: list[str] = []

    def on_header_field(data, start, end):
        state["hname"] += data[start:end]

    def on_header_value(data, start, end):
        state["hvalue"] += data[start:end]

    def on_header_end():
        state["headers"].append((state["hname"].lower(), state["hvalue"]))
        state["hname"], state["hvalue"] = b"", b""

    def on_headers_finished():
        state["parts"] += 1
        if state["parts"] > MAX_FORM_PARTS:
            raise Rejected(400, f"malformed form: more than {MAX_FORM_PARTS} parts")
        disposition = dict(state["headers"]).get(b"content-disposition", b"")
        _, options = parse_options_header(disposition)
        state["name"] = _text(options.get(b"name", b""))
        state["headers"], state["data"] = [], bytearray()

    def on_part_data(data, start, end):
        if len(state["data"]) + (end - start) > part_limit:
            raise Rejected(413, f"the form field {state['name']!r} is over the limit of {s.max_source_bytes} bytes")
        state["data"] += data[start:end]

    def on_part_end():
        name = state["name"]
        if name in FORM_FIELDS and name not in fields:
            fields[name] = bytes(state["data"])
            done.append(name)
        state["data"] = bytearray()

    parser = MultipartParser(boundary, {"on_header_field": on_header_field, "on_header_value": on_header_value,
                                        "on_header_end": on_header_end, "on_headers_finished": on_headers_finished,
                                        "on_part_data": on_part_data, "on_part_end": on_part_end})
    try:
        async for chunk in _chunks(request, limit):
            parser.write(chunk)
            if not token_checked and "token" in done:
                check_token(s, _text(fields["token"]).strip() or None)    # before the rest is read
                token_checked = True
        parser.finalize()
    except FormParserError as e:
        raise Rejected(400, f"malformed form: {e}") from None
    if not token_checked:
        check_token(s, _text(fields.get("token", b"")).strip() or None)
    return fields


def validate(s, data) -> dict:
    """A clean submission from untrusted fields, or Rejected (4xx). Stores nothing."""
    if not isinstance(data, dict):
        raise Rejected(400, "the body must be a JSON object")
    unknown = set(data) - SUBMISSION_FIELDS
    if unknown:
        raise Rejected(422, f"unknown field(s) {sorted(unknown)}; expected {sorted(SUBMISSION_FIELDS)}")
    for field in ("task", "source"):
        value = data.get(field)
        if field == "source" and isinstance(value, bytes) and value.strip():   # the form's bytes, as sent
            continue
        if not isinstance(value, str) or not value.strip():
            raise Rejected(422, f"field {field!r} is required and must be a non-empty string")
    if not isinstance(data.get("name"), str):
        raise Rejected(422, "field 'name' is required and must be a non-empty string")
    try:
        name = submitter_name(data["name"])          # the CLI's rule and message (store/names.py)
    except InvalidName as e:
        raise Rejected(422, str(e)) from None
    raw = data["source"]
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise Rejected(422, "the source is not valid UTF-8 (it contains lone surrogates)") from None
    if len(raw) > s.max_source_bytes:
        raise Rejected(413, f"the source is {len(raw)} bytes; the limit is {s.max_source_bytes}")
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
