"""serve --ray: Ray Serve replicas (services.ray_replica) behind an HTTP ingress of this command's own (aiohttp, as
serve --http): POST /v1/act, the V2 REST routes (the repository API's too), GET /healthz and /metrics. The ingress holds
serve's bounds and calls the replicas through Ray Serve handles; @serve.batch gathers what a replica has waiting into
one engine call per version. Replicas share no memory: a request is the client's "connection"; a line carries its
"memory" (docs/serve.md#ray-serve). Run folders: an application per model, its versions its user_config (Rollouts)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

from ..core.errors import UsageError
from ..core.files import Interrupted, handlers_kept
from ..services.batcher import Batcher, ServeOptions
from ..services.dataplane import DataPlane, Model, rest_error, rest_routes
from ..services.errors import NotFound, Unavailable
from ..services.open_inference import Statistics
from ..services.protocol import echoed_id, json_codec
from ..services.ray_replica import PolicyReplica, body_lines
from ..services.ray_support import (
    copy_package,
    ray_failure,
    ray_init,
    ray_model,
    ray_unreachable,
    ray_version,
    serve_running,
    wait_until_running,
)
from ..services.serve_common import (
    BATCH_BUCKETS,
    LATENCY_BUCKETS_S,
    STOP_GRACE_S,
    Front,
    Histogram,
    OneLineLog,
    RepositoryControl,
    add_v2_unknown_route,
    model_metrics,
    tell_limited,
)

if TYPE_CHECKING:  # (annotations only)
    from ..services.context import Context

__all__ = [
    "APP",
    "ROUTE",
    "READY_WITHIN_S",
    "REQUEST_BYTES",
    "REQUEST_LINES",
    "IN_FLIGHT_BYTES",
    "NEED_HTTP",
    "Described",
    "Ingress",
    "RayHttp",
    "Rollouts",
    "serve_on_ray",
]


APP, ROUTE = "mlagents-inference", "/v1/act"


# the replicas' start (replicas loading, images pulled on a cluster)
READY_WITHIN_S = float(os.environ.get("MLAGENTS_RAY_SERVE_READY_S", 600))


REQUEST_BYTES = 16 << 20  # the most one request's body holds (--max-line-bytes + 1 where that is more): 413 past it


REQUEST_LINES = 16_384  # the most stream lines one POST /v1/act carries: 413 past them


IN_FLIGHT_BYTES = ServeOptions.http_in_flight_bytes  # (--http-in-flight-bytes' default) the bodies of the requests
# in flight together (one without Content-Length counts as a full REQUEST_BYTES until read): past it, and past the
# replicas' own room for requests, 503 at once, nothing read


NEED_HTTP = "serve --ray needs aiohttp and prometheus-client (its ingress): pip install -r requirements-ray.txt"


class Described:
    """A model as its replica described it (describe()): the ingress's data plane's Model of each version (`entries`;
    `stats(view)`: its statistics, summed over the replicas), with no policy of its own."""

    def __init__(self, described: dict, stats: Callable):
        self.stats = stats
        self.update(described)

    def update(self, described: dict) -> None:
        self.name, self.version, self.server = described["name"], described["version"], described["server"]
        self.entries = {version: self.entry(version, d) for version, d in described["versions"].items()}

    def entry(self, version: str, described: dict) -> Model:
        view = _Version(self.name, version)
        return Model(view, lambda: described["metadata"], lambda: described["config"], lambda: self.stats(view))

    def loaded(self) -> list:
        return sorted(self.entries, key=lambda v: (len(v), v))


_Version = NamedTuple("_Version", [("name", str), ("version", str)])  # (as the data plane and statistics name it)


class Ingress:
    """The HTTP side, in this command's event loop: each request bounded (REQUEST_BYTES, REQUEST_LINES), the requests
    in flight bounded (the replicas' room, --http-in-flight-bytes; a request counts until its answer is written, so that
    clients that do not read hold their room), answered by a replica through `handle`; every failure one JSON line
    (and, for the replicas' own, one line on stderr a second at most)."""

    def __init__(self, handle, described, limit: int, room: int, dumps, allow_remote=False, loads=None, named=False):
        """`handle`, `described`: the one policy's (a replica's describe()), or with `named` (a model repository) each
        model's; `body_s` (--body-timeout-s: 408 past it), `in_flight_bytes` (--http-in-flight-bytes: 503 past it)."""
        handles, descriptions = (handle, described) if named else ({described["name"]: handle}, {0: described})
        self.named, self.dumps, self.allow_remote = named, dumps, allow_remote
        self.loads = loads or json_codec()[0]
        self.models = {d["name"]: Described(d, self.version_stats) for d in descriptions.values()}
        self.handles = {d["name"]: handles[d["name"]] for d in descriptions.values()}
        self.handle = next(iter(self.handles.values()))
        server = next(iter(self.models.values())).server
        self.plane = DataPlane({}, lambda: bool(self.stopping), server, self.model_at, self.every_model)
        self.body_bytes, self.limit, self.room = max(REQUEST_BYTES, limit + 1), limit, room
        self.body_s, self.in_flight_bytes = ServeOptions.body_timeout_s, IN_FLIGHT_BYTES  # (defaults; main() sets them)
        self.in_flight = self.held = self.refused = self.requests = 0
        self.lines_refused = 0  # lines the ingress answered with an error itself (no model chosen)
        self.stopping, self.tallies = 0, {}
        self.latency = Histogram(LATENCY_BUCKETS_S)
        for d in descriptions.values():
            self.keep(d["tally"])
        self.drained: Optional[asyncio.Event] = None
        self.rolling, self.rolled = asyncio.Lock(), {}  # (one rollout at a time; each model's last user_config)

    def model_at(self, name: str, version: Optional[str] = None) -> Model:
        """V2's model `name` at `version` (None or "": the version serving): its data plane Model, or NotFound with
        serve's words (fronts.serve.Server.model_at)."""
        model = self.models.get(name) if isinstance(name, str) else None
        if model is None:
            served = ", ".join(repr(n) for n in sorted(self.models))[:200]
            raise NotFound(f"unknown model {str(name)[:120]!r}: this server serves {served}")
        entry = model.entries.get(model.version if version in (None, "") else str(version))
        if entry is None:
            loaded = ", ".join(model.loaded())[:200]
            raise NotFound(f"unknown version {str(version)[:40]!r} of model {name!r}: loaded {loaded}")
        return entry

    def every_model(self) -> list:
        return [model.entries[v] for _, model in sorted(self.models.items()) for v in model.loaded()]

    def version_stats(self, view: _Version) -> dict:
        return self.totals(view.name, view.version)[3].model_stats(view)

    def keep(self, tally: dict) -> None:
        if not tally:  # (an answer the ingress made itself)
            return
        held = self.tallies.get(tally["replica"])
        if held is None or held["seq"] <= tally["seq"]:
            self.tallies[tally["replica"]] = tally

    def answer(self, web, obj, status: int = 200):
        return web.Response(body=self.dumps(obj), status=status, content_type="application/json")

    def totals(self, model: Optional[str] = None, version: Optional[str] = None) -> tuple:
        """(lines, errors, batch histogram, V2 Statistics) summed over every replica's latest counts (of `model`'s
        replicas at `version` alone, where given)."""
        lines = errors = 0
        batches, stats = Histogram(BATCH_BUCKETS), Statistics()
        for t in self.tallies.values():
            if model is None:
                each = [t]
            elif t.get("model") != model:
                continue
            else:
                each = [c for v, c in t["versions"].items() if version is None or v == version]
            for c in each:
                lines, errors = lines + c["lines"], errors + c["errors"]
                counts, total, n = c["batch"]
                batches.counts = [a + b for a, b in zip(batches.counts, counts)]
                batches.sum, batches.n = batches.sum + total, batches.n + n
                if "v2" not in c:
                    continue
                v2_counts, v2_ns, v2_batches, inferences, executions, last = c["v2"]
                for name in stats.names:
                    stats.counts[name] += v2_counts.get(name, 0)
                    stats.ns[name] += v2_ns.get(name, 0)
                for rows, (count, ns) in v2_batches.items():
                    held = stats.batches.setdefault(rows, [0, 0])
                    held[0], held[1] = held[0] + count, held[1] + ns
                stats.inference_count += inferences
                stats.execution_count += executions
                stats.last_inference = max(stats.last_inference, last)
        if model is None:  # (the lines refused before a model was chosen count once, in the totals)
            lines, errors = lines + self.lines_refused, errors + self.lines_refused
        return lines, errors, batches, stats

    def collect(self):
        """Prometheus families (serve's names, summed over the replicas; lines and errors per replica, and per model
        and version as serve --http's, too)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        lines, errors, batches, _ = self.totals()
        yield CounterMetricFamily("mlagents_serve_lines", "lines and V2 requests answered, every replica", value=lines)
        yield CounterMetricFamily("mlagents_serve_error_answers", "error answers, every replica", value=errors)
        per_lines = CounterMetricFamily(
            "mlagents_serve_replica_lines", "lines answered by a replica", labels=["replica"]
        )
        per_errors = CounterMetricFamily(
            "mlagents_serve_replica_error_answers", "its error answers", labels=["replica"]
        )
        for name, t in sorted(self.tallies.items()):
            per_lines.add_metric([name], t["lines"])
            per_errors.add_metric([name], t["errors"])
        yield per_lines
        yield per_errors
        yield from model_metrics(
            (name, version, *self.totals(name, version)[:3])
            for name, model in sorted(self.models.items())
            for version in model.loaded()
        )
        yield GaugeMetricFamily("mlagents_serve_replicas_seen", "replicas that have answered", value=len(self.tallies))
        yield GaugeMetricFamily("mlagents_serve_requests_in_flight", "requests at the replicas", value=self.in_flight)
        yield CounterMetricFamily("mlagents_serve_requests", "requests taken to a replica", value=self.requests)
        yield CounterMetricFamily("mlagents_serve_requests_refused", "503: no room", value=self.refused)
        yield HistogramMetricFamily(
            "mlagents_serve_batch_lines",
            "lines and V2 requests per replica engine pass (@serve.batch)",
            buckets=batches.buckets(),
            sum_value=batches.sum,
        )
        yield HistogramMetricFamily(
            "mlagents_serve_latency_seconds",
            "from a request's arrival at the ingress to its answer written",
            buckets=self.latency.buckets(),
            sum_value=self.latency.sum,
        )

    async def forward(self, web, request, method: str, *more):
        """A POST's body to a replica (`method`, `more` its arguments after the body): its answer, written before the
        request leaves the count."""
        started = time.perf_counter()
        if self.stopping:
            return self.answer(web, {"id": None, "error": "the server is stopping"}, 503)
        length = request.content_length
        if length is not None and length > self.body_bytes:
            return self.too_long(web)
        hold = self.body_bytes if length is None else length
        room = self.room * max(1, len(self.handles))  # (`room` per model served)
        if self.in_flight >= room or self.held + hold > self.in_flight_bytes:
            self.refused += 1
            return self.answer(
                web,
                {
                    "id": None,
                    "error": f"busy: {self.in_flight} requests in flight (at most {room} and "
                    f"{self.in_flight_bytes:,} bytes of bodies); try again",
                },
                503,
            )
        self.in_flight, self.held = self.in_flight + 1, self.held + hold
        try:
            try:  # (a body already here, as a small one comes with its headers: read without a timer's task)
                reading = request.read()
                body = await (reading if request.content.is_eof() else asyncio.wait_for(reading, self.body_s))
            except asyncio.TimeoutError:
                why = f"the request's body did not arrive within {self.body_s:g} s (--body-timeout-s)"
                answer = self.answer(web, {"id": None, "error": why}, 408)
                answer.force_close()  # (the body's rest unread: the connection cannot carry another request)
                return answer
            except web.HTTPRequestEntityTooLarge:
                return self.too_long(web)
            except ConnectionError:  # (the client went before its body came: nobody to answer, nothing to say)
                return web.Response(status=400)
            refused = self.refusal(web, body, method, *more[:2])
            if refused is not None:
                return refused
            self.requests += 1
            try:
                if method == "act" and self.named:
                    status, text, kind, header, tally = await self.routed(body)
                else:
                    handle = self.handles[more[0]] if method == "infer" else self.handle
                    args = (body,) if method == "act" else (*more[:2], body, *more[2:])  # (name, version, body..)
                    status, text, kind, header, tally = await getattr(handle, method).remote(*args)
            except Exception as exc:  # noqa: BLE001 - a replica that died or failed: one line, never a traceback
                why = ray_failure(exc)
                tell_limited(f"ray: a replica failed on a request: {why}")
                return self.answer(
                    web, {"id": None, "error": f"a Ray Serve replica failed on this request: {why}"}, 503
                )
            self.keep(tally)
            answer = web.Response(
                body=text,
                status=status,
                content_type=kind,
                headers=None if header is None else {"Inference-Header-Content-Length": str(header)},
            )
            with contextlib.suppress(ConnectionResetError):  # (a client gone: its answer is dropped)
                await answer.prepare(request)
                await answer.write_eof()  # (waits while the client does not read: its room stays held)
            return answer
        finally:
            self.in_flight, self.held = self.in_flight - 1, self.held - hold
            self.latency.add(time.perf_counter() - started)
            if self.stopping and not self.in_flight:
                self.drained.set()

    async def routed(self, body: bytes) -> tuple:
        """POST /v1/act where several models or versions are served: each line to its model's replicas by its "model"
        key (left out: the one model served), at the version its "version" key names (left out: the one serving; one
        not loaded refused, as serve's batcher does); the lines of one model version in one request, every model's at
        once; the answers back in the order of the lines (a line refused here: its error answer, naming no model). As a
        replica's answer: (status, body, content type, None, a tally)."""
        lines = body_lines(body, self.limit)
        if not lines:
            return (
                400,
                self.dumps({"id": None, "error": "empty body: expected stream lines"}),
                "application/json",
                None,
                {},
            )
        texts: list = [None] * len(lines)
        groups: dict = {}
        for k, raw in enumerate(lines):
            key, refusal = self.route(raw)
            if refusal is not None:
                texts[k] = self.dumps(refusal)
                self.lines_refused += 1
            else:
                groups.setdefault(key, []).append(k)
        calls = [
            self.handles[name].act.remote(b"\n".join(lines[k] for k in ks), version)
            for (name, version), ks in groups.items()
        ]
        status, tally = 200, {}
        for ks, answer in zip(groups.values(), await asyncio.gather(*calls)):
            status, text, kind, _, tally = answer
            self.keep(tally)
            for k, line in zip(ks, [text] if len(ks) == 1 else text.split(b"\n")[: len(ks)]):
                texts[k] = line
        if len(lines) == 1:
            return (status if groups else 400), texts[0], "application/json", None, tally
        return 200, b"\n".join(texts) + b"\n", "application/x-ndjson", None, tally

    def route(self, raw) -> tuple:
        """((the model a line goes to, the version it names or None), None) or (None, its error answer)."""
        served = ", ".join(sorted(self.models))[:200]
        if raw is None:
            if len(self.models) == 1:  # (the replica answers it as the stream does)
                return (next(iter(self.models)), None), None
            return None, {"id": None, "error": f"line longer than {self.limit} bytes (--max-line-bytes)"}
        try:
            obj = self.loads(raw)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            if len(self.models) == 1:  # (the replica answers it as the stream does)
                return (next(iter(self.models)), None), None
            error = "line is not JSON (or nested too deep)" if obj is None else 'expected an object like {"obs": [...]}'
            return None, {"id": None, "error": error}
        ident = echoed_id(obj)
        name, version = obj.get("model"), obj.get("version")
        if name is None:
            if len(self.models) != 1:
                return None, {"id": ident, "error": f"name the model: {len(self.models)} are served ({served})"}
            name = next(iter(self.models))
        if type(name) is not str or name not in self.models:
            shown = name[:120] if type(name) is str else str(name)[:40]
            return None, {"id": ident, "error": f"model {shown}: not served (served: {served})"}
        if version is None:
            return (name, None), None
        model = self.models[name]
        routed = Batcher.named_version(name, {v: v for v in model.loaded()}, version, ident, None, raw)
        return ((name, routed.lane), None) if routed.lane is not None else (None, routed.payload)

    def follow(self, repository, rollout, allowed: bool, thread: bool) -> None:
        """serve --ray of run folders: each change of a model's versions (the repository's follower thread with
        --follow, a repository call with --allow-model-control) rolled out by `rollout(name)` (a thread: Ray Serve's
        deployment update, a new application for a model not served, the application deleted for a model with no
        version left; what the model serves now back, None where it is gone), the rollouts one after another; the
        ingress then routes by what the replicas hold. The V2 repository API (services.serve_common.RepositoryControl)
        answers where `allowed` (--allow-model-control), a call answered once its change is rolled out."""
        loop = asyncio.get_running_loop()

        def changed(name: str, version) -> None:  # (the follower thread, or a repository call's)
            with contextlib.suppress(RuntimeError):  # (the loop closing meanwhile)
                loop.call_soon_threadsafe(lambda: loop.create_task(self.roll(name, rollout)))

        repository.on_change = repository.on_loaded = changed
        from ..services.repository import ModelNotFound

        settled = lambda name: self.roll(name, rollout, True)  # noqa: E731
        self.plane.control = RepositoryControl(repository, ModelNotFound, self.plane, allowed, lambda: loop, settled)
        if thread:
            repository.start_following()

    async def roll(self, name: str, rollout, raising: bool = False) -> None:
        """The model's versions as the repository holds them now, rolled out where they changed (one rollout at a
        time); a failure: one line, the replicas keep theirs (raised, for a repository call, as Unavailable)."""
        if self.stopping:
            return
        async with self.rolling:
            loop = asyncio.get_running_loop()
            try:
                kept, model = rollout.kept(name), self.models.get(name)
                if model is not None and not kept:  # (unloaded: no longer routed to, before its application goes)
                    self.models.pop(name, None)
                    self.handles.pop(name, None)
                elif model is not None:  # (a version let go: no longer routed to, before the replicas let it go)
                    model.entries = {v: e for v, e in model.entries.items() if v in kept or v == model.version}
                done = await loop.run_in_executor(None, rollout, name, self.rolled.get(name))
                if done is None:
                    return
                config, app = done
                self.rolled[name] = config
                if app is None:
                    print(f"[serve] ray: model {name} unloaded (its application deleted)", file=sys.stderr, flush=True)
                    return
                handle = rollout.serve.get_app_handle(app)
                described = await handle.describe.remote()
                self.keep(described["tally"])
                if name in self.models:
                    self.models[name].update(described)
                else:
                    self.models[name] = Described(described, self.version_stats)
                self.handles[name] = handle
            except Exception as exc:  # noqa: BLE001 - the old version keeps answering: one line
                why = ray_failure(exc)
                tell_limited(f"ray: model {name}: the rollout failed ({why}); the replicas keep theirs")
                if raising:
                    raise Unavailable(f"model {name}: the rollout to Ray Serve failed ({why})") from None
                return
            step = config["serving"]
            print(f"[serve] ray: model {name} version {step} rolled out", file=sys.stderr, flush=True)

    def too_long(self, web):
        return self.answer(web, {"id": None, "error": f"the request body is longer than {self.body_bytes} bytes"}, 413)

    def refusal(self, web, body: bytes, method: str, *model):
        """Its refusal (V2's model or version unknown once the body is here, as serve --http's; many lines), or None."""
        if method == "infer":
            try:
                self.plane.model(*model)
            except UsageError as exc:
                status, text = rest_error(exc, self.dumps)
                return web.Response(body=text, status=status, content_type="application/json")
        if method != "act" or body.count(b"\n") < REQUEST_LINES:
            return None
        if len(body_lines(body, self.limit)) <= REQUEST_LINES:
            return None
        return self.answer(
            web, {"id": None, "error": f"more than {REQUEST_LINES} lines in one request: send them in several"}, 413
        )

    def read(self, web):
        """The repository API's body reader (services.dataplane.repository_routes' `read`), as serve --http's
        (fronts.serve_http.BodyBounds): within the bodies in flight (--http-in-flight-bytes, counted with /v1/act's
        and V2's: 503 at once past it) and --body-timeout-s (408); a body longer than --max-line-bytes None."""

        def refused(status: int, text: str):
            answer = self.answer(web, {"error": text}, status)
            answer.force_close()  # (the body unread: the connection cannot carry another request)
            return answer

        def reader(handler):
            async def bounded(request):
                length = request.content_length
                hold = self.body_bytes if length is None else min(length, self.body_bytes)
                if self.held and self.held + hold > self.in_flight_bytes:
                    return refused(
                        503,
                        f"busy: {self.held:,} bytes of request bodies in flight (at most {self.in_flight_bytes:,}, "
                        "--http-in-flight-bytes); try again",
                    )
                self.held += hold
                try:
                    try:
                        reading = request.read()
                        body = await (reading if request.content.is_eof() else asyncio.wait_for(reading, self.body_s))
                    except asyncio.TimeoutError:
                        why = f"the request's body did not arrive within {self.body_s:g} s (--body-timeout-s)"
                        return refused(408, why)
                    except web.HTTPRequestEntityTooLarge:
                        body = None
                    return await handler(request, None if body is None or len(body) > self.limit else body)
                finally:
                    self.held -= hold

            return bounded

        return reader

    def routes(self, web) -> list:
        async def healthz(request):
            return web.Response(text="stopping\n" if self.stopping else "ok\n", status=503 if self.stopping else 200)

        async def metrics(request):
            from prometheus_client import CollectorRegistry, generate_latest

            registry = CollectorRegistry(auto_describe=False)
            registry.register(self)
            return web.Response(
                body=generate_latest(registry), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
            )

        async def act(request):
            return await self.forward(web, request, "act")

        async def infer(request):
            name, version = request.match_info["model"], request.match_info.get("version")
            header_length = request.headers.get("Inference-Header-Content-Length")
            return await self.forward(web, request, "infer", name, version, header_length)

        return [
            web.get("/healthz", healthz),
            web.get("/metrics", metrics),
            web.post(ROUTE, act),
            *rest_routes(web, self.plane, self.dumps, infer, self.read(web), self.loads),
        ]

    async def run(self, front: Front, started) -> int:
        """Serve on the front's socket until SIGTERM, SIGINT or SIGHUP: then no new request, those in flight answered
        (at most STOP_GRACE_S; a second signal: at once). The signal's number comes back."""
        import logging

        from aiohttp import web

        loop = asyncio.get_running_loop()
        done, self.drained = loop.create_future(), asyncio.Event()

        def stop(signum: int) -> None:
            if self.stopping or done.done():
                return None if done.done() else done.set_result(None)
            self.stopping = signum
            if not self.in_flight:
                self.drained.set()
            loop.call_later(STOP_GRACE_S, lambda: done.done() or done.set_result(None))
            loop.create_task(self.drained.wait()).add_done_callback(lambda _: done.done() or done.set_result(None))

        for name in ("aiohttp.server", "aiohttp.web", "aiohttp.access", "aiohttp.internal"):
            logger = logging.getLogger(name)
            if not any(isinstance(f, OneLineLog) for f in logger.filters):
                logger.addFilter(OneLineLog())
        app = web.Application(client_max_size=self.body_bytes, middlewares=[_one_line_failures(web, self)])
        app.add_routes(self.routes(web))
        add_v2_unknown_route(app, web, self.dumps)  # (last: any other /v2 path, 404 or 405 in JSON)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        try:
            front.bind(self.allow_remote)
            await web.SockSite(runner, front.sock).start()
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.add_signal_handler(signum, stop, signum)
            started()
            await done
        finally:
            await runner.cleanup()
        return self.stopping


def _one_line_failures(web, ingress: Ingress):
    """An ingress handler's own failure: a JSON line (500), one line on stderr; never aiohttp's traceback."""

    @web.middleware
    async def middleware(request, handler):
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            tell_limited(f"http: {request.method} {request.path[:80]}: {type(exc).__name__}: {exc}")
            return ingress.answer(web, {"id": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}, 500)

    return middleware


class RayHttp(Front):
    """--http with --ray: the ingress's socket, bound before Ray starts (a taken port: one line, at once)."""

    option, says = "--http", "ray serve listening"


def _one_http(args) -> str:
    """--http's one address (the one ingress); --listen, --grpc and --stream-stats refused."""
    if args.listen:
        raise UsageError("--listen: not with --ray (Ray Serve answers over HTTP: --http HOST:PORT)")
    if args.grpc:
        raise UsageError("--grpc: not with --ray (Ray Serve answers over HTTP: --http HOST:PORT)")
    if args.stream_stats:
        raise UsageError("--stream-stats: not with --ray (each replica answers on its own: GET /metrics tells)")
    if len(args.http or ()) > 1:
        raise UsageError(f"--http: given {len(args.http)} times; with --ray, one HTTP ingress")
    if not args.http:
        raise UsageError("--ray: serve through Ray Serve needs --http HOST:PORT (its HTTP ingress)")
    return args.http[0]


def serve_on_ray(ctx: Context) -> tuple:
    """Deploys --replicas PolicyReplicas (a GPU or an NPU each on accelerators) on Ray Serve, its HTTP proxy left out:
    the ingress is this command's (Ingress, on --http), which tells so in one line on stderr and serves until
    SIGTERM/SIGINT/SIGHUP; then deletes what it deployed (Serve itself where it started it, and the local Ray instance)
    and main() ends 0 (SIGTERM) or 128 + N."""
    args = ctx.args
    front = RayHttp(_one_http(args))
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError:
        raise UsageError(NEED_HTTP) from None
    front.bind(bool(getattr(args, "allow_remote", False)))  # (a taken port, or one not meant to be open: one line now)
    front.close()  # (bound again once the replicas run: until then a client is refused, not kept waiting)
    # (the checkpoints read and checked before Ray starts: a bad one is one line at once; run folders: each model's
    # serving version verified by the model repository here, as serve does)
    repository = _repository(ctx)
    model = ray_model(ctx) if repository is None else None
    if args.ray == "local":  # Ray's servers listen on loopback alone where it expects no cluster (as on macOS)
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ.setdefault("RAY_prestart_worker_first_driver", "0")  # (idle workers would slow the start)
    try:
        import ray
        from ray import serve
    except ImportError:
        raise UsageError("--ray: serve needs Ray Serve, which is not installed: pip install -r requirements-ray.txt")
    if unreachable := ray_unreachable(args.ray):
        raise UsageError(f"--ray {args.ray}: no Ray cluster there ({unreachable})")
    return _serve(ctx, ray, serve, front, model, repository)


def _repository(ctx: Context):
    """serve's model repository of run folders (services.repository), scanned once, or None where one policy is
    served as before (version "1"). The same rule as serve's model_repository: --model-dir given more than once, a
    folder of several models, --follow, --versions, --pin or --allow-model-control; each model's versions verified
    here (a strict load, onnx-compare, a probe batch) before any replica loads them."""
    from ..loaders.run_folder import several_models
    from ..services.repository import Repository

    a = ctx.args
    dirs = [Path(d) for d in (getattr(a, "model_dirs", None) or ([a.model_dir] if a.model_dir else []))]
    wanted = a.follow or a.versions is not None or a.pin or a.allow_model_control
    if not (wanted or len(dirs) > 1 or (len(dirs) == 1 and several_models(dirs[0]))):
        return None
    if not dirs:
        raise UsageError("--follow, --versions, --pin and --allow-model-control serve run folders: give --model-dir")
    poll_s = getattr(a, "follow_poll_s", 2.0) or 2.0
    repository = Repository(dirs, a.versions or 1, a.pin or (), poll_s=poll_s, policy_options={"device": "cpu"})
    repository.first_scan(", ".join(map(str, dirs)))  # (verified on this CPU; the replicas load what passed)
    return repository


class Rollouts:
    """serve --ray of run folders: a model an application (`APP`-name, one deployment) whose user_config lists the
    versions the repository keeps and the one serving. `rollout(name, last)` (a thread; `busy` held, `stopping` ends
    it) makes it hold what the repository holds now: nothing where that is `last` (rolled out before), a lightweight
    update (no replica restarted), a new application for a model not served, the application deleted (serve.delete)
    for a model with no version left (its CPUs, GPUs or NPUs freed). (config, application or None if deleted) back."""

    def __init__(self, ctx: Context, serve, deployment, repository, bound: tuple, deployed: list):
        self.ctx, self.serve, self.deployment, self.repository = ctx, serve, deployment, repository
        self.bound, self.deployed, self.busy, self.stopping = bound, deployed, threading.Lock(), threading.Event()

    def entry(self, name: str) -> Optional[dict]:
        return next((e for e in self.repository.models() if e["name"] == name), None)

    def kept(self, name: str) -> set:
        """The versions the repository holds for `name` now."""
        entry = self.entry(name)
        return {str(step) for step in entry["versions"]} if entry else set()

    def config(self, name: str) -> Optional[dict]:
        """The user_config of `name` as the repository holds it now: {"versions": {step: ray_version's dict},
        "serving": its step}; None where it holds none."""
        entry = self.entry(name)
        if entry is None or entry["serving"] is None:
            return None
        versions = {}
        for step in entry["versions"]:
            with contextlib.suppress(UsageError):  # (let go since the index was read: the next change tells)
                path = self.repository.lookup(name, step).path
                versions[str(step)] = ray_version(self.ctx, name, entry["run"], path)
        serving = str(entry["serving"])
        return {"versions": versions, "serving": serving} if serving in versions else None

    def deploy(self, name: str, config: dict) -> str:
        """The model's application with `config` (created, or updated in place), not waited for."""
        app = f"{APP}-{name}"
        with handlers_kept():
            self.serve._run(
                self.deployment.options(user_config=config).bind(*self.bound, name),
                _blocking=False,
                name=app,
                route_prefix=None,
            )
        if app not in self.deployed:
            self.deployed.append(app)
        return app

    def __call__(self, name: str, last: Optional[dict]):
        with self.busy:
            return self.rollout(name, last)

    def rollout(self, name: str, last: Optional[dict]):
        config = self.config(name)
        if config == last or self.stopping.is_set():
            return None
        app = f"{APP}-{name}"
        if config is None:
            with handlers_kept():
                self.serve.delete(app)
            with contextlib.suppress(ValueError):
                self.deployed.remove(app)
            return None, None
        self.deploy(name, config)
        wait_until_running(self.serve, time.monotonic() + READY_WITHIN_S, app, READY_WITHIN_S, self.stopping.is_set)
        return config, app


def _serve(ctx: Context, ray, serve, front: RayHttp, model: Optional[dict], repository) -> tuple:
    args = ctx.args
    import logging

    with (
        tempfile.TemporaryDirectory(prefix="inference-ray-") as code,
        open(os.devnull, "w") as void,
        contextlib.redirect_stdout(void),
    ):
        copy_package(Path(code))  # (PolicyReplica is pickled by reference: the replicas import it from there)
        ray_init(ray, args.ray, code)
        started_serve, rollouts = False, None
        deployed: list = []
        signum = 0
        try:
            logging.getLogger("ray.serve").setLevel(logging.ERROR)
            if args.ray == "local" and (where := {n["NodeManagerAddress"] for n in ray.nodes()}) != {"127.0.0.1"}:
                raise UsageError(
                    f"the local Ray instance listens on {', '.join(where)}, not on loopback alone (Ray was "
                    "imported before --ray local could keep it there); stopped"
                )
            device, max_batch = ctx.device, args.max_batch or 256
            resources = (
                {"num_gpus": 1}
                if device.type == "cuda"
                else {"resources": {"NPU": 1}}
                if device.type == "npu"
                else {"num_cpus": 1}
            )  # (Ray Serve's own actors reserve none; 0 here left replicas side by side)
            # one Ray Serve application (a deployment) per model: --replicas replicas each, rolled out on its own
            bound = (None, args.max_line_bytes, max_batch, args.max_wait_us / 1e6, args.max_batch)
            with handlers_kept():
                started_serve = not serve_running(serve)
                if not started_serve and any(_ours(app) for app in serve.status().applications):
                    raise UsageError(
                        f"--ray {args.ray}: this cluster already serves {APP} (another serve --ray); "
                        "stop that one first"
                    )
                serve.start(
                    proxy_location="Disabled",  # (the ingress is this command's: no proxy actor to start)
                    logging_config={"log_level": "WARNING", "enable_access_log": False},
                )
                deployment = serve.deployment(
                    PolicyReplica,
                    name="policy",
                    num_replicas=args.replicas,
                    ray_actor_options=resources,
                    max_ongoing_requests=2 * max_batch,
                )
            configs: dict = {}
            if repository is None:
                deployed.append(APP)
                with handlers_kept():
                    serve._run(deployment.bind(model, *bound[1:]), _blocking=False, name=APP, route_prefix=None)
            else:
                # (a model's versions are its deployment's user_config: a change is rolled out by Ray Serve's
                # lightweight update, PolicyReplica.reconfigure on each replica, none restarted)
                rollouts = Rollouts(ctx, serve, deployment, repository, bound, deployed)
                for entry in repository.models():
                    if (config := rollouts.config(entry["name"])) is not None:
                        configs[entry["name"]] = config
                        rollouts.deploy(entry["name"], config)
            deadline = time.monotonic() + READY_WITHIN_S
            for app in list(deployed):
                wait_until_running(serve, deadline, app, READY_WITHIN_S)
            names = None if repository is None else {name: f"{APP}-{name}" for name in configs}
            room = 2 * max_batch * args.replicas
            signum = _run_ingress(ctx, serve, front, room, names, rollouts, configs)
        except KeyboardInterrupt as exc:
            if getattr(exc, "signum", None) != signal.SIGTERM:
                raise  # (SIGINT, SIGHUP: 128 + N, as every mode)
            # SIGTERM: a server's normal end, exit 0 once what it deployed is deleted (as serve without --ray)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"--ray: {ray_failure(exc)}") from None
        finally:
            if repository is not None:
                repository.stop()
            if rollouts is not None:  # (a rollout under way ends first: Ray is not called after it stops)
                rollouts.stopping.set()
                with rollouts.busy:
                    pass
            _stop(ray, serve, args.ray == "local", started_serve, deployed)
        if signum and signum != signal.SIGTERM:
            raise Interrupted(signum)
    return None, True


def _ours(app: str) -> bool:
    return app == APP or app.startswith(APP + "-")


def _run_ingress(
    ctx: Context, serve, front: RayHttp, room: int, names: Optional[dict] = None, rollouts=None, configs=None
) -> int:
    """The ingress in an event loop of its own until a signal (its number comes back). `names`: model -> its
    application, where serve's models of run folders are served (`rollouts`: their changes, `configs`: the
    user_config each was deployed with)."""
    args = ctx.args
    handle = serve.get_app_handle(APP) if names is None else None
    handles = {} if names is None else {name: serve.get_app_handle(app) for name, app in names.items()}
    loads, dumps = json_codec()
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    loop = asyncio.new_event_loop()

    def told() -> None:
        shown = front.shown()
        note = front.told()[len(shown) :]
        n = args.replicas
        each = "" if names is None else f" for each of {len(names)} models ({', '.join(sorted(names))[:300]})"
        print(
            f"[serve] ray serve listening on http://{shown}{ROUTE} ({n} replica{'s' if n > 1 else ''}{each}){note}",
            file=sys.stderr,
            flush=True,
        )

    async def main() -> int:
        remote = bool(getattr(args, "allow_remote", 0))
        if names is None:
            described = await handle.describe.remote()
            ingress = Ingress(handle, described, args.max_line_bytes, room, dumps, remote, loads)
        else:
            described = dict(zip(handles, await asyncio.gather(*(h.describe.remote() for h in handles.values()))))
            ingress = Ingress(handles, described, args.max_line_bytes, room, dumps, remote, loads, named=True)
            ingress.rolled.update(configs or {})
            ingress.follow(rollouts.repository, rollouts, bool(args.allow_model_control), bool(args.follow))
        options = ServeOptions.from_args(args)
        ingress.body_s, ingress.in_flight_bytes = options.body_timeout_s, options.http_in_flight_bytes
        try:
            return await ingress.run(front, told)
        finally:  # (a rollout still under way: cancelled, not left pending)
            rest = asyncio.all_tasks() - {asyncio.current_task()}
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()
        front.close()
        for signum, handler in before.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _stop(ray, serve, local: bool, started_serve: bool, deployed) -> None:
    """What this command deployed (`deployed`: its applications) is deleted: Serve with it where this command started
    Serve on a cluster (a local Ray instance ends with everything in it)."""
    with contextlib.suppress(Exception), handlers_kept():
        if ray.is_initialized() and not local and started_serve:
            serve.shutdown()
        elif ray.is_initialized() and not local and deployed:
            for app in deployed:
                serve.delete(app)
    with contextlib.suppress(Exception):
        ray.shutdown()
