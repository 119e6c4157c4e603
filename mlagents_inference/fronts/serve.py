"""serve: the stream's JSON lines over TCP or a Unix socket, the lines waiting on every connection answered together
(one answer_waiting call: one engine call for the plain lines); --http adds GET /healthz, GET /metrics and POST /v1/act
(aiohttp and prometheus-client, optional: imported with --http alone), and V2 over HTTP and gRPC. docs/serve.md.

The pieces, as uvicorn's pluggable protocols: the model's batcher (services.batcher.Batcher: the answering pass,
given a policy and ServeOptions) takes lines from Owners (a connection, an HTTP request, a V2 request) and hands them
their answers; Server adds the socket connections (Connection) and the stop; a front (Front: a listening transport)
makes owners. FRONTS maps each front's option to its class: a new transport is one class and one row there."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
from collections import deque
from typing import TYPE_CHECKING, Optional

from ..core.errors import UsageError
from ..core.files import Interrupted
from ..core.report import latency_text, percentiles
from ..services.batcher import Batcher, ServeOptions
from ..services.dataplane import DataPlane, local_model
from ..services.errors import NotFound
from ..services.serve_common import STOP_GRACE_S, Front, RepositoryControl, loop_error, loop_maker

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = [
    "WRITE_BOUND",
    "READ_SIZE",
    "READ_BOUND",
    "UNFINISHED_BOUND",
    "LINE_COST",
    "Connection",
    "Server",
    "LineFront",
    "FRONTS",
    "front_class",
    "fronts_given",
    "mode_serve",
    "model_repository",
    "repository_models",
    "serving",
]


WRITE_BOUND = 1 << 20  # a connection's unsent answers (bytes) past which its lines are no longer read


READ_SIZE = 1 << 16  # the most one read takes from a connection (the stream's pipe reads: the same); small, so
# that one read of short lines (2 bytes each) makes at most ~32k line objects


READ_BOUND = 1 << 20  # its received, unanswered lines (bytes, LINE_COST more each) past which likewise


UNFINISHED_BOUND = 64 << 20  # the unfinished lines past READ_BOUND, every connection together: one past READ_BOUND
# takes one of UNFINISHED_BOUND // --max-line-bytes slots (at least 1) until it ends; a connection that finds none free
# is not read until one is (24 connections holding 15 MiB of a line each held ~360 MB before)


LINE_COST = 64  # what a waiting line costs beside its bytes (its object and its place in the list)


def _raise_open_files_limit() -> None:
    """Idle connections cost a file descriptor each: the soft limit goes up to the hard one."""
    with contextlib.suppress(ImportError, ValueError, OSError):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


class Connection(asyncio.BufferedProtocol):
    """One client (an Owner of services.batcher, answered lock-step): its bytes split into the stream's lines (too
    long: None), waiting for the next answering pass. Reads go into the server's one read buffer (up to READ_SIZE at a
    time, copied out at once): an idle connection holds none."""

    def __init__(self, server: "Server"):
        self.server, self.lines, self.parts, self.parts_len, self.skipping = server, [], [], 0, False
        self.arrived, self.closed, self.eof, self.info = 0.0, False, False, False
        self.write_paused = self.read_paused = False
        self.slot = self.slot_wanted = False  # (an unfinished line past READ_BOUND: holds / waits for a server's slot)
        self.waiting_bytes, self.transport, self.scope, self.fd = 0, None, "", -1

    lockstep = True  # (the batcher notes when it answered it: it gathers for lock-step clients, AWAITED_S)

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


class Server(Batcher):
    """serve's server: the batcher of its models (services.batcher: one policy as before, or `models` {name:
    ([(version, policy)], serving version)} from the model repository) with the socket connections (Connection:
    --listen's owners), their bounds, the data plane the V2 fronts answer on (every model and version), the
    repository it follows (follow: its changes swap the lanes in the loop; the V2 repository API's calls), and the
    stop."""

    def __init__(self, policy, options: ServeOptions = ServeOptions(), models: Optional[dict] = None):
        super().__init__(policy, options, models)
        self.conns: set = set()
        self.serial = self.opened_total = 0
        self.read_view = memoryview(bytearray(READ_SIZE))
        self.slots, self.slots_wanted = max(1, UNFINISHED_BOUND // self.limit), deque()  # (unfinished long lines)
        self.started = None  # (called once every front listens: serving())
        self.plane = DataPlane(
            {}, lambda: bool(self.stopping), self.view.server_metadata(), self.model_at, self.every_model
        )  # (V2's data plane: every lane, a Model each)
        for lane in self.every_lane():
            self.lane_added([lane])

    def lane_added(self, lanes) -> None:
        for lane in lanes:
            if lane.model_entry is None:
                lane.model_entry = entry = local_model(lane.view, self.submit, self.max_batch)
                entry.metadata = lambda view=lane.view: {**view.metadata(), "versions": self.versions_of(view.name)}

    def versions_of(self, model: str) -> list:
        """A model's loaded versions, oldest first (V2 metadata's "versions")."""
        return sorted(self.lanes.get(model, {}), key=lambda v: (len(v), v))

    def model_at(self, name: str, version: Optional[str] = None):
        """V2's model `name` at `version` (None or "": the version serving): its dataplane Model, or NotFound."""
        held = self.lanes.get(name) if isinstance(name, str) else None
        if held is None:
            served = ", ".join(repr(n) for n in sorted(self.lanes))[:200]
            raise NotFound(f"unknown model {str(name)[:120]!r}: this server serves {served}")
        if version in (None, ""):
            lane = self.serving.get(name)
            if lane is None:
                raise NotFound(f"model {name!r}: no verified version loaded yet")
        else:
            lane = held.get(str(version))
            if lane is None:
                loaded = ", ".join(held)[:200]
                raise NotFound(f"unknown version {str(version)[:40]!r} of model {name!r}: loaded {loaded}")
        return lane.model_entry

    def every_model(self) -> list:
        return [lane.model_entry for lane in self.every_lane()]

    # -- the model repository
    def follow(self, repository, thread: bool) -> None:
        """Answer from `repository` (services.repository): each change of what serves a model (its follower thread, a
        pin, a rollback, an unload) swaps that model's lanes in the loop, between two passes (swap). The V2
        repository API (the data plane's control, services.serve_common.RepositoryControl) answers on it where
        --allow-model-control was given."""
        self.repository, self.follower = repository, thread
        repository.on_change = repository.on_loaded = self.changed
        from ..services.repository import ModelNotFound

        allowed = self.options.allow_model_control
        self.plane.control = RepositoryControl(repository, ModelNotFound, self.plane, allowed, lambda: self.loop)

    def changed(self, model: str, version) -> None:
        """The repository's on_change (any thread): the swap is made in the loop."""
        loop = self.loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # (the loop closing meanwhile)
                loop.call_soon_threadsafe(self.refresh)

    def refresh(self) -> None:
        """Every model's lanes as the repository holds them now (one read of its index; a model gone: no lanes)."""
        models = repository_models(self.repository)
        for name in list(self.lanes):
            if name not in models:
                self.swap(name, [], None)
        for name, (versions, serving) in models.items():
            self.swap(name, versions, serving)

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
        for lane in self.every_lane():
            lane.memories.forget_scope(conn.scope)  # its agents' memories go with it
        for model, gone in list(self.gone_lanes.items()):  # (and what was remembered of those of unloaded versions)
            for lane in gone:
                lane.orphans.pop(conn.scope, None)
            if not any(lane.orphans for lane in gone):
                del self.gone_lanes[model]
                every = self.every_lane()
                self.only = every[0] if len(every) == 1 and len(self.serving) == 1 and not self.gone_lanes else None
        if self.stopping:
            self.check_drained()

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
        repository = getattr(self, "repository", None)
        if repository is not None:
            self.refresh()  # (what changed before the loop ran)
            if self.follower:
                repository.start_following()
        loop.set_exception_handler(loop_error)
        for started, front in enumerate(fronts):
            try:
                await front.start(self)
            except BaseException:  # (the fronts started before it let go of what they made: a process, a port)
                for each in fronts[:started]:
                    await each.cleanup()
                raise
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
    loop_name, make_loop = loop_maker(getattr(a, "loop", "auto"))
    fronts = fronts_given({dest: getattr(a, dest, None) for dest in FRONTS})
    if not fronts:
        raise UsageError("--mode serve needs --listen HOST:PORT (or unix:PATH), --http HOST:PORT or --grpc HOST:PORT")
    for front in fronts:
        front.check()
    server_options = ServeOptions.from_args(a)
    repository = model_repository(ctx)
    if repository is None:
        server = Server(ctx.policy, server_options)  # (the policy is loaded here, before any socket is opened)
    else:
        server = Server(None, server_options, repository_models(repository))
        server.follow(repository, a.follow)
    gc.freeze()  # (as the stream: what is loaded stays, a full collection need not walk it again and again)
    _raise_open_files_limit()
    loop = None
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        for front in fronts:
            front.bind(server_options.allow_remote)
        loop = make_loop()
        loop.run_until_complete(server.run(fronts))
    finally:
        if repository is not None:
            repository.stop()
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
        graphs = graph_calls_text(server.policy.engine)  # (the torch engine on a card: captures, replays, eager calls)
        print(
            f"[serve] lines={server.lines} errors={server.errors} p50={p['p50_ms']} p99={p['p99_ms']} "
            f"connections={server.opened_total} engine={server.policy.engine_name} device={ctx.device} loop={loop_name}"
            + (f" graphs={graphs}" if graphs else ""),
            file=sys.stderr,
            flush=True,
        )
    if server.stopping and server.stopping != signal.SIGTERM:
        raise Interrupted(server.stopping)
    return None, True


def model_repository(ctx: Context):
    """The model repository serve answers from (services.repository: versions are checkpoints' steps), or None where
    one policy is served as before (version "1"): --model-dir given more than once, a folder of several models, or
    --follow, --versions, --pin or --allow-model-control given. Its first scan is made here (its versions loaded and
    verified before any socket is opened); a folder where no version verifies is refused in one line."""
    a = ctx.args
    dirs = list(getattr(a, "model_dirs", None) or ([a.model_dir] if a.model_dir else []))
    wanted = a.follow or a.versions is not None or a.pin or a.allow_model_control
    from ..loaders.run_folder import several_models

    if not (wanted or len(dirs) > 1 or (len(dirs) == 1 and several_models(dirs[0]))):
        return None
    if not dirs:
        raise UsageError("--follow, --versions, --pin and --allow-model-control serve run folders: give --model-dir")
    from ..services.repository import Repository

    repository = Repository(
        dirs, a.versions or 1, a.pin or (), poll_s=getattr(a, "follow_poll_s", 2.0), policy_options=ctx.policy_options()
    )
    repository.first_scan(", ".join(map(str, dirs)))
    return repository


def repository_models(repository) -> dict:
    """The repository's models as the batcher takes them: {model: ([(version, policy)], serving version)}."""
    models = {}
    for entry in repository.models():
        versions = []
        for step in entry["versions"]:
            with contextlib.suppress(UsageError):  # (swapped out since the index was read: the next change tells)
                versions.append((str(step), repository.lookup(entry["name"], step).policy))
        serving = entry["serving"]
        models[entry["name"]] = (versions, None if serving is None else str(serving))
    return models


@contextlib.contextmanager
def serving(
    policy,
    options: ServeOptions = ServeOptions(),
    repository=None,
    follow: bool = False,
    loop: str = "auto",
    **addresses,
):
    """The server in this process, on a thread of its own (tests, or an application embedding it): serving(policy,
    listen="127.0.0.1:0", http="127.0.0.1:0", grpc=...) yields {"listen": "HOST:PORT", "http": ...} as bound (a list
    given: a list); leaving the block stops it as SIGTERM does (every line received answered) and closes its sockets.
    `repository` (services.repository.Repository, scanned once already; policy None): its models, followed by its
    thread where `follow` (stopped when the block is left). `loop`: the event loop, as --loop (auto: uvloop where
    installed)."""
    import threading

    make_loop = loop_maker(loop)[1]
    fronts = fronts_given(addresses)
    for front in fronts:
        front.check()
    if repository is None:
        server = Server(policy, options)
    else:
        server = Server(None, options, repository_models(repository))
        server.follow(repository, follow)
    loop, started = make_loop(), threading.Event()
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
        if repository is not None:
            repository.stop()
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
