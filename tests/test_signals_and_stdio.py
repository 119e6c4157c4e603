"""What only a real process shows, so these tests start one: a signal ends a run with 128 + N after clean-up
(while the heavy modules import, mid-batch, while the stream waits), a full or closed stdout is one line, and
stderr stays one line where torch, numpy or onnxruntime would write to it themselves. In this process: main()
puts back the signal handlers it installed, and a write interrupted by a signal leaves the old file."""

import json
import os
import signal
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BUNDLED, BUNDLED_PT, EXAMPLES, ROOT, child_env, cli, leftovers, one_line, refused, wider_outputs

import inference as I
from mlagents_inference.core.files import Interrupted, atomic_write, install_signal_handlers, restore_signal_handlers

# --- signals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "signum,after",
    [
        (signal.SIGINT, 0.05),
        (signal.SIGINT, 0.3),
        (signal.SIGINT, 0.8),
        (signal.SIGINT, 1.5),
        (signal.SIGINT, 3.0),
        (signal.SIGTERM, 0.5),
    ],
)
def test_a_signal_while_importing_is_one_line_and_128_plus_n(signum, after):
    """Within the first second torch is still importing (about 2 s here): no traceback, no death
    by the signal itself. (Later, main()'s handlers answer the same way.)"""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        time.sleep(after)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, (proc.returncode, err[-1500:])
    one_line(err, "interrupted")
    assert out == ""


@pytest.fixture(scope="module")
def big_obs(tmp_path_factory) -> Path:
    """2.5 million rows of 59 floats (590 MB, sparse: no disk used) for a run long enough to
    be interrupted half-way."""
    path = tmp_path_factory.mktemp("big") / "big.npy"
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(2_500_000, 59))
    del array
    return path


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])  # (SIGINT: the same handler)
def test_signal_mid_batch_cleans_up(tmp_path, big_obs, signum):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / "out.npy"
    target.write_bytes(b"keep me")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "inference.py"),
            "--mode",
            "batch",
            "--obs-file",
            str(big_obs),
            "--output",
            str(target),
            "--model-dir",
            str(BUNDLED),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        deadline = time.time() + 240
        while not leftovers(out_dir):  # the temporary output exists: the run is writing
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "the batch never started writing"
            time.sleep(0.02)
        time.sleep(0.2)
        assert proc.poll() is None, "the batch finished before the signal: make the input larger"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signum, (proc.returncode, err)  # not -15: a bare signal death
    one_line(err, "interrupted")
    assert "SUCCESS" not in out
    assert leftovers(out_dir) == [] and target.read_bytes() == b"keep me"


def test_sigterm_while_streaming_waits_for_input():
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        proc.stdin.write(json.dumps({"obs": [0.5] * 59}) + "\n")
        proc.stdin.flush()
        assert "actions" in proc.stdout.readline()  # loaded and answering: now blocked on stdin
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, (proc.returncode, err)
    one_line(err, "SIGTERM")


def test_signal_handlers_are_restored(capsys):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    hook = sys.unraisablehook
    assert I.main(["--mode", "checkpoints", "--model-dir", str(BUNDLED)]) == 0  # (not conftest.run: it restores them)
    assert {s: signal.getsignal(s) for s in before} == before
    assert sys.unraisablehook is hook


def test_a_signal_lost_in_a_callback_is_raised_again(capfd):
    """A signal landing in a callback that cannot pass exceptions on (here a weakref callback, as importlib's module
    locks have while torch imports) once made a run go on as if never signalled, and exit 0; now it lands again."""
    previous = install_signal_handlers()
    try:

        class Held:
            pass

        def callback(_ref):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs here, inside the callback
                pass

        held = Held()
        ref = weakref.ref(held, callback)
        with pytest.raises(Interrupted) as caught:
            del held
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
        assert caught.value.signum == signal.SIGTERM and ref() is None
    finally:
        restore_signal_handlers(previous)
    assert "Exception ignored" not in capfd.readouterr().err


def test_a_signal_inside_an_import_lands_after_it(tmp_path, monkeypatch):
    """An Interrupted raised inside an import once landed in torch's C++ start-up (pybind11 calling back into Python:
    std::terminate, SIGABRT) or in onnxruntime's ("onnxruntime cannot be imported"); now the import ends whole and
    the signal lands right after it, in the importer's own code."""
    (tmp_path / "signalled_while_imported.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\nfor _ in range(50):\n    time.sleep(0.002)\n"
        "WHOLE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = install_signal_handlers()
    try:
        with pytest.raises(Interrupted) as caught:
            import signalled_while_imported  # noqa: F401

            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                time.sleep(0.001)
        assert caught.value.signum == signal.SIGTERM
        assert sys.modules["signalled_while_imported"].WHOLE
    finally:
        restore_signal_handlers(previous)
        sys.modules.pop("signalled_while_imported", None)


def test_handlers_installed_inside_an_import_still_raise_there(tmp_path, monkeypatch):
    """A program that installs the handlers while it is itself being imported (main() called at a module's top level)
    is not held: only imports begun after the handlers were installed are waited for."""
    (tmp_path / "runs_while_imported.py").write_text(
        "import os, signal, time\n"
        "from mlagents_inference.core.files import Interrupted, install_signal_handlers, restore_signal_handlers\n"
        "previous = install_signal_handlers()\n"
        "CAUGHT = None\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    deadline = time.monotonic() + 5\n"
        "    while time.monotonic() < deadline:\n"
        "        time.sleep(0.001)\n"
        "except Interrupted as exc:\n"
        "    CAUGHT = exc.signum\n"
        "finally:\n"
        "    restore_signal_handlers(previous)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import runs_while_imported
    finally:
        sys.modules.pop("runs_while_imported", None)
    assert runs_while_imported.CAUGHT == signal.SIGTERM


def test_atomic_write_interrupted_in_the_writer(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def interrupted(tmp):
        Path(tmp).write_bytes(b"half")
        raise Interrupted(signal.SIGTERM)

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


# --- stdout full or closed ----------------------------------------------------------------------------------


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_stdout_full(json_flag):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, str(ROOT / "inference.py"), "--mode", "action", "--model-dir", str(BUNDLED), *json_flag],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=300,
        )
    refused(result, "standard output", "No space left on device")


def test_stdout_closed_at_start_and_pipe_without_reader():
    closed = subprocess.run(
        [sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model-dir", str(BUNDLED)],
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        timeout=300,
        preexec_fn=lambda: os.close(1),
    )
    refused(closed, "standard output is closed")
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that went away before the first line
    try:
        gone = subprocess.run(
            [sys.executable, str(ROOT / "inference.py"), "--mode", "action", "--model-dir", str(BUNDLED)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=300,
        )
    finally:
        os.close(write_end)
    refused(gone, "standard output", "Broken pipe")


# --- stderr is one line, whatever the libraries would print -------------------------------------------------


def test_bad_arguments_refused_as_a_user_runs_them():
    """After torch, onnxruntime and the model are loaded: nothing else reaches the real stderr."""
    refused(cli("--mode", "action", "--obs", "1,2,3", "--model-dir", BUNDLED), "expected 59 numbers")


def test_a_zero_element_weight_is_one_line_without_torchs_warning(tmp_path):
    checkpoint = torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)
    state = dict(checkpoint["Policy"])
    state["network_body._body_endoder.seq_layers.0.weight"] = torch.zeros((0, 59))
    torch.save({**checkpoint, "Policy": state}, tmp_path / "zero.pt")
    line = refused(cli("--mode", "action", "--checkpoint", tmp_path / "zero.pt"), "zero.pt")
    assert "Warning" not in line


def test_an_empty_csv_is_one_line_without_numpys_warning(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    refused(cli("--mode", "batch", "--model-dir", BUNDLED, "--obs-file", tmp_path / "empty.csv"), "empty.csv")


def test_onnxruntime_says_nothing_of_a_misdeclared_output_shape(tmp_path):
    """A reference whose actions are declared [batch, 2] but computed [batch, 4]: onnxruntime would
    log a shape-merge warning; the result is "not this policy" (exit 1), nothing on stderr."""
    done = cli("--mode", "onnx-compare", "--model-dir", EXAMPLES / "vector", "--onnx", wider_outputs(tmp_path))
    assert done.returncode == 1 and "not this policy" in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.strip() == "", done.stderr
