"""Request bodies under a limit and a deadline, enforced in front of the app (pure ASGI, no web framework):

- a Content-Length over the limit is answered 413 before the app runs or a byte of the body is read;
- a body without a length (Transfer-Encoding: chunked) is counted while it streams: the read that passes
  the limit raises BodyTooLarge (the app answers 413), so no more than the limit is ever read or kept;
- the whole body must arrive within `body_timeout_s` of the first read (BodyTimeout, 408): a client that
  trickles a body cannot hold a connection and a worker thread for long;
- a response sent before the body was read to its end says `Connection: close`, so the server drops the
  connection instead of reading (and discarding) the rest of an upload it refused;
- once the body is in, receive() is the server's own again: an app that waits for the client's disconnect
  (the reward server cancels the evaluations of a client that went away) is not cut off by the deadline.

`read_bounded(receive-bearing request, limit)` reads a body in its chunks, refused (BodyTooLarge) as soon as
it passes the limit, whatever Content-Length said.
"""
from __future__ import annotations

import json

import anyio


class BodyTooLarge(Exception):
    """The request body passed the server's limit while it was being read."""


class BodyTimeout(Exception):
    """The request body did not arrive within the server's deadline."""


async def send_error(send, status: int, message: str) -> None:
    body = json.dumps({"error": message, "status": status}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    def __init__(self, app, limit: int, body_timeout_s: float = 30.0):
        self.app, self.limit, self.body_timeout_s = app, limit, body_timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        cl = headers.get(b"content-length")
        if cl is not None:
            try:
                n = int(cl)
            except ValueError:
                return await send_error(send, 400, "invalid Content-Length")
            if n > self.limit:
                return await send_error(send, 413, f"the request body is {n} bytes; the limit is {self.limit}")
        has_body = (cl is not None and cl.strip() != b"0") or b"transfer-encoding" in headers
        state = {"received": 0, "deadline": None, "body_done": not has_body, "started": False}

        async def limited_receive():
            if state["body_done"]:
                return await receive()
            if state["deadline"] is None:
                state["deadline"] = anyio.current_time() + self.body_timeout_s
            message = None
            with anyio.move_on_after(max(0.0, state["deadline"] - anyio.current_time())):
                message = await receive()
            if message is None:
                raise BodyTimeout(f"the request body did not arrive within {self.body_timeout_s:g} s")
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > self.limit:
                    raise BodyTooLarge(f"the request body is over the limit of {self.limit} bytes")
                if not message.get("more_body", False):
                    state["body_done"] = True
            return message

        async def closing_send(message):
            if message["type"] == "http.response.start":
                state["started"] = True
                if not state["body_done"]:
                    message = {**message, "headers": [(k, v) for k, v in message.get("headers", [])
                                                      if k.lower() != b"connection"] + [(b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, limited_receive, closing_send)
        except (BodyTooLarge, BodyTimeout) as e:    # the app did not answer it itself
            if state["started"]:
                raise
            await send_error(send, 413 if isinstance(e, BodyTooLarge) else 408, str(e))


async def read_bounded(request, limit: int) -> bytes:
    """The body of a Starlette request, read in its chunks and refused as soon as it passes `limit`."""
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > limit:
            raise BodyTooLarge(f"the request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
