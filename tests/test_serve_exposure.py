"""Exposure is a decision: serve has no authentication, so an address other than loopback (0:PORT, which the C
library reads as 0.0.0.0, every interface) is refused in one line (exit 2) unless --allow-remote is given, and the
start-up line then says what it exposes. The refusals run in this process (capfd: a native library's stderr counts
too); the server that listens is a subprocess."""

import re

import pytest
from conftest import EXAMPLES, refused, run, serve_process

MODEL = ("--model-dir", EXAMPLES / "vector")


@pytest.mark.parametrize(
    "option, value", [("--listen", "0:0"), ("--listen", "0.0.0.0:0"), ("--http", "0:0"), ("--grpc", "0.0.0.0:0")]
)
def test_every_interface_without_allow_remote_is_refused_in_one_line(capfd, option, value):
    if option == "--http":
        pytest.importorskip("aiohttp")
    if option == "--grpc":
        pytest.importorskip("grpc")
    refused(run(capfd, "--mode", "serve", *MODEL, option, value), "every interface", "--allow-remote")


def test_allow_remote_listens_and_its_start_up_line_says_every_interface():
    proc, _, text = serve_process(*MODEL, "--listen", "0:0", "--allow-remote")
    proc.kill()
    proc.wait(timeout=30)
    line = re.search(r"\[serve\] listening on .*", text).group(0)
    assert "0.0.0.0:" in line and "every interface" in line and "no authentication" in line, line
