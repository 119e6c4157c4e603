"""serve --grpc: the Open Inference Protocol's gRPC service (KServe V2, `inference.GRPCInferenceService`, as Triton
serves it) on grpcio's asyncio server, in serve's own event loop: health, metadata, model configuration and
statistics, ModelInfer (typed `contents` or `raw_input_contents`; answers in `raw_output_contents`, as Triton's) and
ModelStreamInfer (one bidirectional stream a client keeps open). The messages are the ones generated from Triton's
grpc_service.proto that tritonclient ships (tritonclient.grpc.service_pb2): no protobuf written by hand here. A
plug-in of serve (its FRONTS row names it): grpcio and tritonclient are imported only when --grpc is given."""

from __future__ import annotations

import asyncio
import time

from ..core.errors import UsageError
from ..services.open_inference import DTYPES, NotFound, read_request, tensor_array
from ..services.serve_common import Front, tell_limited
from .serve import Server

__all__ = ["NEED_GRPC", "CONTENTS", "GrpcFront", "V2Service", "add_service", "grpc_job", "grpc_answer", "parameters"]


NEED_GRPC = 'serve --grpc needs grpcio and tritonclient[grpc]: pip install ".[serve]"'


CONTENTS = {  # V2 datatype -> its field of InferTensorContents (typed contents, where raw_input_contents is not used)
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def parameters(mapping) -> dict:
    """A request's parameters (a map of InferParameter) as plain values."""
    out = {}
    for key, value in mapping.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, which) if which else None
    return out


def grpc_job(view, request):
    """A ModelInferRequest checked against the model: a Job (UsageError, NotFound in one line)."""
    started = time.perf_counter_ns()
    view.check(request.model_name, request.model_version)
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise UsageError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: one for each input")
    tensors = {}
    for n, tensor in enumerate(request.inputs):
        name = tensor.name
        if name in tensors:
            raise UsageError(f'input "{name[:40]}" is given twice')
        if raw and tensor.HasField("contents") and tensor.contents.ListFields():  # (Triton refuses it too)
            raise UsageError(
                f'input "{name[:40]}": both typed contents and raw_input_contents given: give its values once'
            )
        if raw:
            tensors[name] = tensor_array(name[:40], tensor.datatype, list(tensor.shape), raw=raw[n])
        else:
            field = CONTENTS.get(tensor.datatype)
            data = list(getattr(tensor.contents, field)) if field else None
            tensors[name] = tensor_array(name[:40], tensor.datatype, list(tensor.shape), data)
    outputs = [o.name for o in request.outputs] or None
    job = read_request(view, tensors, outputs, parameters(request.parameters), request.id or None)
    job.arrived = started
    job.read_ns = time.perf_counter_ns() - started
    return job


def grpc_answer(pb, job):
    """The ModelInferResponse of an answered Job: its outputs in raw_output_contents, as Triton answers."""
    view, types = job.view, {n: d for n, d, _ in job.view.outputs}
    outputs, raw = [], []
    for name in job.wanted:
        array = job.outputs[name]
        outputs.append(pb.ModelInferResponse.InferOutputTensor(name=name, datatype=types[name], shape=array.shape))
        raw.append(array.astype(DTYPES[types[name]], copy=False).tobytes())
    return pb.ModelInferResponse(
        model_name=view.name, model_version=view.version, id=job.ident or "", outputs=outputs, raw_output_contents=raw
    )


class GrpcFront(Front):
    """--grpc HOST:PORT: the V2 gRPC service (grpcio's asyncio server) in the server's loop."""

    option, says = "--grpc", "grpc"

    def check(self) -> None:
        try:
            import grpc  # noqa: F401
            from tritonclient.grpc import service_pb2, service_pb2_grpc  # noqa: F401
        except ImportError:
            raise UsageError(NEED_GRPC) from None
        except Exception as exc:  # noqa: BLE001 - a tritonclient that cannot load its messages (protobuf's version)
            raise UsageError(f"{NEED_GRPC} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None

    async def start(self, server: Server) -> None:
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
            ]
        )
        add_service(self.grpc, server)
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
        if getattr(self, "grpc", None) is not None:
            await self.grpc.stop(1.0)


class V2Service:
    """inference.GRPCInferenceService's methods for one server's policy (add_service joins them to the generated
    servicer class, which answers UNIMPLEMENTED for the repository, shared-memory, trace and log methods)."""

    def __init__(self, server: Server):
        import grpc
        from google.protobuf import json_format
        from tritonclient.grpc import model_config_pb2
        from tritonclient.grpc import service_pb2 as pb

        self.server, self.view, self.codes, self.pb = server, server.view, grpc.StatusCode, pb
        self.parse, self.config_message = json_format.ParseDict, model_config_pb2.ModelConfig

    async def checked(self, context, request) -> None:
        try:
            self.view.check(request.name, request.version)
        except NotFound as exc:
            await context.abort(self.codes.NOT_FOUND, str(exc))

    async def answered(self, request):
        """A ModelInferRequest's response, or (status, text) where it is refused."""
        server, view, codes = self.server, self.view, self.codes
        try:
            if server.stopping:
                return codes.UNAVAILABLE, "the server is stopping"
            job = grpc_job(view, request)
        except UsageError as exc:
            view.stats.add("fail", 0)
            return codes.NOT_FOUND if isinstance(exc, NotFound) else codes.INVALID_ARGUMENT, str(exc)
        await server.submit(job)
        if job.error is not None:
            view.stats.add("fail", time.perf_counter_ns() - job.arrived)
            return codes.INVALID_ARGUMENT, job.error
        started = time.perf_counter_ns()
        response = grpc_answer(self.pb, job)
        view.stats.finished(job, time.perf_counter_ns() - started)
        return response

    async def ServerLive(self, request, context):
        return self.pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return self.pb.ServerReadyResponse(ready=not self.server.stopping)

    async def ModelReady(self, request, context):
        await self.checked(context, request)
        return self.pb.ModelReadyResponse(ready=not self.server.stopping)

    async def ServerMetadata(self, request, context):
        return self.pb.ServerMetadataResponse(**self.view.server_metadata())

    async def ModelMetadata(self, request, context):
        await self.checked(context, request)
        return self.parse(self.view.metadata(), self.pb.ModelMetadataResponse())

    async def ModelConfig(self, request, context):
        await self.checked(context, request)
        config = self.parse(self.view.config(self.server.max_batch), self.config_message())
        return self.pb.ModelConfigResponse(config=config)

    async def ModelStatistics(self, request, context):
        if request.name:
            await self.checked(context, request)
        stats = {"model_stats": [self.view.stats.model_stats(self.view)]}
        return self.parse(stats, self.pb.ModelStatisticsResponse())

    async def ModelInfer(self, request, context):
        response = await self.answered(request)
        if isinstance(response, tuple):
            await context.abort(*response)
        return response

    async def ModelStreamInfer(self, request_iterator, context):
        """Requests read as they come and answered in their order (a client may send many before reading); a refused
        one gets its error_message and the stream goes on."""
        waiting: asyncio.Queue = asyncio.Queue(maxsize=1024)

        async def read():
            try:
                async for request in request_iterator:
                    await waiting.put(asyncio.ensure_future(self.answered(request)))
            except Exception as exc:  # noqa: BLE001 - the client went away mid-stream
                tell_limited(f"grpc: a stream ended: {type(exc).__name__}")
            finally:
                await waiting.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (task := await waiting.get()) is not None:
                response = await task
                if isinstance(response, tuple):
                    yield self.pb.ModelStreamInferResponse(error_message=response[1])
                else:
                    yield self.pb.ModelStreamInferResponse(infer_response=response)
        finally:
            reader.cancel()


def add_service(grpc_server, server: Server) -> None:
    """inference.GRPCInferenceService for `server`'s policy, on `grpc_server`."""
    from tritonclient.grpc import service_pb2_grpc

    service = type("Service", (V2Service, service_pb2_grpc.GRPCInferenceServiceServicer), {})(server)
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, grpc_server)
