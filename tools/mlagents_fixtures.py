"""Write ML-Agents 1.1.0 run folders (zoo layout) for policy configurations the zoo does not have,
with ML-Agents' own code: the fixtures under tests/fixtures/mlagents/ come from here.

    python3.11 -m venv /tmp/mlvenv
    /tmp/mlvenv/bin/pip install torch==2.13.0
    /tmp/mlvenv/bin/pip install --no-deps --ignore-requires-python mlagents==1.1.0 mlagents-envs==1.1.0
    /tmp/mlvenv/bin/pip install "numpy==1.23.5" "onnx==1.15.0" "protobuf==3.20.3" "setuptools<70" pyyaml \
        "cattrs<1.7,>=1.1.0" attrs h5py cloudpickle pillow onnxruntime tensorboard grpcio
    # torch 2.13 exports with its newer exporter by default; ML-Agents 1.1.0 needs the TorchScript one:
    # in mlagents/trainers/torch_entities/model_serialization.py, torch.onnx.export(..., dynamo=False)
    /tmp/mlvenv/bin/python tools/mlagents_fixtures.py --out /tmp/runs [--committed] [NAME ...]

Everything is built and written by ML-Agents: TorchPolicy (as PPOTrainer / SACTrainer /
POCATrainer.create_policy build it), the trainer's optimizer, TorchModelSaver.save_checkpoint
(.pt + checkpoint.pt + ModelSerializer .onnx) and copy_final_model (<Behavior>.onnx). Weights are
ML-Agents' initialisation, rescaled; vector normalisers get non-trivial statistics; one optimizer
step with learning rate 0 fills the Adam states. The committed fixtures keep checkpoint.pt,
<Behavior>.onnx, configuration.yaml and `generated.json` (what was built, with each input's
ML-Agents ObservationType). Not part of inference.py or its tests' requirements.
"""

import argparse
import json
import os
import shutil
import sys
import time

import numpy as np
import yaml
from mlagents.plugins.trainer_type import get_default_trainer_types
from mlagents.torch_utils import torch

get_default_trainer_types()

from mlagents.trainers.model_saver.torch_model_saver import TorchModelSaver  # noqa: E402
from mlagents.trainers.policy.torch_policy import TorchPolicy  # noqa: E402
from mlagents.trainers.settings import RunOptions  # noqa: E402
from mlagents.trainers.torch_entities.encoders import Normalizer, VectorInput  # noqa: E402
from mlagents.trainers.torch_entities.layers import LinearEncoder  # noqa: E402,F401
from mlagents.trainers.torch_entities.networks import SharedActorCritic, SimpleActor  # noqa: E402
from mlagents_envs.base_env import (  # noqa: E402
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

NONE = DimensionProperty.NONE
TE = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
VS = DimensionProperty.VARIABLE_SIZE


def vec(n, goal=False, name=None):
    return ("vector", (n,), ObservationType.GOAL_SIGNAL if goal else ObservationType.DEFAULT)


def cam(c, h, w):
    return ("visual", (c, h, w), ObservationType.DEFAULT)


def buf(n, f):
    return ("entities", (n, f), ObservationType.DEFAULT)


# name -> dict(behavior, obs, cont, branches, net, trainer, shared_critic, step, extra)
CONFIGS = {
    "nonsquare-simple": dict(
        behavior="NonSquareSimple",
        obs=[cam(3, 64, 48), vec(7)],
        cont=3,
        branches=[],
        net=dict(normalize=True, hidden_units=64, num_layers=2, vis_encode_type="simple"),
    ),
    "nature84": dict(
        behavior="Nature84",
        obs=[cam(3, 84, 84)],
        cont=0,
        branches=[4, 3],
        net=dict(normalize=False, hidden_units=128, num_layers=1, vis_encode_type="nature_cnn"),
    ),
    "resnet-gray-nonsquare": dict(
        behavior="ResnetGray",
        obs=[cam(1, 40, 30), vec(4)],
        cont=2,
        branches=[],
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="resnet"),
    ),
    "two-cams-after-vector": dict(
        behavior="TwoCams",
        obs=[vec(9), cam(3, 32, 40), cam(1, 24, 24)],
        cont=2,
        branches=[3],
        net=dict(normalize=True, hidden_units=64, num_layers=2, vis_encode_type="simple"),
    ),
    "visual-lstm-discrete": dict(
        behavior="VisualLstm",
        obs=[cam(3, 36, 36), vec(6)],
        cont=0,
        branches=[3, 4],
        net=dict(
            normalize=True,
            hidden_units=64,
            num_layers=2,
            vis_encode_type="simple",
            memory=dict(memory_size=128, sequence_length=16),
        ),
    ),
    "visual-lstm64-nature": dict(
        behavior="VisualLstm64",
        obs=[vec(5), cam(3, 40, 36)],
        cont=0,
        branches=[5],
        net=dict(
            normalize=False,
            hidden_units=48,
            num_layers=1,
            vis_encode_type="nature_cnn",
            memory=dict(memory_size=64, sequence_length=8),
        ),
    ),
    "attention-camera-vector": dict(
        behavior="AttnCam",
        obs=[vec(6), buf(5, 4), cam(3, 24, 32)],
        cont=0,
        branches=[3, 2],
        net=dict(normalize=True, hidden_units=64, num_layers=2, vis_encode_type="simple"),
    ),
    "attention-two-buffers": dict(
        behavior="AttnTwoBuf",
        obs=[buf(12, 9), vec(4), buf(3, 2)],
        cont=2,
        branches=[],
        net=dict(normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "attention-only-buffer": dict(
        behavior="AttnOnly",
        obs=[buf(20, 7)],
        cont=0,
        branches=[4],
        net=dict(normalize=True, hidden_units=64, num_layers=1, vis_encode_type="simple"),
    ),
    "goal-hyper-multi": dict(
        behavior="GoalMulti",
        obs=[vec(8), vec(4, goal=True), vec(5)],
        cont=2,
        branches=[3],
        net=dict(
            normalize=True, hidden_units=48, num_layers=3, vis_encode_type="simple", goal_conditioning_type="hyper"
        ),
    ),
    "goal-hyper-camera": dict(
        behavior="GoalCam",
        obs=[cam(3, 36, 28), vec(6), vec(3, goal=True)],
        cont=0,
        branches=[4],
        net=dict(
            normalize=False, hidden_units=32, num_layers=1, vis_encode_type="simple", goal_conditioning_type="hyper"
        ),
    ),
    "match3-7x9": dict(
        behavior="Match3Big",
        obs=[cam(6, 7, 9)],
        cont=0,
        branches=[5, 4, 7],
        net=dict(normalize=False, hidden_units=64, num_layers=2, vis_encode_type="match3"),
    ),
    "fc-small-grid": dict(
        behavior="FcGrid",
        obs=[cam(2, 3, 5), vec(3)],
        cont=1,
        branches=[2],
        net=dict(normalize=True, hidden_units=16, num_layers=1, vis_encode_type="fully_connected"),
    ),
    "sac-camera": dict(
        behavior="SacCam",
        obs=[cam(3, 40, 30), vec(8)],
        cont=3,
        branches=[],
        trainer="sac",
        net=dict(normalize=True, hidden_units=64, num_layers=2, vis_encode_type="simple"),
    ),
    "poca-normalize": dict(
        behavior="PocaNorm",
        obs=[vec(11), vec(3)],
        cont=0,
        branches=[2, 4, 3],
        trainer="poca",
        net=dict(normalize=True, hidden_units=64, num_layers=2, vis_encode_type="simple"),
    ),
    "hybrid-lstm-3x48": dict(
        behavior="HybridLstm",
        obs=[vec(13)],
        cont=2,
        branches=[3, 2],
        net=dict(
            normalize=True,
            hidden_units=48,
            num_layers=3,
            vis_encode_type="simple",
            memory=dict(memory_size=64, sequence_length=8),
        ),
    ),
    "vec-cam-vec-normalize": dict(
        behavior="VecCamVec",
        obs=[vec(5), cam(3, 21, 20), vec(7)],
        cont=2,
        branches=[],
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    # Not something mlagents-learn writes (normalize is one switch per network): the middle vector's
    # processor is replaced by an unnormalised VectorInput after construction.
    "unnorm-between-norm": dict(
        behavior="UnnormMid",
        obs=[vec(6), vec(4), vec(5)],
        cont=3,
        branches=[],
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
        unnormalise=[1],
    ),
    "shared-critic-visual-lstm": dict(
        behavior="SharedLstm",
        obs=[cam(3, 20, 24), vec(4)],
        cont=2,
        branches=[2],
        shared_critic=True,
        net=dict(
            normalize=True,
            hidden_units=32,
            num_layers=2,
            vis_encode_type="simple",
            memory=dict(memory_size=32, sequence_length=4),
        ),
    ),
    "sac-hybrid-discrete": dict(
        behavior="SacHybrid",
        obs=[vec(10)],
        cont=2,
        branches=[3],
        trainer="sac",
        net=dict(normalize=False, hidden_units=40, num_layers=2, vis_encode_type="simple"),
    ),
}

# Second group: edge cases likely to trip a loader that infers the architecture from shapes.
CONFIGS.update(
    {
        "goal-two-signals": dict(
            behavior="GoalTwo",
            obs=[vec(8), vec(2, goal=True), vec(3, goal=True)],
            cont=2,
            branches=[],
            net=dict(
                normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
            ),
        ),
        "goal-same-width": dict(
            behavior="GoalSame",
            obs=[vec(3), vec(3, goal=True), vec(7)],
            cont=0,
            branches=[4],
            net=dict(
                normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
            ),
        ),
        "goal-visual-signal": dict(
            behavior="GoalVisual",
            obs=[vec(6), ("visual", (3, 24, 24), ObservationType.GOAL_SIGNAL)],
            cont=2,
            branches=[],
            net=dict(
                normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
            ),
        ),
        "goal-hyper-lstm-1layer": dict(
            behavior="GoalLstm",
            obs=[vec(3, goal=True), vec(9)],
            cont=1,
            branches=[3],
            net=dict(
                normalize=True,
                hidden_units=32,
                num_layers=1,
                vis_encode_type="simple",
                goal_conditioning_type="hyper",
                memory=dict(memory_size=48, sequence_length=8),
            ),
        ),
        "goal-none-conditioning": dict(
            behavior="GoalNone",
            obs=[vec(6), vec(3, goal=True)],
            cont=2,
            branches=[],
            net=dict(
                normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple", goal_conditioning_type="none"
            ),
        ),
        "wide-images": dict(
            behavior="Wide",
            obs=[cam(3, 36, 96), vec(2)],
            cont=0,
            branches=[3],
            net=dict(normalize=True, hidden_units=32, num_layers=1, vis_encode_type="nature_cnn"),
        ),
        "tall-simple": dict(
            behavior="Tall",
            obs=[cam(1, 120, 20)],
            cont=2,
            branches=[],
            net=dict(normalize=False, hidden_units=32, num_layers=1, vis_encode_type="simple"),
        ),
        "buffer-1x1-lstm": dict(
            behavior="Buf1Lstm",
            obs=[buf(1, 1), vec(2)],
            cont=0,
            branches=[2, 2],
            net=dict(
                normalize=True,
                hidden_units=32,
                num_layers=2,
                vis_encode_type="simple",
                memory=dict(memory_size=32, sequence_length=4),
            ),
        ),
        "sac-discrete-camera": dict(
            behavior="SacDisc",
            obs=[cam(3, 30, 40), vec(4)],
            cont=0,
            branches=[3, 3],
            trainer="sac",
            net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
        ),
        "poca-continuous-attention": dict(
            behavior="PocaAttn",
            obs=[vec(5), buf(4, 3)],
            cont=2,
            branches=[],
            trainer="poca",
            net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
        ),
        "twelve-vectors": dict(
            behavior="Twelve",
            obs=[vec(1 + (i % 4)) for i in range(12)],
            cont=2,
            branches=[2],
            net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
        ),
        "twelve-mixed-unnorm": dict(
            behavior="TwelveMixed",
            obs=[
                vec(2),
                cam(1, 20, 20),
                vec(3),
                vec(1),
                vec(4),
                cam(3, 20, 24),
                vec(2),
                vec(5),
                vec(1),
                vec(2),
                cam(2, 22, 20),
                vec(3),
            ],
            cont=0,
            branches=[3],
            net=dict(normalize=False, hidden_units=32, num_layers=1, vis_encode_type="simple"),
        ),
        "single-scalar": dict(
            behavior="Scalar",
            obs=[vec(1)],
            cont=1,
            branches=[],
            net=dict(normalize=True, hidden_units=8, num_layers=1, vis_encode_type="simple"),
        ),
        "shared-critic-attention": dict(
            behavior="SharedAttn",
            obs=[buf(6, 4), vec(3)],
            cont=0,
            branches=[3],
            shared_critic=True,
            net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
        ),
    }
)
# ML-Agents' smallest image per encoder, one square and one non-square camera each
for _enc, _side in [("simple", 20), ("nature_cnn", 36), ("resnet", 15), ("match3", 5), ("fully_connected", 1)]:
    CONFIGS[f"min-{_enc}"] = dict(
        behavior=f"Min{_enc.title().replace('_', '')}",
        obs=[cam(2, _side, _side), vec(3), cam(3, _side + 3, _side)],
        cont=1,
        branches=[3],
        net=dict(normalize=True, hidden_units=16, num_layers=1, vis_encode_type=_enc),
    )

# tests/fixtures/mlagents/ (--committed): small enough to keep in the repository
COMMITTED = {
    "goal-two-signals": dict(
        behavior="GoalTwo",
        obs=[vec(8), vec(2, goal=True), vec(3, goal=True)],
        cont=2,
        branches=[],
        net=dict(
            normalize=True, hidden_units=12, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
        ),
    ),
    "goal-visual-signal": dict(
        behavior="GoalVisual",
        obs=[vec(6), ("visual", (3, 20, 20), ObservationType.GOAL_SIGNAL)],
        cont=0,
        branches=[3, 2],
        net=dict(
            normalize=False, hidden_units=12, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
        ),
    ),
    "lstm-camera-nonsquare": dict(
        behavior="LstmCam",
        obs=[cam(1, 24, 30), vec(3)],
        cont=0,
        branches=[3, 2],
        net=dict(
            normalize=True,
            hidden_units=16,
            num_layers=1,
            vis_encode_type="simple",
            memory=dict(memory_size=16, sequence_length=4),
        ),
    ),
    "cameras-after-vector": dict(
        behavior="CamsAfter",
        obs=[vec(4), cam(3, 20, 24), cam(2, 21, 20)],
        cont=2,
        branches=[],
        net=dict(normalize=True, hidden_units=16, num_layers=2, vis_encode_type="simple"),
    ),
}


# examples/ (--examples): one small run folder per policy kind, shipped with the repository. They mirror
# the development zoo's kinds (same inputs, actions, encoders and trainers) at hidden sizes small enough to
# keep the whole set to a few MB; "steps" writes more than one checkpoint.
EXAMPLES = {
    "vector": dict(
        behavior="Vector",
        obs=[vec(8)],
        cont=2,
        branches=[],
        steps=[50000, 100000],
        net=dict(normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "multi-continuous": dict(
        behavior="Crawlerish",
        obs=[vec(30), vec(8)],
        cont=6,
        branches=[],
        net=dict(normalize=True, hidden_units=32, num_layers=3, vis_encode_type="simple"),
    ),
    "discrete-multi": dict(
        behavior="DiscreteMulti",
        obs=[vec(20), vec(6)],
        cont=0,
        branches=[3, 2, 5],
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "hybrid": dict(
        behavior="Hybrid",
        obs=[vec(12)],
        cont=3,
        branches=[2],
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "sac-continuous": dict(
        behavior="SacContinuous",
        obs=[vec(16)],
        cont=4,
        branches=[],
        trainer="sac",
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "poca-discrete": dict(
        behavior="PocaDiscrete",
        obs=[vec(14)],
        cont=0,
        branches=[3, 3, 3],
        trainer="poca",
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "shared-critic": dict(
        behavior="SharedCritic",
        obs=[vec(10)],
        cont=2,
        branches=[],
        shared_critic=True,
        net=dict(normalize=True, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "visual-simple": dict(
        behavior="VisualSimple",
        obs=[cam(3, 36, 36), vec(5)],
        cont=2,
        branches=[],
        net=dict(normalize=False, hidden_units=32, num_layers=1, vis_encode_type="simple"),
    ),
    "visual-nature_cnn": dict(
        behavior="VisualNature",
        obs=[cam(3, 36, 36), vec(5)],
        cont=0,
        branches=[3],
        net=dict(normalize=True, hidden_units=16, num_layers=1, vis_encode_type="nature_cnn"),
    ),
    "visual-resnet": dict(
        behavior="VisualResnet",
        obs=[cam(3, 36, 36), vec(5)],
        cont=2,
        branches=[],
        shared_critic=True,
        net=dict(normalize=True, hidden_units=16, num_layers=1, vis_encode_type="resnet"),
    ),
    "visual-match3": dict(
        behavior="VisualMatch3",
        obs=[cam(4, 6, 6), vec(5)],
        cont=0,
        branches=[6],
        shared_critic=True,
        net=dict(normalize=True, hidden_units=32, num_layers=1, vis_encode_type="match3"),
    ),
    "visual-fully_connected": dict(
        behavior="VisualFC",
        obs=[cam(4, 6, 6), vec(5)],
        cont=2,
        branches=[],
        net=dict(normalize=False, hidden_units=32, num_layers=1, vis_encode_type="fully_connected"),
    ),
    "lstm": dict(
        behavior="Memory",
        obs=[vec(10)],
        cont=0,
        branches=[4],
        steps=[50000, 100000],
        net=dict(
            normalize=False,
            hidden_units=32,
            num_layers=2,
            vis_encode_type="simple",
            memory=dict(memory_size=32, sequence_length=8),
        ),
    ),
    "attention": dict(
        behavior="Attention",
        obs=[buf(6, 5), vec(8)],
        cont=0,
        branches=[3, 3],
        net=dict(normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple"),
    ),
    "goal-hyper": dict(
        behavior="GoalHyper",
        obs=[vec(12), vec(3, goal=True)],
        cont=0,
        branches=[5],
        net=dict(
            normalize=False, hidden_units=32, num_layers=2, vis_encode_type="simple", goal_conditioning_type="hyper"
        ),
    ),
}
EXAMPLES.update(COMMITTED)
# No optimizer step for the examples: the Adam states stay empty, as in a checkpoint written before the first
# update (they would be two thirds of each file, and inference never reads them).
EXAMPLES = {name: dict(cfg, adam_step=False) for name, cfg in EXAMPLES.items()}


def obs_specs(obs):
    specs = []
    for i, (kind, shape, otype) in enumerate(obs):
        if kind == "vector":
            props = (NONE,)
        elif kind == "visual":
            props = (NONE, TE, TE)
        else:
            props = (VS, NONE)
        specs.append(ObservationSpec(shape=shape, dimension_property=props, observation_type=otype, name=f"obs{i}"))
    return specs


def trainer_settings(cfg):
    trainer = cfg.get("trainer", "ppo")
    hyper = {}
    if trainer == "ppo":
        hyper = dict(batch_size=64, buffer_size=256, shared_critic=bool(cfg.get("shared_critic")))
    elif trainer == "sac":
        hyper = dict(batch_size=64, buffer_size=1000)
    else:
        hyper = dict(batch_size=64, buffer_size=256)
    net = dict(cfg["net"])
    net.setdefault("memory", None)
    d = {
        "behaviors": {
            cfg["behavior"]: dict(
                trainer_type=trainer,
                hyperparameters=hyper,
                network_settings=net,
                keep_checkpoints=15,
                max_steps=2000000,
            )
        }
    }
    ro = RunOptions.from_dict(d)
    return ro, ro.behaviors[cfg["behavior"]]


def build_policy(cfg, ts, seed):
    trainer = cfg.get("trainer", "ppo")
    spec = BehaviorSpec(obs_specs(cfg["obs"]), ActionSpec(cfg["cont"], tuple(cfg["branches"])))
    actor_cls = SimpleActor
    kwargs = {"conditional_sigma": False, "tanh_squash": False}
    if trainer == "sac":
        kwargs = {"conditional_sigma": True, "tanh_squash": True}
    if trainer == "ppo" and cfg.get("shared_critic"):
        actor_cls = SharedActorCritic
        kwargs["stream_names"] = [k.value for k in ts.reward_signals]
    return TorchPolicy(seed, spec, ts.network_settings, actor_cls, kwargs), spec


def unnormalise(policy, indices):
    enc = policy.actor.network_body.observation_encoder
    for i in indices:
        old = enc.processors[i]
        enc.processors[i] = VectorInput(old.normalizer.running_mean.shape[0], False)
    # network_body.processors is the same ModuleList object, nothing else to do


def perturb(policy, rng):
    actor = policy.actor
    with torch.no_grad():
        for name, p in actor.named_parameters():
            if "value_heads" in name or not p.requires_grad:  # the *_vector constants are frozen Parameters
                continue
            if "mu" in name or "branches" in name:
                p.mul_(6.0)
            elif "log_sigma" in name and p.dim() == 2 and p.shape[0] == 1:
                p.copy_(torch.tensor(rng.uniform(-1.0, 0.3, size=p.shape), dtype=p.dtype))
            elif name.endswith("bias"):
                p.add_(torch.tensor(rng.normal(0, 0.05, size=p.shape), dtype=p.dtype))
            else:
                p.mul_(1.3)
        for m in actor.modules():
            if isinstance(m, Normalizer):
                n = m.running_mean.shape[0]
                steps = int(rng.integers(500, 40000))
                m.running_mean.copy_(torch.tensor(rng.uniform(-2, 2, size=n), dtype=torch.float32))
                scale = np.exp(rng.uniform(np.log(0.14), np.log(20), size=n))
                m.running_variance.copy_(torch.tensor(scale**2 * steps, dtype=torch.float32))
                m.normalization_steps.fill_(steps)


def perturb_more(policy, rng):
    """Move every weight a little, as further training would, between two checkpoints of one run."""
    with torch.no_grad():
        for name, p in policy.actor.named_parameters():
            if p.requires_grad and p.is_floating_point():
                p.add_(torch.tensor(rng.normal(0, 0.02, size=tuple(p.shape)), dtype=p.dtype))


def make_optimizer(cfg, policy, ts):
    trainer = cfg.get("trainer", "ppo")
    if trainer == "ppo":
        from mlagents.trainers.ppo.optimizer_torch import TorchPPOOptimizer

        return TorchPPOOptimizer(policy, ts)
    if trainer == "sac":
        from mlagents.trainers.sac.optimizer_torch import TorchSACOptimizer

        return TorchSACOptimizer(policy, ts)
    from mlagents.trainers.poca.optimizer_torch import TorchPOCAOptimizer

    return TorchPOCAOptimizer(policy, ts)


def fake_adam_step(opt_modules):
    """Give each torch.optim optimizer a non-empty state (one step with random gradients)."""
    for name, mod in opt_modules.items():
        if isinstance(mod, torch.optim.Optimizer):
            saved = []
            for g in mod.param_groups:
                lr = g["lr"]
                g["lr"] = 0.0  # do not move the weights
                saved.append(lr)
                for p in g["params"]:
                    if p.is_floating_point():
                        p.grad = torch.randn_like(p) * 1e-3
            mod.step()
            for g, lr in zip(mod.param_groups, saved):
                g["lr"] = lr
                for p in g["params"]:
                    p.grad = None


def generate(name, cfg, out_root, seed):
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    ro, ts = trainer_settings(cfg)
    policy, spec = build_policy(cfg, ts, seed)
    if cfg.get("unnormalise"):
        unnormalise(policy, cfg["unnormalise"])
    perturb(policy, rng)
    step = int(cfg.get("step", 40000 + 1000 * (seed % 17)))
    policy.set_step(step)
    run_dir = os.path.join(out_root, name)
    if os.path.exists(run_dir):
        shutil.rmtree(run_dir)
    model_path = os.path.join(run_dir, cfg["behavior"])
    saver = TorchModelSaver(ts, model_path)
    saver.register(policy)
    try:
        opt = make_optimizer(cfg, policy, ts)
        if cfg.get("adam_step", True):
            fake_adam_step(opt.get_modules())
        saver.register(opt)
        opt_note = type(opt).__name__
    except Exception as e:  # noqa: BLE001
        opt_note = f"no optimizer ({type(e).__name__}: {e})"
    steps = cfg.get("steps", [step])
    for k, step in enumerate(steps):
        if k:  # a later checkpoint of the same run: its weights moved on
            perturb_more(policy, rng)
        policy.set_step(step)
        onnx_path, aux = saver.save_checkpoint(cfg["behavior"], step)
    saver.copy_final_model(onnx_path)
    conf = ro.as_dict()
    conf = {"default_settings": None, "behaviors": conf["behaviors"]}
    with open(os.path.join(run_dir, "configuration.yaml"), "w") as f:
        yaml.dump(conf, f, sort_keys=False)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump(conf, f, indent=1)
    os.makedirs(os.path.join(run_dir, "run_logs"), exist_ok=True)
    cks = [
        {
            "steps": s,
            "file_path": f"results/{name}/{cfg['behavior']}/{cfg['behavior']}-{s}.onnx",
            "reward": None if cfg.get("trainer") == "sac" else 0.5,
            "creation_time": time.time(),
            "auxillary_file_paths": [f"results/{name}/{cfg['behavior']}/{cfg['behavior']}-{s}.pt"],
        }
        for s in steps
    ]
    final = dict(cks[-1], file_path=f"results/{name}/{cfg['behavior']}.onnx")
    status = {
        cfg["behavior"]: {"checkpoints": cks, "final_checkpoint": final},
        "metadata": {"stats_format_version": "0.3.0", "mlagents_version": "1.1.0", "torch_version": torch.__version__},
    }
    with open(os.path.join(run_dir, "run_logs", "training_status.json"), "w") as f:
        json.dump(status, f, indent=4)
    # a sidecar (not part of the zoo layout) saying what the generator built
    meta = {
        "name": name,
        "behavior": cfg["behavior"],
        "trainer": cfg.get("trainer", "ppo"),
        "shared_critic": bool(cfg.get("shared_critic")),
        "observations": [
            dict(onnx_input=f"obs_{i}", kind=k, shape=list(s), observation_type=t.name)
            for i, (k, s, t) in enumerate(cfg["obs"])
        ],
        "continuous_size": cfg["cont"],
        "discrete_branches": cfg["branches"],
        "network_settings": cfg["net"],
        "unnormalised_inputs": cfg.get("unnormalise", []),
        "steps": steps,
        "optimizer": opt_note,
    }
    with open(os.path.join(out_root, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return run_dir, opt_note


def prune_example(run_dir, behavior):
    """examples/ keep ML-Agents' run-folder layout less its byte-for-byte copies: checkpoint.pt (the
    final <Behavior>-<step>.pt again), the final step's <Behavior>-<step>.onnx (<Behavior>.onnx again)
    and config.json (configuration.yaml again); the generator's sidecar goes inside as generated.json."""
    folder = os.path.join(run_dir, behavior)
    os.remove(os.path.join(folder, "checkpoint.pt"))
    os.remove(os.path.join(run_dir, "config.json"))
    stepped = sorted(f for f in os.listdir(folder) if f.endswith(".onnx"))
    final = max(stepped, key=lambda f: int(f[len(behavior) + 1 : -5]))
    os.remove(os.path.join(folder, final))
    meta = os.path.join(os.path.dirname(run_dir), os.path.basename(run_dir) + ".meta.json")
    os.replace(meta, os.path.join(run_dir, "generated.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="where the run folders go")
    ap.add_argument("--committed", action="store_true", help="the fixtures kept in tests/fixtures/mlagents/")
    ap.add_argument(
        "--examples",
        action="store_true",
        help="the example policies kept in examples/ (pruned of byte-for-byte copies)",
    )
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    configs = EXAMPLES if args.examples else COMMITTED if args.committed else CONFIGS
    names = args.names or list(configs)
    failed = 0
    for i, name in enumerate(configs):
        if name not in names:
            continue
        try:
            run_dir, note = generate(name, configs[name], args.out, seed=1000 + i)
            if args.examples:
                prune_example(run_dir, configs[name]["behavior"])
            print(f"OK   {name:28s} {run_dir}  [{note}]", flush=True)
        except Exception as e:  # noqa: BLE001
            failed += 1
            import traceback

            traceback.print_exc()
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
