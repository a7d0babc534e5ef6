"""The socket layer of the outputs' hand-over by file descriptors (issue 35's second route; core/cuda_vmm.py makes
and opens the descriptors): one JSON record and its descriptor per message on a SOCK_SEQPACKET Unix socket pair,
sent with SCM_RIGHTS. The kernel installs the descriptor in the receiver's own table, so no pid is named or
resolved on either side, and it crosses the sandbox's pid namespace (tests/test_cuda_vmm.py starts the sender under
sandbox/isolation.py's own argv). Why not pidfd_getfd (what UCX's and PyTorch's expandable-segment IPC use): it
needs the sender's pid resolved in the receiver's namespace and ptrace rights over it, and it fails in containers
without them (pytorch/pytorch#165685: "pidfd_getfd: Operation not permitted").

The receiver is trusted and the sender may be hostile, so every receive is bounded: at most `max_bytes` of record
and `max_fds` descriptors, and whatever breaks a bound is refused with every received descriptor closed.
Standard library only (no package import), so the opener can load this file by its path without torch."""
from __future__ import annotations

import json
import os
import socket

# the channel's bounds: one record per message (a few hundred bytes honest), one descriptor per record
RECORD_MAX_BYTES = 4096
MAX_FDS = 1


class ChannelRefused(ValueError):
    """A message on the hand-over socket broke its bounds (too many bytes, too many or too few descriptors, not a
    valid record) or did not come in time; every descriptor it carried was closed."""


# SOCK_SEQPACKET keeps message boundaries: a record never spans two reads, and a descriptor always arrives with its
# own record
def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(parent's end, child's end); pass the child's end's fileno() with Popen's pass_fds."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def send_output(sock: socket.socket, fd: int, record: dict) -> None:
    """One record (JSON: offset, nbytes, dtype, shape, ...) and its fd, in one message (socket.send_fds)."""
    data = json.dumps(record, separators=(",", ":")).encode()
    if len(data) > RECORD_MAX_BYTES:
        raise ValueError(f"a record is at most {RECORD_MAX_BYTES} bytes, this one {len(data)}")
    socket.send_fds(sock, [data], [int(fd)])


def recv_message(sock: socket.socket, max_bytes: int = RECORD_MAX_BYTES, max_fds: int = MAX_FDS,
                 timeout_s: float | None = None) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it, within bounds, or ChannelRefused with every received
    descriptor closed. The control buffer is CMSG_LEN(max_fds * 4), as socket.recv_fds sizes it, so the kernel
    installs at most max_fds descriptors and drops (closes) the rest, flagging MSG_CTRUNC; MSG_CMSG_CLOEXEC keeps
    them out of any process this one starts. A message over max_bytes comes back MSG_TRUNC."""
    sock.settimeout(timeout_s)
    try:
        msg, anc, flags, _ = sock.recvmsg(max_bytes + 1, socket.CMSG_LEN(max_fds * 4), socket.MSG_CMSG_CLOEXEC)
    except (socket.timeout, TimeoutError):
        raise ChannelRefused(f"no message within {timeout_s} s") from None
    except OSError as e:
        raise ChannelRefused(f"recvmsg: {e}") from None
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(data) - len(data) % 4
            fds.extend(int.from_bytes(data[i:i + 4], "little", signed=True) for i in range(0, n, 4))
    problem = None
    if flags & socket.MSG_CTRUNC or len(fds) > max_fds:
        problem = f"more than {max_fds} descriptor(s) in one message"
    elif flags & socket.MSG_TRUNC or len(msg) > max_bytes:
        problem = f"a message over {max_bytes} bytes"
    elif not msg and not fds:
        problem = "the peer closed the channel"
    if problem:
        for fd in fds:
            os.close(fd)
        raise ChannelRefused(problem)
    return msg, fds


def parse_record(data: bytes, max_nbytes: int | None = None) -> dict:
    """The record's schema: a JSON object with integer offset >= 0, nbytes > 0, offset + nbytes < 2^48, a dtype
    string and a shape list of non-negative ints (what the file path's header gives). ValueError otherwise."""
    try:
        r = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"a record is a JSON object: {e}") from None
    if not isinstance(r, dict):
        raise ValueError("a record is a JSON object")
    for k in ("offset", "nbytes"):
        if type(r.get(k)) is not int:
            raise ValueError(f"record[{k!r}] is an integer, got {r.get(k)!r:.40}")
    if r["offset"] < 0 or r["nbytes"] <= 0 or r["offset"] + r["nbytes"] >= 1 << 48:
        raise ValueError(f"record offset {r['offset']} and nbytes {r['nbytes']} out of range")
    if max_nbytes is not None and r["nbytes"] > max_nbytes:
        raise ValueError(f"record nbytes {r['nbytes']} over the bound {max_nbytes}")
    if not isinstance(r.get("dtype"), str) or len(r["dtype"]) > 32:
        raise ValueError("record['dtype'] is a short string")
    shape = r.get("shape")
    if not isinstance(shape, list) or len(shape) > 16 or any(type(d) is not int or d < 0 for d in shape):
        raise ValueError("record['shape'] is a list of at most 16 non-negative integers")
    return r


def recv_output(sock: socket.socket, timeout_s: float | None = None,
                max_nbytes: int | None = None) -> tuple[dict, int]:
    """One output: (its validated record, its fd, which the caller owns) or ChannelRefused, with nothing left open."""
    msg, fds = recv_message(sock, timeout_s=timeout_s)
    try:
        if len(fds) != 1:
            raise ChannelRefused(f"a record comes with exactly one descriptor, got {len(fds)}")
        try:
            return parse_record(msg, max_nbytes), fds[0]
        except ValueError as e:
            raise ChannelRefused(str(e)) from None
    except ChannelRefused:
        for fd in fds:
            os.close(fd)
        raise
