"""--spin / load(spin=): onnxruntime's intra-op threads spin-wait between runs (its own default) or sleep. serve
defaults
to sleeping: its clients share the CPU (docs/serve.md, "Measured"). Read back from the session itself."""

import importlib.util

import pytest
from conftest import BUNDLED, EXAMPLES

from mlagents_inference.core.errors import UsageError
from mlagents_inference.fronts.cli import parse_args
from mlagents_inference.loaders.onnx_file import MLAgentsOnnx, load_file_policy

TORCH = importlib.util.find_spec("torch") is not None
SPIN_KEY = "session.intra_op.allow_spinning"


def spinning(session) -> bool:
    """Whether the session's threads spin (the entry unset: onnxruntime's default, spinning)."""
    try:
        return session.get_session_options().get_session_config_entry(SPIN_KEY) != "0"
    except Exception:  # noqa: BLE001 - (onnxruntime raises for an entry never set)
        return True


@pytest.mark.parametrize(
    "mode, expected",
    [("stream", "on"), ("serve", "off"), ("action", "on"), ("batch", "on"), ("benchmark", "on"), ("info", "on")],
)
def test_serve_defaults_to_sleeping_threads_the_other_modes_to_onnxruntimes_default(mode, expected):
    assert parse_args(["--mode", mode]).spin == expected
    other = "on" if expected == "off" else "off"
    assert parse_args(["--mode", mode, "--spin", other]).spin == other


def test_a_bad_spin_value_is_refused():
    with pytest.raises((UsageError, SystemExit)):
        parse_args(["--mode", "stream", "--spin", "maybe"])


def test_the_ml_agents_file_itself_runs_with_sleeping_threads_when_asked():
    onnx = next(EXAMPLES.glob("lstm/*.onnx"))
    settings = load_file_policy(onnx).settings
    assert not spinning(MLAgentsOnnx(onnx, settings, spin=False).session)
    assert spinning(MLAgentsOnnx(onnx, settings).session)


@pytest.mark.skipif(not TORCH, reason="the rebuilt modules' engine needs torch")
def test_load_passes_spin_to_the_onnxruntime_engine_and_checks_it():
    import inference

    assert not spinning(inference.load(BUNDLED, spin=False).engine.session)
    assert spinning(inference.load(BUNDLED).engine.session)
    with pytest.raises(UsageError, match="spin="):
        inference.load(BUNDLED, spin="no")


@pytest.mark.skipif(not TORCH, reason="the rebuilt modules' engine needs torch")
def test_the_serve_context_loads_its_policy_with_sleeping_threads_and_the_stream_as_asked():
    from mlagents_inference.services.context import Context

    for mode, spins in (("serve", False), ("stream", True), ("action", True)):
        ctx = Context(parse_args(["--mode", mode, "--model-dir", str(BUNDLED)]))
        assert spinning(ctx.policy.engine.session) is spins, mode
    ctx = Context(parse_args(["--mode", "stream", "--model-dir", str(BUNDLED), "--spin", "off"]))
    assert not spinning(ctx.policy.engine.session)
