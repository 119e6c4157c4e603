"""Hostile and unlucky input, round four (issue 26): options that would be silently ignored are
refused in one line (cli.parse_args, the one place), and peak_rss_mb is this program's own peak,
not that of the process that started it. No Ray needed (the Ray group: test_ray.py)."""
import json

import numpy as np
import pytest
from conftest import BUNDLED, cli

import inference as I


def run(capsys, *args):
    """main() in this process: (exit code, stdout, stderr)."""
    code = I.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args, message", [
    (["--batch", "10", "--ray", "local"], "--ray applies only with --obs-file; it would be ignored"),
    (["--obs-file", "x.parquet", "--ray", ""], "--ray: empty value"),
    (["--obs-file", "x.parquet", "--ray", " "], "--ray: empty value"),
    (["--ray-actors", "3"], "--ray-actors applies only with --ray; it would be ignored"),
    (["--obs-file", "x.parquet", "--ray-actors", "3"], "--ray-actors applies only with --ray"),
    (["--keep-columns", "id", "--output", "out.npz"], "--keep-columns applies only with --obs-file"),
    (["--chunk", "100"], "--chunk applies only with --obs-file"),
    (["--progress"], "--progress applies only with --obs-file"),
    (["--obs-file", "x.npy", "--batch", "5"], "--batch does not apply with --obs-file; it would be ignored"),
    # given at its default value, an option is given all the same (it was taken as not given)
    (["--ray-actors", "2"], "--ray-actors applies only with --ray; it would be ignored"),
    (["--chunk", "16384"], "--chunk applies only with --obs-file"),
    (["--samples", "100"], "--samples applies to --mode precision, not batch"),
])
def test_options_that_would_be_ignored_are_refused(capsys, tmp_path, monkeypatch, args, message):
    """Each ran before, its option dropped: --batch 10 --ray local without Ray, --ray '' without Ray,
    --ray-actors and --keep-columns without effect. Refused before any model is read or file is written."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "--mode", "batch", *args, "--model-dir", BUNDLED)
    assert code == 2 and out == "", (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), err
    assert list(tmp_path.iterdir()) == []


def test_an_option_with_a_mode_dependent_default_given_to_another_mode_is_refused(capsys):
    """--batch and --steps have per-mode defaults; given to a mode that takes neither they were dropped."""
    for args, message in ((["--mode", "action", "--batch", "5"], "--batch applies to --mode batch / onnx-compare / "
                                                                    "benchmark, not action"),
                          (["--mode", "info", "--steps", "9"], "--steps applies to --mode fingerprint / stats / "
                                                                 "onnx-compare, not info")):
        code, out, err = run(capsys, *args, "--model-dir", BUNDLED)
        assert code == 2 and err.strip() == f"error: {message}", err


def test_options_that_fit_still_run(capsys, tmp_path):
    np.save(tmp_path / "obs.npy", np.zeros((5, 59), np.float32))
    code, out, err = run(capsys, "--mode", "batch", "--obs-file", tmp_path / "obs.npy", "--chunk", "2", "--progress",
                         "--model-dir", BUNDLED, "--json")
    assert code == 0 and json.loads(out)["rows"] == 5, err
    code, out, err = run(capsys, "--mode", "batch", "--batch", "3", "--model-dir", BUNDLED, "--json")
    assert code == 0 and json.loads(out)["rows"] == 3, err


def test_peak_rss_is_this_programs_own_not_its_parents(tmp_path):
    """Linux carries ru_maxrss across exec: started from a process holding 2 GB, the program reported
    a peak of 2 GB or more. VmHWM counts this program's own pages only."""
    np.save(tmp_path / "obs.npy", np.zeros((100, 59), np.float32))
    ballast = np.ones(2 << 27)  # 2 GiB of float64, resident in this (the parent) process
    result = cli("--mode", "batch", "--obs-file", tmp_path / "obs.npy", "--model-dir", BUNDLED, "--json")
    assert ballast[-1] == 1.0
    assert result.returncode == 0, result.stderr
    peak = json.loads(result.stdout)["peak_rss_mb"]
    assert 20 < peak < 1500, peak  # the program alone: a few hundred MB (torch, onnxruntime)
