"""The batcher: the answering pass of the models served, below every serve front. The lines and V2 requests its owners
hand over (an Owner: a socket connection, a POST /v1/act line, a V2 request) wait together; a pass routes each to its
model's Lane (one version of one model: its policy, memories, V2 view and counts; by the line's "model" and "version"
keys, or a V2 request's model and version) and goes through one answer_waiting call per lane (one engine call for the
plain lines, the V2 requests' rows riding in it), each lane with a budget of its own, so that a flooded model does not
starve another; each owner gets its answers in its order, each tagged with the model and version that answered. As
MLServer keeps its adaptive batching in a package of its own (mlserver/batching), it knows no transport: fronts.serve's
Server adds the connections, the socket registry and the model repository it follows, fronts.serve_http and
fronts.serve_grpc hand it HttpLines and V2 Jobs (submit). docs/architecture.md draws the path of a line;
docs/serve.md says how passes are shared between models."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional, Protocol

from ..core.observations import AgentMemories, MemoryBudget
from .open_inference import Job, ModelView, claim_memories, shown_sequence
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
    "GATHER_QUIET_S",
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
    "GONE_KEPT",
    "Routed",
    "Lane",
    "Batcher",
]


GONE_KEPT = 4  # a model's last unloaded versions whose agents (and V2 sequences) are refused, not moved, until reset


RECENT_S, GATHER_TURNS, GATHER_MOST, GATHER_QUIET_S = 0.002, 16, 1024, 0.0003
# With --max-wait-us 0, a V2 request that comes within RECENT_S of the one before is answered once GATHER_TURNS turns
# of the loop have passed with no other V2 request coming and, while fewer requests wait than the last pass found
# (`pass_jobs`, falling by one a pass), GATHER_QUIET_S after the last one came (at most GATHER_MOST turns in all, or
# --max-batch lines and requests waiting): grpcio hands the loop one request at a time, a few turns apart. Without
# the turns 64 clients' requests went one engine call each (1.08 rows a call measured); 16 turns counted from the
# first request, 3.5-3.9; counted from the last one, about 19 on asyncio's loop. uvloop's turns are shorter: 16 of
# them made 3.7 rows a call on a quiet machine, the time floor 25 (docs/performance.md). A lone client's request finds
# none within RECENT_S, or a last pass of one: answered at once, or after the turns.


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
    allow_model_control: bool = False  # the V2 repository API (load, unload) answered, not refused
    grpc_process: bool = True  # --grpc: grpcio's server in a process of its own (fronts.serve_grpc.Relay)

    @classmethod
    def from_args(cls, args) -> "ServeOptions":
        return cls(
            args.max_line_bytes,
            args.max_batch,
            args.max_wait_us,
            bool(getattr(args, "allow_remote", False)),
            getattr(args, "body_timeout_s", 30.0),
            getattr(args, "http_in_flight_bytes", 64 << 20),
            bool(getattr(args, "allow_model_control", False)),
            getattr(args, "grpc_process", "on") == "on",
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


class Routed(NamedTuple):
    """A line whose model is known: the lane that answers it and what it hands that lane (the raw line, or its
    object with "model" and "version" taken out); `lane` None: refused before a model was chosen, `payload` its
    answer. `raw`: the line as it came (routed again should its lane be unloaded before it is answered)."""

    lane: Optional["Lane"]
    payload: object
    raw: object


class Lane:
    """One version of one model the batcher answers: its policy, its own LSTM memories (two versions never share
    memories, nor two models), its V2 view (name, version, statistics), its counts (/metrics' model and version
    labels). A lane unloaded is `gone`: a line already in its engine call is answered on it, no line after. The
    memories' bounds are `budget`'s (the Batcher's: every lane's memories together, and each client's in every
    lane)."""

    def __init__(self, model: str, version: str, policy, limit: int, dumps: Callable, budget: MemoryBudget):
        self.model, self.version, self.policy = model, str(version), policy
        self.memories = AgentMemories(budget=budget)
        self.view = ModelView(policy, model, self.version)
        self.view.lane = self
        self.bounds = {**self.memories.bounds(), "max_line_bytes": limit}
        s, self.info = policy.settings, policy.info  # (an answer's bytes: 24 a number; an info answer's, as it is)
        self.answer_bytes = (
            96
            + len(model)
            + len(self.version)
            + 24 * (s.continuous_size * 2 + len(s.discrete_branches) + s.memory_size)
        )
        self.info_bytes = max(
            self.answer_bytes, len(dumps({"id": None, "info": self.info, "bounds": self.bounds})) + 64 + len(model)
        )
        self.lines = self.errors = 0
        self.batches = Histogram(BATCH_BUCKETS)
        self.gone = False
        self.orphans: dict = {}  # once gone: scope -> the keys of the agents and sequences whose memory it held
        self.model_entry = None  # (its services.dataplane.Model, set by the server)

    def leave(self) -> None:
        """Unloaded: its memories forgotten and their room given back to the budget (a new id then fits), the keys
        that held one remembered (orphans), so that their next line is refused rather than continued on another
        version."""
        self.gone = True
        if self.policy.settings.memory_size:
            self.orphans = {scope: set(held[0]) for scope, held in self.memories.scopes.items() if held[0]}
        self.memories.release()

    def orphaned(self, key, scope: str) -> bool:
        return key in self.orphans.get(scope, ())

    def adopt(self, key, scope: str) -> None:
        """The key's memory starts again elsewhere (a reset, a sequence start, a memory given): no longer refused."""
        keys = self.orphans.get(scope)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.orphans[scope]

    def tag(self, answer: dict) -> dict:
        answer["model"], answer["version"] = self.model, self.version
        return answer


class Batcher:
    """The answering pass of the models served: every owner's waiting lines (and V2 requests) routed to their model's
    lane (a version of a model: Lane) and answered through one answer_waiting call per lane a pass: one engine call per
    model (and per version named) a pass. Each lane has its own budget in a pass (--max-batch rows, PASS_ANSWER_BYTES
    of answers): an owner whose next line's lane has spent its budget keeps its place and waits for the next pass, and
    the pass goes on to the others, so that a flooded model does not starve another. With one model of one version
    (`only`) lines are routed without being read, as before. The holder of the owners (fronts.serve.Server) sets `loop`
    and `done` and, while stopping, check_drained."""

    def __init__(self, policy, options: ServeOptions = ServeOptions(), models: Optional[dict] = None):
        self.limit = options.max_line_bytes
        self.max_batch, self.max_wait = options.max_batch, -(-options.max_wait_us // 1000) / 1000
        # (--max-wait-us in whole ms, rounded up: asyncio's loop waits for its selector in whole ms, so a wait under
        # 1 ms took about 1 ms there; uvloop rounds a timer to the nearest ms, so one under 0.5 ms did not wait at all)
        self.options = options
        self.loads, self.dumps = json_codec()
        self.ready: dict = {}  # owners (connections, HTTP lines, V2 requests) with lines waiting, in arrival order
        self.waiting_lines, self.timer, self.scheduled = 0, None, False
        self.stopping, self.failure, self.loop, self.done = 0, None, None, None
        self.lines = self.errors = self.passes = 0
        self.latencies: list = []
        self.latency, self.batches = Histogram(LATENCY_BUCKETS_S), Histogram(BATCH_BUCKETS)
        self.jobs = 0  # (V2: its requests waiting)
        self.last_job, self.jobs_taken = 0.0, 0  # the last V2 request's arrival, how many were taken (gather)
        self.pass_jobs = 0  # (V2 requests waiting when the last pass began: the gather's guess of what comes)
        self.awaited: dict = {}  # lock-step owners answered, none of their lines back since: {owner: when}, oldest 1st
        self.lanes: dict = {}  # model -> {version: Lane}
        self.serving: dict = {}  # model -> the Lane that answers a line naming no version
        self.only: Optional[Lane] = None  # the one lane, where one model of one version is served
        self.gone_lanes: dict = {}  # model -> its last GONE_KEPT lanes unloaded whose agents' memories are remembered
        self.memory_budget = MemoryBudget(MEMORY_IDS, MEMORY_BYTES, CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES)
        # (the LSTM memories' bounds: every lane's together, each client's in every lane; the lanes keep their own)
        if models is None:  # one policy, as before: version "1"
            models = {str(policy.info["behavior"]): ([("1", policy)], "1")}
        for model, (versions, serving) in models.items():
            self.swap(model, versions, serving)
        first = next(iter(self.serving.values()), None) or next(iter(next(iter(self.lanes.values())).values()))
        self.policy, self.memories, self.view = first.policy, first.memories, first.view  # (the first model's)
        self.info, self.bounds = first.info, first.bounds

    def swap(self, model: str, versions: list, serving: Optional[str]) -> None:
        """What answers `model` now: `versions` [(version, policy)] loaded (a lane each; a lane already made for
        the same policy is kept, with its memories), `serving` the version a line naming none gets (None: not
        ready). Lanes no longer loaded are gone. Called in the loop (between passes): every line routed after it
        gets the new version; a pass already taken finishes on the old."""
        old = self.lanes.get(model, {})
        lanes = {}
        for version, policy in versions:
            version = str(version)
            lane = old.get(version)
            lanes[version] = (
                lane
                if lane is not None and lane.policy is policy
                else Lane(model, version, policy, self.limit, self.dumps, self.memory_budget)
            )
        gone = self.gone_lanes.setdefault(model, [])
        for version, lane in old.items():
            if lanes.get(version) is not lane:
                lane.leave()
                if lane.orphans:
                    gone.append(lane)
        del gone[: -GONE_KEPT or None]  # (the agents of older ones are told "not held" instead)
        if not gone:
            self.gone_lanes.pop(model, None)
        if lanes:
            self.lanes[model] = lanes
        else:
            self.lanes.pop(model, None)
        if serving is not None and str(serving) in lanes:
            self.serving[model] = lanes[str(serving)]
        else:
            self.serving.pop(model, None)
        every = [lane for held in self.lanes.values() for lane in held.values()]
        self.only = every[0] if len(every) == 1 and len(self.serving) == 1 and not self.gone_lanes else None
        self.answer_bytes = max((lane.answer_bytes for lane in every), default=128)
        self.info_bytes = max((lane.info_bytes for lane in every), default=128)
        self.lane_added(lanes.values())

    def lane_added(self, lanes) -> None:
        """The server's hook: lanes (new or kept) of a model after a swap."""

    def every_lane(self) -> list:
        return [lane for held in self.lanes.values() for lane in held.values()]

    def route(self, raw, scope: str = "") -> Routed:
        """The lane that answers a line (its "model" and "version" keys, taken out), or its refusal."""
        if type(raw) is Routed:
            if raw.lane is None or not raw.lane.gone:
                return raw
            raw = raw.raw
        if type(raw) is Job:
            return self.route_job(raw)
        only = self.only
        if only is not None and (raw is None or (b'"model"' not in raw and b'"version"' not in raw)):
            return Routed(only, raw, raw)
        one = next(iter(self.serving.values())) if len(self.serving) == 1 and len(self.lanes) == 1 else None
        if raw is None:
            error = f"line longer than {self.limit} bytes (--max-line-bytes)"
            return Routed(one, raw, raw) if one else Routed(None, {"id": None, "error": error}, raw)
        try:
            msg = self.loads(raw)
        except (ValueError, RecursionError):
            msg = None
        if type(msg) is not dict:  # (the lane's own answer says why, where there is one lane to ask)
            if one is not None:
                return Routed(one, raw, raw)
            error = "line is not JSON (or nested too deep)" if msg is None else 'expected an object like {"obs": [...]}'
            return Routed(None, {"id": None, "error": error}, raw)
        ident = echoed_id(msg)
        name, version = msg.pop("model", None), msg.pop("version", None)
        served = ", ".join(sorted(self.lanes))[:200]
        if name is None:
            if len(self.lanes) != 1:
                return Routed(
                    None, {"id": ident, "error": f"name the model: {len(self.lanes)} are served ({served})"}, raw
                )
            name = next(iter(self.lanes))
        held = self.lanes.get(name) if type(name) is str else None
        if held is None:
            shown = name[:120] if type(name) is str else str(name)[:40]
            return Routed(None, {"id": ident, "error": f"model {shown}: not served (served: {served})"}, raw)
        if version is None:
            lane = self.serving.get(name)
            if lane is None:
                return Routed(None, {"id": ident, "error": f"model {name}: no verified version loaded yet"}, raw)
            if lane.policy.settings.memory_size and ident is not None and (len(held) > 1 or name in self.gone_lanes):
                key = scope + (str(ident) if type(ident) is int else json.dumps(ident))
                started = msg.get("reset") is True or msg.get("memory") is not None
                return self.stick(name, lane, key, scope, started, msg, raw, f"agent {json.dumps(ident)[:60]}")
            return Routed(lane, msg, raw)
        return self.named_version(name, held, version, ident, msg, raw)

    @staticmethod
    def named_version(name: str, held: dict, version, ident, msg, raw) -> Routed:
        """The lane of a version a line names (a whole number, or its digits), or its refusal naming those loaded."""
        text = (
            str(version)
            if type(version) is int and 0 <= version < 10**18
            else str(int(version))
            if type(version) is str and version.isascii() and version.isdigit() and len(version) <= 18
            else None
        )
        lane = held.get(text) if text is not None else None
        if lane is None:
            loaded = ", ".join(held)[:200]
            shown = str(version)[:40]
            error = f"model {name}: version {shown} is not loaded (loaded: {loaded})"
            return Routed(None, {"id": ident, "error": error}, raw)
        return Routed(lane, msg, raw)

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
        more = turns > 0 or (self.jobs < self.pass_jobs and time.perf_counter() - self.last_job < GATHER_QUIET_S)
        if more and most > 0 and not full:
            self.loop.call_soon(self.gather, turns - 1, seen, most - 1)
        else:
            self.answer_pass()

    def submit(self, job: Job):
        """A V2 request's Job through the next answering pass: a future of the Job, its outputs or error set (awaited
        by the data plane; a plain call returning the future, not a coroutine: one layer less on every request)."""
        owner = TensorRequest(job, self.loop.create_future())
        self.jobs += 1
        self.jobs_taken += 1
        self.waiting(owner, 1)
        self.last_job = owner.arrived
        return owner.future

    # -- answering
    def control(self, raw, lane: Lane):
        """{"info": true} (optionally with "id"): the lane's info dict; None for any other line."""
        if type(raw) is dict:
            msg = raw
        else:
            try:
                msg = self.loads(raw)
            except (ValueError, RecursionError):
                return None
        if type(msg) is not dict or msg.get("info") is not True or not set(msg) <= {"info", "id"}:
            return None
        return lane.tag({"id": echoed_id(msg), "info": lane.info, "bounds": lane.bounds})

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
        An owner whose answers are unsent is left out until resume_writing. Several lanes: _take_routed."""
        if self.only is None:
            return self._take_routed()
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

    def _take_routed(self) -> tuple:
        """_take_lines with several lanes: each line routed as it is taken (Routed, kept in its owner's list should
        it wait), each lane with a budget of its own (--max-batch rows, PASS_ANSWER_BYTES); an owner whose next line's
        lane has spent its budget keeps its place in line, and the pass goes on to the next owner."""
        lines, scopes, owners, ready, info = [], [], [], self.ready, False
        budgets: dict = {}  # lane -> [rows left, answer bytes left]
        later, spent, lanes = [], 0, sum(map(len, self.lanes.values())) + 1  # (+1: the refusals' own)
        most = self.max_batch or sys.maxsize
        for owner in list(ready):
            if spent >= lanes:
                break
            if getattr(owner, "write_paused", False):
                del ready[owner]
                continue
            each = self.info_bytes if owner.info else self.answer_bytes
            take, n, cap = owner.lines, 0, max(1, ANSWER_BYTES // each)
            while n < len(take) and n < cap:
                routed = take[n] = self.route(take[n], owner.scope)
                budget = budgets.get(routed.lane)
                if budget is None:
                    budget = budgets[routed.lane] = [most, PASS_ANSWER_BYTES]
                if budget[0] <= 0 or budget[1] <= 0:
                    break
                budget[0] -= routed.payload.rows if type(routed.payload) is Job else 1
                budget[1] -= each
                spent += budget[0] <= 0 or budget[1] <= 0
                n += 1
            if n == 0:
                continue  # (its place kept)
            del ready[owner]
            got, owner.lines = take[:n], take[n:]
            if owner.lines:
                later.append(owner)
            lines += got
            scopes += [owner.scope] * n
            owners.append(Taken(owner, n, owner.arrived))
            info = info or owner.info
        for owner in later:
            ready[owner] = None
        return lines, scopes, owners, info

    def _answer_pass(self) -> None:
        ready, self.pass_jobs = self.ready, max(self.jobs, self.pass_jobs - 1)
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
        """A pass's answers, in order: each lane's lines through one _lane_answers call (one engine call), each answer
        of a lane tagged with its model and version; lines refused before a model was chosen answered in place."""
        self.passes += 1
        only = self.only
        if only is not None:  # (one model of one version: the lines go as they are, unless one names a model)
            for line in lines:
                kind = type(line)
                if (
                    (kind is bytes and (b'"model"' in line or b'"version"' in line))
                    or (kind is Job and line.view.lane is not only)
                    or kind is Routed  # (routed while several lanes were served)
                ):
                    break
            else:
                answers = self._lane_answers(only, lines, scopes, info, self.loads)
                errors = 0
                for answer in answers:
                    if type(answer) is not Job:
                        answer["model"], answer["version"] = only.model, only.version
                        errors += "error" in answer
                only.lines += len(lines)
                only.errors += errors
                only.batches.add(len(lines))
                return answers
        route, groups, answers = self.route, {}, [None] * len(lines)
        for i, line in enumerate(lines):
            routed = route(line, scopes[i])
            if routed.lane is None:
                answers[i] = routed.payload
                self.jobs -= type(routed.payload) is Job  # (a V2 request refused before its lane: no longer waiting)
            else:
                groups.setdefault(routed.lane, []).append(i)
                lines[i] = routed.payload
        for lane, at in groups.items():
            if len(at) == len(lines):
                got = self._lane_answers(lane, lines, scopes, info, self.read_line)
            else:
                got = self._lane_answers(lane, [lines[i] for i in at], [scopes[i] for i in at], info, self.read_line)
            errors = 0
            for i, answer in zip(at, got):
                if type(answer) is not Job:
                    lane.tag(answer)
                    errors += "error" in answer
                answers[i] = answer
            lane.lines += len(at)
            lane.errors += errors
            lane.batches.add(len(at))
        return answers

    def _lane_answers(self, lane: Lane, lines: list, scopes: list, info: bool, loads: Callable) -> list:
        """One lane's answers, in order: control lines ({"info": true}) apart; V2 requests (Jobs, checked already)
        riding in the lines' engine call (a second request of one sequence in the next call, from the first's
        memory)."""
        policy, memories = lane.policy, lane.memories
        jobs = [i for i, line in enumerate(lines) if type(line) is Job] if self.jobs else []
        special = (
            {
                i: a
                for i, raw in enumerate(lines)
                if (type(raw) is bytes and b'"info"' in raw) or (type(raw) is dict and "info" in raw)
                for a in [self.control(raw, lane)]
            }
            if info
            else {}
        )
        special = {i: a for i, a in special.items() if a is not None}
        if not jobs and not special:
            return answer_waiting(policy, lines, memories, loads, self.limit, scopes)
        answers: list = [None] * len(lines)
        rest = [i for i, line in enumerate(lines) if type(line) is not Job and i not in special]
        self.jobs -= len(jobs)
        started = time.perf_counter_ns()
        for i in jobs:
            lines[i].queue_ns = max(0, started - lines[i].arrived - lines[i].read_ns)
        riders, later = claim_memories([lines[i] for i in jobs], memories)
        got = answer_waiting(
            policy,
            [lines[i] for i in rest],
            memories,
            loads,
            self.limit,
            [scopes[i] for i in rest],
            riders,
        )
        while later:
            riders, later = claim_memories(later, memories)
            ride_along(policy, [], 0, riders)
        for i, answer in [*zip(rest, got), *special.items(), *((i, lines[i]) for i in jobs)]:
            answers[i] = answer
        return answers

    def stick(self, name: str, lane: Lane, key, scope: str, started: bool, payload, raw, who: str) -> Routed:
        """An agent (or V2 sequence) of an LSTM model keeps the version its memory started on: the loaded lane that
        holds its memory, unless it starts again (`started`: a reset, a sequence start, its own memory); one whose
        version was unloaded is refused, never moved to another version. One whose memory a loaded lane dropped at
        its client's bound (the bound counts every lane) goes to that lane, which refuses it in its words."""
        if started:
            for gone in self.gone_lanes.get(name, ()):
                gone.adopt(key, scope)
            return Routed(lane, payload, raw)
        if key in lane.memories:
            return Routed(lane, payload, raw)
        for other in self.lanes.get(name, {}).values():
            if other is not lane and (key in other.memories or key in other.memories.dropped.get(scope, ())):
                if other.policy.settings.memory_size != lane.policy.settings.memory_size and type(payload) is Job:
                    break  # (its request was read for the serving version's memory size: refused below)
                if type(payload) is Job:
                    payload.view = other.view
                return Routed(other, payload, raw)
        else:
            for gone in self.gone_lanes.get(name, ()):
                if gone.orphaned(key, scope):
                    gone.adopt(key, scope)  # (told once; its next line starts again or is unknown, as ever)
                    return self.refuse(
                        payload,
                        f"{who}: its version {gone.version} of {name} was unloaded: send "
                        + ('"reset": true' if type(payload) is not Job else "sequence_start")
                        + f" to start again on version {lane.version}",
                    )
            return Routed(lane, payload, raw)
        return self.refuse(
            payload,
            f"{who}: it started on version {other.version} of {name}, whose memory size differs from version "
            f"{lane.version}'s: name version {other.version}, or send sequence_start to start again on {lane.version}",
        )

    def refuse(self, payload, text: str) -> Routed:
        if type(payload) is Job:
            payload.fail(text)
            return Routed(None, payload, payload)
        return Routed(None, {"id": echoed_id(payload), "error": text}, payload)

    def route_job(self, job: Job) -> Routed:
        """A V2 request's lane: its view's, or for a sequence, the version it started on (stick)."""
        lane = job.view.lane
        if (
            job.key is None
            or lane is None
            or not lane.policy.settings.memory_size
            or (len(self.lanes.get(lane.model, ())) < 2 and lane.model not in self.gone_lanes)
            or lane is not self.serving.get(lane.model)
        ):
            return Routed(lane, job, job)
        started = bool(job.start or job.memory_given)
        return self.stick(
            lane.model, lane, job.key, job.scope, started, job, job, f"sequence {shown_sequence(job.sequence)}"
        )

    def read_line(self, raw):
        """answer_waiting's `loads`: a line routed already is its object ("model" and "version" taken out)."""
        return raw if type(raw) is dict else self.loads(raw)
