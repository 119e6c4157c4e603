"""serve --grpc: the Open Inference Protocol's gRPC service (KServe V2, `inference.GRPCInferenceService`, as Triton
serves it) on grpcio's asyncio server, in serve's own event loop: health, metadata, model configuration and
statistics, ModelInfer (typed `contents` or `raw_input_contents`; answers in `raw_output_contents`, as Triton's) and
ModelStreamInfer (one bidirectional stream a client keeps open). The messages are the ones generated from Triton's
grpc_service.proto that tritonclient ships (tritonclient.grpc.service_pb2): no protobuf written by hand here. A
plug-in of serve (its FRONTS row names it): grpcio and tritonclient are imported only when --grpc is given."""

from __future__ import annotations

import asyncio
import collections
import os
import sys
from functools import partial
from typing import Optional

from ..core.errors import UsageError
from ..services.batcher import Batcher
from ..services.dataplane import GrpcCodec, grpc_error, named_version
from ..services.open_inference import grpc_stream_answer, owner_of
from ..services.serve_common import Front, tell_limited

__all__ = [
    "NEED_GRPC",
    "STREAM_BYTES",
    "STREAM_REQUESTS",
    "STOP_STREAMS_S",
    "METADATA_BYTES",
    "GRPCIO_METADATA_BYTES",
    "metadata_bound",
    "GrpcFront",
    "V2Service",
    "Stream",
    "add_service",
    "GenericOnly",
    "INFER",
    "STREAM_INFER",
    "owner_of_context",
]


STREAM_BYTES = 4 << 20  # a ModelStreamInfer's requests read and unanswered plus its answers unsent: past it, not read


STREAM_REQUESTS = 1024  # the same in requests (each costs its task beside its bytes)


METADATA_BYTES = 16 << 10  # a call's metadata (its keys and values, 32 bytes more an entry, as HTTP/2 counts them)
# past which it is refused: RESOURCE_EXHAUSTED with a message


GRPCIO_METADATA_BYTES = 1 << 20  # grpcio's own bound, past which it refuses a call itself, with no message


STOP_STREAMS_S = 1.0  # the stop: how long grpcio answers the calls it holds before it cancels them (streams too)


NEED_GRPC = 'serve --grpc needs grpcio and tritonclient[grpc]: pip install ".[serve]"'


class GrpcFront(Front):
    """--grpc HOST:PORT: the V2 gRPC service (grpcio's asyncio server) in the server's loop."""

    option, says = "--grpc", "grpc"

    def check(self) -> None:
        # grpcio's C core writes its own lines to stderr, one per refused request and past any rate limit (a peer
        # could fill the log): not written, unless GRPC_VERBOSITY asks; serve says what it refuses, once a second
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
        try:
            import grpc  # noqa: F401
            from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: F401
        except ImportError:
            raise UsageError(NEED_GRPC) from None
        except Exception as exc:  # noqa: BLE001 - a tritonclient that cannot load its messages (protobuf's version)
            raise UsageError(f"{NEED_GRPC} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None

    async def start(self, server: Batcher) -> None:
        import grpc

        host, port = self.sock.getsockname()[:2]
        self.said = self.shown(), self.told()
        self.sock.close()  # (bound first so that a taken port is one line before anything runs; grpc binds it again)
        limit = server.limit + (1 << 16)
        self.grpc = grpc.aio.server(
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.max_metadata_size", GRPCIO_METADATA_BYTES),  # (below it, METADATA_BYTES is refused here)
                ("grpc.absolute_max_metadata_size", GRPCIO_METADATA_BYTES),
            ],
        )
        self.service = add_service(self.grpc, server)
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = self.grpc.add_insecure_port(where)
        except RuntimeError as exc:
            bound, why = 0, exc
        else:
            why = "taken"
        if not bound:
            raise UsageError(f"--grpc {self.text}: cannot listen there ({why})")
        await self.grpc.start()

    said = None  # (what shown() and told() say, kept once grpcio has the port)

    def shown(self) -> str:
        return self.said[0] if self.said else super().shown()

    def told(self) -> str:
        return self.said[1] if self.said else super().told()

    def stop_accepting(self) -> None:
        pass  # (grpcio stops taking RPCs in cleanup, after the lines and requests already here are answered)

    async def cleanup(self) -> None:
        """The stop: grpcio answers what it holds for STOP_STREAMS_S, then cancels every call left (streams whose
        clients do not read among them); their tasks are waited for, so that none is left when the loop closes."""
        if getattr(self, "grpc", None) is not None:
            await self.grpc.stop(STOP_STREAMS_S)
            closing = {t for t in self.service.closing if not t.done()}
            if closing:
                await asyncio.wait(closing, timeout=STOP_STREAMS_S)
            if self.service.cut:
                print(
                    f"[serve] grpc: {self.service.cut} stream(s) still open {STOP_STREAMS_S:g} s into the stop were "
                    f"ended (CANCELLED)",
                    file=sys.stderr,
                    flush=True,
                )


def metadata_bound(handlers: list, methods: Optional[dict] = None):
    """The generic handler grpcio asks for every call's method: `methods`' handler of it (method -> handler, asked
    first), else `handlers`' (the service's), except that a call whose
    metadata passes METADATA_BYTES is refused with RESOURCE_EXHAUSTED and a message saying so (grpcio's own refusal,
    past its far larger bound, has none), and one line at most once a second on stderr. (A generic handler, not a
    grpc.aio interceptor: grpcio calls it as a plain function, where an interceptor costs a chain of coroutines on
    every call.)"""
    import grpc

    def refusing(handler, text: str):
        async def refuse(request, context):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, text)

        async def refuse_stream(request, context):  # (a response stream: an async generator that yields nothing)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, text)
            yield  # pragma: no cover - (never reached: abort raises)

        kind = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(handler.request_streaming, handler.response_streaming)]
        return kind(
            refuse_stream if handler.response_streaming else refuse,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    known = methods or {}

    class MetadataBound(grpc.GenericRpcHandler):
        def service(self, details):
            metadata = details.invocation_metadata or ()
            size = 0
            for key, value in metadata:
                size += len(key) + len(value) + 32
            handler = known.get(details.method)
            if handler is None:
                handler = next((h for h in (each.service(details) for each in handlers) if h is not None), None)
            if size <= METADATA_BYTES or handler is None:
                return handler
            tell_limited(f"grpc: a call refused: {len(metadata)} metadata entries, {size} bytes")
            return refusing(
                handler,
                f"the call's metadata is {size} bytes ({len(metadata)} entries): at most {METADATA_BYTES} bytes",
            )

    return MetadataBound()


class V2Service:
    """inference.GRPCInferenceService's methods over the server's data plane (services.dataplane: each method one of
    its calls, a refusal's status from grpc_error); add_service joins them to the generated servicer class, which
    answers UNIMPLEMENTED for the shared-memory, trace and log methods; the repository methods are answered where
    --allow-model-control was given (else PERMISSION_DENIED, one line)."""

    def __init__(self, server: Batcher):
        import grpc
        from google.protobuf import json_format
        from tritonclient.grpc import model_config_pb2
        from tritonclient.grpc import service_pb2 as pb

        self.server, self.plane, self.codes, self.pb = server, server.plane, grpc.StatusCode, pb
        self.codec = GrpcCodec(grpc.StatusCode)
        self.cut = 0  # (streams the stop ended: said in one line)
        self.closing: set = set()  # (the cancelled tasks of streams that ended: the stop waits for what is left)
        self.parse, self.config_message = json_format.ParseDict, model_config_pb2.ModelConfig

    async def asked(self, context, what, *args):
        """The data plane's answer to what(*args), or the call aborted with its refusal's status."""
        try:
            return what(*args)
        except UsageError as exc:
            await context.abort(*grpc_error(self.codes, exc))

    async def answered(self, request, owner):
        """A ModelInferRequest's answer (its wire bytes), or (status, text) where it is refused. `owner`: its peer
        (owner_of)."""
        return await self.plane.infer(request.model_name, request.model_version, self.codec, (request, owner))

    async def ServerLive(self, request, context):
        return self.pb.ServerLiveResponse(live=self.plane.live())

    async def ServerReady(self, request, context):
        return self.pb.ServerReadyResponse(ready=self.plane.ready())

    async def ModelReady(self, request, context):
        ready = await self.asked(context, self.plane.model_ready, request.name, request.version)
        return self.pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request, context):
        return self.pb.ServerMetadataResponse(**self.plane.server_metadata())

    async def ModelMetadata(self, request, context):
        metadata = await self.asked(context, self.plane.model_metadata, request.name, request.version)
        return self.parse(metadata, self.pb.ModelMetadataResponse())

    async def ModelConfig(self, request, context):
        config = await self.asked(context, self.plane.model_config, request.name, request.version)
        return self.pb.ModelConfigResponse(config=self.parse(config, self.config_message()))

    async def ModelStatistics(self, request, context):
        stats = await self.asked(context, self.plane.model_statistics, request.name, request.version)
        return self.parse(stats, self.pb.ModelStatisticsResponse())

    async def RepositoryIndex(self, request, context):
        rows = await self.control(context, self.plane.repository_index, request.ready)
        return self.pb.RepositoryIndexResponse(models=[self.pb.RepositoryIndexResponse.ModelIndex(**r) for r in rows])

    async def RepositoryModelLoad(self, request, context):
        version = await self.asked(context, self.version_of, request)
        await self.control(context, self.plane.repository_load, request.model_name, version)
        return self.pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        version = await self.asked(context, self.version_of, request)
        await self.control(context, self.plane.repository_unload, request.model_name, version)
        return self.pb.RepositoryModelUnloadResponse()

    @staticmethod
    def version_of(request):
        """A load's or unload's "version" parameter (string_param or int64_param), or None."""
        if "version" not in request.parameters:
            return None
        param = request.parameters["version"]
        kind = param.WhichOneof("parameter_choice")
        return named_version({"version": getattr(param, kind) if kind in ("string_param", "int64_param") else "?"})

    async def control(self, context, what, *args):
        """The data plane's repository call, or the call aborted with its refusal's status."""
        try:
            return await what(*args)
        except UsageError as exc:
            await context.abort(*grpc_error(self.codes, exc))

    async def ModelInfer(self, request, context):
        """Its answer's wire bytes (the method's handler has no response serializer: add_service)."""
        response = await self.plane.infer(
            request.model_name, request.model_version, self.codec, (request, partial(owner_of_context, context))
        )
        if type(response) is tuple:
            await context.abort(*response)
        return response

    async def ModelStreamInfer(self, request_iterator, context):
        """Requests read as they come and answered in their order (a client may send many before reading); a refused
        one gets its error_message and the stream goes on. What the stream holds (its requests read and not answered,
        its answers not yet sent) is bounded in bytes, STREAM_BYTES, and in count: past either, the stream is not
        read until its client reads (grpcio's flow control then holds the client's sends). A message that cannot be
        read ends the stream with INVALID_ARGUMENT, after the answers of the requests before it."""
        # (a coroutine writing with context.write, not an async generator: one cancelled at a yield, as grpcio cancels
        # a stream at the stop or when its client goes, is finalized later by the loop, which may be closed by then)
        stream = Stream(self, owner_of_context(context))
        stream.reader = asyncio.ensure_future(stream.read(request_iterator))
        try:
            while (message := await stream.next_answer()) is not None:
                await context.write(message)
                stream.sent()
            if stream.failed is not None:
                await context.abort(self.codes.INVALID_ARGUMENT, stream.failed)
        except asyncio.CancelledError:
            self.cut += bool(self.server.stopping)
            raise
        finally:
            for task in stream.close():
                self.closing.add(task)
                task.add_done_callback(self.closing.discard)


class Stream:
    """One ModelStreamInfer: its requests' answers (tasks) in order, each with the bytes it holds (its request's,
    then its answer's too), read while those bytes stay under STREAM_BYTES."""

    def __init__(self, service: V2Service, owner: str):
        self.service, self.owner, self.pending, self.held = service, owner, collections.deque(), 0
        self.ended, self.failed, self.answered, self.reader = False, None, 0, None
        self.changed, self.room = asyncio.Event(), asyncio.Event()

    async def read(self, request_iterator) -> None:
        try:
            async for request in request_iterator:
                size = request.ByteSize()
                while self.pending and (self.held + size > STREAM_BYTES or len(self.pending) >= STREAM_REQUESTS):
                    self.room.clear()
                    await self.room.wait()  # (the writer sets it as answers go out; close() cancels this task)
                task = asyncio.ensure_future(self.service.answered(request, self.owner))
                entry = [task, size]
                task.add_done_callback(lambda t, e=entry: self.counted(t, e))
                self.pending.append(entry)
                self.held += size
                self.changed.set()
        except Exception as exc:  # noqa: BLE001 - a message grpcio cannot decode, or the client gone mid-stream
            self.failed = (
                f"a request on this stream could not be read ({type(exc).__name__}"
                f"{': ' + str(exc).splitlines()[0][:120] if str(exc) else ''}): the stream ends here, after the "
                f"answers of the requests before it"
            )
            tell_limited(f"grpc: a stream ended: {type(exc).__name__}")
        finally:
            self.ended = True
            self.changed.set()

    def counted(self, task, entry) -> None:
        """A request answered: the bytes of its answer held too, until it is sent."""
        if not task.cancelled() and task.exception() is None and type(task.result()) is not tuple:
            extra = len(task.result())
            entry[1] += extra
            self.held += extra

    async def next_answer(self):
        """The next answer as a ModelStreamInferResponse's wire bytes, in order; None once the stream is read to its
        end."""
        while not self.pending:
            if self.ended:
                return None
            self.changed.clear()
            await self.changed.wait()
        response = await self.pending[0][0]
        if type(response) is tuple:
            return self.service.pb.ModelStreamInferResponse(error_message=response[1]).SerializeToString()
        return grpc_stream_answer(response)

    def sent(self) -> None:
        _, size = self.pending.popleft()
        self.held -= size
        self.answered += 1
        self.room.set()

    def close(self) -> list:
        """The stream is over (its end, its client gone, the server stopping): its tasks cancelled (returned, for the
        stop to wait on: nothing of it is left pending when the loop closes)."""
        tasks = [t for t in [self.reader, *(task for task, _ in self.pending)] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        self.pending.clear()
        self.room.set()
        return tasks


def add_service(grpc_server, server: Batcher) -> V2Service:
    """inference.GRPCInferenceService for `server`'s policy, on `grpc_server` (the service returned)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    service = type("Service", (V2Service, service_pb2_grpc.GRPCInferenceServiceServicer), {})(server)
    handlers = GenericOnly()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, handlers)
    request = service.pb.ModelInferRequest.FromString
    wire = {  # (the inference methods answer their responses' wire bytes: no response serializer)
        INFER: grpc.unary_unary_rpc_method_handler(service.ModelInfer, request_deserializer=request),
        STREAM_INFER: grpc.stream_stream_rpc_method_handler(service.ModelStreamInfer, request_deserializer=request),
    }
    grpc_server.add_generic_rpc_handlers((metadata_bound(handlers.generic, wire),))
    return service


INFER, STREAM_INFER = "/inference.GRPCInferenceService/ModelInfer", "/inference.GRPCInferenceService/ModelStreamInfer"


def owner_of_context(context) -> str:
    """The owner of a gRPC call's sequences: its peer's host (open_inference.owner_of)."""
    return owner_of("grpc:" + str(context.peer()))


class GenericOnly:
    """What the generated add_GRPCInferenceServiceServicer_to_server gives a server, keeping its generic handler and
    leaving out its registered methods (tritonclient 2.73's generated code registers all 22): grpc.aio's server keeps
    a request-call task for each registered method and waits on all of them with asyncio.wait for every call it takes
    (grpcio's aio server.pyx.pxi, _server_main_loop). With one generic handler, it waits on one."""

    def __init__(self):
        self.generic: list = []

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.generic.extend(handlers)

    def add_registered_method_handlers(self, service: str, handlers: dict) -> None:
        pass
