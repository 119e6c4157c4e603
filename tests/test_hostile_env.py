"""A hostile environment, not hostile input: file permissions and the umask, output names whose
suffix is not lower case, full disks, long names, /proc and /sys, a full or closed stdout,
signals, an output that is the input, crafted-but-weights-only checkpoints and status files.

The contract: exit 2 and one line on stderr (never a traceback, never a bare signal death),
128 + N for signal N after cleanup, an existing output never damaged, no temporary file left,
SUCCESS only for a file that holds the result.

Tests that need root (tmpfs for a real full disk, setpriv for an unprivileged user) skip
elsewhere. Process-boundary behaviour (signals, stdout, users, full disks) runs in a real
subprocess; the rest through inference.main([...]) in this process.
"""
from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import BUNDLED, BUNDLED_PT, EXAMPLES, FIXTURES, ROOT, child_env, cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inference as I
from mlagents_inference.core.files import Interrupted, atomic_write, npy_size, open_npy_memmap, refuse_same_file
from mlagents_inference.core.sources import check_sha256, file_sha256, final_step, status_entry, training_status
from mlagents_inference.fronts import cli as command_line
from mlagents_inference.loaders.checkpoint import read_checkpoint, validate_tensors

LONG = "x" * 300  # one path component longer than NAME_MAX (255)


def one_line(err: str, *words) -> str:
    lines = [l for l in err.strip().splitlines() if l.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return lines[0]


def refused(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr)
    return one_line(result.stderr, *words)


def run_main(capsys, *args):
    """main() in this process; returns (exit code, stdout, stderr)."""
    code = I.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def leftovers(folder: Path) -> list[str]:
    """Temporary files atomic_write would leave (".<name>.<random>.tmp<suffix>")."""
    return sorted(p.name for p in Path(folder).iterdir() if ".tmp" in p.name and p.name.startswith("."))


@pytest.fixture()
def sample(tmp_path) -> Path:
    """A writable copy of the bundled sample run folder."""
    return Path(shutil.copytree(BUNDLED, tmp_path / "run"))


@pytest.fixture()
def umask():
    """Set the process umask inside a test; restored after."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda value: os.umask(value)
    os.umask(old)


# --- 1. permissions of what atomic_write creates ------------------------------------------------

@pytest.mark.parametrize("mask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_gets_the_umask_mode(tmp_path, umask, mask, mode):
    umask(mask)
    target = tmp_path / "a.npy"
    atomic_write(target, lambda tmp: np.save(tmp, np.arange(3)))
    assert stat.S_IMODE(target.stat().st_mode) == mode
    plain = tmp_path / "plain"
    plain.write_text("x")  # what open(..., "w") gives, for comparison
    assert stat.S_IMODE(plain.stat().st_mode) == mode


def test_existing_file_keeps_its_mode(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "a.npy"
    target.write_bytes(b"old")
    target.chmod(0o640)
    atomic_write(target, lambda tmp: np.save(tmp, np.arange(3)))
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert np.array_equal(np.load(target), np.arange(3))


def test_batch_output_mode_through_main(capsys, tmp_path, umask):
    umask(0o022)
    target = tmp_path / "out.npy"
    code, out, err = run_main(capsys, "--mode", "batch", "--batch", 4, "--output", target, "--model-dir", BUNDLED)
    assert code == 0, err
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_symlinked_output_is_written_through(tmp_path):
    real = tmp_path / "real.npy"
    real.write_bytes(b"old")
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    atomic_write(link, lambda tmp: np.save(tmp, np.arange(4)))
    assert link.is_symlink() and np.array_equal(np.load(real), np.arange(4))


# --- 2. an output suffix that is not lower case -------------------------------------------------

@pytest.mark.parametrize("name", ["out.NPY", "out.Npy", "out.npy"])
def test_upper_case_npy_output_holds_the_result(capsys, tmp_path, name):
    target = tmp_path / name
    code, out, err = run_main(capsys, "--mode", "batch", "--batch", 4, "--output", target,
                              "--model-dir", BUNDLED, "--json")
    assert code == 0, err
    assert np.load(target).shape == (4, 21)
    assert np.array_equal(np.load(target), np.asarray(json.loads(out)["actions"], np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no "out.NPY.npy" beside it


@pytest.mark.parametrize("name,save,load", [
    ("a.NPY", lambda tmp: np.save(tmp, np.arange(5)), lambda p: np.load(p)),
    ("a.NPZ", lambda tmp: np.savez(tmp, x=np.arange(5)), lambda p: np.load(p)["x"]),
])
def test_writers_that_append_a_suffix(tmp_path, name, save, load):
    target = tmp_path / name
    atomic_write(target, save)
    assert np.array_equal(load(target), np.arange(5))
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_upper_case_onnx(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    atomic_write(tmp_path / "m.ONNX", lambda tmp: onnx.save(model, str(tmp)))
    assert onnx.load(str(tmp_path / "m.ONNX")).graph.node[0].op_type == "Identity"
    assert [p.name for p in tmp_path.iterdir()] == ["m.ONNX"]


def test_upper_case_png(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, _ = plt.subplots()
    atomic_write(tmp_path / "p.PNG", lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
    assert (tmp_path / "p.PNG").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["p.PNG"]


# --- 3. full disk -------------------------------------------------------------------------------

def test_reservation_failure_is_clean(tmp_path, monkeypatch):
    """Any machine: posix_fallocate says the disk is full -> UsageError, old file intact,
    nothing left, the writer never called."""
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    called = []
    with pytest.raises(I.UsageError, match="No space left on device") as info:
        atomic_write(target, lambda tmp: called.append(tmp), size=10**6)
    assert "\n" not in str(info.value) and ".tmp" not in str(info.value)
    assert not called and target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


def test_writer_os_error_is_a_usage_error(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def half_then_full(tmp):
        Path(tmp).write_bytes(b"half")
        raise OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp))
    with pytest.raises(I.UsageError, match="Disk quota exceeded"):
        atomic_write(target, half_then_full)
    assert target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


def test_open_npy_memmap_round_trip(tmp_path):
    for shape in ((7, 3), (0, 3)):
        target = tmp_path / f"m{shape[0]}.npy"

        def write(tmp):
            out = open_npy_memmap(tmp, shape, np.float32)
            out[:] = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            if isinstance(out, np.memmap):
                out.flush()
            del out
        atomic_write(target, write, size=npy_size(shape, np.float32))
        assert np.array_equal(np.load(target), np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
        assert target.stat().st_size == npy_size(shape, np.float32)


@pytest.fixture()
def full_disk(tmp_path):
    """A real 1 MiB tmpfs (root only), unmounted after."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def assert_full_disk_refused(result, mnt):
    assert result.returncode == 2, (result.returncode, result.stderr)  # not 135 (SIGBUS), not 1 (traceback)
    one_line(result.stderr, "No space left on device")
    assert "SUCCESS" not in result.stdout
    assert (mnt / "out.npy").read_bytes() == b"keep me" if (mnt / "out.npy").exists() else True
    assert leftovers(mnt) == []


def test_full_disk_in_memory_batch(full_disk):
    (full_disk / "out.npy").write_bytes(b"keep me")
    result = cli("--mode", "batch", "--batch", 20000, "--output", full_disk / "out.npy", "--model-dir", BUNDLED)
    assert_full_disk_refused(result, full_disk)
    assert (full_disk / "out.npy").read_bytes() == b"keep me"


def test_full_disk_export_onnx(full_disk):
    (full_disk / "model.onnx").write_bytes(b"keep me")
    result = cli("--mode", "export-onnx", "--output", full_disk / "model.onnx", "--model-dir", BUNDLED)
    assert result.returncode == 2, (result.returncode, result.stderr)
    one_line(result.stderr, "No space left on device")
    assert (full_disk / "model.onnx").read_bytes() == b"keep me" and leftovers(full_disk) == []


def test_full_disk_memory_mapped_file_batch(full_disk, tmp_path):
    """The file batch writes through a memory map: without its space reserved first, a full
    disk is a SIGBUS (exit -7 / 135) that leaves the temporary file behind. Needs batch_file to
    write through open_npy_memmap (not np.lib.format.open_memmap, which makes a sparse file)."""
    obs = np.lib.format.open_memmap(tmp_path / "in.npy", mode="w+", dtype=np.float32, shape=(20000, 59))
    del obs  # 20000 x 21 float32 actions = 1.7 MB > 1 MiB
    (full_disk / "out.npy").write_bytes(b"keep me")
    result = cli("--mode", "batch", "--obs-file", tmp_path / "in.npy", "--output", full_disk / "out.npy",
                 "--model-dir", BUNDLED)
    assert_full_disk_refused(result, full_disk)
    assert (full_disk / "out.npy").read_bytes() == b"keep me"


# --- 4. every OSError is one line -------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--mode", "action", "--checkpoint", f"/tmp/{LONG}.pt"],
    ["--mode", "action", "--model-dir", f"/tmp/{LONG}"],
    ["--mode", "action", "--model-dir", f"/tmp/{LONG}/sub"],
    ["--mode", "batch", "--model-dir", BUNDLED, "--obs-file", f"/tmp/{LONG}.npy"],
    ["--mode", "batch", "--model-dir", BUNDLED, "--batch", "2", "--output", f"/tmp/{LONG}.npy"],
    ["--mode", "onnx-compare", "--model-dir", BUNDLED, "--onnx", f"/tmp/{LONG}.onnx"],
    ["--mode", "export-onnx", "--model-dir", BUNDLED, "--output", f"/tmp/{LONG}/m.onnx"],
    ["--mode", "benchmark", "--model-dir", BUNDLED, "--runs", "3", "--plot", f"/tmp/{LONG}.png"],
])
def test_name_too_long_in_any_path_option(capsys, args):
    code, out, err = run_main(capsys, *args)
    assert code == 2, err
    one_line(err, "too long")
    assert len(err) < 600  # the 300-character name is shortened in the message


def test_name_too_long_in_huggy_model_dir(capsys, monkeypatch):
    monkeypatch.setenv("HUGGY_MODEL_DIR", f"/tmp/{LONG}")
    code, out, err = run_main(capsys, "--mode", "action")
    assert code == 2
    one_line(err, "HUGGY_MODEL_DIR", "too long")


def test_control_characters_in_a_path_stay_on_one_line(capsys, tmp_path):
    code, out, err = run_main(capsys, "--mode", "action", "--checkpoint", tmp_path / "a\nb\rc.pt")
    assert code == 2
    one_line(err, "no such file")


@pytest.mark.parametrize("target", ["/proc/x.npy", "/proc/self/x.npy", "/sys/x.npy"])
def test_output_under_proc_or_sys(capsys, target):
    code, out, err = run_main(capsys, "--mode", "batch", "--batch", 2, "--output", target, "--model-dir", BUNDLED)
    assert code == 2 and "SUCCESS" not in out
    one_line(err, target)


def test_os_error_and_memory_error_reaching_main(capsys, monkeypatch):
    def denied(ctx):
        raise PermissionError(errno.EACCES, "Permission denied", "/some/where/file.bin")

    def no_memory(ctx):
        raise MemoryError()
    monkeypatch.setattr(command_line, "mode_functions", lambda mode, ray=False: (denied, None))
    code, out, err = run_main(capsys, "--mode", "info")
    assert code == 2
    one_line(err, "/some/where/file.bin", "Permission denied")
    monkeypatch.setattr(command_line, "mode_functions", lambda mode, ray=False: (no_memory, None))
    code, out, err = run_main(capsys, "--mode", "info")
    assert code == 2
    one_line(err, "out of memory")


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_stdout_full(json_flag):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "action", "--model-dir",
                                 str(BUNDLED), *json_flag], stdout=full, stderr=subprocess.PIPE, text=True,
                                env=child_env(), timeout=300)
    refused(result, "standard output", "No space left on device")


def test_stdout_closed_at_start_and_pipe_without_reader():
    closed = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "info", "--model-dir", str(BUNDLED)],
                            stderr=subprocess.PIPE, text=True, env=child_env(), timeout=300,
                            preexec_fn=lambda: os.close(1))
    refused(closed, "standard output is closed")
    read_end, write_end = os.pipe()
    os.close(read_end)  # a reader that went away before the first line
    try:
        gone = subprocess.run([sys.executable, str(ROOT / "inference.py"), "--mode", "action", "--model-dir",
                               str(BUNDLED)], stdout=write_end, stderr=subprocess.PIPE, text=True, env=child_env(),
                              timeout=300)
    finally:
        os.close(write_end)
    refused(gone, "standard output", "Broken pipe")


def nobody(*args, cwd=None) -> subprocess.CompletedProcess:
    """inference.py as user nobody (65534), through setpriv."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    if not nobody_can_run():
        pytest.skip("this interpreter, its packages or inference.py are not readable by an unprivileged user")
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                           str(ROOT / "inference.py"), *map(str, args)], capture_output=True, text=True,
                          env=child_env(HOME="/nonexistent"), timeout=300, cwd=cwd or "/")


@functools.lru_cache(maxsize=None)
def nobody_can_run() -> bool:
    """Whether user nobody can start this interpreter with its packages and read inference.py
    (a venv inside a private temporary folder, as CI may make, is not reachable)."""
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
                            f"import numpy, torch; open({str(ROOT / 'inference.py')!r}).close()"],
                           capture_output=True, env=child_env(HOME="/nonexistent"), timeout=120, cwd="/")
    return probe.returncode == 0


@pytest.fixture()
def public_dir():
    """A folder user nobody can reach (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="hostile-env-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_permission_denied_as_unprivileged_user(public_dir):
    run = Path(shutil.copytree(BUNDLED, public_dir / "run"))
    for p in [run, *run.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    secret = run / "Huggy" / "Huggy-600017.pt"
    secret.chmod(0o600)  # root's: nobody cannot read it
    refused(nobody("--mode", "action", "--model-dir", run), "Permission denied", "Huggy-600017.pt")
    secret.chmod(0o644)
    locked = public_dir / "locked"
    locked.mkdir(mode=0o700)  # root's: nobody can neither look inside nor write
    np.save(locked / "in.npy", np.zeros((3, 59), np.float32))
    refused(nobody("--mode", "batch", "--model-dir", run, "--batch", "2", "--output", locked / "out.npy"),
            "Permission denied")
    refused(nobody("--mode", "batch", "--model-dir", run, "--obs-file", locked / "in.npy"), "Permission denied")
    assert sorted(p.name for p in locked.iterdir()) == ["in.npy"]


# --- 5. signals ---------------------------------------------------------------------------------

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
    proc = subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "batch", "--obs-file", str(big_obs),
                             "--output", str(target), "--model-dir", str(BUNDLED)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
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
    proc = subprocess.Popen([sys.executable, str(ROOT / "inference.py"), "--mode", "stream", "--model-dir", str(BUNDLED)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env())
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
    run_main(capsys, "--mode", "checkpoints", "--model-dir", BUNDLED)
    assert {s: signal.getsignal(s) for s in before} == before


def test_atomic_write_interrupted_in_the_writer(tmp_path):
    target = tmp_path / "out.npy"
    target.write_bytes(b"keep me")

    def interrupted(tmp):
        Path(tmp).write_bytes(b"half")
        raise Interrupted(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, interrupted)
    assert target.read_bytes() == b"keep me" and leftovers(tmp_path) == []


# --- 6. the output is the input -----------------------------------------------------------------

def test_output_onto_the_input_is_refused(capsys, tmp_path):
    source = tmp_path / "in.npy"
    np.save(source, np.random.RandomState(0).randn(8, 59).astype(np.float32))
    original = source.read_bytes()
    (tmp_path / "link.npy").symlink_to(source)
    os.link(source, tmp_path / "hard.npy")
    (tmp_path / "sub").mkdir()
    for output in (source, tmp_path / "link.npy", tmp_path / "hard.npy", tmp_path / "sub" / ".." / "in.npy"):
        code, out, err = run_main(capsys, "--mode", "batch", "--obs-file", source, "--output", output,
                                  "--model-dir", BUNDLED)
        assert code == 2, (output, err)
        one_line(err, "is the input file")
        assert source.read_bytes() == original
    code, out, err = run_main(capsys, "--mode", "batch", "--obs-file", tmp_path / "link.npy", "--output", source,
                              "--model-dir", BUNDLED)
    assert code == 2 and source.read_bytes() == original
    assert leftovers(tmp_path) == []


def test_refuse_same_file_helper(tmp_path):
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    a.write_bytes(b"a")
    refuse_same_file(b, [a])  # different, and b does not exist yet
    refuse_same_file(None, [a])
    with pytest.raises(I.UsageError, match="is the input file"):
        refuse_same_file(a, [b, a])


# --- 7. crafted status files and checkpoints --------------------------------------------------

BAD_STATUS = {
    "behaviour is a list": json.dumps({"Huggy": []}),
    "checkpoints not a list": json.dumps({"Huggy": {"checkpoints": 5}}),
    "entries not objects": json.dumps({"Huggy": {"checkpoints": [1, "x", None]}}),
    "aux paths not a list": json.dumps({"Huggy": {"checkpoints": [{"steps": 1, "auxillary_file_paths": 7}]}}),
    "aux paths not text": json.dumps({"Huggy": {"checkpoints": [{"steps": 1, "auxillary_file_paths": [{}]}]}}),
    "steps text": json.dumps({"Huggy": {"checkpoints": [{"steps": "600017"}], "final_checkpoint": {"steps": "x"}}}),
    "final is a list": json.dumps({"Huggy": {"final_checkpoint": []}}),
    "top level list": "[1, 2, 3]",
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "nested objects": '{"Huggy": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
    "not json": "{",
    "not utf-8": b"\xff\xfe\x00{",
}


def write_status(folder: Path, content) -> None:
    path = folder / "run_logs" / "training_status.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())


def warned_once(err: str) -> None:
    warnings = [l for l in err.splitlines() if l.startswith("[warn]")]
    assert len(warnings) == 1 and "ignored" in warnings[0] and "training_status.json" in warnings[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", list(BAD_STATUS))
def test_bad_status_file_checkpoints_mode(capsys, sample, case):
    write_status(sample, BAD_STATUS[case])
    code, out, err = run_main(capsys, "--mode", "checkpoints", "--model-dir", sample, "--json")
    assert code == 0, err
    warned_once(err)
    rows = json.loads(out)["checkpoints"]
    assert [r["file"] for r in rows] == ["Huggy-600017.pt"] and rows[0]["reward"] is None


@pytest.mark.parametrize("case", ["behaviour is a list", "nested 100000 deep"])
@pytest.mark.parametrize("mode", [["onnx-compare"], ["export-onnx"], ["benchmark", "--runs", "5"]])
def test_bad_status_file_other_modes(capsys, sample, tmp_path, case, mode):
    """Without the step's own ONNX, the top-level one is chosen through final_step()."""
    (sample / "Huggy" / "Huggy-600017.onnx").unlink()
    write_status(sample, BAD_STATUS[case])
    extra = ["--output", tmp_path / "m.onnx"] if mode[0] == "export-onnx" else []
    code, out, err = run_main(capsys, "--mode", *mode, "--model-dir", sample, *extra)
    assert code == 0, err
    warned_once(err)


def test_status_odd_but_valid_values(sample):
    write_status(sample, '{"Huggy": {"checkpoints": [{"steps": 600017, "reward": NaN, "auxillary_file_paths": null,'
                         ' "file_path": "x/Huggy-600017.onnx", "extra": {"a": [1]}}], "final_checkpoint": '
                         '{"steps": 600017, "reward": 2}}, "metadata": 5}')
    status = training_status(sample, "Huggy")
    assert status_entry(status, Path("Huggy-600017.pt"), 600017)["reward"] is None  # NaN: no reward yet
    assert final_step(sample, "Huggy") == 600017
    assert training_status(sample, "Other") == {}


@pytest.fixture(scope="module")
def policy_checkpoint():
    return torch.load(BUNDLED_PT, map_location="cpu", weights_only=True)


def crafted(tmp_path, checkpoint, key, value, where="Policy") -> Path:
    obj = dict(checkpoint)
    obj[where] = dict(obj[where])
    obj[where][key] = value
    path = tmp_path / f"crafted-{len(list(tmp_path.iterdir()))}.pt"
    torch.save(obj, path)
    return path


MU_BIAS = "action_model._continuous_distribution.mu.bias"


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("value,words", [
    (lambda: torch.zeros(1).expand(10**10), "10,000,000,000 elements"),       # 37 GiB view of 4 bytes
    (lambda: torch.zeros(1, 21).expand(10**6, 21), "elements over a storage"),
    (lambda: torch.eye(21).to_sparse(), "not dense"),
    (lambda: torch.eye(21).to_sparse_csr(), "not dense"),
    (lambda: torch.zeros(21, dtype=torch.complex64), "complex64"),
])
def test_crafted_tensors_refused_before_their_data_is_read(capsys, tmp_path, policy_checkpoint, value, words):
    path = crafted(tmp_path, policy_checkpoint, MU_BIAS, value())
    t0 = time.perf_counter()
    code, out, err = run_main(capsys, "--mode", "action", "--checkpoint", path)
    assert code == 2, err
    one_line(err, "refused", words)
    assert time.perf_counter() - t0 < 60


def test_crafted_tensor_outside_the_policy_is_refused_too(tmp_path, policy_checkpoint):
    path = crafted(tmp_path, policy_checkpoint, "w", torch.zeros(1).expand(10**10), where="Optimizer:critic")
    with pytest.raises(I.UsageError, match="elements over a storage"):
        read_checkpoint(path)


def test_validate_tensors_walks_deep_and_cyclic_structures():
    deep: list = []
    inner = deep
    for _ in range(100_000):
        inner.append([])
        inner = inner[0]
    inner.append(torch.zeros(1).expand(100))
    with pytest.raises(I.UsageError, match="elements over a storage"):
        validate_tensors({"Policy": {}, "x": deep})
    cyclic: list = [torch.zeros(3)]
    cyclic.append(cyclic)
    validate_tensors({"Policy": {"a": cyclic}})  # terminates, nothing to refuse


def test_nan_in_continuous_act_size_vector(capsys, tmp_path, policy_checkpoint):
    """(Size vectors are read by the policy section: not a usable policy, one line.)"""
    path = crafted(tmp_path, policy_checkpoint, "continuous_act_size_vector", torch.tensor([float("nan")]))
    code, out, err = run_main(capsys, "--mode", "action", "--checkpoint", path)
    assert code == 2, err
    one_line(err)


def test_legacy_format_checkpoint_still_loads(tmp_path, policy_checkpoint):
    """Not a zip: loaded without mmap, validated the same way."""
    path = tmp_path / "Huggy-600017.pt"
    torch.save(policy_checkpoint, path, _use_new_zipfile_serialization=False)
    obj = read_checkpoint(path)
    assert torch.equal(obj["Policy"][MU_BIAS], policy_checkpoint["Policy"][MU_BIAS])


def test_every_fixture_checkpoint_passes_validation():
    files = sorted(EXAMPLES.rglob("*.pt")) + (sorted(FIXTURES.rglob("*.pt")) if FIXTURES.exists() else [])
    assert len(files) >= 19
    for path in files:
        obj = read_checkpoint(path)  # memory-mapped zip, validated
        assert isinstance(obj["Policy"], dict), path


# --- 8. --expect-sha256 -------------------------------------------------------------------------

def test_check_sha256(tmp_path):
    good = file_sha256(BUNDLED_PT)
    assert check_sha256(BUNDLED_PT, None) == good
    assert check_sha256(BUNDLED_PT, " " + good.upper() + " ") == good
    with pytest.raises(I.UsageError, match="refusing it"):
        check_sha256(BUNDLED_PT, "0" * 64)
    with pytest.raises(I.UsageError, match="cannot read|no such|is a folder"):
        check_sha256(tmp_path / "absent.pt", "0" * 64)


def test_checkpoints_mode_honours_expect_sha256(capsys):
    """Needs mode_checkpoints to call check_sha256(<the checkpoint it reports as default>,
    args.expect_sha256) before listing."""
    good = file_sha256(BUNDLED_PT)
    code, out, err = run_main(capsys, "--mode", "checkpoints", "--model-dir", BUNDLED, "--expect-sha256", good)
    assert code == 0, err
    code, out, err = run_main(capsys, "--mode", "checkpoints", "--model-dir", BUNDLED, "--expect-sha256", "0" * 64)
    assert code == 2, err
    one_line(err, "refusing it")


# --- 9. empty option values -------------------------------------------------------------------

@pytest.mark.parametrize("option", ["--model", "--model-dir", "--checkpoint"])
@pytest.mark.parametrize("value", ["", "  "])
def test_empty_model_options_refused(capsys, option, value):
    code, out, err = run_main(capsys, "--mode", "info", f"{option}={value}")
    assert code == 2, err
    one_line(err, option, "empty value")
    assert "bundled sample" not in out


def test_empty_huggy_model_dir_counts_as_unset(capsys, monkeypatch):
    monkeypatch.setenv("HUGGY_MODEL_DIR", "")
    code, out, err = run_main(capsys, "--mode", "info", "--json")
    assert code == 0 and json.loads(out)["source"] == "bundled sample"


# --- 10. fuzzed training_status.json ------------------------------------------------------------

@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "run_logs").mkdir()
    return folder


leaves = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
any_json = st.recursive(leaves, lambda children: st.lists(children, max_size=4)
                        | st.dictionaries(st.text(max_size=8), children, max_size=4), max_leaves=30)
record = st.fixed_dictionaries({}, optional={
    "steps": st.one_of(st.integers(-5, 10**7), any_json), "file_path": st.one_of(st.text(max_size=30), any_json),
    "reward": st.one_of(st.floats(allow_nan=True, allow_infinity=True), any_json),
    "auxillary_file_paths": st.one_of(st.lists(st.text(max_size=30), max_size=3), any_json)})
status_like = st.fixed_dictionaries({"Huggy": st.one_of(
    st.fixed_dictionaries({}, optional={"checkpoints": st.one_of(st.lists(st.one_of(record, any_json), max_size=4),
                                                                  any_json),
                                        "final_checkpoint": st.one_of(record, any_json)}), any_json)},
    optional={"metadata": any_json})
deep = st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(content=st.one_of(any_json.map(json.dumps), status_like.map(json.dumps), deep, st.binary(max_size=40)))
def test_fuzzed_status_files(fuzz_dir, content):
    (fuzz_dir / "run_logs" / "training_status.json").write_bytes(content if isinstance(content, bytes)
                                                                  else content.encode())
    status = training_status(fuzz_dir, "Huggy")  # must not raise, whatever the file holds
    for ckpt, step in ((Path("Huggy-600017.pt"), 600017), (Path("checkpoint.pt"), None)):
        entry = status_entry(status, ckpt, step)
        assert entry == {} or {"steps", "file_path", "auxillary_file_paths"} <= set(entry), entry
        reward = entry.get("reward")
        assert reward is None or (type(reward) in (int, float) and np.isfinite(reward))
    final = final_step(fuzz_dir, "Huggy")
    assert final is None or (type(final) is int and final >= 0)


@settings(max_examples=200, deadline=None)
@given(status=st.one_of(any_json, status_like), step=st.one_of(st.none(), st.integers(-5, 10**7)))
def test_fuzzed_status_entry_on_raw_structures(status, step):
    entry = status_entry(status, Path("Huggy-600017.pt"), step)
    assert entry == {} or {"steps", "file_path", "auxillary_file_paths"} <= set(entry), entry
