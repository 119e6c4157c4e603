#!/usr/bin/env python3
"""Refresh the pinned copy of ML-Agents' C# runtime that the Unity communicator's tests compile against
(clients/csharp/Tests~/MLAgentsRuntime/, read by tests/test_unity_communicator.py).

The copy is the smallest closed set of com.unity.ml-agents' own Runtime files that `Academy`, `Agent`,
`ICommunicator`, `CommunicatorFactory`, `ObservationWriter`, `DecisionRequester`, `BufferSensor(Component)` and
`StackingSensor` need to compile (FILES below, 84 files, found by compiling with Mono's mcs and adding the file of each
type it could not find; the 21 protobuf message files of Grpc/CommunicatorObjects, GRPC_FILES, compiled as the package
compiles them, into an assembly of their own), ML-Agents' LICENSE.md (Apache-2.0), its package.json, and the
Google.Protobuf DLL the package ships
(its demonstration writer and training-analytics side channel are protobuf messages). Left out: the gRPC transport
(Communicator/RpcCommunicator.cs, Grpc/CommunicatorObjects/UnityToExternalGrpc.cs and Grpc.Core.dll: the Academy
only names RpcCommunicator under UNITY_EDITOR || UNITY_STANDALONE, which the tests do not define), the editor code
and every sensor, actuator and integration nothing above references.

Mono's mcs (the compiler CI has) knows C# 7.2; five files of 3.0.0 use C# 8 and 9 forms. They are lowered here, each
by a rule that keeps the meaning, and the copy says so (LOWERED.md):
- `x[^k]` on an array -> `x[x.Length - k]`;
- `using var v = e;` -> `using (var v = e) { ... }` around the rest of its block (the same disposal point);
- `x is >= a and < b` (C# 9) -> `(x >= a && x < b)`;
- a local function (Sampler.cs's MultiRange) -> a `Func<float>` lambda, called the same way;
- `Select(i => (int)i)` -> `Select(dim => (int)dim)`: mcs refuses a lambda parameter that shadows a loop's `i`;
- `m_Brain?.DecideAction() ?? new ActionBuffers()` (a `ref readonly` return under `?.`, which mcs refuses) ->
  `m_Brain != null ? m_Brain.DecideAction() : new ActionBuffers()`;
- `foreach (var (a, b) in e)` -> `foreach (var a_b in e)` with `a` and `b` its Key and Value where `e` is a
  dictionary (DICTIONARIES: KeyValuePair has no Deconstruct in .NET Framework's profile), else its Item1 and Item2.
Nothing else is changed; MANIFEST.txt holds each file's SHA-256 as copied from the package and as written here.

    python tools/refresh_mlagents_runtime.py PACKAGE_DIR

PACKAGE_DIR: an unpacked com.unity.ml-agents 3.0.0 (the folder a Unity project keeps under
Library/PackageCache/com.unity.ml-agents@..., or a checkout of the package's repository at its 3.0.0 tag).
Exit 2 with one line on stderr when the folder is not that package or a file or a lowering rule does not apply.
"""

import hashlib
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / "clients" / "csharp" / "Tests~" / "MLAgentsRuntime"
VERSION = "3.0.0"

FILES = """
Academy.cs Actuators/ActionSegment.cs Actuators/ActionSpec.cs Actuators/ActuatorComponent.cs
Actuators/ActuatorDiscreteActionMask.cs Actuators/ActuatorManager.cs Actuators/IActionReceiver.cs
Actuators/IActuator.cs Actuators/IBuiltInActuator.cs Actuators/IDiscreteActionMask.cs Actuators/IHeuristicProvider.cs
Actuators/VectorActuator.cs Agent.cs Analytics/AnalyticsUtils.cs Analytics/Events.cs Analytics/InferenceAnalytics.cs
Analytics/TrainingAnalytics.cs Communicator/CommunicatorFactory.cs Communicator/GrpcExtensions.cs
Communicator/ICommunicator.cs Communicator/UnityRLCapabilities.cs Constants.cs DecisionRequester.cs
Demonstrations/DemonstrationMetaData.cs Demonstrations/DemonstrationSummary.cs Demonstrations/DemonstrationWriter.cs
EnvironmentParameters.cs EpisodeIdCounter.cs IMultiAgentGroup.cs Inference/ApplierImpl.cs
Inference/DynamicTensorShapeExtensions.cs Inference/GeneratorImpl.cs Inference/ModelRunner.cs
Inference/SentisModelInfo.cs Inference/SentisModelParamLoader.cs Inference/TensorApplier.cs
Inference/TensorExtensions.cs Inference/TensorGenerator.cs Inference/TensorNames.cs Inference/TensorProxy.cs
Inference/Utils/Multinomial.cs Inference/Utils/RandomNormal.cs InplaceArray.cs Policies/BehaviorParameters.cs
Policies/BrainParameters.cs Policies/HeuristicPolicy.cs Policies/IPolicy.cs Policies/RemotePolicy.cs
Policies/SentisPolicy.cs RecursionChecker.cs Sampler.cs Sensors/BufferSensor.cs Sensors/BufferSensorComponent.cs
Sensors/CompressionSpec.cs Sensors/IBuiltInSensor.cs Sensors/ISensor.cs Sensors/ObservationSpec.cs
Sensors/ObservationWriter.cs Sensors/Reflection/BoolReflectionSensor.cs Sensors/Reflection/EnumReflectionSensor.cs
Sensors/Reflection/FloatReflectionSensor.cs Sensors/Reflection/IntReflectionSensor.cs
Sensors/Reflection/ObservableAttribute.cs Sensors/Reflection/QuaternionReflectionSensor.cs
Sensors/Reflection/ReflectionSensorBase.cs Sensors/Reflection/Vector2ReflectionSensor.cs
Sensors/Reflection/Vector3ReflectionSensor.cs Sensors/Reflection/Vector4ReflectionSensor.cs Sensors/SensorComponent.cs
Sensors/SensorShapeValidator.cs Sensors/StackingSensor.cs Sensors/VectorSensor.cs
SideChannels/EngineConfigurationChannel.cs SideChannels/EnvironmentParametersChannel.cs
SideChannels/IncomingMessage.cs SideChannels/OutgoingMessage.cs SideChannels/SideChannel.cs
SideChannels/SideChannelManager.cs SideChannels/StatsSideChannel.cs SideChannels/TrainingAnalyticsSideChannel.cs
StatsRecorder.cs Timer.cs UnityAgentsException.cs Utilities.cs
""".split()
# the protobuf messages, their own assembly in the package (Unity.ML-Agents.CommunicatorObjects); not the gRPC service
GRPC_FILES = """
Grpc/AssemblyInfo.cs Grpc/CommunicatorObjects/AgentAction.cs Grpc/CommunicatorObjects/AgentInfo.cs
Grpc/CommunicatorObjects/AgentInfoActionPair.cs Grpc/CommunicatorObjects/BrainParameters.cs
Grpc/CommunicatorObjects/Capabilities.cs Grpc/CommunicatorObjects/Command.cs
Grpc/CommunicatorObjects/CustomResetParameters.cs Grpc/CommunicatorObjects/DemonstrationMeta.cs
Grpc/CommunicatorObjects/EngineConfiguration.cs Grpc/CommunicatorObjects/Header.cs
Grpc/CommunicatorObjects/Observation.cs Grpc/CommunicatorObjects/SpaceType.cs
Grpc/CommunicatorObjects/TrainingAnalytics.cs Grpc/CommunicatorObjects/UnityInput.cs
Grpc/CommunicatorObjects/UnityMessage.cs Grpc/CommunicatorObjects/UnityOutput.cs
Grpc/CommunicatorObjects/UnityRlInitializationInput.cs Grpc/CommunicatorObjects/UnityRlInitializationOutput.cs
Grpc/CommunicatorObjects/UnityRlInput.cs Grpc/CommunicatorObjects/UnityRlOutput.cs
Grpc/CommunicatorObjects/UnityToExternal.cs
""".split()
OTHER = ["LICENSE.md", "package.json", "Plugins/Google.Protobuf_Packed.dll"]

INDEX_FROM_END = re.compile(r"\b([A-Za-z_][\w.]*)\[\^(\d+)\]")
USING_VAR = re.compile(r"^([ \t]*)using var (\w+) = ([^;]+);[ \t]*$", re.M)
DICTIONARIES = {"m_InputsByName"}  # ModelRunner's Dictionary<string, Tensor>; the other pairs are tuples
RANGE_PATTERN = re.compile(r"\b([\w.]+) is >= (\d+) and < (\d+)")
SHADOWED_LAMBDA = ("Select(i => (int)i)", "Select(dim => (int)dim)")
LOCAL_FUNCTION = (
    "            float MultiRange()\n            {\n"
    "                int sampledInterval = intervalDistr.Sample(intervalSizes);\n"
    "                return intervalFuncs[sampledInterval].Invoke();\n            }\n",
    "            Func<float> MultiRange = () =>\n            {\n"
    "                int sampledInterval = intervalDistr.Sample(intervalSizes);\n"
    "                return intervalFuncs[sampledInterval].Invoke();\n            };\n",
)
NULL_CONDITIONAL_REF = (
    "m_Brain?.DecideAction() ?? new ActionBuffers()",
    "m_Brain != null ? m_Brain.DecideAction() : new ActionBuffers()",
)
FOREACH_PAIR = re.compile(r"^([ \t]*)foreach \(var \((\w+), (\w+)\) in (.+)\)\n([ \t]*)\{\n", re.M)


class RefreshError(Exception):
    pass


def lower_using_var(text: str) -> str:
    """`using var v = e;` -> `using (var v = e)` with a block that ends where the declaration's block ends."""
    while True:
        m = USING_VAR.search(text)
        if not m:
            return text
        depth, i = 0, m.end()
        while i < len(text):
            c = text[i]
            if c == "/" and text.startswith("//", i):
                i = text.index("\n", i)
            elif c == '"':
                i = text.index('"', i + 1)
            elif c == "{":
                depth += 1
            elif c == "}":
                if depth == 0:
                    break
                depth -= 1
            i += 1
        else:
            raise RefreshError("a `using var` declaration without an enclosing block")
        end = text.rfind("\n", 0, i) + 1  # the line of the block's closing brace
        indent = m.group(1)
        head = f"{indent}using (var {m.group(2)} = {m.group(3)})\n{indent}{{"
        text = text[: m.start()] + head + text[m.end() : end] + f"{indent}}}\n" + text[end:]


def foreach_pair(m) -> str:
    """`foreach (var (a, b) in e)` -> one variable, then `a` and `b` taken from it (see the module's docstring)."""
    indent, a, b, e, brace = m.groups()
    pair = f"{a}_{b}"
    first, second = ("Key", "Value") if e in DICTIONARIES else ("Item1", "Item2")
    return (
        f"{indent}foreach (var {pair} in {e})\n{brace}{{\n"
        f"{brace}    var {a} = {pair}.{first};\n{brace}    var {b} = {pair}.{second};\n"
    )


def lower(rel: str, text: str) -> tuple:
    """(text in C# 7.2, the rules applied)."""
    rules = []
    new = INDEX_FROM_END.sub(lambda m: f"{m.group(1)}[{m.group(1)}.Length - {m.group(2)}]", text)
    if new != text:
        rules.append("x[^k] -> x[x.Length - k]")
    text, new = new, RANGE_PATTERN.sub(r"(\1 >= \2 && \1 < \3)", new)
    if new != text:
        rules.append("x is >= a and < b -> (x >= a && x < b)")
    text, new = new, lower_using_var(new)
    if new != text:
        rules.append("using var -> using (...) { }")
    text = new
    for old, replacement, rule in (
        (*SHADOWED_LAMBDA, "Select(i => (int)i) -> Select(dim => (int)dim)"),
        (*LOCAL_FUNCTION, "local function -> Func<float> lambda"),
        (*NULL_CONDITIONAL_REF, "m_Brain?.DecideAction() ?? x -> m_Brain != null ? m_Brain.DecideAction() : x"),
    ):
        if old in text:
            text = text.replace(old, replacement)
            rules.append(rule)
    new = FOREACH_PAIR.sub(foreach_pair, text)
    if new != text:
        rules.append("foreach (var (a, b) in e) -> foreach (var a_b in e) { var a = ...; var b = ...;")
    text = new
    left = re.search(r"float MultiRange\(\)|foreach \(var \(|\[\^\d|\bis [<>]=? *\d|using var ", text)
    if left:
        raise RefreshError(f"{rel}: a C# 8 form no rule here lowers ({left.group(0)})")
    return text, rules


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def refresh(package: Path, dest: Path = DEST) -> list:
    meta = package / "package.json"
    try:
        info = json.loads(meta.read_text())
    except (OSError, ValueError) as e:
        raise RefreshError(f"{package}: not an unpacked com.unity.ml-agents package ({e})") from None
    if info.get("name") != "com.unity.ml-agents" or info.get("version") != VERSION:
        raise RefreshError(f"{package}: {info.get('name')} {info.get('version')}, not com.unity.ml-agents {VERSION}")
    missing = [f for f in [*("Runtime/" + f for f in FILES + GRPC_FILES), *OTHER] if not (package / f).is_file()]
    if missing:
        raise RefreshError(f"{package}: missing {', '.join(missing)}")
    tmp = Path(tempfile.mkdtemp(prefix="mlagents-runtime-", dir=dest.parent))
    try:
        manifest, lowered = [], []
        for rel in [*("Runtime/" + f for f in FILES + GRPC_FILES), *OTHER]:
            data = (package / rel).read_bytes()
            out = tmp / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            written = data
            if rel.endswith(".cs"):
                text, rules = lower(rel, data.decode("utf-8-sig"))
                if rules:
                    written = text.encode()
                    lowered.append(f"- `{rel}`: " + "; ".join(rules))
            out.write_bytes(written)
            manifest.append(f"{sha(data)} {sha(written)} {rel}")
        (tmp / "MANIFEST.txt").write_text(
            f"# com.unity.ml-agents {VERSION}: sha256 as in the package, sha256 as written here, path\n"
            + "\n".join(manifest)
            + "\n"
        )
        (tmp / "LOWERED.md").write_text(
            f"# Files of com.unity.ml-agents {VERSION} lowered to C# 7.2 (Mono's mcs)\n\n"
            "Written by tools/refresh_mlagents_runtime.py; each rule keeps the meaning (see that script).\n\n"
            + "\n".join(lowered)
            + "\n"
        )
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return manifest


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python tools/refresh_mlagents_runtime.py PACKAGE_DIR", file=sys.stderr)
        return 2
    try:
        files = refresh(Path(argv[0]))
    except RefreshError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{len(files)} files written to {DEST.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
