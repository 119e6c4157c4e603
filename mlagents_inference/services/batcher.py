"""The batcher: one model's answering pass, below every serve front. The lines and V2 requests its owners hand over
(an Owner: a socket connection, a POST /v1/act line, a V2 request) wait together and go through one answer_waiting
call a pass (one engine call for the plain lines, the V2 requests' rows riding in it); each owner gets its answers in
its order. As MLServer keeps its adaptive batching in a package of its own (mlserver/batching), it knows no transport:
fronts.serve's Server adds the connections and the socket registry, fronts.serve_http and fronts.serve_grpc hand it
HttpLines and V2 Jobs (submit). One Batcher per model (issue 44 serves several: a table of them under the data plane).
docs/architecture.md draws the path of a line."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import NamedTuple, Optional, Protocol

from ..core.observations import AgentMemories
from .open_inference import Job, ModelView, claim_memories
from .protocol import answer_waiting, echoed_id, json_codec, ride_along
from .serve_common import (
    BATCH_BUCKETS,
    CONNECTION_MEMORY_BYTES,
    CONNECTION_MEMORY_IDS,
    LATENCY_BUCKETS_S,
    MEMORY_BYTES,
    MEMORY_IDS,
    Histogram,
)

__all__ = [
    "RECENT_S",
    "GATHER_TURNS",
    "GATHER_MOST",
    "AWAITED_S",
    "GATHER_S",
    "PASS_ANSWER_BYTES",
    "ANSWER_BYTES",
    "HTTP_SCOPE",
    "ServeOptions",
    "Owner",
    "HttpLine",
    "TensorRequest",
    "Taken",
    "Batcher",
]


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
    """Whatever hands the Batcher lines and takes their answers (a socket connection, one HTTP request). The Batcher
    learns of its lines through Batcher.waiting(owner, n) and, in an answering pass, takes them from `lines`."""

    lines: list  # its raw lines waiting to be answered, in order (bytes; None for a line past --max-line-bytes)
    scope: str  # the prefix of its ids' memory keys: two owners' agent 0 are two agents ("<n>:", "http:")
    arrived: float  # time.perf_counter() when its oldest waiting line was read (latency is measured from there)
    eof: bool  # no more lines will come: close once the last answer is written
    closed: bool  # gone: answers for it are dropped
    info: bool  # a line of it may be {"info": true} (the pass looks for control lines only then)
    lockstep: bool  # a client that comes back once answered (a connection): the pass notes when it answered it

    def deliver(self, texts: list, answers: list) -> None:
        """The answers to the lines it handed over, in their order: JSON texts (bytes) and the answer dicts."""

    def answered(self) -> None:
        """The pass that took its lines is over (resume reading, close after EOF, ...)."""


class HttpLine:
    """POST /v1/act: one line, its answer handed to the request's future (an Owner)."""

    eof = closed = info = lockstep = False

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

    eof = closed = info = lockstep = False
    scope = ""

    def __init__(self, job: Job, future):
        self.lines, self.future, self.arrived, self.weight = [job], future, time.perf_counter(), job.rows

    def deliver(self, texts: list, answers: list) -> None:
        if not self.future.done():
            self.future.set_result(answers[0])

    def answered(self) -> None:
        pass


class Taken(NamedTuple):
    """An owner's part of an answering pass: its lines taken, from when."""

    owner: Owner
    n: int
    arrived: float


class Batcher:
    """One model's answering pass: every owner's waiting lines (and V2 requests) through one answer_waiting call a
    pass. The holder of the owners (fronts.serve.Server) sets `loop` and `done` and, while stopping, check_drained."""

    def __init__(self, policy, options: ServeOptions = ServeOptions()):
        self.policy, self.limit = policy, options.max_line_bytes
        self.max_batch, self.max_wait = options.max_batch, options.max_wait_us / 1e6
        self.options = options
        self.loads, self.dumps = json_codec()
        self.memories = AgentMemories(MEMORY_IDS, MEMORY_BYTES, CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES)
        self.ready: dict = {}  # owners (connections, HTTP lines, V2 requests) with lines waiting, in arrival order
        self.waiting_lines, self.timer, self.scheduled = 0, None, False
        self.stopping, self.failure, self.loop, self.done = 0, None, None, None
        self.lines = self.errors = 0
        self.latencies: list = []
        self.latency, self.batches = Histogram(LATENCY_BUCKETS_S), Histogram(BATCH_BUCKETS)
        self.view, self.jobs = ModelView(policy), 0  # (V2: the model as it sees it; its requests waiting)
        self.last_job, self.jobs_taken = 0.0, 0  # the last V2 request's arrival, how many were taken (gather)
        self.awaited: dict = {}  # lock-step owners answered, none of their lines back since: {owner: when}, oldest 1st
        self.bounds = {**self.memories.bounds(), "max_line_bytes": self.limit}
        s, self.info = policy.settings, policy.info  # (an answer's bytes: 24 a number; an info answer's, as it is)
        self.answer_bytes = 64 + 24 * (s.continuous_size * 2 + len(s.discrete_branches) + s.memory_size)
        self.info_bytes = max(
            self.answer_bytes, len(self.dumps({"id": None, "info": self.info, "bounds": self.bounds}))
        )

    def check_drained(self) -> None:
        """After a pass while stopping: the owners' holder closes what is done (fronts.serve.Server)."""

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
            owners.append(Taken(owner, len(take), owner.arrived))
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
                if not owner.lines and owner.lockstep and not owner.eof:  # (at EOF: it closes)
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
