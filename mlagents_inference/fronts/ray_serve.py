"""serve --ray: Ray Serve replicas, each loading the policy once, behind an HTTP ingress of this command's own (aiohttp,
in its process, as serve --http): POST /v1/act (one or many stream lines), the Open Inference Protocol's REST routes
(/v2/...), GET /healthz and GET /metrics (every replica's counts). The ingress holds serve's bounds (a request's body,
the requests in flight, the bytes they hold) and calls the replicas through a Ray Serve handle; @serve.batch gathers
what a replica has waiting (lines and V2 requests) into one engine call. Replicas share no memory: a request is the
client's "connection" (an LSTM id's memory goes from one of its lines to the next, and is gone with it); a line
carries its "memory", the answer the next one (docs/serve.md#ray-serve)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.errors import UsageError
from ..core.files import Interrupted, handlers_kept
from ..core.observations import AgentMemories
from ..services.batcher import ServeOptions
from ..services.dataplane import DataPlane, Model, RestCodec, rest_error, rest_routes
from ..services.open_inference import Job, ModelView, Statistics
from ..services.protocol import answer_texts, answer_waiting, json_codec
from ..services.ray_support import (
    copy_package,
    ray_failure,
    ray_init,
    ray_model,
    ray_policy,
    ray_repository_models,
    ray_unreachable,
    ray_version,
    routed_loads,
    serve_running,
    wait_until_running,
)
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
    OneLineLog,
    add_v2_unknown_route,
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
    "SEQUENCE_REFUSED",
    "body_lines",
    "PolicyReplica",
    "Described",
    "Ingress",
    "RayHttp",
    "serve_on_ray",
]


APP, ROUTE = "mlagents-inference", "/v1/act"


READY_WITHIN_S = float(
    os.environ.get("MLAGENTS_RAY_SERVE_READY_S", 600)
)  # replicas loading, images pulled on a cluster


REQUEST_BYTES = 16 << 20  # the most one request's body holds (--max-line-bytes + 1 where that is more): 413 past it


REQUEST_LINES = 16_384  # the most stream lines one POST /v1/act carries: 413 past them


IN_FLIGHT_BYTES = ServeOptions.http_in_flight_bytes  # (--http-in-flight-bytes' default) the bodies of the requests
# in flight together (one without Content-Length counts as a full REQUEST_BYTES until read): past it, and past the
# replicas' own room for requests, 503 at once, nothing read


NEED_HTTP = "serve --ray needs aiohttp and prometheus-client (its ingress): pip install -r requirements-ray.txt"


SEQUENCE_REFUSED = (
    'parameter "sequence_id": not with --ray (replicas keep no memory between requests); send "recurrent_in" with '
    'each request (the last answer\'s "recurrent_out")'
)


def body_lines(body: bytes, limit: int) -> list:
    """A request body's stream lines, as a connection splits what it reads: blank lines dropped, one longer than
    `limit` None (its error answer)."""
    return [None if len(line) > limit else line for line in body.split(b"\n") if line and not line.isspace()]


class PolicyReplica:
    """A Ray Serve replica: the policy loaded once. act(body) answers one POST /v1/act (its lines, in order, as one
    connection's), infer(...) one V2 request through its data plane (services.dataplane, as serve's); the requests
    waiting are answered together (@serve.batch: one answer_waiting call, the V2 requests riding in its engine call).
    Memories live for one call, each request in a scope of its own, within serve's bounds: no id keeps a memory between
    two requests, or across two clients'."""

    def __init__(
        self,
        model: dict,
        limit: int,
        max_batch: int,
        wait_s: float,
        config_batch: Optional[int] = None,
        name: Optional[str] = None,
        version: Optional[str] = None,
    ):
        from ray import serve

        self.limit, self.config_batch = limit, config_batch
        self.loads, self.dumps = json_codec()
        self.codec = RestCodec((self.loads, self.dumps), limit, _no_sequences)  # (POST .../infer's)
        # `name`, `version`: a model of serve's model repository (run folders) at a checkpoint's step; its lines come
        # routed by the ingress (their "model" and "version" keys taken out here), its answers name both
        self.named = name is not None
        self.install(ray_policy(model), name, version)
        self.answer = serve.batch(max_batch_size=max_batch, batch_wait_timeout_s=wait_s)(self.answer_requests)
        try:
            context = serve.get_replica_context()
            self.name = str(getattr(context, "replica_id", None) or context.replica_tag)
        except Exception:  # noqa: BLE001 - outside a replica (a test): the process
            self.name = f"pid{os.getpid()}"
        self.lines = self.errors = self.seq = 0
        self.batches = Histogram(BATCH_BUCKETS)

    def install(self, policy, name: Optional[str], version: Optional[str]) -> None:
        """The policy this replica answers with (its V2 view and data plane), swapped in whole: a batch already in
        answer_now keeps the one it started with."""
        view = ModelView(policy, name, version)
        model = Model(view, view.metadata, self.config, view.model_stats, self.submit)
        plane = DataPlane({view.name: model}, lambda: False, view.server_metadata())  # (the ingress stops)
        self.serving = (policy, view, plane)
        self.policy, self.view, self.plane = self.serving

    def reconfigure(self, config: dict) -> None:
        """Ray Serve's user_config ({"model": ray_version's dict, "version": its step}): the version a model's
        deployment serves, rolled out by `serve.run` of the deployment with a new user_config (a lightweight update:
        Ray Serve calls this on each replica in turn, none restarted). The same version again: nothing to do."""
        if not self.named or str(config.get("version")) == self.view.version:
            return
        self.install(ray_policy(config["model"]), self.view.name, str(config["version"]))

    def config(self) -> dict:
        """Triton's model configuration, as a replica serves the model: no sequence batching (SEQUENCE_REFUSED)."""
        config = self.view.config(self.config_batch)
        if config.pop("sequence_batching", None) is not None:  # (no sequence keeps a memory on Ray: SEQUENCE_REFUSED)
            config["dynamic_batching"] = {"preferred_batch_size": [self.config_batch]} if self.config_batch else {}
        return config

    def describe(self) -> dict:
        """The model as V2 tells it (metadata, configuration, server metadata), for the ingress's GETs."""
        view = self.view
        return {
            "name": view.name,
            "version": view.version,
            "metadata": view.metadata(),
            "config": self.config(),
            "server": view.server_metadata(),
            "tally": self.tally(),
        }

    def tally(self) -> dict:
        """This replica's counts so far (the ingress keeps each replica's latest and sums them)."""
        s = self.view.stats
        return {
            "replica": self.name,
            "model": self.view.name,
            "version": self.view.version,
            "seq": self.seq,
            "lines": self.lines,
            "errors": self.errors,
            "batch": [self.batches.counts[:], self.batches.sum, self.batches.n],
            "v2": [dict(s.counts), dict(s.ns), {k: v[:] for k, v in s.batches.items()}]
            + [s.inference_count, s.execution_count, s.last_inference],
        }

    async def act(self, body: bytes) -> tuple:
        """POST /v1/act: (status, body, content type, None, tally)."""
        return await self.answer(body)

    async def infer(self, name: str, version: Optional[str], body: bytes, header_length: Optional[str]) -> tuple:
        """POST .../infer (the model checked by the ingress too): (status, body, content type, header length, tally)."""
        answer = await self.serving[2].infer(name, version, self.codec, (body, header_length, ""))
        self.seq += 1
        return (*answer, self.tally())

    async def submit(self, job: Job) -> Job:
        """A checked V2 request through @serve.batch (the data plane's batcher here): answered."""
        return await self.answer(job)

    async def answer_requests(self, requests: list) -> list:
        return self.answer_now(requests)

    def answer_now(self, requests: list) -> list:
        """The answers of requests waiting together (bodies of /v1/act, V2 Jobs), in order."""
        lines, scopes, spans, jobs = [], [], [], []
        for k, request in enumerate(requests):
            if type(request) is Job:
                jobs.append(request)
                spans.append(None)
                continue
            got = body_lines(request, self.limit)
            spans.append((len(lines), len(got)))
            lines += got
            scopes += [f"{k}:"] * len(got)
        memories = AgentMemories(MEMORY_IDS, MEMORY_BYTES, CONNECTION_MEMORY_IDS, CONNECTION_MEMORY_BYTES)
        started = time.perf_counter_ns()
        for job in jobs:
            job.queue_ns = max(0, started - job.arrived - job.read_ns)
        with np.errstate(over="ignore"):
            policy, view, _ = self.serving  # (one version for the whole batch, whatever a rollout does meanwhile)
            loads = routed_loads(self.loads, view.version) if self.named else self.loads
            answers = answer_waiting(policy, lines, memories, loads, self.limit, scopes, jobs[:])
        if self.named:  # (every answer names the model and version that gave it, as serve's)
            for answer in answers:
                answer["model"], answer["version"] = view.name, view.version
        texts = answer_texts(self.dumps, answers)
        errors = sum("error" in a for a in answers) + sum(job.error is not None for job in jobs)
        self.lines += len(lines) + len(jobs)
        self.errors += errors
        self.batches.add(len(lines) + len(jobs))
        self.seq += 1
        tally = self.tally()
        return [
            request if span is None else (*self.lines_answer(texts, answers, *span), tally)  # (a Job: answered)
            for request, span in zip(requests, spans)
        ]

    def lines_answer(self, texts: list, answers: list, at: int, n: int) -> tuple:
        if n == 0:
            return 400, self.dumps({"id": None, "error": "empty body: expected stream lines"}), "application/json", None
        if n == 1:  # (as serve --http: the answer, 400 for an error answer)
            return 400 if "error" in answers[at] else 200, texts[at], "application/json", None
        return 200, b"\n".join(texts[at : at + n]) + b"\n", "application/x-ndjson", None


def _no_sequences(job: Job) -> None:
    if job.key is not None:
        raise UsageError(SEQUENCE_REFUSED)


class Described:
    """The model as a replica described it: the ingress's data plane answers the V2 GETs and checks a request's model
    and version (ModelView's check) with no policy of its own."""

    check = ModelView.check

    def __init__(self, described: dict):
        self.update(described)

    def update(self, described: dict) -> None:
        self.name, self.version = described["name"], described["version"]
        self.metadata, self.config, self.server = described["metadata"], described["config"], described["server"]


class Ingress:
    """The HTTP side, in this command's event loop: each request bounded (REQUEST_BYTES, REQUEST_LINES), the requests
    in flight bounded (the replicas' room, --http-in-flight-bytes; a request counts until its answer is written, so that
    clients that do not read hold their room), answered by a replica through `handle`; every failure one JSON line
    (and, for the replicas' own, one line on stderr a second at most)."""

    def __init__(self, handle, described, limit: int, room: int, dumps, allow_remote=False, loads=None, named=False):
        """`handle`, `described`: the one policy's (a replica's describe()), or with `named` (serve's model repository)
        a dict of each: model name -> its deployment's handle, its replica's description. `body_s` (--body-timeout-s):
        the time a body has to arrive, past it 408 and the connection closed; `in_flight_bytes`
        (--http-in-flight-bytes): the bodies in flight together, past it 503 at once."""
        handles, descriptions = (handle, described) if named else ({described["name"]: handle}, {0: described})
        self.named, self.dumps, self.allow_remote = named, dumps, allow_remote
        self.loads = loads or json_codec()[0]
        self.models = {d["name"]: Described(d) for d in descriptions.values()}
        self.handles = {d["name"]: handles[d["name"]] for d in descriptions.values()}
        self.handle = next(iter(self.handles.values()))
        self.model = next(iter(self.models.values()))

        def entry(model: Described) -> Model:
            stats = lambda: self.totals(model.name if named else None)[3].model_stats(model)  # noqa: E731
            return Model(model, lambda: model.metadata, lambda: model.config, stats)

        self.plane = DataPlane(
            {name: entry(m) for name, m in self.models.items()}, lambda: bool(self.stopping), self.model.server
        )
        self.body_bytes, self.limit, self.room = max(REQUEST_BYTES, limit + 1), limit, room
        self.body_s, self.in_flight_bytes = ServeOptions.body_timeout_s, IN_FLIGHT_BYTES  # (defaults; main() sets them)
        self.in_flight = self.held = self.refused = self.requests = 0
        self.lines_refused = 0  # lines the ingress answered with an error itself (no model chosen)
        self.stopping, self.tallies = 0, {}
        self.latency = Histogram(LATENCY_BUCKETS_S)
        for d in descriptions.values():
            self.keep(d["tally"])
        self.drained: Optional[asyncio.Event] = None

    def keep(self, tally: dict) -> None:
        held = self.tallies.get(tally["replica"])
        if held is None or held["seq"] <= tally["seq"]:
            self.tallies[tally["replica"]] = tally

    def answer(self, web, obj, status: int = 200):
        return web.Response(body=self.dumps(obj), status=status, content_type="application/json")

    def totals(self, model: Optional[str] = None) -> tuple:
        """(lines, errors, batch histogram, V2 Statistics) summed over every replica's latest counts (of `model`'s
        replicas alone, where given)."""
        lines = errors = 0
        batches, stats = Histogram(BATCH_BUCKETS), Statistics()
        for t in self.tallies.values():
            if model is not None and t.get("model") != model:
                continue
            lines, errors = lines + t["lines"], errors + t["errors"]
            counts, total, n = t["batch"]
            batches.counts = [a + b for a, b in zip(batches.counts, counts)]
            batches.sum, batches.n = batches.sum + total, batches.n + n
            v2_counts, v2_ns, v2_batches, inferences, executions, last = t["v2"]
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
        """Prometheus families (serve's names, summed over the replicas; lines and errors per replica too)."""
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
        if self.in_flight >= self.room or self.held + hold > self.in_flight_bytes:
            self.refused += 1
            return self.answer(
                web,
                {
                    "id": None,
                    "error": f"busy: {self.in_flight} requests in flight (at most {self.room} and "
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
            refused = self.refusal(web, body, method)
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
        """POST /v1/act where several models are served: each line to its model's replicas by its "model" key (left
        out: the one model served), its "version" checked against the one they serve; the lines of one model in one
        request, every model's at once; the answers back in the order of the lines (a line refused here: its error
        answer, naming no model). As a replica's answer: (status, body, content type, None, a tally)."""
        lines = body_lines(body, self.limit)
        texts: list = [None] * len(lines)
        groups: dict = {}
        for k, raw in enumerate(lines):
            name, refusal = self.route(raw)
            if refusal is not None:
                texts[k] = self.dumps(refusal)
                self.lines_refused += 1
            else:
                groups.setdefault(name, []).append(k)
        if not lines:
            groups[self.model.name] = []
        calls = [self.handles[name].act.remote(b"\n".join(lines[k] for k in ks)) for name, ks in groups.items()]
        status, tally = 200, None
        for (name, ks), answer in zip(groups.items(), await asyncio.gather(*calls)):
            status, text, kind, _, tally = answer
            self.keep(tally)
            if not ks:  # (an empty body: the replica's one error line)
                return answer
            for k, line in zip(ks, [text] if len(ks) == 1 else text.split(b"\n")[: len(ks)]):
                texts[k] = line
        tally = tally if tally is not None else next(iter(self.tallies.values()))
        if len(lines) == 1:
            return (status if groups else 400), texts[0], "application/json", None, tally
        return 200, b"\n".join(texts) + b"\n", "application/x-ndjson", None, tally

    def route(self, raw) -> tuple:
        """(the model a line goes to, None) or (None, its error answer)."""
        served = ", ".join(sorted(self.models))
        if raw is None:
            return None, {"id": None, "error": f"the line is longer than {self.limit} bytes (--max-line-bytes)"}
        try:
            obj = self.loads(raw)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            if len(self.models) == 1:  # (the replica answers it as the stream does)
                return self.model.name, None
            return None, {"id": None, "error": "not a JSON object: expected a stream line naming its model"}
        ident = obj.get("id") if isinstance(obj.get("id"), (str, int, type(None))) else None
        name, version = obj.get("model"), obj.get("version")
        if name is None:
            if len(self.models) > 1:
                return None, {"id": ident, "error": f"name the model: {len(self.models)} are served ({served})"}
            name = self.model.name
        if not isinstance(name, str) or name not in self.models:
            return None, {"id": ident, "error": f"model {str(name)[:80]}: not served (served: {served})"}
        serving = self.models[name].version
        if version is not None and str(version) != serving:
            return None, {
                "id": ident,
                "error": f"model {name}: version {str(version)[:80]} is not loaded (loaded: {serving})",
            }
        return name, None

    def follow(self, repository, rollout) -> None:
        """serve --ray --follow: each change of what serves a model (the repository's follower thread) rolled out by
        `rollout(name)` (a thread: Ray Serve's deployment update, until it runs; the version's step back), one model's
        rollouts one after another; the ingress then routes by the new version."""
        loop, self.rolling = asyncio.get_running_loop(), asyncio.Lock()

        def changed(name: str, version) -> None:  # (the follower thread)
            if version is not None:
                with contextlib.suppress(RuntimeError):  # (the loop closing meanwhile)
                    loop.call_soon_threadsafe(lambda: loop.create_task(self.roll(name, rollout)))

        repository.on_change = changed
        repository.start_following()

    async def roll(self, name: str, rollout) -> None:
        if self.stopping:
            return
        if name not in self.handles:
            tell_limited(f"ray: model {name}: a new model is served after a restart of serve --ray")
            return
        async with self.rolling:
            try:
                step = await asyncio.get_running_loop().run_in_executor(None, rollout, name)
                self.models[name].update(await self.handles[name].describe.remote())
            except Exception as exc:  # noqa: BLE001 - the old version keeps answering: one line
                tell_limited(f"ray: model {name}: the rollout failed ({ray_failure(exc)}); the replicas keep theirs")
                return
            print(f"[serve] ray: model {name} version {step} rolled out", file=sys.stderr, flush=True)

    def too_long(self, web):
        return self.answer(web, {"id": None, "error": f"the request body is longer than {self.body_bytes} bytes"}, 413)

    def refusal(self, web, body: bytes, method: str):
        if method != "act" or body.count(b"\n") < REQUEST_LINES:
            return None
        if len(body_lines(body, self.limit)) <= REQUEST_LINES:
            return None
        return self.answer(
            web, {"id": None, "error": f"more than {REQUEST_LINES} lines in one request: send them in several"}, 413
        )

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
            try:
                self.plane.model(name, version)
            except UsageError as exc:
                status, text = rest_error(exc, self.dumps)
                return web.Response(body=text, status=status, content_type="application/json")
            header_length = request.headers.get("Inference-Header-Content-Length")
            return await self.forward(web, request, "infer", name, version, header_length)

        return [
            web.get("/healthz", healthz),
            web.get("/metrics", metrics),
            web.post(ROUTE, act),
            *rest_routes(web, self.plane, self.dumps, infer),
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
    models = None if repository is None else ray_repository_models(ctx, repository)
    model = ray_model(ctx) if models is None else None
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
    return _serve(ctx, ray, serve, front, model, models, repository)


def _repository(ctx: Context):
    """serve's model repository of run folders (services.repository), scanned once, or None where one policy is
    served as before (version "1"). The same rule as serve's model_repository: --model-dir given more than once, a
    folder of several models, --pin or --follow; each model's serving version verified here (a strict load,
    onnx-compare, a probe batch) before any replica loads it."""
    from ..loaders.run_folder import several_models

    a = ctx.args
    dirs = [Path(d) for d in (getattr(a, "model_dirs", None) or ([a.model_dir] if a.model_dir else []))]
    for flag, given in (("--versions", a.versions), ("--allow-model-control", a.allow_model_control)):
        if given:
            raise UsageError(f"{flag}: not with --ray yet (serve --ray serves one version of each model at a time)")

    if not (a.pin or a.follow or len(dirs) > 1 or (len(dirs) == 1 and several_models(dirs[0]))):
        return None
    if not dirs:
        raise UsageError("--follow and --pin serve run folders: give --model-dir")
    from ..services.repository import Repository

    poll_s = getattr(a, "follow_poll_s", 2.0) or 2.0
    repository = Repository(dirs, 1, a.pin or (), poll_s=poll_s, policy_options={"device": "cpu"})  # (on this CPU)
    repository.poll()
    return repository


def _serve(
    ctx: Context, ray, serve, front: RayHttp, model: Optional[dict], models: Optional[dict], repository
) -> tuple:
    args = ctx.args
    import logging

    with (
        tempfile.TemporaryDirectory(prefix="inference-ray-") as code,
        open(os.devnull, "w") as void,
        contextlib.redirect_stdout(void),
    ):
        copy_package(Path(code))  # (PolicyReplica is pickled by reference: the replicas import it from there)
        ray_init(ray, args.ray, code)
        started_serve = deployed = False
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
            wait_s = args.max_wait_us / 1e6
            apps = (
                {APP: (None, (model, args.max_line_bytes, max_batch, wait_s, args.max_batch))}
                if models is None
                else {
                    f"{APP}-{name}": (name, (m, args.max_line_bytes, max_batch, wait_s, args.max_batch, name, step))
                    for name, (m, step) in models.items()
                }
            )
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
                deployed = list(apps)
                for app, (name, bound) in apps.items():
                    # (a model's version is its deployment's user_config: a new one is rolled out by Ray Serve's
                    # lightweight update, PolicyReplica.reconfigure on each replica, none restarted)
                    config = None if name is None else {"model": bound[0], "version": bound[-1]}
                    serve._run(
                        deployment.options(user_config=config).bind(*bound),
                        _blocking=False,
                        name=app,
                        route_prefix=None,
                    )
            deadline = time.monotonic() + READY_WITHIN_S
            for app in apps:
                wait_until_running(serve, deadline, app, READY_WITHIN_S)
            names = None if models is None else {name: app for app, (name, _) in apps.items()}

            def rollout(name: str) -> str:
                """(a thread of the ingress) The model's serving version now, rolled out to its deployment."""
                version, app = repository.lookup(name), f"{APP}-{name}"
                run = next(e["run"] for e in repository.models() if e["name"] == name)
                config = {"model": ray_version(ctx, name, run, version.path), "version": str(version.step)}
                with handlers_kept():
                    serve._run(
                        deployment.options(user_config=config).bind(*apps[app][1]),
                        _blocking=False,
                        name=app,
                        route_prefix=None,
                    )
                wait_until_running(serve, time.monotonic() + READY_WITHIN_S, app, READY_WITHIN_S)
                return str(version.step)

            follow = (repository, rollout) if repository is not None and args.follow else None
            signum = _run_ingress(ctx, serve, front, 2 * max_batch * args.replicas * len(apps), names, follow)
        except KeyboardInterrupt as exc:
            if getattr(exc, "signum", None) != signal.SIGTERM:
                raise  # (SIGINT, SIGHUP: 128 + N, as every mode)
            # SIGTERM: a server's normal end, exit 0 once what it deployed is deleted (as serve without --ray)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"--ray: {ray_failure(exc)}") from None
        finally:
            _stop(ray, serve, args.ray == "local", started_serve, deployed)
        if signum and signum != signal.SIGTERM:
            raise Interrupted(signum)
    return None, True


def _ours(app: str) -> bool:
    return app == APP or app.startswith(APP + "-")


def _run_ingress(ctx: Context, serve, front: RayHttp, room: int, names: Optional[dict] = None, follow=None) -> int:
    """The ingress in an event loop of its own until a signal (its number comes back). `names`: model -> its
    application, where serve's models of run folders are served."""
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
            if follow is not None:
                ingress.follow(*follow)
        options = ServeOptions.from_args(args)
        ingress.body_s, ingress.in_flight_bytes = options.body_timeout_s, options.http_in_flight_bytes
        return await ingress.run(front, told)

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
