"""serve --http: aiohttp in the server's event loop. GET /healthz, GET /metrics (Prometheus), POST /v1/act (one stream
line), and the Open Inference Protocol's REST routes (KServe V2, as Triton serves them: health, metadata, model
configuration, statistics, POST /v2/models/{model}/infer with JSON or binary tensors). A plug-in of serve (its FRONTS
row names it): aiohttp and prometheus-client are imported only when --http is given. docs/serve.md."""

from __future__ import annotations

import asyncio
import logging
import socket
from functools import partial

from ..core.errors import UsageError
from ..services.batcher import Batcher, HttpLine
from ..services.dataplane import RestCodec, rest_routes
from ..services.open_inference import owner_of
from ..services.serve_common import Front, OneLineLog, add_v2_unknown_route, model_metrics, tell_limited

__all__ = ["NEED_HTTP", "HttpFront", "start_http", "v2_routes", "BodyBounds", "owner_of_request"]


NEED_HTTP = 'serve --http needs aiohttp and prometheus-client: pip install ".[serve]" (or aiohttp prometheus-client)'


class HttpFront(Front):
    """--http: GET /healthz, GET /metrics and POST /v1/act (start_http), aiohttp in the server's loop."""

    option, says = "--http", "http"

    def check(self) -> None:
        try:
            import aiohttp  # noqa: F401
            import prometheus_client  # noqa: F401
        except ImportError:
            raise UsageError(NEED_HTTP) from None

    async def start(self, server: Batcher) -> None:
        self.runner = await start_http(server, self.sock)

    async def cleanup(self) -> None:
        await self.runner.cleanup()


async def start_http(server: Batcher, sock: socket.socket):
    """GET /healthz, GET /metrics (Prometheus text, a registry of its own), POST /v1/act (one stream line, batched
    with the socket lines; its answer object, status 400 when it is an error answer) and the V2 routes (v2_routes),
    in the server's event loop."""
    from aiohttp import web
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    class Collector:
        def collect(self):
            s = server
            yield CounterMetricFamily("mlagents_serve_lines", "lines answered (sockets and /v1/act)", value=s.lines)
            yield CounterMetricFamily("mlagents_serve_error_answers", "error answers", value=s.errors)
            yield GaugeMetricFamily("mlagents_serve_connections_open", "socket connections open", value=len(s.conns))
            yield CounterMetricFamily("mlagents_serve_connections", "socket connections accepted", value=s.opened_total)
            yield HistogramMetricFamily(
                "mlagents_serve_batch_lines",
                "lines per answering pass (one engine call for the plain ones)",
                buckets=s.batches.buckets(),
                sum_value=s.batches.sum,
            )
            yield from model_metrics(
                (lane.model, lane.version, lane.lines, lane.errors, lane.batches) for lane in s.every_lane()
            )
            yield HistogramMetricFamily(
                "mlagents_serve_latency_seconds",
                "from the read that brought a line to the write of its answer",
                buckets=s.latency.buckets(),
                sum_value=s.latency.sum,
            )

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())

    async def healthz(request):
        return web.Response(text="stopping\n" if server.stopping else "ok\n", status=503 if server.stopping else 200)

    async def metrics(request):
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def act(request, body):  # (body: read by BodyBounds; None where it is longer than --max-line-bytes)
        if server.stopping:
            return web.json_response({"id": None, "error": "the server is stopping"}, status=503)
        body = None if body is None else body.strip()
        line = HttpLine(body if body is None or len(body) <= server.limit else None, server.loop.create_future())
        if body == b"":
            return web.json_response({"id": None, "error": "empty body: expected one stream line"}, status=400)
        server.waiting(line, 1)
        text, answer = await line.future
        return web.Response(body=text, status=400 if "error" in answer else 200, content_type="application/json")

    for name in ("aiohttp.server", "aiohttp.web", "aiohttp.access", "aiohttp.internal"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineLog) for f in logger.filters):
            logger.addFilter(OneLineLog())
    app = web.Application(client_max_size=server.limit + 1)  # (no middleware: each would wrap every request)
    bodies = BodyBounds(web, server)
    app.add_routes([web.get("/healthz", healthz), web.get("/metrics", metrics), web.post("/v1/act", bodies.read(act))])
    app.add_routes(v2_routes(server, web, bodies))
    add_v2_unknown_route(app, web, server.dumps)  # (last: any other /v2 path, 404 or 405 in JSON)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


class BodyBounds:
    """Every POST's body read before its handler (read(handler): the handler gets the bytes, or None past
    --max-line-bytes), within two bounds: the bodies being read and answered together (--http-in-flight-bytes; one
    without Content-Length counts as --max-line-bytes until read): past it, 503 at once, the body unread and the
    connection closed; and the time a body may take to arrive (--body-timeout-s): past it, 408 and the connection
    closed. The Ray ingress bounds its bodies the same way (fronts.ray_serve.IN_FLIGHT_BYTES). Slow or stalled bodies
    hold at most the bound, for at most the time."""

    def __init__(self, web, server: Batcher):
        self.web, self.server, self.held = web, server, 0
        self.bound, self.seconds = server.options.http_in_flight_bytes, server.options.body_timeout_s

    def refused(self, request, status: int, text: str):
        answer = {"error": text} if request.path.startswith("/v2/") else {"id": None, "error": text}
        response = self.web.Response(body=self.server.dumps(answer), status=status, content_type="application/json")
        response.force_close()  # (the body unread: the connection cannot carry another request)
        return response

    def read(self, handler):
        """`handler(request, body)` as an aiohttp handler, its body read within the bounds."""
        web, server = self.web, self.server

        async def bounded(request):
            length = request.content_length
            hold = server.limit + 1 if length is None else min(length, server.limit + 1)
            if self.held and self.held + hold > self.bound:
                tell_limited(f"http: a request refused (503): {self.held} bytes of bodies in flight")
                return self.refused(
                    request,
                    503,
                    f"busy: {self.held:,} bytes of request bodies in flight (at most {self.bound:,}, "
                    f"--http-in-flight-bytes); try again",
                )
            self.held += hold
            try:
                try:  # (a body already here, as a small one comes with its headers: read without a timer's task)
                    reading = request.read()
                    body = await (reading if request.content.is_eof() else asyncio.wait_for(reading, self.seconds))
                except asyncio.TimeoutError:
                    text = f"the request's body did not arrive within {self.seconds:g} s (--body-timeout-s)"
                    return self.refused(request, 408, text)
                except web.HTTPRequestEntityTooLarge:
                    body = None
                return await handler(request, body)
            finally:
                self.held -= hold

        return bounded


def v2_routes(server: Batcher, web, bodies: BodyBounds) -> list:
    """The Open Inference Protocol's REST routes: the data plane's (services.dataplane.rest_routes), POST .../infer's
    body read by `bodies`."""
    plane, codec = server.plane, RestCodec((server.loads, server.dumps), server.limit)
    Response, length_header = web.Response, "Inference-Header-Content-Length"

    async def infer(request, body):
        match = request.match_info
        status, text, kind, length = await plane.infer(
            match["model"],
            match.get("version"),
            codec,
            (body, request.headers.get(length_header), partial(owner_of_request, request)),
        )
        headers = None if length is None else {length_header: str(length)}
        return Response(body=text, status=status, content_type=kind, headers=headers)

    return rest_routes(web, plane, server.dumps, bodies.read(infer), bodies.read, server.loads)


def owner_of_request(request) -> str:
    """The owner of a REST request's sequences: its host (open_inference.owner_of), whichever connection."""
    return owner_of("http:" + str(request.remote))
