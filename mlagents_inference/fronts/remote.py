"""inference.connect(): the policy's Python API over a serve connection, torch-free (docs/serve.md): the same checks
as inference.load()'s policy (shared: observations), the same answers, through the stream's lines."""

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

import numpy as np

from ..api.contract import (
    check_act_arguments,
    check_agent_ids,
    check_behavior_spec,
    check_no_extras,
    steps_arguments,
)
from ..core.errors import UsageError
from ..core.observations import observation_arrays, shape_masks, shape_memory
from ..core.spec import InputSpec, PolicySettings, action_tuple, continuous_only, no_actions
from ..services.protocol import parse_address

__all__ = ["connect", "RemotePolicy", "Answer", "INFO_LINE_BYTES", "ANSWER_NUMBER_BYTES", "FLOAT32_MAX"]


def _codec() -> tuple:
    try:
        import orjson

        return orjson.loads, orjson.dumps
    except ImportError:
        return json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()


def _brief(value) -> str:
    return json.dumps(value)[:40] if isinstance(value, (str, int, float, type(None))) else type(value).__name__


def _settings(info: dict) -> PolicySettings:
    """The policy's settings from its info dict (serve's info answer); KeyError, TypeError or ValueError when it is not
    one."""

    def whole(value, low: int = 0) -> int:
        if type(value) is not int or value < low:
            raise ValueError(value)
        return value

    inputs = [
        InputSpec(
            str(x["name"]),
            str(x["kind"]),
            tuple(whole(n, 1) for n in x["shape"]),
            bool(x["normalized"]),
            x["encoder"],
            x["goal"],
        )
        for x in info["inputs"]
    ]
    if not inputs or not isinstance(info["discrete_branches"], list):
        raise ValueError("inputs")
    return PolicySettings(
        inputs,
        whole(info["hidden_units"], 1),
        whole(info["num_layers"], 1),
        False,
        whole(info["continuous_size"]),
        [whole(n, 1) for n in info["discrete_branches"]],
        whole(info["memory_size"]),
    )


def connect(address: str, timeout: float = 60.0, model: Optional[str] = None, version=None) -> "RemotePolicy":
    """A policy served by `python inference.py --mode serve --listen ADDRESS` ("HOST:PORT" or "unix:PATH"): info, act,
    get_action, check_spec, reset as inference.load()'s, close() (or `with`). `model`: the served model (behaviour
    name) every line names, required when the server serves several; `version`: a loaded version (a checkpoint's
    step) every line names, else the one serving at each line. UsageError (one line) when it cannot."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise UsageError(f"timeout={timeout!r}: expected a positive number of seconds")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise UsageError(f"model={_brief(model)}: expected a served model's name (text), or None")
    return RemotePolicy(address, float(timeout), model, _version_text(version))


def _version_text(version) -> Optional[str]:
    """connect()'s version as serve's answers write it (the digits of a whole number), or None."""
    if version is None:
        return None
    if isinstance(version, str) and version.strip().isascii() and version.strip().isdigit():
        return str(int(version.strip()))
    if isinstance(version, (int, np.integer)) and not isinstance(version, bool) and version >= 0:
        return str(int(version))
    raise UsageError(f"version={_brief(version)}: expected a loaded version (a whole number, or its digits as text)")


class Answer(dict):
    """act()'s result: the dict inference.load()'s act() returns, and which model and version answered (serve's
    answer keys "model" and "version", as attributes; None from a server that does not say)."""

    __slots__ = ("model", "version")

    def __init__(self, arrays: dict, model: Optional[str], version: Optional[str]):
        super().__init__(arrays)
        self.model, self.version = model, version


INFO_LINE_BYTES = 1 << 20  # the longest info answer read (a serve policy's is a few kB)


ANSWER_NUMBER_BYTES = 32  # the most bytes one number of an answer takes in JSON (with its comma)


FLOAT32_MAX = float(np.finfo(np.float32).max)


class _Call:
    """One call's lines on the connection, waiting for their answers (in the order of its lines)."""

    __slots__ = ("ids", "answers", "limit", "error", "bell")

    def __init__(self, messages: list, limit: int):
        self.ids = [m.get("id") for m in messages]
        self.answers: list = []
        self.limit = limit
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


_NAMING_KEYS = frozenset({"model", "version"})  # which model and version answered (serve's answers carry them)
_ERROR_KEYS = frozenset({"id", "error"}) | _NAMING_KEYS

_FORK_LOCK = threading.Lock()  # a child's first call opens its own connection under it (made anew in every child)


def _new_fork_lock() -> None:
    global _FORK_LOCK
    _FORK_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_fork_lock)


class RemotePolicy:
    """inference.connect()'s policy. Safe to share across threads: one connection, whose lines are queued a call's at
    a time (the lines of calls queued together go out in one write) and answered in that order (serve's rule), each
    answer handed to the call that sent its line and checked against its id; the thread that waits first reads for all
    (no reader thread of its own). The server keeps
    get_action's LSTM memories per connection and agent id, so per agent id whichever thread asks. After os.fork a
    child's first call opens a connection of the child's own (the parent's is never written or read there).
    Every answer is checked against the policy's info (its id, keys, shapes, types, ranges, finiteness) and read
    within a bound (its longest possible line): a peer that is not serve, or misbehaves, is a one-line UsageError."""

    def __init__(self, address: str, timeout: float, model: Optional[str] = None, version: Optional[str] = None):
        self._where = parse_address("connect()", address, listening=False)
        self.address, self.timeout, self._sock, self._closed = address.strip(), timeout, None, None
        # every line names them (serve's "model" and "version" keys); left out, the server's one model, and the
        # version serving at each line
        self._route = {k: v for k, v in (("model", model), ("version", version)) if v is not None}
        self._answered = threading.local()  # which version answered this thread's latest call
        self._loads, self._dumps = _codec()
        self._state = threading.Lock()  # get_action's memory bookkeeping
        self._known: set = set()  # get_action's agent ids the server may hold a memory of
        self._stale: set = set()  # ... and those whose next line starts from zeros ("reset": true)
        self._orphans: set = set()  # (a forked child) ids whose memory the parent's connection holds
        self._fresh_connection()
        self._sock = self._open()
        self._limit = INFO_LINE_BYTES
        try:
            answer = self._ask([{"info": True, **self._route}])[0]
        except UsageError as exc:
            self.close()
            said = str(exc)
            if said.startswith(f"connect({self.address!r})"):
                raise
            hint = " (connect(..., model=NAME))" if "model" not in self._route and "name the model" in said else ""
            raise UsageError(f"connect({self.address!r}): {said}{hint}") from None
        try:
            self.settings = _settings(answer["info"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            self.close()
            raise UsageError(
                f'connect({self.address!r}): the answer to {{"info": true}} is not a serve policy\'s '
                f"info (expected its inputs, action sizes and memory size): is this python inference.py "
                f"--mode serve --listen?"
            ) from None
        self.info = answer["info"]
        self.bounds = answer.get("bounds") if isinstance(answer.get("bounds"), dict) else {}
        # the model answering (the server's name for it; a server before models: the behaviour's name), and the
        # version that answered the info line
        self.model = answer["model"] if isinstance(answer.get("model"), str) else model or self.info.get("behavior")
        self._first_version = answer["version"] if isinstance(answer.get("version"), str) else None
        s = self.settings
        self._width = s.continuous_size * (2 if continuous_only(s) else 1) + len(s.discrete_branches) + s.memory_size
        self._ids = itertools.count(1)  # act()'s line ids where no memory is kept by id

    def __repr__(self) -> str:
        state = "closed" if self._closed is not None or self._sock is None else "open"
        return f"<connect({self.address!r}): {self.model}, version {self.version}, {state}>"

    @property
    def version(self) -> Optional[str]:
        """The version (text, a checkpoint's step; "1" for one policy served as before) that answered this thread's
        latest act() or get_action() (for get_action, its last agent's; `versions` has each agent's), or the info line
        before any."""
        return getattr(self._answered, "version", self._first_version)

    @property
    def versions(self) -> dict:
        """This thread's latest get_action(): each agent id's answering version (an LSTM agent keeps the version its
        memory started on while that stays loaded, so they may differ)."""
        return dict(getattr(self._answered, "versions", {}))

    # -- the connection
    def _fresh_connection(self) -> None:
        """This process's connection state (no socket yet): its locks, the calls waiting, the bytes read."""
        self._pid = os.getpid()
        self._queue_lock = threading.Lock()  # a call queued with its lines: the queue's order is the lines' order
        self._outbox: list = []  # lines queued and not yet written (the writing thread takes them all at once)
        self._send_lock = threading.Lock()  # held by the one thread writing
        self._read_lock = threading.Lock()  # one thread reads, and hands each answer to its call
        self._calls: collections.deque = collections.deque()  # calls sent and not yet answered, in order
        self._buf, self._scan = bytearray(), 0

    def _open(self) -> socket.socket:
        where = self._where
        try:
            if where[0] == "unix":
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(self.timeout)
                    sock.connect(where[1])
                except BaseException:
                    sock.close()
                    raise
            else:
                sock = socket.create_connection(where[1:], timeout=self.timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            raise self._failed(exc) from None
        sock.setblocking(False)
        return sock

    def _own(self) -> None:
        """In a forked child: the parent's socket let go (this copy of it closed, never shut down or used), a connection
        of the child's own opened; get_action's memories held by the parent's connection refused until reset."""
        if self._pid == os.getpid():
            return
        with _FORK_LOCK:
            if self._pid == os.getpid():
                return
            inherited, self._sock = self._sock, None
            self._fresh_connection()
            self._state = threading.Lock()
            self._orphans = (self._orphans | self._known) - self._stale
            self._known, self._stale = set(), set()
            if inherited is not None:
                inherited.close()  # (the child's descriptor only: the parent's connection goes on)
            if self._closed is None:
                try:
                    self._sock = self._open()
                except UsageError as exc:
                    self._closed = str(exc)
                    raise

    def _failed(self, exc: BaseException) -> UsageError:
        if isinstance(exc, (socket.timeout, TimeoutError)):
            return UsageError(f"connect({self.address!r}): no answer within {self.timeout:g} s")
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

    def _bad(self, what: str) -> UsageError:
        """A misbehaving peer: the connection closed (every call waiting on it fails), one line saying what was
        expected."""
        return self._break(UsageError(f"connect({self.address!r}): {what}"))

    def _break(self, error: UsageError) -> UsageError:
        """The connection unusable: every call waiting on it fails with `error`, the socket is shut down (a thread
        waiting on it wakes) and closed once no thread uses it."""
        if self._closed is None:
            self._closed = str(error)
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        while self._calls:
            try:
                call = self._calls.popleft()
            except IndexError:
                break
            call.error = call.error or error
            call.ring()
        self._outbox.clear()
        return error

    def _reap(self) -> None:
        """A broken connection's socket closed, when no other thread is inside it."""
        if self._closed is not None and self._sock is not None:
            self._close_socket(None)

    def _close_socket(self, wait) -> None:
        """The socket closed once no thread is inside it: both locks taken, waiting up to `wait` seconds for each (None:
        not at all, and then left open)."""
        how = {"blocking": False} if wait is None else {"timeout": wait}
        if not self._send_lock.acquire(**how):
            return
        try:
            if self._read_lock.acquire(**how):
                try:
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None
                finally:
                    self._read_lock.release()
        finally:
            self._send_lock.release()

    def _refused(self) -> UsageError:
        return UsageError(f"connect({self.address!r}): the connection is closed")

    def _ask(self, messages: list, rows: int = 1) -> list:
        """Send the lines, and wait for as many answers (sending and reading at once: a large group never waits on
        the server's bound). Each answer line is at most the longest a line of `rows` rows can be; read in linear
        time. Any number of threads may ask at once."""
        self._own()
        if self._closed is not None or self._sock is None:
            raise self._refused()
        limit = self._limit if messages[0].get("info") else 4096 + rows * self._width * ANSWER_NUMBER_BYTES
        payload = b"".join(self._dumps(m) + b"\n" for m in messages)
        call, deadline = _Call(messages, limit), time.monotonic() + self.timeout
        try:
            self._send(call, payload, deadline)
            self._wait(call, deadline)
        finally:
            self._reap()
        if call.error is not None:
            raise call.error
        self._check_errors(call.answers)
        return call.answers

    def _send(self, call: _Call, payload: bytes, deadline: float) -> None:
        """The call queued with its lines; the lines written by this thread, with every other thread's queued
        meanwhile (one write for many calls), or by the thread writing now, which takes them before it stops."""
        with self._queue_lock:
            if self._closed is not None or self._sock is None:
                raise self._refused()
            self._calls.append(call)
            self._outbox.append(payload)
        # (the writer looks again after it lets go: lines queued while it stopped are never left behind)
        while self._outbox and self._send_lock.acquire(blocking=False):
            try:
                while True:
                    with self._queue_lock:
                        if not self._outbox:
                            break
                        data = self._outbox[0] if len(self._outbox) == 1 else b"".join(self._outbox)
                        self._outbox.clear()
                    self._write(memoryview(data), call, deadline)
            finally:
                self._send_lock.release()

    def _write(self, payload: memoryview, call: _Call, deadline: float) -> None:
        """(the send lock held) The bytes written, whole; while the server cannot take more, this thread reads (where no
        other does) so that the server's answers never wait on it."""
        sock = self._sock
        if self._closed is not None or sock is None:
            raise self._refused()
        sent, out = 0, select.poll()
        out.register(sock.fileno(), select.POLLOUT)
        while sent < len(payload):
            try:
                sent += sock.send(payload[sent : sent + (1 << 20)])
                continue
            except BlockingIOError:
                pass
            except OSError as exc:
                raise self._break(self._failed(exc)) from None
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._break(self._failed(socket.timeout()))
            if self._read_lock.acquire(blocking=False):
                try:
                    self._read(call, deadline, until_writable=True)
                finally:
                    self._read_lock.release()
                    self._hand_over()
                if self._closed is not None:
                    raise self._refused()
            else:
                out.poll(min(left, 0.05) * 1000)

    def _wait(self, call: _Call, deadline: float) -> None:
        """Until the call is answered: the thread that takes the read lock reads for every call; the others sleep
        until their answers come or the reader hands the reading over to them."""
        while not call.done():
            if self._read_lock.acquire(blocking=False):
                try:
                    self._read(call, deadline)
                finally:
                    self._read_lock.release()
                    self._hand_over()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not call.bell.acquire(timeout=left):
                if not call.done():
                    self._break(self._failed(socket.timeout()))
                return

    def _hand_over(self) -> None:
        """(the read lock just released) The oldest call still waiting is woken to read next."""
        try:
            self._calls[0].ring()
        except IndexError:
            pass

    def _read(self, call: _Call, deadline: float, until_writable: bool = False) -> None:
        """(the read lock held) Read and hand out answers until `call` is answered (or, `until_writable`, until the
        socket takes more lines)."""
        sock = self._sock
        if self._closed is not None or sock is None:
            call.error = call.error or self._refused()
            return
        poll = select.poll()
        poll.register(sock.fileno(), select.POLLIN | (select.POLLOUT if until_writable else 0))
        try:
            while until_writable or not call.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout()
                events = poll.poll(left * 1000)
                if not events:
                    continue
                if until_writable and any(e & select.POLLOUT for _, e in events):
                    return
                try:
                    chunk = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    if self._closed is not None:  # (closed by close() from another thread)
                        raise self._refused()
                    raise UsageError(f"connect({self.address!r}): the server closed the connection")
                self._buf += chunk
                self._take_lines()
        except UsageError as exc:
            self._break(exc)
        except OSError as exc:
            self._break(self._failed(exc))

    def _take_lines(self) -> None:
        """The complete answer lines read (taken out of the buffer), each handed to the oldest call waiting, checked
        against its line's id; where the next newline search starts is kept (the bytes before it were searched:
        linear time); UsageError past the waiting call's bound."""
        buf, scan, calls = self._buf, self._scan, self._calls
        while True:
            end = buf.find(b"\n", scan)
            if end < 0:
                limit = calls[0].limit if calls else 0
                if len(buf) > limit:
                    raise self._bad(
                        f"an answer line longer than {limit} bytes (the longest this policy's "
                        f"answer can be): is this python inference.py --mode serve --listen?"
                    )
                self._scan = len(buf)
                return
            line = bytes(buf[:end])
            del buf[: end + 1]
            scan = 0
            if not line.strip():
                continue
            if not calls:
                raise self._bad("an answer that no line asked for (answers come one per line)")
            call = calls[0]
            answer = self._parse(line, call.limit)
            expected = call.ids[len(call.answers)]
            if answer.get("id") != expected:
                raise self._bad(
                    f"an answer for id {_brief(answer.get('id'))} where id {_brief(expected)} "
                    f"was expected (answers come in the order of the lines)"
                )
            call.answers.append(answer)
            if len(call.answers) == len(call.ids):
                calls.popleft()
                call.ring()

    def _check_errors(self, answers: list) -> None:
        """An error answer is a one-line UsageError (the connection goes on)."""
        for answer in answers:
            if "error" in answer:
                error = answer["error"]
                if not isinstance(error, str) or not {"id", "error"} <= set(answer) <= _ERROR_KEYS:
                    raise self._bad('an error answer that is not {"id": ..., "error": "..."}')
                raise UsageError(error.splitlines()[0] if error.strip() else "the server answered an empty error")

    def _parse(self, line: bytes, limit: int) -> dict:
        if len(line) > limit:
            raise self._bad(f"an answer line longer than {limit} bytes (the longest this policy's answer can be)")
        try:
            answer = self._loads(line)
        except (ValueError, RecursionError):
            raise self._bad(
                "an answer that is not JSON: expected the JSON lines of python inference.py --mode serve "
                "--listen (an --http port, or another program, answers otherwise)"
            ) from None
        if not isinstance(answer, dict):
            raise self._bad("an answer that is not a JSON object: expected serve's answer lines")
        return answer

    def close(self) -> None:
        """Closes the connection, from any thread: calls still waiting on it fail in one line. In a forked child it
        lets go of the parent's socket without touching the parent's connection."""
        if self._pid != os.getpid():
            with _FORK_LOCK:
                if self._pid != os.getpid():
                    inherited, self._sock = self._sock, None
                    self._fresh_connection()
                    self._closed = "closed"
                    if inherited is not None:
                        inherited.close()
                    return
        if self._sock is None:
            return
        self._break(self._refused())
        self._close_socket(self.timeout)  # (the threads inside leave at once: it is shut down)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the policy's API
    def _observation_arrays(self, observations) -> tuple:
        """As Policy.observation_arrays: float32 [rows, *shape] per input, rows, batched."""
        return observation_arrays(self.settings, observations)

    def _line(self, arrays: list, masks, memory, deterministic: bool, seed) -> dict:
        s = self.settings
        line = (
            {"obs": arrays[0].tolist()}
            if len(s.inputs) == 1
            else {spec.name: array.tolist() for spec, array in zip(s.inputs, arrays)}
        )
        line.update(self._route)
        if masks is not None:
            line["action_masks"] = masks.astype(np.int8).tolist()
        if memory is not None:
            line["memory"] = memory.tolist()
        if not deterministic:  # noise: the line's seed (drawn here when none is given), as the stream draws it
            line["stochastic"], line["seed"] = (
                True,
                int.from_bytes(os.urandom(8), "little") >> 1 if seed is None else int(seed),
            )
        return line

    def _outputs(self, answer: dict, rows: int, batched: bool) -> dict:
        """An answer's arrays, checked against the policy's info: its keys, shapes, types, ranges and finiteness; its
        model and version (where it names them: serve's answers do) the ones connected to."""
        s, out = self.settings, {}
        expected = (
            {"id"}
            | ({"continuous_actions"} if s.continuous_size else set())
            | ({"actions"} if continuous_only(s) else set())
            | ({"discrete_actions"} if s.discrete_branches else set())
            | ({"memory"} if s.memory_size else set())
        )
        if not expected <= set(answer) <= expected | _NAMING_KEYS:
            raise self._bad(
                f"an answer with keys {sorted(answer)[:8]}; this policy's answers hold {sorted(expected)} "
                f"(and the model and version)"
            )
        self._check_naming(answer)
        lead = (rows,) if batched else ()
        if s.continuous_size:
            out["continuous_actions"] = self._numbers(answer, "continuous_actions", lead + (s.continuous_size,), False)
            if continuous_only(s) and answer["actions"] != answer["continuous_actions"]:
                raise self._bad('an answer whose "actions" differ from its "continuous_actions"')
        if s.discrete_branches:
            actions = self._numbers(answer, "discrete_actions", lead + (len(s.discrete_branches),), True)
            if ((actions < 0) | (actions >= np.asarray(s.discrete_branches))).any():
                raise self._bad(f'an answer whose "discrete_actions" are outside the branches {s.discrete_branches}')
            out["discrete_actions"] = actions
        if s.memory_size:
            out["memory"] = self._numbers(answer, "memory", lead + (s.memory_size,), False)
        return out

    def _check_naming(self, answer: dict) -> None:
        """An answer's "model" is the model connected to, its "version" text (the version asked for, where one was)."""
        if "model" in answer and answer["model"] != self.model:
            raise self._bad(f"an answer from model {_brief(answer['model'])} to a line for model {_brief(self.model)}")
        if "version" in answer:
            version, asked = answer["version"], self._route.get("version")
            if not isinstance(version, str) or (asked is not None and version != asked):
                raise self._bad(
                    f"an answer from version {_brief(version)}"
                    + (f" to a line for version {asked}" if asked is not None else ": expected text (a step)")
                )

    def _numbers(self, answer: dict, name: str, shape: tuple, whole: bool) -> np.ndarray:
        try:
            array = np.asarray(answer[name])
        except (ValueError, TypeError):
            array = np.asarray([None])
        fits = array.shape == shape and array.dtype.kind in ("i" if whole else "if")
        if fits and array.size:  # (NaN fails both comparisons; no cast that overflows, no errstate to set)
            low, high = array.min(), array.max()
            fits = bool(-(2**62) < low and high < 2**62) if whole else bool(-FLOAT32_MAX <= low and high <= FLOAT32_MAX)
        if not fits:
            raise self._bad(
                f'an answer whose "{name}" is not {"whole numbers" if whole else "finite float32 numbers"} '
                f"of shape {list(shape)} (got {_brief(answer[name])})"
            )
        return array.astype(np.int64 if whole else np.float32)

    def act(self, observations, action_masks=None, deterministic: bool = True, seed=None, memory=None) -> dict:
        """As Policy.act (deterministic results equal; sampled ones draw the stream's noise for `seed`, or for a seed
        drawn here when None): {"continuous_actions", "discrete_actions", "memory"} as numpy arrays."""
        s = self.settings
        observations, action_masks, memory = check_act_arguments(
            observations, action_masks, memory, deterministic, seed
        )
        arrays, rows, batched = self._observation_arrays(observations)
        check_no_extras(s, action_masks, memory)
        masks = shape_masks(action_masks, s.discrete_branches, rows, batched) if action_masks is not None else None
        if memory is not None:
            memory = shape_memory(memory, s.memory_size, rows, batched)[:, 0]
        if not rows:
            return Answer(self._no_actions(), self.model, None)
        one = (lambda x: x) if batched else (lambda x: None if x is None else x[0])
        line = self._line([one(a) for a in arrays], one(masks), one(memory), bool(deterministic), seed)
        if not s.memory_size:  # (an id of its own, checked on its answer; with a memory an id would be kept)
            line["id"] = next(self._ids)
        answer = self._ask([line], rows)[0]
        out = self._outputs(answer, rows, batched)
        self._answered.version = answer.get("version")
        return Answer(out, answer.get("model", self.model), answer.get("version"))

    def _no_actions(self) -> dict:
        return no_actions(self.settings)

    def get_action(self, decision_steps, terminal_steps=None, deterministic: bool = True):
        """As Policy.get_action: one line per agent ("id": its agent id; the server keeps its memory for this
        connection), sent together (one engine call for the plain ones); an ActionTuple."""
        s = self.settings
        ended, ids, masks, obs = steps_arguments(s, decision_steps, terminal_steps, deterministic)
        rows = len(ids)
        arrays, got, batched = self._observation_arrays(list(obs))
        masks = (
            shape_masks(masks, s.discrete_branches, got, batched) if s.discrete_branches and masks is not None else None
        )
        if got != rows:
            raise UsageError(f"decision_steps: {rows} agent id(s) but {got} observation(s)")
        if not rows:
            if s.memory_size:
                self._claim(ended, ids)
            return self._action_tuple(self._no_actions(), 0)
        lines = [
            self._line([a[row] for a in arrays], None if masks is None else masks[row], None, bool(deterministic), None)
            for row in range(rows)
        ]
        resets = self._claim(ended, ids) if s.memory_size else set()
        for line, agent in zip(lines, ids):
            line["id"] = agent
            if agent in resets:
                line["reset"] = True
        try:
            said = self._ask(lines)
            answers = [self._outputs(answer, 1, False) for answer in said]
        except UsageError:
            if resets:
                with self._state:  # (their memories were not started over: on their next line, then)
                    self._stale.update(resets)
            raise
        self._answered.versions = {agent: answer.get("version") for agent, answer in zip(ids, said)}
        self._answered.version = said[-1].get("version")
        out = {}
        if s.continuous_size:
            out["continuous_actions"] = np.stack([a["continuous_actions"] for a in answers])
        if s.discrete_branches:
            out["discrete_actions"] = np.stack([a["discrete_actions"] for a in answers])
        return self._action_tuple(out, rows)

    def _action_tuple(self, out: dict, rows: int):
        s = self.settings
        return action_tuple(
            out["continuous_actions"] if s.continuous_size else np.zeros((rows, 0), np.float32),
            out["discrete_actions"].astype(np.int32) if s.discrete_branches else np.zeros((rows, 0), np.int32),
        )

    def reset(self, agent_ids=None) -> None:
        """As Policy.reset: get_action's memories of every agent, or of `agent_ids`, start from zeros on their next
        line."""
        ids = None if agent_ids is None else check_agent_ids(agent_ids, "agent_ids")
        self._own()
        with self._state:
            self._stale.update(self._known if ids is None else ids)
            self._orphans = set() if ids is None else self._orphans.difference(ids)

    def _claim(self, ended, ids: list) -> set:
        """(get_action, a memory policy) The agents of these lines whose memory starts from zeros on them ("reset":
        true): those ended now or reset before; the lines' agents known from here on. UsageError for an agent whose
        memory the parent process's connection holds (this object made before os.fork)."""
        self._own()
        with self._state:
            if self._orphans and (held := [agent for agent in ids if agent in self._orphans and agent not in ended]):
                raise UsageError(
                    f"agent id {_brief(held[0])}: its LSTM memory is held by the connection of the process this "
                    f"connect() was made in, before os.fork(); call reset() in this process first (it starts from "
                    f"zeros) or connect() again here"
                )
            self._stale.update(agent for agent in ended if agent in self._known)
            self._orphans.difference_update(ended)
            self._orphans.difference_update(ids)
            resets = self._stale.intersection(ids)
            self._stale.difference_update(ids)
            self._known.update(ids)
            return resets

    def check_spec(self, behavior_spec) -> None:
        """As Policy.check_spec: UsageError naming the first difference; None when they agree."""
        check_behavior_spec(self.settings, behavior_spec)
