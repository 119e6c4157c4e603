"""serve: the stream's JSON lines over TCP or a Unix socket, the lines waiting on every connection answered together
(one answer_waiting call: one engine call for the plain lines); --http adds GET /healthz, GET /metrics and POST /v1/act
(aiohttp and prometheus-client, optional: imported with --http alone). docs/serve.md.

The pieces, as uvicorn's pluggable protocols: a Server (the answering loop, given a policy and ServeOptions) takes
lines from Owners (the Owner protocol: a connection, an HTTP request) and hands them their answers; a front (Front: a
listening transport) makes owners. FRONTS maps each front's option to its class: a new transport is one class and
one row there."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol

from ..core.errors import UsageError
from ..core.files import Interrupted
from ..core.observations import AgentMemories
from ..core.report import latency_text, percentiles
from ..services.open_inference import Job, ModelView, claim_memories
from ..services.protocol import answer_waiting, echoed_id, json_codec, ride_along
from ..services.serve_common import (
    BATCH_BUCKETS,
    CONNECTION_MEMORY_BYTES,
    CONNECTION_MEMORY_IDS,
    LATENCY_BUCKETS_S,
    MEMORY_BYTES,
    MEMORY_IDS,
    STOP_GRACE_S,
    Front,
    Histogram,
    loop_error,
)

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = [
    "WRITE_BOUND",
    "READ_SIZE",
    "READ_BOUND",
    "UNFINISHED_BOUND",
    "HTTP_SCOPE",
    "ServeOptions",
    "Owner",
    "Connection",
    "HttpLine",
    "TensorRequest",
    "Server",
    "LineFront",
    "FRONTS",
    "front_class",
    "fronts_given",
    "mode_serve",
    "serving",
    "PASS_ANSWER_BYTES",
    "GATHER_TURNS",
    "GATHER_MOST",
    "RECENT_S",
    "AWAITED_S",
    "GATHER_S",
    "ANSWER_BYTES",
    "LINE_COST",
]


WRITE_BOUND = 1 << 20  # a connection's unsent answers (bytes) past which its lines are no longer read


READ_SIZE = 1 << 16  # the most one read takes from a connection (the stream's pipe reads: the same); small, so
# that one read of short lines (2 bytes each) makes at most ~32k line objects


READ_BOUND = 1 << 20  # its received, unanswered lines (bytes, LINE_COST more each) past which likewise


UNFINISHED_BOUND = 64 << 20  # the unfinished lines past READ_BOUND, every connection together: one past READ_BOUND
# takes one of UNFINISHED_BOUND // --max-line-bytes slots (at least 1) until it ends; a connection that finds none free
# is not read until one is (24 connections holding 15 MiB of a line each held ~360 MB before)


LINE_COST = 64  # what a waiting line costs beside its bytes (its object and its place in the list)


RECENT_S, GATHER_TURNS, GATHER_MOST = 0.002, 16, 1024  # with --max-wait-us 0, a V2 request that comes within
# RECENT_S of the one before is answered once GATHER_TURNS turns of the loop have passed with no other V2 request
# coming (at most GATHER_MOST turns in all, or --max-batch lines and requests waiting): grpcio hands the loop one
# request at a time, a few turns apart. Without the turns 64 clients' requests went one engine call each (1.08 rows a
# call measured); 16 turns counted from the first request, 3.5-3.9; counted from the last one, about 19 (and 1.4-1.5x
# the requests a second: perf_analyzer at 64, docs/performance.md). A lone client's request finds none within
# RECENT_S: answered at once.


AWAITED_S, GATHER_S = 0.005, 0.002  # with --max-wait-us 0, a line that finds other connections "awaited" (answered
# within AWAITED_S, no line of theirs back since: lock-step clients working out their next step) waits up to GATHER_S
# for them, and is answered as soon as every one is back. 64 lock-step connections of one line each went 4-22 lines
# an engine call without it, 27-51 with it (GATHER_S 0.001: 25-36); a lone client, or clients seldom answered, wait
# for none. (The loop's timers are whole ms: it sleeps in the poll meanwhile, reading what comes.)


PASS_ANSWER_BYTES = 2 << 20  # about how many bytes of answers one pass makes for every connection together


ANSWER_BYTES = 1 << 20  # about how many bytes of answers one pass makes for one connection (its lines' share: the
# rest waits for the next pass, and for its unsent answers to fall under WRITE_BOUND)


HTTP_SCOPE = "http:"  # the memory scope of every POST /v1/act line (socket connections: "<n>:")


def _raise_open_files_limit() -> None:
    """Idle connections cost a file descriptor each: the soft limit goes up to the hard one."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


@dataclass(frozen=True)
class ServeOptions:
    """What the answering loop needs to know (the command line's --max-line-bytes, --max-batch, --max-wait-us)."""

    max_line_bytes: int = 16 << 20  # a longer line gets an error answer, its rest skipped
    max_batch: Optional[int] = None  # the most lines one answering pass takes (None: every line waiting)
    max_wait_us: int = 0  # how long a pass waits for more lines after the first arrives (0: answer at once)
    allow_remote: bool = False  # listening on an address other than loopback (0.0.0.0, a LAN address) is meant
    body_timeout_s: float = 30.0  # --http: a POST's body arrives within this, else 408
    http_in_flight_bytes: int = 64 << 20  # --http: the bodies of the POSTs being read and answered, all together

    @classmethod
    def from_args(cls, args) -> "ServeOptions":
        return cls(
            args.max_line_bytes,
            args.max_batch,
            args.max_wait_us,
            bool(getattr(args, "allow_remote", False)),
            getattr(args, "body_timeout_s", 30.0),
            getattr(args, "http_in_flight_bytes", 64 << 20),
        )


class Owner(Protocol):
    """Whatever hands the Server lines and takes their answers (a socket connection, one HTTP request). The Server
    learns of its lines through Server.waiting(owner, n) and, in an answering pass, takes them from `lines`."""

    lines: list  # its raw lines waiting to be answered, in order (bytes; None for a line past --max-line-bytes)
    scope: str  # the prefix of its ids' memory keys: two owners' agent 0 are two agents ("<n>:", "http:")
    arrived: float  # time.perf_counter() when its oldest waiting line was read (latency is measured from there)
    eof: bool  # no more lines will come: close once the last answer is written
    closed: bool  # gone: answers for it are dropped
    info: bool  # a line of it may be {"info": true} (the pass looks for control lines only then)

    def deliver(self, texts: list, answers: list) -> None:
        """The answers to the lines it handed over, in their order: JSON texts (bytes) and the answer dicts."""

    def answered(self) -> None:
        """The pass that took its lines is over (resume reading, close after EOF, ...)."""


class Connection(asyncio.BufferedProtocol):
    """One client (an Owner): its bytes split into the stream's lines (too long: None), waiting for the next answering
    pass. Reads go into the server's one read buffer (up to READ_SIZE at a time, copied out at once): an idle
    connection holds none."""

    def __init__(self, server: "Server"):
        self.server, self.lines, self.parts, self.parts_len, self.skipping = server, [], [], 0, False
        self.arrived, self.closed, self.eof, self.info = 0.0, False, False, False
        self.write_paused = self.read_paused = False
        self.slot = self.slot_wanted = False  # (an unfinished line past READ_BOUND: holds / waits for a server's slot)
        self.waiting_bytes, self.transport, self.scope, self.fd = 0, None, "", -1

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BOUND)
        self.server.opened(self)

    def get_buffer(self, sizehint: int):
        return self.server.read_view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.server.read_view[:nbytes].tobytes())

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        limit, lines = self.server.limit, self.lines
        before = len(lines)
        self.info = self.info or b'"info"' in data
        if b"\n" not in data:
            if not self.skipping:
                self.parts.append(data)
                self.parts_len += len(data)
                if self.parts_len > limit:  # a too-long line is answered at once, its rest skipped
                    lines.append(None)
                    self.parts, self.parts_len, self.skipping = [], 0, True
        else:
            if self.parts:
                data = b"".join(self.parts) + data
                self.parts, self.parts_len = [], 0
            *complete, tail = data.split(b"\n")
            for line in complete:
                if self.skipping:  # the end of a line already answered as too long
                    self.skipping = False
                elif len(line) > limit:
                    lines.append(None)
                elif line and not line.isspace():
                    lines.append(line)
            if len(tail) > limit:
                lines.append(None)
                self.skipping = True
            elif tail:
                self.parts, self.parts_len = [tail], len(tail)
        if self.parts_len > READ_BOUND or self.slot:
            self.unfinished()
        if len(lines) > before:
            self.waiting_bytes += len(data) + LINE_COST * (len(lines) - before)
            self.server.waiting(self, len(lines) - before)
            if self.waiting_bytes > READ_BOUND:
                self.reading()

    def eof_received(self) -> bool:
        tail = b"".join(self.parts)  # a last line without its newline is a line too
        if tail.strip() and not self.skipping:
            self.lines.append(tail)
            self.server.waiting(self, 1)
        self.parts, self.parts_len, self.eof = [], 0, True
        self.unfinished()
        if not self.lines:
            self.transport.close()  # (after the answers already written)
        return True  # the answers still to come are written before it closes

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.parts, self.parts_len = [], 0
        self.unfinished()
        if self.slot_wanted:
            self.slot_wanted = False
            self.server.slots_wanted.remove(self)
        self.server.lost(self)

    def unfinished(self) -> None:
        """Its unfinished line counts: past READ_BOUND it holds one of the server's slots (UNFINISHED_BOUND) until it
        ends, and without a free one the connection is not read until one is freed."""
        if self.parts_len <= READ_BOUND:
            if self.slot:
                self.server.release_slot(self)
        elif not self.slot and not self.slot_wanted and not self.server.take_slot(self):
            self.slot_wanted = True
            self.reading()

    def pause_writing(self) -> None:  # its unsent answers passed WRITE_BOUND: stop reading it
        self.write_paused = True
        self.reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.reading()
        if self.lines and not self.closed:  # (lines held while its answers were unsent: answered now)
            self.server.waiting(self, 0)

    def reading(self) -> None:
        pause = self.write_paused or self.waiting_bytes > READ_BOUND or self.slot_wanted
        if pause != self.read_paused and not self.closed and not self.transport.is_closing():
            self.read_paused = pause
            (self.transport.pause_reading if pause else self.transport.resume_reading)()

    def deliver(self, texts: list, answers: list) -> None:
        if not self.closed and not self.transport.is_closing():
            self.transport.write(b"\n".join(texts) + b"\n")

    def answered(self) -> None:
        self.waiting_bytes = (
            sum(len(line) for line in self.lines if line) + LINE_COST * len(self.lines) if self.lines else 0
        )
        self.reading()
        if self.eof and not self.lines and not self.closed:
            self.transport.close()


class HttpLine:
    """POST /v1/act: one line, its answer handed to the request's future (an Owner)."""

    eof = closed = info = False

    def __init__(self, line, future):
        self.lines, self.future, self.scope, self.arrived = [line], future, HTTP_SCOPE, time.perf_counter()
        self.info = line is not None and b'"info"' in line

    def deliver(self, texts: list, answers: list) -> None:
        if not self.future.done():
            self.future.set_result((texts[0], answers[0]))

    def answered(self) -> None:
        pass


class TensorRequest:
    """One V2 request (REST or gRPC; an Owner): its checked Job, answered with the lines of the same pass (the Job
    itself comes back through the future, its outputs or its error set)."""

    eof = closed = info = False
    scope = ""

    def __init__(self, job: Job, future):
        self.lines, self.future, self.arrived, self.weight = [job], future, time.perf_counter(), job.rows

    def deliver(self, texts: list, answers: list) -> None:
        if not self.future.done():
            self.future.set_result(answers[0])

    def answered(self) -> None:
        pass


class Server:
    """The answering loop: every connection's waiting lines go through one answer_waiting call per pass."""

    def __init__(self, policy, options: ServeOptions = ServeOptions()):
        self.policy, self.limit = policy, options.max_line_bytes
        self.max_batch, self.max_wait = options.max_batch, options.max_wait_us / 1e6
        self.options = options
        self.loads, self.dumps = json_codec()
        self.memories = AgentMemories(MEMORY_IDS, MEMORY_BYTES, CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES)
        self.ready: dict = {}  # connections (and HTTP lines) with lines waiting, in arrival order
        self.conns: set = set()
        self.waiting_lines, self.serial, self.timer, self.scheduled = 0, 0, None, False
        self.stopping, self.failure, self.loop, self.done = 0, None, None, None
        self.lines = self.errors = self.opened_total = 0
        self.latencies: list = []
        self.latency, self.batches = Histogram(LATENCY_BUCKETS_S), Histogram(BATCH_BUCKETS)
        self.read_view = memoryview(bytearray(READ_SIZE))
        self.slots, self.slots_wanted = max(1, UNFINISHED_BOUND // self.limit), deque()  # (unfinished long lines)
        self.started = None  # (called once every front listens: serving())
        self.view, self.jobs = ModelView(policy), 0  # (V2: the model as it sees it; its requests waiting)
        self.last_job, self.jobs_taken = 0.0, 0  # the last V2 request's arrival, how many were taken (gather)
        self.awaited: dict = {}  # connections answered, none of their lines back since: {conn: when}, oldest first
        self.bounds = {**self.memories.bounds(), "max_line_bytes": self.limit}
        s, self.info = policy.settings, policy.info  # (an answer's bytes: 24 a number; an info answer's, as it is)
        self.answer_bytes = 64 + 24 * (s.continuous_size * 2 + len(s.discrete_branches) + s.memory_size)
        self.info_bytes = max(
            self.answer_bytes, len(self.dumps({"id": None, "info": self.info, "bounds": self.bounds}))
        )

    # -- connections
    def opened(self, conn: Connection) -> None:
        self.serial += 1
        self.opened_total += 1
        conn.scope = f"{self.serial}:"
        sock = conn.transport.get_extra_info("socket")
        conn.fd = sock.fileno() if sock is not None else -1
        self.conns.add(conn)
        if self.stopping:
            conn.transport.close()

    def take_slot(self, conn: Connection) -> bool:
        """A slot for conn's unfinished line past READ_BOUND; none free: conn waits in line for one (False)."""
        if self.slots > 0:
            self.slots -= 1
            conn.slot = True
            return True
        self.slots_wanted.append(conn)
        return False

    def release_slot(self, conn: Connection) -> None:
        """conn's long line ended (or conn is gone): its slot goes to the first connection still waiting for one."""
        conn.slot, self.slots = False, self.slots + 1
        while self.slots_wanted and self.slots > 0:
            waiter = self.slots_wanted.popleft()
            if waiter.slot_wanted and not waiter.closed:
                self.slots -= 1
                waiter.slot, waiter.slot_wanted = True, False
                waiter.reading()

    def lost(self, conn: Connection) -> None:
        self.conns.discard(conn)
        self.awaited.pop(conn, None)
        self.ready.pop(conn, None)
        self.waiting_lines -= len(conn.lines)
        conn.lines = []
        self.memories.forget_scope(conn.scope)  # its agents' memories go with it
        if self.stopping:
            self.check_drained()

    def waiting(self, owner, n: int) -> None:
        if owner not in self.ready:
            self.ready[owner] = None
            owner.arrived = time.perf_counter()
        self.waiting_lines += n
        awaited = self.awaited and self.still_awaited(owner)
        full = self.max_batch is not None and self.waiting_lines >= self.max_batch
        if self.timer is not None and (full or (not awaited and not self.max_wait)):
            self.timer.cancel()  # (full, or the gather's last awaited connection is back: at once)
            self.timer = None
            self.scheduled = False
        if not self.scheduled:
            self.scheduled = True
            if self.max_wait and not full:
                self.timer = self.loop.call_later(self.max_wait, self.answer_pass)
            elif self.jobs and not full and owner.arrived - self.last_job < RECENT_S:
                self.loop.call_soon(self.gather, GATHER_TURNS, self.jobs_taken, GATHER_MOST)
            elif awaited and not full:
                self.timer = self.loop.call_later(GATHER_S, self.answer_pass)
            else:
                self.loop.call_soon(self.answer_pass)

    def still_awaited(self, owner) -> int:
        """How many connections other than `owner` (whose line is back) are still awaited: answered within AWAITED_S,
        none of their lines back since (those answered before that no longer count)."""
        awaited = self.awaited
        awaited.pop(owner, None)
        old = owner.arrived - AWAITED_S
        while awaited:
            conn = next(iter(awaited))
            if awaited[conn] >= old:
                break
            del awaited[conn]
        return len(awaited)

    def gather(self, turns: int, seen: int, most: int) -> None:
        """The answering pass once `turns` turns of the loop (each polls the sockets) pass with no V2 request coming
        (`seen`: the count of those taken when this one was called; at most `most` turns in all, or --max-batch
        lines and requests waiting): V2 requests that grpcio hands over one at a time, a few turns apart, join the
        same engine call, with no timer (the loop's timers are whole ms)."""
        if self.jobs_taken != seen:
            turns, seen = GATHER_TURNS, self.jobs_taken
        full = self.max_batch is not None and self.waiting_lines >= self.max_batch
        if turns > 0 and most > 0 and not full:
            self.loop.call_soon(self.gather, turns - 1, seen, most - 1)
        else:
            self.answer_pass()

    async def submit(self, job: Job) -> Job:
        """A V2 request's Job through the next answering pass: the Job, its outputs or error set."""
        owner = TensorRequest(job, self.loop.create_future())
        self.jobs += 1
        self.jobs_taken += 1
        self.waiting(owner, 1)
        self.last_job = owner.arrived
        return await owner.future

    # -- answering
    def control(self, raw):
        """{"info": true} (optionally with "id"): the policy's info dict; None for any other line."""
        try:
            msg = self.loads(raw)
        except (ValueError, RecursionError):
            return None
        if type(msg) is not dict or msg.get("info") is not True or not set(msg) <= {"info", "id"}:
            return None
        return {"id": echoed_id(msg), "info": self.info, "bounds": self.bounds}

    def answer_pass(self) -> None:
        self.scheduled, self.timer = False, None
        try:
            self._answer_pass()
        except BaseException as exc:  # noqa: BLE001 - ends the server through mode_serve, which raises it again
            self.failure = self.failure or exc
            if not self.done.done():
                self.done.set_result(None)

    def _take_lines(self) -> tuple:
        """(lines, scopes, owners, info) of this pass: each ready owner's lines up to its share (about ANSWER_BYTES of
        answers; PASS_ANSWER_BYTES for all; --max-batch), the rest waiting for the next pass, that owner last in line.
        An owner whose answers are unsent is left out until resume_writing."""
        lines, scopes, owners, budget, ready = [], [], [], self.max_batch or sys.maxsize, self.ready
        info = False
        later, room = [], PASS_ANSWER_BYTES
        while ready and budget > 0 and room > 0:
            owner = next(iter(ready))
            del ready[owner]
            if getattr(owner, "write_paused", False):
                continue
            each = self.info_bytes if owner.info else self.answer_bytes  # (the most one of its answers takes)
            take, share = owner.lines, max(1, min(budget, min(ANSWER_BYTES, room) // each))
            room -= min(len(take), share) * each
            if len(take) > share:
                owner.lines, take = take[share:], take[:share]
                later.append(owner)
            else:
                owner.lines = []
            lines += take
            scopes += [owner.scope] * len(take)
            owners.append((owner, len(take), owner.arrived))
            budget -= getattr(owner, "weight", len(take))  # (a V2 request: its rows)
            info = info or owner.info
        for owner in later:
            ready[owner] = None
        return lines, scopes, owners, info

    def _answer_pass(self) -> None:
        ready = self.ready
        lines, scopes, owners, info = self._take_lines()
        self.waiting_lines -= len(lines)
        if lines:
            answers = self._answers(lines, scopes, info)
            dumps, texts, errors = self.dumps, [], 0
            for i, answer in enumerate(answers):
                if type(answer) is Job:  # (a V2 request's: its front encodes it)
                    texts.append(None)
                    errors += answer.error is not None
                    continue
                try:
                    texts.append(dumps(answer))
                except (TypeError, ValueError):  # a non-finite number slipped through: strict JSON or nothing
                    answers[i] = answer = {"id": answer.get("id"), "error": "the answer holds non-finite numbers"}
                    texts.append(dumps(answer))
                errors += "error" in answer
            now, at, awaited = time.perf_counter(), 0, self.awaited
            for owner, n, arrived in owners:
                owner.deliver(texts[at : at + n], answers[at : at + n])
                if not owner.lines and type(owner) is Connection and not owner.eof:  # (at EOF: it closes)
                    awaited.pop(owner, None)  # (kept oldest first)
                    awaited[owner] = now
                at += n
                self.latency.add(now - arrived, n)
                if len(self.latencies) < 1_000_000:  # bounded: a day-long server keeps the first million
                    self.latencies += [(now - arrived) * 1e3] * n
            self.lines += len(lines)
            self.errors += errors
            self.batches.add(len(lines))
        for owner, _, _ in owners:
            owner.answered()
        if ready and not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.answer_pass)
        if self.stopping:
            self.check_drained()

    def _answers(self, lines: list, scopes: list, info: bool) -> list:
        """A pass's answers, in order: control lines ({"info": true}) apart; V2 requests (Jobs, checked already) riding
        in the lines' engine call (a second request of one sequence in the next call, from the first's memory)."""
        jobs = [i for i, line in enumerate(lines) if type(line) is Job] if self.jobs else []
        special = (
            {
                i: a
                for i, raw in enumerate(lines)
                if type(raw) is bytes and b'"info"' in raw
                for a in [self.control(raw)]
            }
            if info
            else {}
        )
        special = {i: a for i, a in special.items() if a is not None}
        if not jobs and not special:
            return answer_waiting(self.policy, lines, self.memories, self.loads, self.limit, scopes)
        answers: list = [None] * len(lines)
        rest = [i for i, line in enumerate(lines) if type(line) is not Job and i not in special]
        self.jobs -= len(jobs)
        started = time.perf_counter_ns()
        for i in jobs:
            lines[i].queue_ns = max(0, started - lines[i].arrived - lines[i].read_ns)
        riders, later = claim_memories([lines[i] for i in jobs], self.memories)
        got = answer_waiting(
            self.policy,
            [lines[i] for i in rest],
            self.memories,
            self.loads,
            self.limit,
            [scopes[i] for i in rest],
            riders,
        )
        while later:
            riders, later = claim_memories(later, self.memories)
            ride_along(self.policy, [], 0, riders)
        for i, answer in [*zip(rest, got), *special.items(), *((i, lines[i]) for i in jobs)]:
            answers[i] = answer
        return answers

    # -- stopping
    def stop(self, signum: int) -> None:
        """SIGTERM (SIGINT, SIGHUP): accept no more; answer every line received; close each connection once its
        answers are sent and nothing more is waiting on it; at most STOP_GRACE_S. A second signal: at once."""
        if self.stopping:
            return self.finish()
        self.stopping = signum
        for front in self.fronts:
            front.stop_accepting()
        self.loop.call_later(STOP_GRACE_S, self.finish)
        self.check_drained()

    def check_drained(self) -> None:
        if self.done.done():
            return
        import select

        idle = [
            c
            for c in self.conns
            if not c.lines
            and c not in self.ready
            and not c.read_paused
            and not c.transport.get_write_buffer_size()
            and not c.transport.is_closing()
        ]
        poll = select.poll()
        for conn in idle:
            poll.register(conn.fd, select.POLLIN)
        busy = {fd for fd, _ in poll.poll(0)} if idle else set()
        for conn in idle:
            if conn.fd not in busy:  # (what it sent is read and answered: it closes after its answers)
                conn.transport.close()
        if not self.conns and not self.ready:
            self.done.set_result(None)
        else:
            self.loop.call_later(0.005, self.check_drained)

    def finish(self) -> None:
        for conn in list(self.conns):
            conn.transport.abort()
        if not self.done.done():
            self.done.set_result(None)

    async def run(self, fronts: list, signals: bool = True) -> None:
        """Serve on `fronts` (bound already) until stopped: SIGTERM, SIGINT or SIGHUP where `signals` (the main
        thread), else stop() called in this loop (loop.call_soon_threadsafe)."""
        loop = self.loop = asyncio.get_running_loop()
        self.done, self.fronts = loop.create_future(), fronts
        loop.set_exception_handler(loop_error)
        for front in fronts:
            await front.start(self)
        if signals:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(signum, self.stop, signum)
        for front in fronts:
            print(f"[serve] {front.says} on {front.told()}", file=sys.stderr, flush=True)
        if self.started is not None:
            self.started()
        try:
            await self.done
        finally:
            for front in fronts:
                await front.cleanup()


class LineFront(Front):
    """--listen: the stream's JSON lines over TCP or a Unix socket, one Connection per client."""

    option, says, unix = "--listen", "listening", True

    async def start(self, server: "Server") -> None:
        self.listener = await server.loop.create_server(lambda: Connection(server), sock=self.sock, backlog=4096)

    def stop_accepting(self) -> None:
        self.listener.close()


# The fronts, by the command line's option (its dest): one class and one row a transport. As uvicorn's protocol
# tables, a row may name its class "module:Class", imported only when that option is given (aiohttp, grpcio: optional).
FRONTS = {
    "listen": LineFront,
    "http": "mlagents_inference.fronts.serve_http:HttpFront",
    "grpc": "mlagents_inference.fronts.serve_grpc:GrpcFront",
}


def front_class(dest: str) -> type:
    """FRONTS' class for an option, imported where the row names it."""
    front = FRONTS[dest]
    if isinstance(front, str):
        import importlib

        module, name = front.split(":")
        front = getattr(importlib.import_module(module), name)
    return front


def fronts_given(addresses: dict) -> list:
    """A front for each address given, in FRONTS' order: {dest: text or [texts]} (an option given several times
    listens on each)."""
    made = []
    for dest in FRONTS:
        given = addresses.get(dest)
        for text in [given] if isinstance(given, str) else given or ():
            made.append(front_class(dest)(text))
    return made


def mode_serve(ctx: Context):
    """Answer the stream's lines on --listen (TCP or Unix socket) and/or POST /v1/act on --http until SIGTERM (then
    exit 0 once every line received is answered) or SIGINT/SIGHUP (the same, then 128 + N)."""
    a = ctx.args
    fronts = fronts_given({dest: getattr(a, dest, None) for dest in FRONTS})
    if not fronts:
        raise UsageError("--mode serve needs --listen HOST:PORT (or unix:PATH), --http HOST:PORT or --grpc HOST:PORT")
    for front in fronts:
        front.check()
    server_options = ServeOptions.from_args(a)
    server = Server(ctx.policy, server_options)  # (the policy is loaded here, before any socket is opened)
    gc.freeze()  # (as the stream: what is loaded stays, a full collection need not walk it again and again)
    _raise_open_files_limit()
    loop = None
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        for front in fronts:
            front.bind(server_options.allow_remote)
        loop = asyncio.new_event_loop()
        loop.run_until_complete(server.run(fronts))
    finally:
        if loop is not None:
            loop.close()
        for signum, handler in before.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for front in fronts:
            front.close()
    if server.failure is not None:
        raise server.failure
    if a.stream_stats:
        from ..engines.factory import graph_calls_text

        p = latency_text(percentiles(server.latencies)) if server.latencies else {"p50_ms": "n/a", "p99_ms": "n/a"}
        graphs = graph_calls_text(ctx.policy.engine)  # (the torch engine on a card: captures, replays, eager calls)
        print(
            f"[serve] lines={server.lines} errors={server.errors} p50={p['p50_ms']} p99={p['p99_ms']} "
            f"connections={server.opened_total} engine={ctx.engine_name} device={ctx.device}"
            + (f" graphs={graphs}" if graphs else ""),
            file=sys.stderr,
            flush=True,
        )
    if server.stopping and server.stopping != signal.SIGTERM:
        raise Interrupted(server.stopping)
    return None, True


@contextlib.contextmanager
def serving(policy, options: ServeOptions = ServeOptions(), **addresses):
    """The server in this process, on a thread of its own (tests, or an application embedding it): serving(policy,
    listen="127.0.0.1:0", http="127.0.0.1:0", grpc=...) yields {"listen": "HOST:PORT", "http": ...} as bound (a list
    given: a list); leaving the block
    stops it as SIGTERM does (every line received answered) and closes its sockets."""
    import threading

    fronts = fronts_given(addresses)
    for front in fronts:
        front.check()
    server = Server(policy, options)
    loop, started = asyncio.new_event_loop(), threading.Event()
    try:
        for front in fronts:
            front.bind(options.allow_remote)
        server.started = started.set

        def run() -> None:
            try:
                loop.run_until_complete(server.run(fronts, signals=False))
            except BaseException as exc:  # noqa: BLE001 - a front that cannot start: raised in the caller's thread
                server.failure = server.failure or exc
            finally:
                started.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        started.wait()
        if server.failure is not None:
            raise server.failure
        shown: dict = {}
        for front in fronts:  # (an option given once: its address; several times: the list)
            dest = front.option.lstrip("-")
            shown[dest] = front.shown() if isinstance(addresses[dest], str) else [*shown.get(dest, []), front.shown()]
        yield shown
        loop.call_soon_threadsafe(server.stop, signal.SIGTERM)
        thread.join(STOP_GRACE_S + 5)
    finally:
        if not loop.is_running():
            _close_loop(loop)
        for front in fronts:
            front.close()
    if server.failure is not None:
        raise server.failure


def _close_loop(loop) -> None:
    """The stopped loop closed. A task it leaves pending (grpcio's own, of a stream ended in the stop) is destroyed
    whenever the garbage collector comes to it, and asyncio then says "Task was destroyed but it is pending!" through
    the loop's error handler, in whatever this process does by that time (a test after the server's, an application's
    own output): for a server that has stopped that says nothing, and is dropped; anything else goes on as before.
    (Cancelling those tasks instead makes grpcio print a CancelledError traceback.)"""
    handler = loop.get_exception_handler()

    def after_stop(loop, context) -> None:
        if str(context.get("message", "")).startswith("Task was destroyed but it is pending"):
            return
        if handler is not None:
            handler(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(after_stop)
    loop.close()
