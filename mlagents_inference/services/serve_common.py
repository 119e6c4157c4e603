"""What every serve front shares, --listen, --http, --grpc and Ray Serve's ingress alike: the Front base class (a
listening transport: bind, refuse an exposed address without --allow-remote, start, stop accepting, clean up), the
listening sockets, the server's bounds (memories, the grace after SIGTERM), the latency and batch histograms of
/metrics, one-line logging at most once a second (the loop's errors, aiohttp's refused requests, the V2 routes'
404/405 answers), and the V2 repository API's calls on a model repository (RepositoryControl). Torch-free; aiohttp
is handed in by its callers (add_v2_unknown_route's `web`)."""

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import sys
import time
from bisect import bisect_left
from typing import Callable, Optional

from ..core.errors import UsageError
from .protocol import parse_address

__all__ = [
    "STOP_GRACE_S",
    "MEMORY_IDS",
    "MEMORY_BYTES",
    "CONNECTION_MEMORY_IDS",
    "CONNECTION_MEMORY_BYTES",
    "LATENCY_BUCKETS_S",
    "BATCH_BUCKETS",
    "cannot_listen",
    "listening_socket",
    "is_loopback",
    "is_wildcard",
    "shown_address",
    "Histogram",
    "DESCRIPTORS",
    "LOOP_ERRORS",
    "loop_error",
    "LOOPS",
    "loop_maker",
    "tell_limited",
    "OneLineLog",
    "add_v2_unknown_route",
    "model_metrics",
    "Front",
    "CONTROL_CALLS",
    "RepositoryControl",
]


STOP_GRACE_S = 10.0  # SIGTERM: how long the lines already received have to be answered and sent


MEMORY_IDS, MEMORY_BYTES = (
    100_000,
    256 << 20,
)  # the LSTM memories of every client together: a new id past them is refused


CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES = 10_000, 8 << 20  # one connection's (HTTP: all of /v1/act's): past them
# its own least recently answered id is dropped, and that id's next line refused unless "reset": true or its "memory"


LATENCY_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


CONTROL_CALLS = 4  # the V2 repository calls (load, unload, index) running at once; more are refused at once (503)


def cannot_listen(option: str, text: str, exc: OSError) -> UsageError:
    reason = {
        errno.EADDRINUSE: "address already in use",
        errno.EACCES: "permission denied",
        errno.EADDRNOTAVAIL: "no such address on this machine",
    }.get(exc.errno, exc.strerror or str(exc))
    return UsageError(f"{option} {text}: cannot listen ({reason})")


def listening_socket(option: str, text: str, address: tuple) -> tuple:
    """A bound, listening, non-blocking socket and the Unix socket file's (dev, inode) it created (None for TCP).
    An existing Unix socket file is replaced when nothing answers on it; any other existing path is refused."""
    made = None
    try:
        if address[0] == "unix":
            path = address[1]
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    raise UsageError(f"{option} {text}: {path} exists and is not a socket; refusing to replace it")
                with socket.socket(socket.AF_UNIX) as probe:
                    try:
                        probe.connect(path)
                    except (ConnectionRefusedError, FileNotFoundError):
                        os.unlink(path)  # a socket file left by a server that is gone
                    else:
                        raise UsageError(f"{option} {text}: another server is listening on {path}")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(path)
            made = (os.stat(path).st_dev, os.stat(path).st_ino)
        else:
            family, kind, proto, _, where = socket.getaddrinfo(
                address[1], address[2], type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(where)
        sock.listen(4096)
        sock.setblocking(False)
        return sock, made
    except socket.gaierror as exc:
        raise UsageError(f"{option} {text}: cannot listen (unknown host: {exc.strerror})")
    except OSError as exc:
        raise cannot_listen(option, text, exc)


def is_loopback(host: str) -> bool:
    import ipaddress

    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def is_wildcard(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.split("%")[0]).is_unspecified
    except ValueError:
        return False


def shown_address(sock: socket.socket) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix:{sock.getsockname()}"
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Histogram:
    """Counts per bucket (Prometheus' `le`), added to n lines at a time: the answering path stays plain Python."""

    def __init__(self, bounds: tuple):
        self.bounds, self.counts, self.sum, self.n = bounds, [0] * (len(bounds) + 1), 0.0, 0

    def add(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n
        self.n += n

    def buckets(self) -> list:
        out, total = [], 0
        for bound, count in zip(self.bounds, self.counts):
            total += count
            out.append((repr(float(bound)), total))
        return out + [("+Inf", self.n)]


DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
LOOP_ERRORS = {"last": 0.0, "quiet": 0}  # the last loop error told, and how many since were not


LOOPS = ("auto", "asyncio", "uvloop")  # --loop, as uvicorn's: auto is uvloop where it is installed, else asyncio


def loop_maker(choice: str = "auto") -> tuple:
    """serve's event loop as --loop chooses it (uvicorn's --loop auto|asyncio|uvloop): (its name, a function making
    one). uvloop (optional: a libuv loop, less CPU a request on gRPC, docs/performance.md) where it is chosen or, for
    auto, installed; else asyncio's. --loop uvloop without uvloop is refused in one line, before anything is loaded."""
    if choice not in LOOPS:
        raise UsageError(f"--loop {choice}: expected one of {', '.join(LOOPS)}")
    if choice != "asyncio":
        try:
            import uvloop
        except ImportError:
            if choice == "uvloop":
                raise UsageError("--loop uvloop needs uvloop: pip install uvloop (or --loop asyncio)") from None
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", asyncio.new_event_loop


def loop_error(loop, context: dict) -> None:
    """The event loop's errors: accept() out of descriptors is asyncio's to retry (a flood of connections, said
    nowhere); anything else in one line on stderr, at most one a second (a peer cannot fill the log)."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in DESCRIPTORS:
        return
    what = f"{type(exc).__name__}: {exc}" if exc is not None else ""
    tell_limited(f"event loop: {context.get('message', 'error')} {what}")


def tell_limited(text: str) -> None:
    """One line on stderr, at most one a second (the server's loop errors, aiohttp's refused requests): a peer cannot
    fill the log; the lines not told are counted in the next."""
    now = time.monotonic()
    if now - LOOP_ERRORS["last"] < 1.0:
        LOOP_ERRORS["quiet"] += 1
        return
    quiet, LOOP_ERRORS["quiet"], LOOP_ERRORS["last"] = LOOP_ERRORS["quiet"], 0, now
    text = " ".join(text.split())[:300]
    print(f"[serve] {text}" + (f" ({quiet} more not shown)" if quiet else ""), file=sys.stderr, flush=True)


class OneLineLog(logging.Filter):
    """aiohttp's "Error handling request" (a multi-line traceback for every malformed request a peer sends): one line
    through tell_limited instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        reason = f" ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})" if exc is not None else ""
        tell_limited(f"http: {record.getMessage()}{reason}")
        return False


def add_v2_unknown_route(app, web, dumps) -> None:
    """An unknown route or method under /v2 (the repository, shared-memory, trace and log routes this server lacks)
    answered as the V2 errors are, 404 or 405 with {"error": "..."} (Triton's clients read every V2 answer as JSON),
    from a route of every method added to `app` after all its others (aiohttp tries it only for a path that no other
    route takes) rather than from a middleware, which every request would go through (a coroutine and aiohttp's
    context manager around each handler): serve --http's and the Ray ingress's."""
    resource = app.router.add_resource("/v2{tail:.*}")

    async def unknown(request):
        path = request.path
        if path != "/v2" and not path.startswith("/v2/"):
            raise web.HTTPNotFound()
        allowed: set = set()
        for other in request.app.router.resources():
            if other is not resource:
                allowed |= (await other.resolve(request))[1]
        what = "method not allowed for" if allowed else "unknown route"
        return web.Response(
            body=dumps({"error": f"{what} {request.method} {path[:80]}"}),
            status=405 if allowed else 404,
            headers={"Allow": ",".join(sorted(allowed))} if allowed else None,
            content_type="application/json",
        )

    resource.add_route("*", unknown)


class Front:
    """A listening transport that makes Owners for the Server: bound before the loop starts (so that a taken port is
    one line before anything runs), started in it, told to stop accepting at the first signal, cleaned up after."""

    option = ""  # its command-line option (FRONTS' key, with --)
    says = ""  # its start-up line: "[serve] <says> on <address>"
    unix = False  # whether it listens on a Unix socket too (unix:PATH)

    def __init__(self, text: str):
        self.text, self.address = text, parse_address(self.option, text, unix=self.unix)
        self.sock, self.made, self.remote = None, None, False

    def check(self) -> None:
        """What it needs that may be missing (an optional package): a UsageError naming it, before the policy loads."""

    def bind(self, allow_remote: bool = False) -> None:
        """Listen (UsageError in one line when it cannot). An address other than loopback is refused unless
        `allow_remote`: there is no authentication, so exposure is a decision (--allow-remote)."""
        self.sock, self.made = listening_socket(self.option, self.text, self.address)
        self.remote = self.address[0] == "tcp" and not is_loopback(self.sock.getsockname()[0])
        if self.remote and not allow_remote:
            where = shown_address(self.sock)
            self.close()
            self.sock = None
            everywhere = (
                " binds every interface"
                if is_wildcard(where.rsplit(":", 1)[0].strip("[]"))
                else " is reachable from other machines"
            )
            raise UsageError(
                f"{self.option} {self.text}{everywhere} ({where}) and serve has no authentication: "
                f"give --allow-remote to mean it, or listen on 127.0.0.1"
            )

    async def start(self, server) -> None:
        """Start serving in `server`'s loop (fronts.serve.Server): make its Owners."""
        raise NotImplementedError

    def stop_accepting(self) -> None:
        """The first signal: take no new clients (those already here are answered)."""

    async def cleanup(self) -> None:
        """The loop is ending: let go of what start() made."""

    def shown(self) -> str:
        return shown_address(self.sock)

    def told(self) -> str:
        """Its start-up line's address, with what it exposes where it is not loopback."""
        where = shown_address(self.sock)
        if not getattr(self, "remote", False):
            return where
        host = where.rsplit(":", 1)[0].strip("[]")
        return where + (
            " (every interface: anyone who reaches this machine, no authentication)"
            if is_wildcard(host)
            else " (reachable from other machines, no authentication)"
        )

    def close(self) -> None:
        """After the loop: the socket closed, and the Unix socket file it made (and only that one) removed."""
        if self.sock is not None:
            self.sock.close()
        if self.made is not None:
            with contextlib.suppress(OSError):
                st = os.stat(self.address[1])
                if (st.st_dev, st.st_ino) == self.made:
                    os.unlink(self.address[1])


def model_metrics(rows) -> tuple:
    """/metrics' per-model families (serve --http's and the Ray ingress's): lines, error answers and lines per engine
    call, labelled by model and version; `rows`: (model, version, lines, errors, batch histogram) each."""
    from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

    labels = ["model", "version"]
    lines = CounterMetricFamily(
        "mlagents_serve_model_lines", "lines and V2 requests answered, per model and version", labels=labels
    )
    errors = CounterMetricFamily("mlagents_serve_model_error_answers", "error answers, per model", labels=labels)
    batches = HistogramMetricFamily(
        "mlagents_serve_model_batch_lines", "lines per engine call, per model and version", labels=labels
    )
    for model, version, n, bad, hist in rows:
        lines.add_metric([model, version], n)
        errors.add_metric([model, version], bad)
        batches.add_metric([model, version], hist.buckets(), hist.sum)
    return lines, errors, batches


class RepositoryControl:
    """The V2 repository API (Triton's model repository extension: index, load, unload) on a model repository
    (services.repository; `not_found`: its ModelNotFound), as a data plane's `control`: serve's Server and the Ray
    ingress answer the same calls the same way. `allowed`: --allow-model-control (otherwise the data plane refuses
    every call, 403); `loop()`: the front's event loop; `settled(name)` (async, optional): what the front does once the
    repository changed a model, before the call is answered (the Ray ingress rolls the change out to the model's
    deployment; serve's lanes get it through the repository's on_change)."""

    def __init__(
        self, repository, not_found: type, plane, allowed: bool, loop: Callable, settled: Optional[Callable] = None
    ):
        self.repository, self.not_found, self.plane, self.allowed = repository, not_found, plane, allowed
        self.loop, self.settled = loop, settled
        self.calls = 0  # (repository calls in flight: at most CONTROL_CALLS)

    async def index(self) -> list:
        """The repository index: a row per loaded version (READY), per model loading (LOADING), per model of the
        served folders with no version loaded (UNAVAILABLE, with why)."""
        from ..loaders.run_folder import discover

        found = await self.bounded(discover, self.repository.roots)
        rows, held = [], {entry["name"]: entry for entry in self.repository.models()}
        for name in sorted(set(found) | set(held)):
            entry = held.get(name)
            if name in self.plane.loading:
                rows.append({"name": name, "version": "", "state": "LOADING", "reason": "a load is running"})
            elif entry is None or not entry["versions"]:
                why = "unloaded" if entry is None else "no version passed verification"
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE", "reason": why})
            else:
                for step in entry["versions"]:
                    serving = "serving" if step == entry["serving"] else "loaded"
                    pinned = ", pinned" if step == entry["pinned"] else ""
                    rows.append({"name": name, "version": str(step), "state": "READY", "reason": serving + pinned})
        return rows

    async def load(self, name: str, version: Optional[str]) -> None:
        await self.control_call(name, self.load_now, name, version)

    async def unload(self, name: str, version: Optional[str]) -> None:
        await self.control_call(name, self.unload_now, name, version)

    def check_room(self) -> None:
        """At most CONTROL_CALLS repository calls (index, load, unload) at a time: the rest refused at once (503 /
        UNAVAILABLE, one line), so that a flood holds no thread and queues nothing."""
        from .errors import Unavailable

        if self.calls >= CONTROL_CALLS:
            raise Unavailable(f"{self.calls} repository calls are running already (at most {CONTROL_CALLS}); try again")

    async def bounded(self, call, *args):
        """A repository call on a thread, within CONTROL_CALLS (check_room)."""
        self.check_room()
        self.calls += 1
        try:
            return await self.loop().run_in_executor(None, call, *args)
        finally:
            self.calls -= 1

    async def control_call(self, name: str, call, *args) -> None:
        """A load or unload on a thread (verification takes a while; the passes go on meanwhile), within
        CONTROL_CALLS (check_room), the model not ready meanwhile; its change reaches the models served (`settled`, or
        the repository's on_change queued first) before the answer goes."""
        self.check_room()  # (refused before the model is marked loading)
        self.calls += 1
        loading = name not in self.plane.loading
        self.plane.loading.add(name)
        try:
            await self.loop().run_in_executor(None, call, *args)
            if self.settled is not None:
                await self.settled(name)
        finally:
            self.calls -= 1
            if loading:
                self.plane.loading.discard(name)

    def load_now(self, name: str, version: Optional[str]) -> None:
        from ..core.errors import CheckFailed
        from .errors import BadRequest, NotFound, Unavailable

        repository = self.repository
        try:
            if name not in {entry["name"] for entry in repository.models()}:
                repository.load(name)  # (unloaded, or given as a path under the served folders: confined)
            if version is not None:
                repository.pin(name, int(version))
            else:
                repository.load(name)
                repository.unpin(name)
        except self.not_found as exc:
            raise NotFound(str(exc)) from None
        except CheckFailed as exc:
            raise BadRequest(str(exc)) from None
        except UsageError as exc:
            raise (Unavailable if "still running" in str(exc) else BadRequest)(str(exc)) from None

    def unload_now(self, name: str, version: Optional[str]) -> None:
        from .errors import BadRequest, NotFound

        try:
            self.repository.unload(name, None if version is None else int(version))
        except self.not_found as exc:
            raise NotFound(str(exc)) from None
        except UsageError as exc:
            raise BadRequest(str(exc)) from None
