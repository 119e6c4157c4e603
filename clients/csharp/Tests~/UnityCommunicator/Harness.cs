// The console harness of tests/test_unity_communicator.py: ML-Agents' own Academy, Agents, BehaviorParameters,
// DecisionRequester and VectorSensors (com.unity.ml-agents 3.0.0, Tests~/MLAgentsRuntime) stepped through the real
// Academy.EnvironmentStep, with ServedCommunicator in the trainer's place, against a live `--mode serve`.
//
//   mono Harness.exe --mlagents-port 1 ADDRESS VECTOR_SIZES CONTINUOUS BRANCHES MASKS AGENTS STEPS EPISODE CHURN WAIT_MS OUT
//
// VECTOR_SIZES: comma-separated; the first is CollectObservations' size, each other one a VectorSensor of the agent's
// own (named so that ML-Agents' sort by name keeps the given order). BRANCHES: comma-separated or "-". MASKS: 1 masks
// a random action of each branch each step. EPISODE: steps per episode (0: one episode). CHURN: 1 adds an agent and
// removes the oldest every 7 steps. OUT gets one line per batch sent (SENT), per action applied (APPLIED), per step
// (STEP, its wall time in ms).
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Text;
using MLAgentsInference;
using Unity.MLAgents;
using Unity.MLAgents.Actuators;
using Unity.MLAgents.Policies;
using Unity.MLAgents.Sensors;
using UnityEngine;

public sealed class ExtraVectors : SensorComponent
{
    public int[] Sizes = new int[0];
    public VectorSensor[] Made;

    public override ISensor[] CreateSensors()
    {
        Made = new VectorSensor[Sizes.Length];
        for (int i = 0; i < Sizes.Length; i++) Made[i] = new VectorSensor(Sizes[i], "VectorSensor_size" + Sizes[0] + "_extra" + (char)('a' + i));
        return Made;
    }
}

public sealed class HarnessAgent : Agent
{
    public int Id, CollectSize, EpisodeSteps;
    public bool Masks;
    public int[] Branches = new int[0];
    public System.Random Rng;
    public Action<HarnessAgent, ActionBuffers> Applied;
    int m_Steps;

    public override void CollectObservations(VectorSensor sensor)
    {
        for (int i = 0; i < CollectSize; i++) sensor.AddObservation(Value());
        var extra = GetComponent<ExtraVectors>();
        foreach (VectorSensor s in extra.Made)
        {
            s.Reset();
            for (int i = 0; i < s.GetObservationSpec().Shape[0]; i++) s.AddObservation(Value());
        }
    }

    float Value() { return (float)(Rng.NextDouble() * 4 - 2); }

    public override void WriteDiscreteActionMask(IDiscreteActionMask actionMask)
    {
        if (!Masks) return;
        for (int b = 0; b < Branches.Length; b++) actionMask.SetActionEnabled(b, Rng.Next(Branches[b]), false);
    }

    public override void OnActionReceived(ActionBuffers actions)
    {
        Applied(this, actions);
        m_Steps++;
        if (EpisodeSteps > 0 && m_Steps % EpisodeSteps == 0) EndEpisode();
    }
}

public static class Harness
{
    static string F(float v) { return v.ToString("R", CultureInfo.InvariantCulture); }

    public static int Main(string[] args)
    {
        int a = Array.IndexOf(args, "--mlagents-port") + 2; // the Academy reads the flag itself
        string address = args[a];
        int[] sizes = Ints(args[a + 1]);
        int continuous = int.Parse(args[a + 2]);
        int[] branches = args[a + 3] == "-" ? new int[0] : Ints(args[a + 3]);
        bool masks = args[a + 4] == "1";
        int agents = int.Parse(args[a + 5]), steps = int.Parse(args[a + 6]), episode = int.Parse(args[a + 7]);
        bool churn = args[a + 8] == "1";
        int waitMs = int.Parse(args[a + 9]);
        var output = new StreamWriter(args[a + 10]) { AutoFlush = false };

        ServedCommunicator communicator = null;
        CommunicatorFactory.Register(() =>
        {
            communicator = new ServedCommunicator(name => address, waitMs);
            communicator.Sent = (behaviour, seq, batch, reset) =>
            {
                var line = new StringBuilder();
                lock (output)
                {
                    foreach (AgentRequest r in batch)
                    {
                        line.Clear();
                        line.Append("SENT ").Append(seq).Append(' ').Append(r.AgentId).Append(reset.Contains(r.AgentId) ? " reset " : " - ");
                        var parts = new List<string>();
                        foreach (object o in r.Observations) parts.Add(string.Join(",", Array.ConvertAll((float[])o, F)));
                        line.Append(string.Join(";", parts)).Append(' ');
                        line.Append(r.ActionMasks == null ? "-" : string.Join(",", r.ActionMasks));
                        output.WriteLine(line.ToString());
                    }
                }
            };
            return communicator;
        });

        var live = new List<GameObject>();
        int made = 0, step = 0;
        Action add = () =>
        {
            var go = new GameObject("agent" + made);
            var bp = go.AddComponent<BehaviorParameters>();
            bp.BehaviorName = "Served";
            bp.BrainParameters.VectorObservationSize = sizes[0];
            bp.BrainParameters.ActionSpec = new ActionSpec(continuous, branches);
            var extra = go.AddComponent<ExtraVectors>();
            var rest = new int[sizes.Length - 1];
            Array.Copy(sizes, 1, rest, 0, rest.Length);
            extra.Sizes = rest;
            go.SetActive(false); // the Agent's fields are set before its OnEnable, as the Inspector sets them
            var agent = go.AddComponent<HarnessAgent>();
            agent.Id = made;
            agent.CollectSize = sizes[0];
            agent.Masks = masks;
            agent.Branches = branches;
            agent.EpisodeSteps = episode;
            agent.Rng = new System.Random(1000 + made);
            agent.Applied = (who, actions) =>
            {
                long seq = communicator.AnsweredSeq(bp.FullyQualifiedBehaviorName, who.Id);
                var c = new string[actions.ContinuousActions.Length];
                for (int i = 0; i < c.Length; i++) c[i] = F(actions.ContinuousActions[i]);
                var d = new string[actions.DiscreteActions.Length];
                for (int i = 0; i < d.Length; i++) d[i] = actions.DiscreteActions[i].ToString(CultureInfo.InvariantCulture);
                lock (output) output.WriteLine("APPLIED " + step + " " + who.Id + " " + seq + " " + (c.Length == 0 ? "-" : string.Join(",", c)) + " " + (d.Length == 0 ? "-" : string.Join(",", d)));
            };
            var requester = go.AddComponent<DecisionRequester>();
            requester.DecisionPeriod = 1;
            go.SetActive(true);
            live.Add(go);
            made++;
        };
        for (int i = 0; i < agents; i++) add();

        var clock = new Stopwatch();
        for (step = 0; step < steps; step++)
        {
            if (churn && step > 0 && step % 7 == 0)
            {
                UnityEngine.Object.Destroy(live[0]);
                live.RemoveAt(0);
                add();
            }
            clock.Restart();
            Academy.Instance.EnvironmentStep();
            clock.Stop();
            lock (output) output.WriteLine("STEP " + step + " " + clock.Elapsed.TotalMilliseconds.ToString("F3", CultureInfo.InvariantCulture));
            System.Threading.Thread.Sleep(20); // a frame's other work: answers arrive between steps
        }
        Academy.Instance.Dispose();
        lock (output) output.Close();
        Console.WriteLine("DONE agents=" + made + " communicator=" + (communicator != null));
        return communicator != null ? 0 : 1;
    }

    static int[] Ints(string text) { return Array.ConvertAll(text.Split(','), s => int.Parse(s, CultureInfo.InvariantCulture)); }
}
