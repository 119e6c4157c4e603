"""What serve's gRPC front and its relay process share (fronts.serve_grpc, --grpc-process): grpcio's asyncio server
with serve's options and the metadata bound, and the frames of the socket pair between the relay and serve. Imports
grpcio only inside its functions (serve runs without it where --grpc is not given)."""

from __future__ import annotations

import asyncio
import struct
from typing import Optional

from .serve_common import tell_limited

__all__ = [
    "METADATA_BYTES",
    "GRPCIO_METADATA_BYTES",
    "GRPC_INT_MAX",
    "TO_SERVE",
    "TO_RELAY",
    "CONTROL",
    "CANCEL",
    "STOP",
    "grpc_server",
    "listen",
    "metadata_bound",
    "relayed_methods",
    "control_frame",
    "Pipe",
]


METADATA_BYTES = 16 << 10  # a call's metadata (its keys and values, 32 bytes more an entry, as HTTP/2 counts them)
# past which it is refused: RESOURCE_EXHAUSTED with a message


GRPCIO_METADATA_BYTES = 1 << 20  # grpcio's own bound, past which it refuses a call itself, with no message


GRPC_INT_MAX = (1 << 31) - 1  # the largest message grpcio can be told to take (a C int): --max-line-bytes past it


# -- the frames of the socket pair between the relay process and serve (--grpc-process on)

TO_SERVE = struct.Struct("<IIHH")  # the relay to serve: the message's bytes, its tag, its method (relayed_methods'
# index, or CONTROL), its peer's bytes; then the peer (context.peer()), then the message


TO_RELAY = struct.Struct("<IIB")  # serve to the relay: the body's bytes, its call's tag, its status (0: the answer's
# wire bytes; a grpc status code's number: its text; STOP: stop); then the body


CONTROL = 0xFFFF  # (a frame of the relay's own: b"ready", b"failed <why>"; CANCEL: a call cancelled)


CANCEL = 0xFFFE  # (the relay's call was cancelled, its client gone: serve cancels its task)


STOP = 255  # (serve tells the relay to stop: grpcio answers for STOP_STREAMS_S what it holds, then cancels the rest)


def control_frame(text: str) -> bytes:
    """A frame of the relay's own to serve (CONTROL): "ready", "failed <why>"."""
    body = text.encode(errors="replace")
    return TO_SERVE.pack(len(body), 0, CONTROL, 0) + body


def relayed_methods(pb) -> list:
    """inference.GRPCInferenceService's methods, in the order of its descriptor (the frames' method numbers, the same
    in both processes): (name, its request's class, whether its requests and its responses are streams)."""
    methods = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
    return [
        (m.name, getattr(pb, m.input_type.name), bool(m.client_streaming), bool(m.server_streaming)) for m in methods
    ]


def grpc_server(limit: int):
    """grpcio's asyncio server with serve's options: messages up to `limit` bytes in, any size out, metadata up to
    GRPCIO_METADATA_BYTES (METADATA_BYTES is refused by metadata_bound first, with a message)."""
    import grpc

    return grpc.aio.server(
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", min(limit, GRPC_INT_MAX)),  # (grpcio reads it as a C int)
            ("grpc.max_send_message_length", -1),
            ("grpc.max_metadata_size", GRPCIO_METADATA_BYTES),  # (below it, METADATA_BYTES is refused here)
            ("grpc.absolute_max_metadata_size", GRPCIO_METADATA_BYTES),
        ],
    )


def listen(grpc_server, where: str) -> str:
    """grpcio's server told to listen on `where` (HOST:PORT): "" where it can, else why not."""
    try:
        bound = grpc_server.add_insecure_port(where)
    except RuntimeError as exc:
        return str(exc) or type(exc).__name__
    return "" if bound else "taken"


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


class Pipe(asyncio.Protocol):
    """One end of the socket pair between the relay process and serve: the frames made in a loop turn go in one write
    at its end (queue), and each frame read is handed whole to frame() as it comes. `head`: the struct of the frames
    it reads; length(): a frame's bytes after its header."""

    head: struct.Struct

    def __init__(self):
        self.buffer, self.out, self.flushing, self.transport = bytearray(), [], False, None
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport) -> None:
        self.transport = transport

    def open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def queue(self, *parts: bytes) -> None:
        self.out += parts
        if not self.flushing:
            self.flushing = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.flushing = False
        if self.open():
            self.transport.write(b"".join(self.out))
        self.out.clear()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        at, end, size = 0, len(buffer), self.head.size
        while end - at >= size:
            fields = self.head.unpack_from(buffer, at)
            stop = at + size + self.length(fields)
            if stop > end:
                break
            self.frame(fields, buffer, at + size, stop)
            at = stop
        del buffer[:at]

    def length(self, fields: tuple) -> int:
        return fields[0]

    def frame(self, fields: tuple, buffer: bytearray, start: int, stop: int) -> None:
        """One frame read: its header's fields, its bytes buffer[start:stop]."""
        raise NotImplementedError
