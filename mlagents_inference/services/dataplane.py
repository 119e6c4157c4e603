"""The Open Inference Protocol's data plane (KServe V2), the one place its routes are answered, under every front: serve
--http's REST routes, serve --grpc's service, and Ray Serve's ingress and replicas. As KServe's DataPlane and MLServer's
handlers/dataplane.py: health, server and model metadata, Triton's model configuration and statistics, and inference,
for a table of models (model name -> Model: what V2 tells of it, and its batcher), with typed errors
(services.errors) mapped to their status once per transport: rest_error for REST (aiohttp, and the Ray replicas'
answers), grpc_error for gRPC. The codecs are services.open_inference's (REST and gRPC side by side); no transport is
imported here (aiohttp's `web` and grpcio's status codes are handed in). docs/architecture.md draws the path of a
request."""

from __future__ import annotations

import time
from typing import Callable, Optional

from ..core.errors import UsageError
from .errors import BadRequest, Forbidden, RequestError, Unavailable, typed
from .open_inference import ModelView, grpc_answer, grpc_request, rest_answer, rest_request

__all__ = [
    "Model",
    "local_model",
    "DataPlane",
    "rest_error",
    "grpc_error",
    "RestCodec",
    "GrpcCodec",
    "control_parameters",
    "named_version",
    "rest_routes",
    "repository_routes",
]


class Model:
    """One model the data plane serves. `view`: what names it (name, version, check(name, version): NotFound; a
    ModelView, or on the Ray ingress a replica's description); `metadata()`, `config()` (Triton's model
    configuration), `stats()` (its entry of model_stats); `submit`: async, a checked Job through its batcher, answered
    (None on the Ray ingress, whose requests a replica answers)."""

    def __init__(self, view, metadata: Callable, config: Callable, stats: Callable, submit: Optional[Callable] = None):
        self.view, self.metadata, self.config, self.stats, self.submit = view, metadata, config, stats, submit


def local_model(view: ModelView, submit: Callable, max_batch: Optional[int] = None) -> Model:
    """A policy served in this process: its ModelView, its batcher's submit (`max_batch`: the configuration's
    preferred batch size)."""
    return Model(view, view.metadata, lambda: view.config(max_batch), view.model_stats, submit)


class DataPlane:
    """The V2 routes over `models` (name -> Model); `stopping()`: whether the server is stopping (ready false,
    inference Unavailable); `server`: the server metadata. `lookup(name, version)` (serve's several models and
    versions): the Model that answers, or NotFound naming what is served; `every()`: every Model (each version)."""

    def __init__(
        self,
        models: dict,
        stopping: Callable[[], bool],
        server: dict,
        lookup: Optional[Callable] = None,
        every: Optional[Callable] = None,
    ):
        self.models, self.stopping, self.server = models, stopping, server
        self.lookup, self.every = lookup, every
        self.loading: set = set()  # models being loaded by a repository call: not ready meanwhile
        self.control = None  # the repository API's answerer (index, load, unload: serve's Server), or None: off

    def live(self) -> bool:
        return True

    def ready(self) -> bool:
        return not self.stopping()

    def server_metadata(self) -> dict:
        return self.server

    def model(self, name: str, version: Optional[str] = None) -> Model:
        """The model `name` (at `version`, where given): NotFound, naming what is served, for any other."""
        if self.lookup is not None:
            return self.lookup(name, version)
        model = self.models.get(name)
        (model or next(iter(self.models.values()))).view.check(name, version)
        return model

    def model_ready(self, name: str, version: Optional[str] = None) -> bool:
        """False while a repository call loads `name` (an unloaded model loading again is not "unknown" meanwhile);
        otherwise whether the server is ready, NotFound for a model or version not served."""
        if isinstance(name, str) and name in self.loading:
            return False
        self.model(name, version)
        return self.ready()

    # -- the repository API (Triton's model repository extension): off unless serve's --allow-model-control
    def controller(self):
        if self.control is None or not self.control.allowed:
            raise Forbidden("the repository API is off: start serve with --allow-model-control to load and unload")
        return self.control

    async def repository_index(self, ready: bool = False) -> list:
        """[{"name", "version", "state", "reason"}]: each loaded version, each model with none (UNAVAILABLE), each
        model loading (LOADING); `ready`: the READY rows alone."""
        rows = await self.controller().index()
        return [row for row in rows if row["state"] == "READY"] if ready else rows

    async def repository_load(self, name: str, version: Optional[str] = None) -> None:
        """Load `name` (follow its newest verified version), or with `version`, pin that version (the rollback)."""
        await self.controller().load(name, version)

    async def repository_unload(self, name: str, version: Optional[str] = None) -> None:
        """Unload `name`, or only its `version` (the version serving falls back to the newest other one)."""
        await self.controller().unload(name, version)

    def model_metadata(self, name: str, version: Optional[str] = None) -> dict:
        return self.model(name, version).metadata()

    def model_config(self, name: str, version: Optional[str] = None) -> dict:
        return self.model(name, version).config()

    def model_statistics(self, name: str = "", version: Optional[str] = None) -> dict:
        """Triton's statistics of `name` (every model where "")."""
        every = self.every() if self.every is not None else list(self.models.values())
        models = [self.model(name, version)] if name else every
        return {"model_stats": [model.stats() for model in models]}

    async def infer(self, name: str, version: Optional[str], codec, call):
        """One inference, in its transport's terms: `codec.decode(view, call)` reads the request (`call`: what the
        front holds of it) into a checked Job, the model's batcher answers it, `codec.encode(job)` makes the answer
        (returned); a refusal is `codec.refusal(exc)`'s answer (exc a RequestError: the server stopping (Unavailable),
        an unknown model (NotFound), a request that does not fit (BadRequest), the engine's failure (EngineFailed)).
        Counted in the model's statistics. (A codec made once per front, not closures made per request: this is the
        path every request takes.)"""
        if self.stopping():
            return codec.refusal(Unavailable("the server is stopping"))
        model = None
        if self.lookup is not None:
            try:
                model = self.lookup(name, version)
            except UsageError as exc:
                return codec.refusal(typed(exc))
            stats = model.view.stats
        else:
            stats = (self.models.get(name) or next(iter(self.models.values()))).view.stats
        try:
            if model is None:  # (the one model's check: an unknown name or version counted as its failure)
                model = self.model(name, version)
            job = codec.decode(model.view, call)
        except UsageError as exc:
            stats.add("fail", 0)
            return codec.refusal(typed(exc))
        await model.submit(job)
        if job.error is not None:
            stats.add("fail", time.perf_counter_ns() - job.arrived)
            return codec.refusal(job.error)
        started = time.perf_counter_ns()
        answer = codec.encode(job)
        stats.finished(job, time.perf_counter_ns() - started)
        return answer


# -- each transport's mapping of the errors (once) and its inference call
def rest_error(exc: UsageError, dumps) -> tuple:
    """A refusal as REST answers it: (status, JSON body {"error": its line})."""
    exc = typed(exc)
    return exc.status, dumps({"error": str(exc)})


def grpc_error(codes, exc: UsageError) -> tuple:
    """A refusal as gRPC answers it: (grpc.StatusCode, its line); `codes`: grpc.StatusCode."""
    exc = typed(exc)
    return getattr(codes, exc.code), str(exc)


class RestCodec:
    """POST /v2/models/{name}[/versions/{version}]/infer's codec (made once per front): a call is (body, header
    length or None, owner); its answer (status, body, content type, header length or None), a refusal included
    (rest_error). `codec`: (loads, dumps); `limit`: the longest body (a call's body is None past it); `refuse(job)`:
    raises a UsageError for a Job this server will not answer."""

    def __init__(self, codec: tuple, limit: int, refuse: Optional[Callable] = None):
        (self.loads, self.dumps), self.limit, self.refuse = codec, limit, refuse

    def decode(self, view, call: tuple):
        body, header_length, owner = call
        if body is None:
            raise UsageError(f"the request is longer than {self.limit} bytes (--max-line-bytes)")
        job = rest_request(view, body, header_length, self.loads, owner)
        if self.refuse is not None:
            self.refuse(job)
        return job

    def encode(self, job) -> tuple:
        text, length = rest_answer(job, self.dumps)
        if length is None:
            return 200, text, "application/json", None
        return 200, text, "application/octet-stream", length

    def refusal(self, exc: RequestError) -> tuple:
        status, text = rest_error(exc, self.dumps)
        return status, text, "application/json", None


class GrpcCodec:
    """ModelInfer's codec (made once per front): a call is (ModelInferRequest, owner); its answer the
    ModelInferResponse's wire bytes (open_inference.grpc_answer), or (status code, text) where it is refused
    (grpc_error). `codes`: grpc.StatusCode."""

    def __init__(self, codes):
        self.codes = codes

    def decode(self, view, call: tuple):
        request, owner = call
        return grpc_request(view, request, owner)

    def encode(self, job):
        return grpc_answer(job)

    def refusal(self, exc: RequestError) -> tuple:
        return grpc_error(self.codes, exc)


def control_parameters(body: Optional[bytes], loads: Callable) -> dict:
    """A repository call's JSON body ({"ready": ...} for the index, {"parameters": {...}} for load and unload): the
    object, {} where empty; BadRequest for anything else."""
    if body is None:
        raise BadRequest("the request's body is longer than --max-line-bytes")
    if not body.strip():
        return {}
    try:
        obj = loads(body)
    except (ValueError, RecursionError):
        obj = None
    if type(obj) is not dict or type(obj.get("parameters", {})) is not dict:
        raise BadRequest('expected a JSON object, e.g. {"parameters": {"version": "100000"}}')
    return obj


def named_version(parameters: dict) -> Optional[str]:
    """The "version" parameter of a load or unload (a checkpoint's step), or None."""
    version = parameters.get("version")
    if version is None or version == "":
        return None
    text = str(version)
    if type(version) not in (int, str) or not text.isascii() or not text.isdigit() or len(text) > 18:
        raise BadRequest(f'parameter "version": expected a checkpoint\'s step, not {text[:40]!r}')
    return str(int(text))


def rest_routes(web, plane: DataPlane, dumps, infer: Callable, read: Optional[Callable] = None, loads=None) -> list:
    """The V2 REST routes over `plane` (aiohttp's `web` handed in); `infer`: the front's handler of POST .../infer
    (it reads the body within its own bounds, then DataPlane.infer with its RestCodec, or forwards it to a replica);
    `read` (the front's body reader, as infer's) with `loads`: the repository API's routes too."""

    def answer(obj, status: int = 200):
        return web.Response(body=dumps(obj), status=status, content_type="application/json")

    def health(ok: bool):
        return web.Response(status=200 if ok else 503)

    async def live(request):
        return health(plane.live())

    async def ready(request):
        return health(plane.ready())

    async def server_metadata(request):
        return answer(plane.server_metadata())

    async def all_stats(request):
        return answer(plane.model_statistics())

    def about(what: Callable):
        """A GET of one model: what(name, version)'s answer, its refusal (404 for another model or version)."""

        async def handler(request):
            try:
                got = what(request.match_info["model"], request.match_info.get("version"))
            except UsageError as exc:
                status, text = rest_error(exc, dumps)
                return web.Response(body=text, status=status, content_type="application/json")
            return health(got) if isinstance(got, bool) else answer(got)

        return handler

    routes = []
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        routes += [
            web.post(base + "/infer", infer),  # (first: aiohttp tries a path's routes in their order, a regex each)
            web.get(base, about(plane.model_metadata)),
            web.get(base + "/ready", about(plane.model_ready)),
            web.get(base + "/config", about(plane.model_config)),
            web.get(base + "/stats", about(plane.model_statistics)),
        ]
    if read is not None:
        routes += repository_routes(web, plane, dumps, read, loads)
    return [
        web.get("/v2/health/live", live),
        web.get("/v2/health/ready", ready),
        web.get("/v2", server_metadata),
        web.get("/v2/models/stats", all_stats),
        *routes,
    ]


def repository_routes(web, plane: DataPlane, dumps, read: Callable, loads: Callable) -> list:
    """POST /v2/repository/index, /v2/repository/models/{model}/load and .../unload (Triton's model repository
    extension), each body read by `read`."""

    def answer(obj, status: int = 200):
        return web.Response(body=dumps(obj), status=status, content_type="application/json")

    def refusal(exc: UsageError):
        status, text = rest_error(exc, dumps)
        return web.Response(body=text, status=status, content_type="application/json")

    async def index(request, body):
        try:
            rows = await plane.repository_index(control_parameters(body, loads).get("ready") is True)
        except UsageError as exc:
            return refusal(exc)
        return answer(rows)

    def change(call: Callable):
        async def handler(request, body):
            try:
                version = named_version(control_parameters(body, loads).get("parameters", {}))
                await call(request.match_info["model"], version)
            except UsageError as exc:
                return refusal(exc)
            return web.Response(status=200)

        return handler

    return [
        web.post("/v2/repository/index", read(index)),
        web.post("/v2/repository/models/{model}/load", read(change(plane.repository_load))),
        web.post("/v2/repository/models/{model}/unload", read(change(plane.repository_unload))),
    ]
