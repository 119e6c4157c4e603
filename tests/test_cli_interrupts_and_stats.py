"""The command line's small promises: an interrupt that Python wrapped in another exception (a RuntimeError from
__set_name__ while torch imports) is the interrupt (130, one line); ports with digits int() refuses (superscripts,
Arabic-Indic) are one line and exit 2; --stream-stats with no line answered prints no NaN."""

import signal
import subprocess
import sys

import pytest
from conftest import EXAMPLES, ROOT, child_env, serve_process

from mlagents_inference.fronts import cli


@pytest.mark.parametrize("link", ["cause", "context", "deep"])
def test_an_interrupt_wrapped_in_another_exception_is_130_and_one_line(monkeypatch, capsys, link):
    """The wrapping Python does for an interrupt inside a class body's __set_name__ (torch importing), made here
    without timing: main() returns 130 and says one line, not a traceback."""

    def importing(*args):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            wrapped = RuntimeError("Error calling __set_name__ on 'cached_property' instance 'x' in 'Y'")
            if link == "cause":
                raise wrapped from exc
            if link == "context":
                raise wrapped
            try:
                raise wrapped from exc
            except RuntimeError:
                raise ImportError("cannot import torch")

    monkeypatch.setattr(cli, "mode_functions", importing)
    code = cli.main(["--mode", "info", "--model-dir", str(EXAMPLES / "vector")])
    err = capsys.readouterr().err
    assert code == 130 and err.strip() == "interrupted", err


def test_an_unrelated_runtime_error_is_not_taken_for_an_interrupt(monkeypatch):
    def failing(*args):
        raise RuntimeError("something else")

    monkeypatch.setattr(cli, "mode_functions", failing)
    with pytest.raises(RuntimeError, match="something else"):
        cli.main(["--mode", "info", "--model-dir", str(EXAMPLES / "vector")])


@pytest.mark.parametrize(
    "option, value",
    [
        ("--listen", "127.0.0.1:\u00b2"),
        ("--http", "127.0.0.1:\u0663\u00b9"),
        ("--listen", "127.0.0.1:\uff18\uff10"),
        ("--listen", "http://127.0.0.1:80"),
    ],
)
def test_ports_with_digits_int_refuses_exit_2_in_one_line(option, value):
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "serve",
            "--model-dir",
            str(EXAMPLES / "vector"),
            option,
            value,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert option in r.stderr


def test_stream_stats_with_no_line_answered_prints_no_nan():
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "stream",
            "--model-dir",
            str(EXAMPLES / "vector"),
            "--stream-stats",
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
    )
    stats = [line for line in r.stderr.splitlines() if line.startswith("[stream]")]
    assert r.returncode == 0 and stats and "nan" not in stats[0] and "p50=n/a p99=n/a" in stats[0], r.stderr


def test_serve_stats_with_no_line_answered_prints_no_nan():
    proc, _, said = serve_process("--model-dir", EXAMPLES / "vector", "--listen", "127.0.0.1:0", "--stream-stats")
    try:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        err = err.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    stats = [line for line in (said + err).splitlines() if line.startswith("[serve] lines=")]
    assert proc.returncode == 0 and stats and "nan" not in stats[0] and "p50=n/a" in stats[0], said + err
