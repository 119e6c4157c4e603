"""inference.connect()'s connection to a serve address, torch-free: one socket per process and address, shared by
every connect() object of the process that talks to that address (as gRPC shares one subchannel between the channels
to one target), and by their threads. Lines are queued a call's at a time (the lines of calls queued together go out
in one write) and serve answers them in that order; each answer is handed to the call that sent its line, checked
against its id. There is no reader thread: the thread that waits first reads for all. The objects count their
shares (join / leave): the socket closes with the last one, or when all are garbage collected. After os.fork the
child's copy is let go (its descriptor closed, never shut down or used) and the child's objects share a connection
of the child's own."""

import collections
import contextlib
import itertools
import json
import os
import select
import socket
import threading
import time
from typing import Optional

from ...core.errors import UsageError

__all__ = ["Connection", "Call", "share", "codec", "brief", "POLL_SLICE_S"]

POLL_SLICE_S = 0.1  # a reader looks again this often whether its call was given up (timed out, or its object closed)


def codec() -> tuple:
    try:
        import orjson

        return orjson.loads, orjson.dumps
    except ImportError:
        return json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()


def brief(value) -> str:
    return json.dumps(value)[:40] if isinstance(value, (str, int, float, type(None))) else type(value).__name__


class Call:
    """One call's lines on the connection, waiting for their answers (in the order of its lines). `owner`: the share
    (the connect() object) that asked; a call given up (its time-out, its object closed) stays queued and its answers,
    when they come, are read and dropped."""

    __slots__ = ("ids", "answers", "limit", "error", "bell", "owner", "timeout")

    def __init__(self, messages: list, limit: int, owner: int, timeout: float):
        self.ids = [m.get("id") for m in messages]
        self.answers: list = []
        self.limit, self.owner, self.timeout = limit, owner, timeout
        self.error: Optional[UsageError] = None
        # rung (released) when answered or failed, or when this call's thread is to read next: a lock held from the
        # start, cheaper to wait on than an Event (the caller's one sleep per call)
        self.bell = threading.Lock()
        self.bell.acquire()

    def done(self) -> bool:
        return self.error is not None or len(self.answers) == len(self.ids)

    def ring(self) -> None:
        try:
            self.bell.release()
        except RuntimeError:  # (rung already: one wake is enough)
            pass


# The pool: this process's shared connections by address (made anew in a forked child), a gate per address (one
# thread opens it at a time; other addresses never wait on it) and the lock of the table.
_POOL: dict = {}
_GATES: dict = {}
_POOL_LOCK = threading.RLock()  # (re-entrant: a share left by garbage collection may run under it)
_FORK_LOCK = threading.Lock()  # a forked child lets go of the parent's connections under it (made anew in every child)


def _after_fork_in_child() -> None:
    global _POOL, _GATES, _POOL_LOCK, _FORK_LOCK
    _POOL, _GATES, _POOL_LOCK, _FORK_LOCK = {}, {}, threading.RLock(), threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def share(where: tuple, address: str, timeout: float, shared: bool = True) -> tuple:
    """(a connection to `where` of this process, the new share's number on it): the one already open to that
    address, else a new one (opened within `timeout`; UsageError in one line when it cannot). `shared=False`: a
    connection of its own, in no pool."""
    if not shared:
        conn = Connection(where, address, timeout, None)
        conn.refs = 1
        return conn, next(conn.shares)
    with _POOL_LOCK:
        gate = _GATES.setdefault(where, threading.Lock())
    with gate:
        with _POOL_LOCK:
            conn = _POOL.get(where)
            if conn is not None and conn.error is None and conn.pid == os.getpid():
                conn.refs += 1
                return conn, next(conn.shares)
        conn = Connection(where, address, timeout, where)
        with _POOL_LOCK:
            _POOL[where] = conn
            conn.refs += 1
            return conn, next(conn.shares)


class Connection:
    """One socket to a serve address, shared by the connect() objects of this process that talk to it (`refs`), and
    by their threads; `error` is set once it is unusable (broken, or closed with its last share)."""

    def __init__(self, where: tuple, address: str, timeout: float, key: Optional[tuple]):
        self.where, self.address, self.key = where, address, key
        self.pid = os.getpid()
        self.error: Optional[UsageError] = None
        self.refs, self.shares = 0, itertools.count()
        self.loads, self.dumps = codec()
        self.queue_lock = threading.Lock()  # a call queued with its lines: the queue's order is the lines' order
        self.outbox: list = []  # lines queued and not yet written (the writing thread takes them all at once)
        self.send_lock = threading.Lock()  # held by the one thread writing
        self.read_lock = threading.Lock()  # one thread reads, and hands each answer to its call
        self.calls: collections.deque = collections.deque()  # calls sent and not yet answered, in order
        self.buf, self.scan = bytearray(), 0
        self.sock: Optional[socket.socket] = None
        self.sock = self._open(timeout)

    def _open(self, timeout: float) -> socket.socket:
        where = self.where
        try:
            if where[0] == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(timeout)
                    sock.connect(where[1])
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(where[1:], timeout=timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise self.failed(exc, timeout) from None
        sock.setblocking(False)
        return sock

    # -- the shares
    def leave(self, owner: int, give_up: bool = True) -> None:
        """A share let go (its object closed, or garbage collected: `give_up` False, no call of its can wait): its
        calls still waiting end ("the connection is closed"); the last share closes the socket. In a forked child:
        the parent's connection let go."""
        if self.pid != os.getpid():
            self.let_go()
            return
        if give_up:
            for call in list(self.calls):  # (a copy made at once: other threads append and pop meanwhile)
                if call.owner == owner and not call.done():
                    call.error = self.refused()
                    call.ring()
        with _POOL_LOCK:
            self.refs -= 1
            last = self.refs <= 0
            if last and self.key is not None and _POOL.get(self.key) is self:
                del _POOL[self.key]
        if last:
            self.break_off(self.refused())
            self.close_socket(5.0 if give_up else None)  # (the threads inside leave at once: it is shut down)
        elif give_up:
            self.hand_over()

    def let_go(self) -> None:
        """(a forked child) The parent's socket let go: this copy of it closed, never shut down or used."""
        with _FORK_LOCK:
            sock, self.sock = self.sock, None
            if self.error is None:
                self.error = self.refused()
            if sock is not None:
                sock.close()  # (the child's descriptor only: the parent's connection goes on)

    # -- failures
    def refused(self) -> UsageError:
        return UsageError(f"connect({self.address!r}): the connection is closed")

    def failed(self, exc: BaseException, timeout: float) -> UsageError:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return UsageError(f"connect({self.address!r}): no answer within {timeout:g} s")
        if isinstance(exc, ConnectionRefusedError) or isinstance(exc, FileNotFoundError):
            return UsageError(
                f"connect({self.address!r}): nothing listens there (start python inference.py --mode serve "
                f"--listen {self.address})"
            )
        if isinstance(exc, socket.gaierror):
            return UsageError(
                f"connect({self.address!r}): unknown host ({exc.strerror}); expected HOST:PORT of a "
                f"serve --listen address, or unix:PATH"
            )
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return UsageError(f"connect({self.address!r}): {reason}")

    def bad(self, what: str) -> UsageError:
        """A misbehaving peer: the connection closed (every call waiting on it fails), one line saying what was
        expected."""
        return self.break_off(UsageError(f"connect({self.address!r}): {what}"))

    def break_off(self, error: UsageError) -> UsageError:
        """The connection unusable: every call waiting on it, whichever object's, fails with `error`; the socket is
        shut down (a thread waiting on it wakes) and closed once no thread uses it. The objects' next calls open a
        new one."""
        if self.error is None:
            self.error = error
        sock = self.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        while self.calls:
            try:
                call = self.calls.popleft()
            except IndexError:
                break
            call.error = call.error or error
            call.ring()
        self.outbox.clear()
        return error

    def _reap(self) -> None:
        """A broken connection's socket closed, when no other thread is inside it."""
        if self.error is not None and self.sock is not None and self.pid == os.getpid():
            self.close_socket(None)

    def close_socket(self, wait) -> None:
        """The socket closed once no thread is inside it: both locks taken, waiting up to `wait` seconds for each (None:
        not at all, and then left open)."""
        how = {"blocking": False} if wait is None else {"timeout": wait}
        if not self.send_lock.acquire(**how):
            return
        try:
            if self.read_lock.acquire(**how):
                try:
                    if self.sock is not None:
                        self.sock.close()
                        self.sock = None
                finally:
                    self.read_lock.release()
        finally:
            self.send_lock.release()

    # -- a call
    def ask(self, messages: list, limit: int, owner: int, timeout: float) -> list:
        """Send the lines, and wait up to `timeout` for as many answers (sending and reading at once: a large group
        never waits on the server's bound), each answer line at most `limit` bytes, read in linear time. Any number of
        threads may ask at once. A call that times out is given up alone (its answers dropped when they come): the
        other calls on the connection go on."""
        if self.error is not None or self.sock is None:
            raise self.refused()
        payload = b"".join(self.dumps(m) + b"\n" for m in messages)
        call, deadline = Call(messages, limit, owner, timeout), time.monotonic() + timeout
        try:
            self._send(call, payload, deadline)
            self._wait(call, deadline)
        finally:
            self._reap()
        if call.error is not None:
            raise call.error
        return call.answers

    def _send(self, call: Call, payload: bytes, deadline: float) -> None:
        """The call queued with its lines; the lines written by this thread, with every other thread's queued
        meanwhile (one write for many calls), or by the thread writing now, which takes them before it stops."""
        with self.queue_lock:
            if self.error is not None or self.sock is None:
                raise self.refused()
            self.calls.append(call)
            self.outbox.append(payload)
        # (the writer looks again after it lets go: lines queued while it stopped are never left behind)
        while self.outbox and self.send_lock.acquire(blocking=False):
            try:
                while True:
                    with self.queue_lock:
                        if not self.outbox:
                            break
                        data = self.outbox[0] if len(self.outbox) == 1 else b"".join(self.outbox)
                        self.outbox.clear()
                    self._write(memoryview(data), call, deadline)
            finally:
                self.send_lock.release()

    def _write(self, payload: memoryview, call: Call, deadline: float) -> None:
        """(the send lock held) The bytes written, whole; while the server cannot take more, this thread reads (where no
        other does) so that the server's answers never wait on it. A server that takes no bytes within the writer's
        time-out breaks the connection (a line half written cannot be given up alone)."""
        sock = self.sock
        if self.error is not None or sock is None:
            raise self.refused()
        sent, out = 0, select.poll()
        out.register(sock.fileno(), select.POLLOUT)
        while sent < len(payload):
            try:
                sent += sock.send(payload[sent : sent + (1 << 20)])
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                raise self.break_off(self.failed(exc, call.timeout)) from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.break_off(self.failed(socket.timeout(), call.timeout))
            if self.read_lock.acquire(blocking=False):
                try:
                    self._read(call, deadline, until_writable=True)
                finally:
                    self.read_lock.release()
                    self.hand_over()
                if self.error is not None:
                    raise self.refused()
            else:
                out.poll(min(left, 0.05) * 1000)

    def _wait(self, call: Call, deadline: float) -> None:
        """Until the call is answered: the thread that takes the read lock reads for every call; the others sleep
        until their answers come or the reader hands the reading over to them. Past the deadline the call is given
        up, alone."""
        while not call.done():
            if self.read_lock.acquire(blocking=False):
                try:
                    self._read(call, deadline)
                finally:
                    self.read_lock.release()
                    self.hand_over()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not call.bell.acquire(timeout=left):
                if not call.done():
                    call.error = self.failed(socket.timeout(), call.timeout)
                    self.hand_over()  # (in case the reading was handed to this call just now)
                return

    def hand_over(self) -> None:
        """(the read lock just released) The oldest call still waited on is woken to read next."""
        calls = self.calls
        try:
            first = calls[0]
        except IndexError:
            return
        if not first.done():
            first.ring()
            return
        for call in list(calls):  # (calls given up come first: the oldest one still waited on)
            if not call.done():
                call.ring()
                return

    def _read(self, call: Call, deadline: float, until_writable: bool = False) -> None:
        """(the read lock held) Read and hand out answers until `call` is answered or given up (or, `until_writable`,
        until the socket takes more lines)."""
        sock = self.sock
        if self.error is not None or sock is None:
            call.error = call.error or self.refused()
            return
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN | (select.POLLOUT if until_writable else 0))
        try:
            while until_writable or not call.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    if until_writable:
                        raise socket.timeout()
                    call.error = call.error or self.failed(socket.timeout(), call.timeout)
                    return
                events = poll.poll(min(left, POLL_SLICE_S) * 1000)
                if not events:
                    continue
                if until_writable and any(e & select.POLLOUT for _, e in events):
                    return
                try:
                    chunk = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    if self.error is not None:  # (closed by its last share's close() from another thread)
                        raise self.refused()
                    raise UsageError(f"connect({self.address!r}): the server closed the connection")
                self.buf += chunk
                self._take_lines()
        except UsageError as exc:
            self.break_off(exc)
        except OSError as exc:
            self.break_off(self.failed(exc, call.timeout))

    def _take_lines(self) -> None:
        """The complete answer lines read (taken out of the buffer), each handed to the oldest call waiting, checked
        against its line's id; where the next newline search starts is kept (the bytes before it were searched:
        linear time); UsageError past the waiting call's bound."""
        buf, scan, calls = self.buf, self.scan, self.calls
        while True:
            end = buf.find(b"\n", scan)
            if end < 0:
                limit = calls[0].limit if calls else 0
                if len(buf) > limit:
                    raise self.bad(
                        f"an answer line longer than {limit} bytes (the longest this policy's "
                        f"answer can be): is this python inference.py --mode serve --listen?"
                    )
                self.scan = len(buf)
                return
            line = bytes(buf[:end])
            del buf[: end + 1]
            scan = 0
            if not line.strip():
                continue
            if not calls:
                raise self.bad("an answer that no line asked for (answers come one per line)")
            call = calls[0]
            answer = self._parse(line, call.limit)
            expected = call.ids[len(call.answers)]
            if answer.get("id") != expected:
                raise self.bad(
                    f"an answer for id {brief(answer.get('id'))} where id {brief(expected)} "
                    f"was expected (answers come in the order of the lines)"
                )
            call.answers.append(answer)
            if len(call.answers) == len(call.ids):
                calls.popleft()
                call.ring()

    def _parse(self, line: bytes, limit: int) -> dict:
        if len(line) > limit:
            raise self.bad(f"an answer line longer than {limit} bytes (the longest this policy's answer can be)")
        try:
            answer = self.loads(line)
        except (ValueError, RecursionError):
            raise self.bad(
                "an answer that is not JSON: expected the JSON lines of python inference.py --mode serve "
                "--listen (an --http port, or another program, answers otherwise)"
            ) from None
        if not isinstance(answer, dict):
            raise self.bad("an answer that is not a JSON object: expected serve's answer lines")
        return answer
