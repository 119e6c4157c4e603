"""serve --grpc: the Open Inference Protocol's gRPC service (KServe V2, `inference.GRPCInferenceService`, as Triton
serves it) on grpcio's asyncio server, in a process of its own that hands each call to serve's event loop
(--grpc-process on, the default: Relay, Lane) or in serve's loop itself (off): health, metadata, model configuration and
statistics, ModelInfer (typed `contents` or `raw_input_contents`; answers in `raw_output_contents`, as Triton's) and
ModelStreamInfer (one bidirectional stream a client keeps open). The messages are the ones generated from Triton's
grpc_service.proto that tritonclient ships (tritonclient.grpc.service_pb2): no protobuf written by hand here. A
plug-in of serve (its FRONTS row names it): grpcio and tritonclient are imported only when --grpc is given."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path

from ..core.errors import UsageError
from ..services.batcher import Batcher
from ..services.dataplane import GrpcCodec, grpc_error, named_version
from ..services.grpc_support import (
    CANCEL,
    CONTROL,
    STOP,
    TO_RELAY,
    TO_SERVE,
    Pipe,
    control_frame,
    grpc_server,
    listen,
    metadata_bound,
    relayed_methods,
)
from ..services.open_inference import grpc_stream_answer, owner_of
from ..services.serve_common import Front, loop_error, loop_maker, tell_limited

__all__ = [
    "NEED_GRPC",
    "STREAM_BYTES",
    "STREAM_REQUESTS",
    "STOP_STREAMS_S",
    "GrpcFront",
    "V2Service",
    "Stream",
    "add_service",
    "GenericOnly",
    "INFER",
    "STREAM_INFER",
    "owner_of_context",
    "make_service",
    "Lane",
    "LaneContext",
    "LaneAbort",
    "Relay",
    "relay_main",
    "RELAY_START_S",
    "RELAY_STOP_S",
    "relay",
    "relay_failed",
    "relay_code",
    "streams_ended",
]


STREAM_BYTES = 4 << 20  # a ModelStreamInfer's requests read and unanswered plus its answers unsent: past it, not read


STREAM_REQUESTS = 1024  # the same in requests (each costs its task beside its bytes)


STOP_STREAMS_S = 1.0  # the stop: how long grpcio answers the calls it holds before it cancels them (streams too)


NEED_GRPC = 'serve --grpc needs grpcio and tritonclient[grpc]: pip install ".[serve]"'


class GrpcFront(Front):
    """--grpc HOST:PORT: the V2 gRPC service (grpcio's asyncio server) in a process of its own (--grpc-process on) or in
    the server's loop."""

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
        host, port = self.sock.getsockname()[:2]
        self.said = self.shown(), self.told()
        self.sock.close()  # (bound first so that a taken port is one line before anything runs; grpc binds it again)
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if server.options.grpc_process:
            return await self.start_relay(server, where)
        self.grpc = grpc_server(server.limit + (1 << 16))
        self.service = add_service(self.grpc, server)
        why = listen(self.grpc, where)
        if why:
            raise UsageError(f"--grpc {self.text}: cannot listen there ({why})")
        await self.grpc.start()

    grpc = relay = lane = None

    async def start_relay(self, server: Batcher, where: str) -> None:
        """--grpc-process on: grpcio's server in a process of its own (relay_main), its calls handed to this loop over a
        socket pair (Lane), answered by the same V2Service; that process says whether it could listen."""
        self.service = make_service(server)
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        kind = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
        args = [str(theirs.fileno()), where, str(server.limit + (1 << 16)), kind]
        try:
            with theirs:
                self.relay = subprocess.Popen(
                    [sys.executable, "-c", relay_code(), *args],
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    start_new_session=True,  # (a terminal's Ctrl-C is serve's: it stops the relay, which ends with it)
                )
        except OSError as exc:
            ours.close()
            raise UsageError(f"--grpc {self.text}: cannot start its process ({exc.strerror or exc})") from None
        _, self.lane = await loop.create_unix_connection(lambda: Lane(self.service, server), sock=ours)
        try:
            why = await asyncio.wait_for(asyncio.shield(self.lane.started), RELAY_START_S)
        except asyncio.TimeoutError:
            why = f"its process did not start in {RELAY_START_S:g} s"
        if why:
            await self.cleanup()
            raise UsageError(f"--grpc {self.text}: cannot listen there ({why})")

    said = None  # (what shown() and told() say, kept once grpcio has the port)

    def shown(self) -> str:
        return self.said[0] if self.said else super().shown()

    def told(self) -> str:
        return self.said[1] if self.said else super().told()

    def stop_accepting(self) -> None:
        pass  # (grpcio stops taking RPCs in cleanup, after the lines and requests already here are answered)

    async def cleanup(self) -> None:
        """The stop: grpcio answers what it holds for STOP_STREAMS_S, then cancels every call left (streams whose
        clients do not read among them); their tasks are waited for, so that none is left when the loop closes. With
        --grpc-process on, that process is told to stop so (it says what it cut) and waited for."""
        if self.relay is not None:
            await self.stop_relay()
        if self.grpc is not None:
            await self.grpc.stop(STOP_STREAMS_S)
            await streams_ended(self.service)

    async def stop_relay(self) -> None:
        relay, lane, self.relay = self.relay, self.lane, None
        if lane is not None and not lane.closed.done():
            lane.send(0, STOP, b"")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(lane.closed), RELAY_STOP_S)
        deadline = asyncio.get_running_loop().time() + 1.0
        while relay.poll() is None and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        if relay.poll() is None:
            relay.kill()
            relay.wait()
        if lane is not None:
            lane.transport.close()


async def streams_ended(service) -> None:
    """After grpcio's stop: the tasks of the streams it cancelled (`service.closing`) waited for, so that none is left
    when the loop closes, and how many streams the stop cut (`service.cut`) said in one line."""
    closing = {t for t in service.closing if not t.done()}
    if closing:
        await asyncio.wait(closing, timeout=STOP_STREAMS_S)
    if service.cut:
        print(
            f"[serve] grpc: {service.cut} stream(s) still open {STOP_STREAMS_S:g} s into the stop were ended "
            f"(CANCELLED)",
            file=sys.stderr,
            flush=True,
        )


def relay_code() -> str:
    """The relay process's `python -c` program: serve's own import path (the package's folder or zipapp first, not the
    working folder that -c would put there), relay_main run; a failure to import told to serve as relay_failed tells
    it (its one line), never a traceback."""
    root = str(Path(__file__).resolve().parents[2])  # (the folder, or the zipapp, the package is imported from)
    paths = [root, *(p for p in sys.path if p and p != root)]
    return (
        f"import sys\nsys.path[:] = {paths!r}\ntry:\n    from mlagents_inference.fronts.serve_grpc import relay_main\n"
        "except Exception as exc:\n    import os, struct\n"
        "    why = f'failed its process could not start ({type(exc).__name__}: {exc})'.encode(errors='replace')\n"
        f"    os.write(int(sys.argv[1]), struct.pack({TO_SERVE.format!r}, len(why), 0, {CONTROL}, 0) + why)\n"
        "    raise SystemExit(2)\nrelay_main(sys.argv[1:])\n"
    )


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

    owner = staticmethod(lambda context: owner_of_context(context))  # (a stream's owner, as answered takes it)

    size_of = staticmethod(lambda request: request.ByteSize())  # (a stream's request's bytes, as Stream counts them)

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
        stream = Stream(self, self.owner(context))
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
                size = self.service.size_of(request)
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


def make_service(server: Batcher) -> V2Service:
    """inference.GRPCInferenceService for `server`'s models: V2Service over the generated servicer class (its methods
    that V2Service does not write answer UNIMPLEMENTED)."""
    from tritonclient.grpc import service_pb2_grpc

    return type("Service", (V2Service, service_pb2_grpc.GRPCInferenceServiceServicer), {})(server)


def add_service(grpc_server, server: Batcher) -> V2Service:
    """inference.GRPCInferenceService for `server`'s models, on `grpc_server` (the service returned)."""
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    service = make_service(server)
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


RELAY_START_S = 60.0  # how long serve waits for the relay process to say it listens


RELAY_STOP_S = STOP_STREAMS_S + 2.0  # how long serve waits for it to stop once told (then it is killed): its stop
# takes STOP_STREAMS_S and the cancelled streams' tasks at most as long again


# -- --grpc-process on: grpcio's server in a process of its own (Relay), serve's answers over a socket pair (Lane)
#
# grpcio's asyncio server spends most of a call's time in its own per-call work (docs/performance.md, issue 43), on the
# thread of the loop it runs in. With --grpc-process on, that work runs in a second process: it takes the calls and
# hands each to serve as one frame on a socket pair (its method, its peer, its message's bytes as they came), and
# serve answers each with one frame (a status, the answer's bytes or the refusal's text). Frames of one loop turn go in
# one write. ModelStreamInfer's requests are handed over one by one, as ModelInfer's.


class LaneAbort(Exception):
    """context.abort on a relayed call: its status and text, answered to the relay."""

    def __init__(self, code, details: str):
        super().__init__(details)
        self.code, self.details = code, details


class LaneContext:
    """What a V2Service method asks of its grpc.aio context, for a call that came over the lane: the client's peer (as
    grpcio's server saw it, in the relay), abort, and the status and text that a method left unwritten by V2Service
    sets before raising NotImplementedError (the generated servicer's)."""

    def __init__(self, peer: str):
        self.peer_text, self.code, self.details = peer, None, None

    def peer(self) -> str:
        return self.peer_text

    async def abort(self, code, details: str = ""):
        raise LaneAbort(code, details)

    def set_code(self, code) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details


class Lane(Pipe):
    """serve's end of the socket pair: each frame the relay sends is a call answered by `service` (ModelInfer through
    the data plane, the other unary methods as V2Service's), each answer one frame back, those of one loop turn in one
    write. The relay's own frames: b"ready" (it listens: `started` is ""), b"failed <why>" (`started` is why). The
    relay gone while serve is not stopping: serve stops, in one line (its failure)."""

    def __init__(self, service: V2Service, server: Batcher):
        self.service, self.server, self.codes = service, server, service.codes
        self.plane, self.codec = service.plane, service.codec
        self.methods = relayed_methods(service.pb)
        self.infer = next(i for i, m in enumerate(self.methods) if m[0] == "ModelInfer")
        self.parse = service.pb.ModelInferRequest.FromString
        self.calls: dict = {}  # tag -> the task answering it (a CANCEL frame cancels it)
        super().__init__()
        self.started, self.closed = self.loop.create_future(), self.loop.create_future()

    head = TO_SERVE

    def length(self, fields: tuple) -> int:
        return fields[0] + fields[3]  # (the message's bytes and its peer's)

    def frame(self, fields: tuple, buffer: bytearray, start: int, stop: int) -> None:
        _, tag, method, peer_size = fields
        peer = buffer[start : start + peer_size].decode(errors="replace")
        body = bytes(buffer[start + peer_size : stop])
        if method == self.infer:
            try:
                request = self.parse(body)
            except Exception as exc:  # noqa: BLE001 - a message protobuf cannot read: grpcio's answer to it
                return self.send(tag, self.codes.UNKNOWN.value[0], f"Unexpected {type(exc)}: {exc}".encode())
            owner = partial(owner_of, "grpc:" + peer)
            call = self.plane.infer(request.model_name, request.model_version, self.codec, (request, owner))
        elif method == CONTROL:
            return self.told(body)
        elif method == CANCEL:
            task = self.calls.get(tag)
            return None if task is None else task.cancel()
        else:
            call = self.call(method, peer, body)
        self.calls[tag] = task = asyncio.ensure_future(call)
        task.add_done_callback(partial(self.answered, tag))

    why = "ended"  # (what the relay said last: its line where it ends while serve is not stopping)

    def told(self, body: bytes) -> None:
        text = "" if body == b"ready" else body.decode(errors="replace").partition(" ")[2]
        if not self.started.done():
            self.started.set_result(text)
        elif text:
            self.why = f"ended: {text}"

    async def call(self, method: int, peer: str, body: bytes):
        """A unary method other than ModelInfer, as grpc.aio's server answers it: its response's wire bytes, or
        (status, text)."""
        name, message, _, _ = self.methods[method]
        context = LaneContext(peer)
        try:
            response = await getattr(self.service, name)(message.FromString(body), context)
        except LaneAbort as exc:
            return exc.code, exc.details
        except Exception as exc:  # noqa: BLE001 - as grpc.aio's server: its code where set, else UNKNOWN
            return context.code or self.codes.UNKNOWN, f"Unexpected {type(exc)}: {exc}"
        return response if type(response) is bytes else response.SerializeToString()

    def answered(self, tag: int, task) -> None:
        """A call's task done: its answer to the relay, whatever it holds (a call never left unanswered)."""
        if self.calls.get(tag) is task:
            del self.calls[tag]
        try:
            if task.cancelled():
                status, body = self.codes.CANCELLED.value[0], b""
            elif task.exception() is not None:
                exc = task.exception()
                status, body = self.codes.UNKNOWN.value[0], f"Unexpected {type(exc)}: {exc}".encode(errors="replace")
            elif type(answer := task.result()) is tuple:
                status, body = answer[0].value[0], str(answer[1]).encode(errors="replace")
            else:
                status, body = 0, answer
            TO_RELAY.pack(len(body), tag, status)
        except Exception as exc:  # noqa: BLE001 - (an answer past 4 GiB, say)
            status, body = self.codes.INTERNAL.value[0], f"the answer could not be sent ({type(exc).__name__})".encode()
        self.send(tag, status, body)

    def send(self, tag: int, status: int, body: bytes) -> None:
        self.queue(TO_RELAY.pack(len(body), tag, status), body)

    def connection_lost(self, exc) -> None:
        listened = self.started.done() and not self.started.result()
        if not self.started.done():
            self.started.set_result("its process ended before it listened")
        if not self.closed.done():
            self.closed.set_result(None)
        server = self.server
        if listened and not server.stopping and server.done is not None and not server.done.done():
            server.failure = server.failure or UsageError(f"serve --grpc: its process (--grpc-process on) {self.why}")
            server.finish()


class Relay(Pipe):
    """The relay process's end of the socket pair and its grpcio server: every method of the service handed to serve
    as a frame (ask), its answer's bytes returned as they come (no message made here); ModelStreamInfer read here as
    V2Service reads it (Stream: its bounds, its order), each of its requests asked as a ModelInfer. The metadata bound
    is this server's (metadata_bound). It stops when serve says so or goes."""

    def __init__(self, pb, codes):
        self.pb, self.codes = pb, codes
        self.methods = relayed_methods(pb)
        self.infer = next(i for i, m in enumerate(self.methods) if m[0] == "ModelInfer")
        self.statuses = {code.value[0]: code for code in codes}
        self.waiting, self.tag = {}, 0
        super().__init__()
        self.stop_asked = self.loop.create_future()
        self.server, self.stopping, self.cut, self.closing = self, 0, 0, set()

    # -- the lane
    head = TO_RELAY

    def frame(self, fields: tuple, buffer: bytearray, start: int, stop: int) -> None:
        _, tag, status = fields
        if status == STOP:
            return self.asked_to_stop(STOP_STREAMS_S)
        future = self.waiting.pop(tag, None)
        if future is not None and not future.done():
            future.set_result((status, bytes(buffer[start:stop])))

    def connection_lost(self, exc) -> None:
        for future in self.waiting.values():  # (serve gone: nothing more is answered)
            if not future.done():
                future.set_result((self.codes.UNAVAILABLE.value[0], b"the server is stopping"))
        self.waiting.clear()
        self.asked_to_stop(0)

    def asked_to_stop(self, grace: float) -> None:
        self.stopping = 1
        if not self.stop_asked.done():
            self.stop_asked.set_result(grace)

    def ask(self, method: int, peer: str, body: bytes) -> tuple:
        """(its tag, a future of serve's answer to one call: (status, bytes))."""
        future = self.loop.create_future()
        if not self.open():
            future.set_result((self.codes.UNAVAILABLE.value[0], b"the server is stopping"))
            return 0, future
        self.tag = tag = (self.tag + 1) & 0xFFFFFFFF
        self.waiting[tag] = future
        where = peer.encode()
        self.queue(TO_SERVE.pack(len(body), tag, method, len(where)) + where, body)
        return tag, future

    def tell(self, text: str) -> None:
        if self.open():  # (serve gone meanwhile: no one to tell)
            self.transport.write(control_frame(text))

    # -- the calls
    async def asked(self, method: int, peer: str, body: bytes) -> tuple:
        """serve's answer to one call (status, bytes); the call cancelled (its client gone, the stop), serve is told to
        cancel its task too, as grpcio would cancel it in serve's own loop."""
        tag, future = self.ask(method, peer, body)
        try:
            return await future
        except asyncio.CancelledError:
            if self.waiting.pop(tag, None) is not None:
                self.queue(TO_SERVE.pack(0, tag, CANCEL, 0))
            raise

    def unary(self, method: int):
        async def relayed(body, context):
            status, answer = await self.asked(method, context.peer(), body)
            if status:
                await context.abort(self.statuses.get(status, self.codes.UNKNOWN), answer.decode(errors="replace"))
            return answer

        return relayed

    async def answered(self, body: bytes, peer: str):
        """A stream's request answered (Stream): the answer's wire bytes, or (status, text)."""
        status, answer = await self.asked(self.infer, peer, body)
        if status:
            return self.statuses.get(status, self.codes.UNKNOWN), answer.decode(errors="replace")
        return answer

    owner = staticmethod(lambda context: context.peer())  # (serve makes the owner of the peer: Lane)

    size_of = staticmethod(len)

    ModelStreamInfer = V2Service.ModelStreamInfer

    def handlers(self) -> dict:
        """Each method's grpcio handler: raw bytes in and out; a stream's requests checked as they are read."""
        import grpc

        check = self.pb.ModelInferRequest.FromString

        def checked(body: bytes) -> bytes:
            check(body)  # (a message that cannot be read ends the stream, as in serve's own process)
            return body

        made = {}
        for method, (name, _, streams_in, streams_out) in enumerate(self.methods):
            path = f"/inference.GRPCInferenceService/{name}"
            if name == "ModelStreamInfer":
                made[path] = grpc.stream_stream_rpc_method_handler(self.ModelStreamInfer, request_deserializer=checked)
            elif not (streams_in or streams_out):
                made[path] = grpc.unary_unary_rpc_method_handler(self.unary(method))
        return made

    async def run(self, sock: socket.socket, where: str, limit: int) -> None:
        self.loop.set_exception_handler(loop_error)
        await self.loop.create_unix_connection(lambda: self, sock=sock)
        server = grpc_server(limit)
        try:
            server.add_generic_rpc_handlers((metadata_bound([], self.handlers()),))
            why = listen(server, where)
            if why:
                self.tell(f"failed {why}")
                return
            if not self.stop_asked.done():  # (serve gone while this process started: nothing to serve)
                await server.start()
                self.tell("ready")
            await server.stop(await self.stop_asked)
        finally:
            await server.stop(0)  # (stopped in any case before the loop closes: grpcio's server cannot stop after)
        await streams_ended(self)


async def relay(pb, codes, sock: socket.socket, where: str, limit: int) -> None:
    await Relay(pb, codes).run(sock, where, limit)


def relay_main(argv: list) -> None:
    """The relay process (serve --grpc-process on starts it, in a session of its own): FD WHERE LIMIT LOOP. Signals are
    serve's to act on: serve tells it to stop, or goes (the socket pair's end)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    fd, where, limit, kind = argv
    sock = socket.socket(fileno=int(fd))
    try:
        import grpc
        from tritonclient.grpc import service_pb2 as pb

        loop = loop_maker(kind)[1]()  # (serve's own: "uvloop" or "asyncio")
    except Exception as exc:  # noqa: BLE001 - told to serve, which says it in its one line
        relay_failed(sock, f"its process could not start ({type(exc).__name__}: {exc})")
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(relay(pb, grpc.StatusCode, sock, where, int(limit)))
    except Exception as exc:  # noqa: BLE001 - likewise
        relay_failed(sock, f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        loop.close()


def relay_failed(sock: socket.socket, why: str) -> None:
    """The relay ends with exit 2, having told serve why (serve's one line says it)."""
    with contextlib.suppress(OSError):
        sock.setblocking(True)
        sock.sendall(control_frame(f"failed {why}"))
    raise SystemExit(2)
