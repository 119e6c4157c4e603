"""serve --grpc against clients that misbehave (docs/serve.md, Limits): a ModelStreamInfer that sends and never reads
is held to a few MB (STREAM_BYTES: the stream is no longer read), so is a stream starting sequences whose ids are a
megabyte each (SEQUENCE_ID_CHARS), SIGTERM ends such streams in bounded time with one line and no asyncio or grpcio
traceback, a stream message that cannot be decoded ends the stream with a status that says so, and a request with
too much metadata gets RESOURCE_EXHAUSTED with a message (the library's own line on stderr at most once a second).
Each holds with grpcio's server in serve's process and in its own (--grpc-process off, on). Memory is measured on a
server subprocess, its gRPC process with it (/proc/PID/status VmRSS, sampled while the flood lasts) on 127.0.0.1 port
0; every loop is bounded in count and time."""

import os
import signal
import time

import numpy as np
import pytest
from conftest import EXAMPLES, family_rss_mb, serve_process

import inference as I

grpc = pytest.importorskip("grpc")
pb = pytest.importorskip("tritonclient.grpc.service_pb2")
service_pb2_grpc = pytest.importorskip("tritonclient.grpc.service_pb2_grpc")

from mlagents_inference.fronts.serve import serving  # noqa: E402
from mlagents_inference.services.batcher import ServeOptions  # noqa: E402

LSTM = EXAMPLES / "lstm"
OWN = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]  # (a connection of its own)
pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc/PID/status")


def big_request(rows: int = 4096) -> "pb.ModelInferRequest":
    """[rows, 10] observations (160 KiB) for the LSTM example: its answer (every output) is about 600 KiB."""
    request = pb.ModelInferRequest(model_name="Memory")
    request.inputs.add(name="obs_0", datatype="FP32", shape=[rows, 10])
    request.raw_input_contents.append(np.full((rows, 10), 0.1, "<f4").tobytes())
    return request


def never_read(address: str, streams: int, requests: int) -> tuple:
    """`streams` ModelStreamInfer calls, each on a connection of its own, sending `requests` big requests and never
    reading an answer: (channels, calls), for the caller to cancel and close."""
    channels = [grpc.insecure_channel(address, options=OWN) for _ in range(streams)]
    calls = [
        service_pb2_grpc.GRPCInferenceServiceStub(c).ModelStreamInfer(iter([big_request()] * requests), timeout=120)
        for c in channels
    ]
    return channels, calls


WAYS = ["on", "off"]  # (--grpc-process)


def start(way: str = "on"):
    return serve_process("--model-dir", LSTM, "--grpc", "127.0.0.1:0", "--grpc-process", way, says="grpc")


def warm(address: str) -> None:
    with grpc.insecure_channel(address, options=OWN) as channel:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(big_request(), timeout=60)


@pytest.mark.parametrize("way", WAYS)
def test_a_stream_that_never_reads_holds_the_servers_growth(way):
    """Measured: 2 streams of 400 requests (~160 KiB each, ~600 KiB answers), never read. The old server queued up to
    1,024 answered requests a stream; now a stream holds at most STREAM_BYTES (4 MiB) of requests and answers and is
    not read past them: the server stays within +200 MB of its size at rest."""
    proc, address, _ = start(way)
    channels = calls = ()
    try:
        warm(address)
        before = most = family_rss_mb(proc.pid)
        channels, calls = never_read(address, streams=2, requests=400)
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            most = max(most, family_rss_mb(proc.pid))
            time.sleep(0.1)
        assert most - before < 200, (before, most)
        warm(address)  # and it still answers
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def sequence_start(seq: str) -> "pb.ModelInferRequest":
    """One step of the LSTM example that starts the sequence `seq` (a string id)."""
    request = big_request(rows=1)
    request.parameters["sequence_id"].string_param = seq
    request.parameters["sequence_start"].bool_param = True
    return request


def test_sequence_ids_of_a_megabyte_hold_the_servers_growth():
    """Measured: one stream starts 400 sequences whose string ids are 1 MiB each, reading every answer. The old
    server kept each id as its memory's key (one scope of 10,000 ids, the key's bytes counted nowhere: about +400 MB
    for as long as the server ran); now a string sequence_id is at most SEQUENCE_ID_CHARS (256) characters, each of
    these is refused in one line, and the server stays within +200 MB of its size at rest and answers on."""
    proc, address, _ = start()
    try:
        warm(address)
        before = most = family_rss_mb(proc.pid)
        with grpc.insecure_channel(address, options=OWN) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            flood = (sequence_start(f"{k:04d}" + "x" * (1 << 20)) for k in range(400))
            errors = []
            for answer in stub.ModelStreamInfer(flood, timeout=120):
                errors.append(answer.error_message)
                if len(errors) % 20 == 0:
                    most = max(most, family_rss_mb(proc.pid))
            most = max(most, family_rss_mb(proc.pid))
            started = stub.ModelInfer(sequence_start("7"), timeout=60)  # (a short id starts as ever)
        assert most - before < 200, (before, most)
        assert len(errors) == 400 and started.outputs, len(errors)
        assert all("longer than 256 characters" in e and "\n" not in e for e in errors), errors[:1]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def after_start(text: str) -> list:
    """stderr's lines after the start-up lines."""
    return [line for line in text.splitlines() if line.strip() and " on " not in line[:40]]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("cancelled", [False, True], ids=["streams-not-reading", "a-stream-cancelled-before"])
def test_sigterm_ends_streams_whose_clients_do_not_read_in_bounded_time_with_one_line(cancelled, way):
    """The old server printed "Task was destroyed but it is pending!" and a traceback (up to 2,000 lines) and took
    15 s: the reader's clean-up waited forever on a full queue, and a stream cancelled by its client left the same
    trap. Now: exit 0 within the stop's grace (10 s) and a few seconds, one line at most, no traceback."""
    proc, address, said = start(way)
    channels = calls = ()
    try:
        warm(address)
        channels, calls = never_read(address, streams=4, requests=200)
        time.sleep(3)  # (the streams fill up and are no longer read)
        if cancelled:
            calls[0].cancel()
            time.sleep(0.5)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - started
    finally:
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert took < 13, took
    lines = after_start(said + text)
    assert len(lines) <= 2, lines[:20]
    for bad in ("Task was destroyed", "Traceback", "Event loop is closed", "different event loop", "Exception"):
        assert bad not in text, text[-2000:]


def test_a_stream_message_that_cannot_be_decoded_ends_the_stream_with_a_status_that_says_so():
    """The old server dropped it and ended the stream with OK: the client could not tell a request was lost. Now
    the requests before it are answered, then the stream ends with INVALID_ARGUMENT naming what happened."""
    policy = I.load(LSTM)
    good = big_request(rows=1).SerializeToString()
    with serving(policy, ServeOptions(), grpc="127.0.0.1:0") as said:
        with grpc.insecure_channel(said["grpc"], options=OWN) as channel:
            call = channel.stream_stream(
                "/inference.GRPCInferenceService/ModelStreamInfer",
                request_serializer=lambda raw: raw,  # (bytes as they are: the third is no ModelInferRequest)
                response_deserializer=pb.ModelStreamInferResponse.FromString,
            )
            answers = call(iter([good, good, b"\xff\xff\xff\xff", good]), timeout=60)
            got = []
            with pytest.raises(grpc.RpcError) as ended:
                for answer in answers:
                    got.append(answer)
    assert len(got) == 2 and all(not a.error_message and a.infer_response.outputs for a in got), got
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ended.value
    details = ended.value.details()
    assert "could not be read" in details and "\n" not in details, details


@pytest.mark.parametrize("way", WAYS)
def test_too_much_metadata_is_refused_with_a_message_and_the_log_stays_short(way):
    """1,000 metadata entries a call, 40 calls: each RESOURCE_EXHAUSTED saying why (the old server's message was
    empty: grpcio's own refusal, its text too long to send), and stderr gets a line at most once a second (the old
    server: grpcio's line for every call, with no limit)."""
    proc, address, said = start(way)
    codes, details = [], set()
    try:
        with grpc.insecure_channel(address, options=OWN) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            metadata = [(f"k{i}", "v" * 10) for i in range(1000)]
            started = time.monotonic()
            for _ in range(40):
                with pytest.raises(grpc.RpcError) as refused:
                    stub.ServerLive(pb.ServerLiveRequest(), metadata=metadata, timeout=30)
                codes.append(refused.value.code())
                details.add(refused.value.details())
            took = time.monotonic() - started
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live  # (and it goes on)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert codes == [grpc.StatusCode.RESOURCE_EXHAUSTED] * 40
    (text,) = details
    assert "metadata" in text and "at most 16384 bytes" in text and " entries)" in text, text
    lines = after_start(said + err.decode(errors="replace"))
    assert len(lines) <= took + 2, lines[:10]
    assert all(line.startswith("[serve] ") for line in lines), lines[:10]
