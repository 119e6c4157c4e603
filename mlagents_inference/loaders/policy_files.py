"""A policy's files read: a checkpoint (sha256 checked before unpickling) rebuilt as ML-Agents' modules, an
ONNX alone, or, without torch, the policy's ML-Agents ONNX itself."""
import math
import time
from pathlib import Path
from typing import Optional

from ..core.errors import NotThisPolicy, UsageError
from ..core.extras import TORCH_HINT, torch_available
from ..core.files import short_path
from ..core.onnx_graph import onnx_input_shapes, read_onnx_interface
from ..core.sources import check_sha256, find_checkpoint_onnx, read_config, step_of
from ..core.spec import GoalInput
from .onnx_file import load_file_policy


def load_checkpoint(path: Path, onnx_path: Optional[Path] = None, model_dir: Optional[Path] = None,
                    behavior: Optional[str] = None, expect_sha256: Optional[str] = None,
                    goal_input: GoalInput = None):
    """Read, validate and rebuild one checkpoint (sha256 checked before unpickling); without torch, the policy's ML-Agents
    ONNX (the file itself: `onnx_path`, the checkpoint's own, or `path` when it is one) as a FileCheckpoint."""
    t0 = time.perf_counter()
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such checkpoint file")
    if not torch_available():
        own = path if path.suffix.lower() == ".onnx" else find_checkpoint_onnx(path, model_dir, behavior, None)
        file = own or onnx_path  # (the checkpoint's own ONNX runs: the torch install runs the checkpoint's weights)
        if file is None:
            raise UsageError(f"{short_path(path)}: this checkpoint has no ML-Agents ONNX beside it, and a checkpoint "
                             f"alone needs torch: {TORCH_HINT}")
        step = step_of(path.name, behavior or path.parent.name) if path.suffix.lower() == ".pt" else None
        policy = load_file_policy(Path(file), expect_sha256, goal_input, step, path.suffix.lower() == ".pt")
        if onnx_path is not None and own is not None and Path(onnx_path).resolve() != Path(own).resolve():
            _same_policy(policy.settings, load_file_policy(Path(onnx_path), None, goal_input).settings, Path(onnx_path))
        config = read_config(model_dir, behavior)  # (the run folder's, as the torch install reads it)
        trainer, hyper = config.get("trainer_type"), config.get("hyperparameters")
        if policy.settings.trainer is None and trainer in ("ppo", "sac", "poca"):
            policy.settings.trainer = str(trainer)
        if isinstance(hyper, dict) and hyper.get("shared_critic") is True:  # (value heads the ONNX leaves out)
            policy.settings.value_streams = list(config.get("reward_signals") or ["extrinsic"])
        policy.behavior = behavior or path.parent.name if path.suffix.lower() == ".pt" else None
        return policy
    from .checkpoint import (
        LoadedCheckpoint,
        build_actor,
        global_step,
        infer_settings,
        onnx_difference,
        policy_needs_onnx,
        read_checkpoint,
        trainer_of,
    )
    if path.suffix.lower() == ".onnx":  # no checkpoint: the ONNX alone
        from .onnx_alone import load_onnx_alone
        return load_onnx_alone(path, expect_sha256, goal_input)
    sha = check_sha256(path, expect_sha256)
    obj = read_checkpoint(path)
    state = obj["Policy"]
    step = global_step(obj)
    given = onnx_path is not None  # named by the user: it must be this policy's (NotThisPolicy)
    onnx_path = onnx_path or find_checkpoint_onnx(path, model_dir, behavior, step)
    needs = onnx_path is not None and policy_needs_onnx(state)
    onnx_iface = read_onnx_interface(onnx_path) if needs or given else None
    needed = onnx_iface if needs else None

    def rebuild(iface):
        settings = infer_settings(state, path, iface, read_config(model_dir, behavior), trainer_of(obj), goal_input)
        return settings, build_actor(settings, state, path)
    try:
        settings, actor = rebuild(needed)
    except UsageError:
        if not given or needed is None:
            raise
        rebuild(None)  # the checkpoint stands without that ONNX: the ONNX is what does not fit
        raise NotThisPolicy(f"{onnx_path.name} takes inputs {[list(s) for s in onnx_input_shapes(onnx_iface) or []]}, "
                            f"which the checkpoint's layers do not fit: not this policy")
    difference = onnx_difference(onnx_iface, state, settings) if given else None
    if difference:
        raise NotThisPolicy(f"{onnx_path.name} {difference}: not this policy")
    return LoadedCheckpoint(path, settings, actor, needed, step, sha, time.perf_counter() - t0)



def _same_policy(own, given, onnx_path: Path) -> None:
    """NotThisPolicy when --onnx takes or answers other shapes than the checkpoint's own ONNX (torch-free)."""
    def shape(s):
        return (sum(math.prod(i.shape) for i in s.inputs), s.continuous_size, list(s.discrete_branches), s.memory_size)
    if shape(own) != shape(given):
        raise NotThisPolicy(f"{onnx_path.name} takes {shape(given)[0]} input values and answers continuous "
                            f"{given.continuous_size}, discrete {list(given.discrete_branches)}, memory {given.memory_size}; "
                            f"the checkpoint's {shape(own)[0]}, {own.continuous_size}, {list(own.discrete_branches)}, "
                            f"{own.memory_size}: not this policy")

