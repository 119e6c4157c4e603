// The console harness of tests/test_unity_communicator.py: ML-Agents' own Academy, Agents, BehaviorParameters,
// DecisionRequester, VectorSensor and BufferSensor (com.unity.ml-agents 3.0.0, Tests~/MLAgentsRuntime) stepped through
// the real Academy.EnvironmentStep, with ServedCommunicator in the trainer's place, against a live `--mode serve`.
//
//   mono Harness.exe --mlagents-port 1 ADDRESS SENSORS CONTINUOUS BRANCHES MASKS AGENTS STEPS EPISODE CHURN WAIT_MS OUT
//       [warm] [--also NAME ADDRESS2 SENSORS CONTINUOUS BRANCHES MASKS AGENTS]
//   mono Harness.exe --policy-server ADDRESS - SENSORS ... (the sample's Heuristic-Only fallback: no communicator)
//   mono Harness.exe --bare - - SENSORS ... (no communicator, no server: ML-Agents' own step, Heuristic doing nothing)
//
// SENSORS: comma-separated, in the policy's input order: vN (the last: CollectObservations' N floats; another: a
// VectorSensor of the agent's own), cCxHxW (a pixel sensor, written through ObservationWriter[c, h, w] as a camera
// writes), gCxHxW (the same writing shades in [0, 1] that are no pixels), bNxF (ML-Agents' BufferSensorComponent, 0..N rows of F appended each step). Sensor names are chosen so that
// ML-Agents' sort by name keeps the given order. BRANCHES: comma-separated or "-". MASKS: 1 masks a random action of
// each branch each step. EPISODE: steps per episode (0: one episode). CHURN: 1 destroys the oldest agent and adds one
// every 7 steps. WAIT_MS: ServedCommunicator's wait. --also: a second behaviour NAME with agents of its own, served from
// ADDRESS2 (the first behaviour is "Served"; the addresses go through the sample's ServePolicies.AddressFor).
// OUT gets, per line sent, SENT seq agent reset|- observations masks behaviour; per agent and step, WROTE step agent
// observations (what the harness itself wrote, channel-first); per action applied, APPLIED step agent seq continuous
// discrete behaviour; per step, STEP step ms (Academy.EnvironmentStep) and COMM step ms bytes longest-call-ms
// collections (the communicator's own calls on the main thread, apart: TimedCommunicator). Observations: inputs joined by ';', each
// flat; a camera frame handed over as its bytes is 'u' and the bytes.
using System;
using System.Collections.Concurrent;
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

/// <summary>A camera's stand-in that ML-Agents cannot tell from one: an ISensor of shape [C, H, W] that writes
/// pixel / 255 through ObservationWriter's [c, h, w] indexer, as ML-Agents' CameraSensor does.</summary>
public sealed class PixelSensor : ISensor
{
    public readonly int C, H, W;
    public readonly string Name;
    public float[] Chw; // what was written last, channel-first
    public System.Random Rng;
    public bool Shades;

    readonly ObservationSpec m_Spec; // made once: GetObservationSpec is asked every step, and its allocations would count as ours

    public PixelSensor(string name, int c, int h, int w)
    {
        Name = name; C = c; H = h; W = w; Chw = new float[c * h * w];
        m_Spec = ObservationSpec.Visual(c, h, w);
    }

    public ObservationSpec GetObservationSpec() { return m_Spec; }

    public int Write(ObservationWriter writer)
    {
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                {
                    // a pixel as ML-Agents' WriteTexture writes one (byte / 255f), or (Shades) a shade in [0, 1] that
                    // is no pixel, as a grayscale camera's (r + g + b) / 3f / 255f mostly is
                    float v = Shades ? (float)Rng.NextDouble() : Rng.Next(256) / 255f;
                    Chw[(c * H + h) * W + w] = v;
                    writer[c, h, w] = v;
                }
        return C * H * W;
    }

    public byte[] GetCompressedObservation() { return null; }
    public void Update() { }
    public void Reset() { }
    public CompressionSpec GetCompressionSpec() { return CompressionSpec.Default(); }
    public string GetName() { return Name; }
}

public sealed class HarnessSensors : SensorComponent
{
    public string[] Specs = new string[0];
    public readonly List<ISensor> Made = new List<ISensor>();
    public System.Random Rng;

    public override ISensor[] CreateSensors()
    {
        Made.Clear();
        for (int i = 0; i < Specs.Length; i++)
        {
            string name = "S" + (char)('a' + i) + "_"; // sorts by position, before CollectObservations' "VectorSensor_..."
            int[] dims = Array.ConvertAll(Specs[i].Substring(1).Split('x'), int.Parse);
            if (Specs[i][0] == 'v') Made.Add(new VectorSensor(dims[0], name + "vector"));
            else if (Specs[i][0] == 'c' || Specs[i][0] == 'g')
                Made.Add(new PixelSensor(name + "camera", dims[0], dims[1], dims[2]) { Rng = Rng, Shades = Specs[i][0] == 'g' });
            else Made.Add(null); // a BufferSensorComponent of its own (below)
        }
        return Made.FindAll(s => s != null).ToArray();
    }
}

// The sample's base class (Samples~/ServedPolicy): with a communicator its Heuristic is never called.
public sealed class HarnessAgent : ServedHeuristicAgent
{
    public int Id, CollectSize, EpisodeSteps;
    public bool Masks;
    public int[] Branches = new int[0];
    public System.Random Rng;
    public Action<HarnessAgent, ActionBuffers> Applied;
    public Action<HarnessAgent> Wrote;
    public bool Bare;
    public readonly List<float[]> Written = new List<float[]>(); // this step's inputs in the policy's order
    public List<BufferSensorComponent> Buffers = new List<BufferSensorComponent>();
    int m_Steps;

    public override void CollectObservations(VectorSensor sensor)
    {
        Written.Clear();
        var own = GetComponent<HarnessSensors>();
        int buffer = 0;
        for (int i = 0; i < own.Specs.Length; i++)
        {
            int[] dims = Array.ConvertAll(own.Specs[i].Substring(1).Split('x'), int.Parse);
            if (own.Specs[i][0] == 'v')
            {
                var v = new float[dims[0]];
                for (int k = 0; k < v.Length; k++) v[k] = Value();
                ((VectorSensor)own.Made[i]).Reset();
                ((VectorSensor)own.Made[i]).AddObservation(v);
                Written.Add(v);
            }
            else if (own.Specs[i][0] == 'c' || own.Specs[i][0] == 'g')
                Written.Add(null); // filled from the sensor after it wrote (below)
            else
            {
                var rows = new float[dims[0] * dims[1]]; // unused rows stay zero, as the BufferSensor pads them
                int n = Rng.Next(dims[0] + 1);
                for (int r = 0; r < n; r++)
                {
                    var row = new float[dims[1]];
                    for (int k = 0; k < row.Length; k++) row[k] = rows[r * dims[1] + k] = Value();
                    Buffers[buffer].AppendObservation(row);
                }
                buffer++;
                Written.Add(rows);
            }
        }
        var collect = new float[CollectSize];
        for (int k = 0; k < collect.Length; k++) collect[k] = Value();
        sensor.AddObservation(collect);
        Written.Add(collect);
    }

    float Value() { return (float)(Rng.NextDouble() * 4 - 2); }

    public override void WriteDiscreteActionMask(IDiscreteActionMask actionMask)
    {
        if (!Masks) return;
        for (int b = 0; b < Branches.Length; b++) actionMask.SetActionEnabled(b, Rng.Next(Branches[b]), false);
    }

    public override void Heuristic(in ActionBuffers actionsOut)
    {
        if (!Bare) base.Heuristic(actionsOut);
    }

    public override void OnActionReceived(ActionBuffers actions)
    {
        // the step's sensors have all written by now (the communicator had them write), and EndEpisode below
        // collects once more: the step's record is taken first
        var own = GetComponent<HarnessSensors>();
        for (int i = 0; i < own.Specs.Length; i++)
            if (own.Specs[i][0] == 'c' || own.Specs[i][0] == 'g') Written[i] = (float[])((PixelSensor)own.Made[i]).Chw.Clone();
        Wrote(this);
        Applied(this, actions);
        m_Steps++;
        if (EpisodeSteps > 0 && m_Steps % EpisodeSteps == 0) EndEpisode();
    }
}

/// <summary>ServedCommunicator as the Academy sees it, each call timed on the main thread: the communicator's own part
/// of a step (the sensors' writes included, which a trainer's communicator makes too), apart from ML-Agents' step, and
/// what it allocated there (GC.GetAllocatedBytesForCurrentThread: the main thread's allocations only).</summary>
public sealed class TimedCommunicator : ICommunicator
{
    readonly ICommunicator m_Inner;
    readonly Stopwatch m_Clock = new Stopwatch();
    long m_Bytes;
    int m_Collections;
    public long Ticks, Bytes, LongestTicks;
    public int Collections; // garbage collections (any thread's) that ran during the calls

    public TimedCommunicator(ICommunicator inner) { m_Inner = inner; }

    public void Restart() { Ticks = Bytes = LongestTicks = 0; Collections = 0; }

    void Start() { m_Collections = GC.CollectionCount(0); m_Bytes = GC.GetAllocatedBytesForCurrentThread(); m_Clock.Restart(); }

    void Stop()
    {
        m_Clock.Stop();
        Bytes += GC.GetAllocatedBytesForCurrentThread() - m_Bytes;
        Collections += GC.CollectionCount(0) - m_Collections;
        Ticks += m_Clock.ElapsedTicks;
        LongestTicks = Math.Max(LongestTicks, m_Clock.ElapsedTicks);
    }

    public event QuitCommandHandler QuitCommandReceived { add { m_Inner.QuitCommandReceived += value; } remove { m_Inner.QuitCommandReceived -= value; } }
    public event ResetCommandHandler ResetCommandReceived { add { m_Inner.ResetCommandReceived += value; } remove { m_Inner.ResetCommandReceived -= value; } }
    public bool Initialize(CommunicatorInitParameters p, out UnityRLInitParameters o) { return m_Inner.Initialize(p, out o); }
    public void SubscribeBrain(string name, ActionSpec spec) { m_Inner.SubscribeBrain(name, spec); }
    public void PutObservations(string key, AgentInfo info, List<ISensor> sensors) { Start(); m_Inner.PutObservations(key, info, sensors); Stop(); }
    public void DecideBatch() { Start(); m_Inner.DecideBatch(); Stop(); }
    public ActionBuffers GetActions(string key, int agentId) { Start(); var r = m_Inner.GetActions(key, agentId); Stop(); return r; }
    public void Dispose() { m_Inner.Dispose(); }
}

public static class Harness
{
    static string F(float v) { return v.ToString("R", CultureInfo.InvariantCulture); }

    static string Ms(long ticks) { return (ticks * 1000.0 / Stopwatch.Frequency).ToString("F3", CultureInfo.InvariantCulture); }

    static string Flat(object o)
    {
        var pixels = o as byte[];
        if (pixels != null) return "u" + string.Join(",", pixels); // a camera's frame handed over as its bytes
        var rows = o as float[][];
        if (rows == null) return string.Join(",", Array.ConvertAll((float[])o, F));
        var parts = new List<string>();
        foreach (float[] row in rows) parts.Add(string.Join(",", Array.ConvertAll(row, F)));
        return string.Join(",", parts);
    }

    /// <summary>One behaviour's agents: their sensors, actions and masks.</summary>
    sealed class Kind
    {
        public string Name;
        public string[] Own; // the harness' sensors (the policy's inputs but the last)
        public int CollectSize, Continuous, Agents;
        public int[] Branches;
        public bool Masks;

        public Kind(string name, string sensors, string continuous, string branches, string masks, string agents)
        {
            Name = name;
            string[] specs = sensors.Split(',');
            // the policy's order: CollectObservations' sensor ("VectorSensor_size...") sorts after the harness' own ("Sa_...")
            int collectAt = specs.Length - 1;
            if (specs[collectAt][0] != 'v') throw new ArgumentException("the policy's last input must be a vector here");
            var own = new List<string>(specs);
            own.RemoveAt(collectAt);
            Own = own.ToArray();
            CollectSize = int.Parse(specs[collectAt].Substring(1));
            Continuous = int.Parse(continuous);
            Branches = branches == "-" ? new int[0] : Ints(branches);
            Masks = masks == "1";
            Agents = int.Parse(agents);
        }
    }

    public static int Main(string[] args)
    {
        bool bare = Array.IndexOf(args, "--bare") >= 0;
        bool fallback = !bare && Array.IndexOf(args, "--mlagents-port") < 0; // the Academy reads the flag itself
        int a = Array.IndexOf(args, bare ? "--bare" : fallback ? "--policy-server" : "--mlagents-port") + 2;
        string address = fallback ? args[a - 1] : args[a];
        var kinds = new List<Kind> { new Kind("Served", args[a + 1], args[a + 2], args[a + 3], args[a + 4], args[a + 5]) };
        int steps = int.Parse(args[a + 6]), episode = int.Parse(args[a + 7]);
        bool churn = args[a + 8] == "1";
        int waitMs = int.Parse(args[a + 9]);
        var output = new StreamWriter(args[a + 10]);
        // --also NAME ADDRESS SENSORS CONTINUOUS BRANCHES MASKS AGENTS: a second behaviour, served from its own address
        // (the sample's --policy-server NAME=ADDRESS)
        var addresses = new Dictionary<string, string> { { "", address } };
        int also = Array.IndexOf(args, "--also");
        if (also >= 0)
        {
            kinds.Add(new Kind(args[also + 1], args[also + 3], args[also + 4], args[also + 5], args[also + 6], args[also + 7]));
            addresses[args[also + 1]] = args[also + 2];
        }
        // what the background thread reports is queued and written between steps, so that the main thread never waits
        // on it for the file
        var reported = new ConcurrentQueue<string>();

        ServedCommunicator communicator = null;
        TimedCommunicator timed = null;
        CommunicatorFactory.Register(() =>
        {
            communicator = new ServedCommunicator(behaviour => ServePolicies.AddressFor(addresses, behaviour), waitMs);
            // a first connection on a loaded machine (Mono compiling the client, the server's first answer) can take
            // more than the default 1 s; the main thread never waits on it either way
            communicator.ConnectTimeoutMs = 5000;
            // --models NAME=MODEL,...: the model each behaviour asks its server for (one server of several models)
            int models = Array.IndexOf(args, "--models");
            if (models >= 0)
            {
                var named = new Dictionary<string, string>();
                foreach (string pair in args[models + 1].Split(','))
                    named[pair.Substring(0, pair.IndexOf('='))] = pair.Substring(pair.IndexOf('=') + 1);
                communicator.ModelFor = behaviour => named[behaviour];
            }
            communicator.Log = message => reported.Enqueue("LOGGED " + message.Replace('\n', ' '));
            communicator.Sent = (behaviour, seq, batch, reset) =>
            {
                int q = behaviour.IndexOf('?');
                string name = q < 0 ? behaviour : behaviour.Substring(0, q);
                foreach (AgentRequest r in batch) // (formatted now: the buffers are reused once the batch is answered)
                    reported.Enqueue("SENT " + seq + " " + r.AgentId + (reset.Contains(r.AgentId) ? " reset " : " - ") +
                        string.Join(";", Array.ConvertAll(r.Observations, Flat)) + " " +
                        (r.ActionMasks == null ? "-" : string.Join(",", r.ActionMasks)) + " " + name);
            };
            return timed = new TimedCommunicator(communicator);
        });

        var live = new List<GameObject>();
        var later = new List<Func<string>>();
        int made = 0, step = 0, answeredCount = 0;
        Action<Kind> add = kind =>
        {
            var go = new GameObject("agent" + made);
            go.SetActive(false); // fields are set before OnEnable, as the Inspector sets them
            var bp = go.AddComponent<BehaviorParameters>();
            bp.BehaviorName = kind.Name;
            if (fallback || bare) bp.BehaviorType = BehaviorType.HeuristicOnly;
            bp.BrainParameters.VectorObservationSize = kind.CollectSize;
            bp.BrainParameters.ActionSpec = new ActionSpec(kind.Continuous, kind.Branches);
            var rng = new System.Random(1000 + made);
            var sensors = go.AddComponent<HarnessSensors>();
            sensors.Specs = kind.Own;
            sensors.Rng = rng;
            var buffers = new List<BufferSensorComponent>();
            for (int i = 0; i < kind.Own.Length; i++)
            {
                if (kind.Own[i][0] != 'b') continue;
                int[] dims = Array.ConvertAll(kind.Own[i].Substring(1).Split('x'), int.Parse);
                var buffer = go.AddComponent<BufferSensorComponent>();
                buffer.SensorName = "S" + (char)('a' + i) + "_buffer";
                buffer.MaxNumObservables = dims[0];
                buffer.ObservableSize = dims[1];
                buffers.Add(buffer);
            }
            var agent = go.AddComponent<HarnessAgent>();
            agent.Id = made;
            agent.CollectSize = kind.CollectSize;
            agent.Masks = kind.Masks;
            agent.Branches = kind.Branches;
            agent.EpisodeSteps = episode;
            agent.Rng = rng;
            agent.Bare = bare;
            agent.Buffers = buffers;
            // what an agent wrote and applied is kept as it is and formatted after the step, outside its timing
            agent.Wrote = who =>
            {
                int at = step, id = who.Id;
                object[] written = who.Written.ToArray(); // (the step's own arrays: the next step writes new ones)
                later.Add(() => "WROTE " + at + " " + id + " " + string.Join(";", Array.ConvertAll(written, Flat)));
            };
            agent.Applied = (who, actions) =>
            {
                long seq = communicator == null ? -1 : communicator.AnsweredSeq(bp.FullyQualifiedBehaviorName, who.Id);
                // the fallback's answers are not numbered: an answer is a first continuous action that is not zero
                if (seq >= 0 || (communicator == null && actions.ContinuousActions.Length > 0 && actions.ContinuousActions[0] != 0f))
                    answeredCount++;
                int at = step, id = who.Id;
                float[] c = actions.ContinuousActions.Array == null ? new float[0] : new float[actions.ContinuousActions.Length];
                for (int i = 0; i < c.Length; i++) c[i] = actions.ContinuousActions[i];
                int[] d = actions.DiscreteActions.Array == null ? new int[0] : new int[actions.DiscreteActions.Length];
                for (int i = 0; i < d.Length; i++) d[i] = actions.DiscreteActions[i];
                later.Add(() => "APPLIED " + at + " " + id + " " + seq + " " +
                    (c.Length == 0 ? "-" : string.Join(",", Array.ConvertAll(c, F))) + " " +
                    (d.Length == 0 ? "-" : string.Join(",", Array.ConvertAll(d, v => v.ToString(CultureInfo.InvariantCulture)))) +
                    " " + kind.Name);
            };
            var requester = go.AddComponent<DecisionRequester>();
            requester.DecisionPeriod = 1;
            go.SetActive(true);
            live.Add(go);
            made++;
        };
        foreach (Kind kind in kinds)
            for (int i = 0; i < kind.Agents; i++) add(kind);

        bool warm = args.Length > a + 11 && args[a + 11] == "warm";
        var clock = new Stopwatch();
        for (step = 0; warm ? answeredCount < steps && step < 1500 : step < steps; step++)
        {
            if (churn && step > 0 && step % 7 == 0)
            {
                UnityEngine.Object.Destroy(live[0]);
                live.RemoveAt(0);
                add(kinds[0]);
            }
            if (timed != null) timed.Restart();
            clock.Restart();
            Academy.Instance.EnvironmentStep();
            clock.Stop();
            lock (output)
            {
                output.WriteLine("STEP " + step + " " + Ms(clock.Elapsed.Ticks));
                foreach (Func<string> format in later) output.WriteLine(format());
                later.Clear();
                if (timed != null) output.WriteLine("COMM " + step + " " + Ms(timed.Ticks) + " " + timed.Bytes + " " + Ms(timed.LongestTicks) + " " + timed.Collections);
                string line;
                while (reported.TryDequeue(out line)) output.WriteLine(line);
            }
            System.Threading.Thread.Sleep(20); // the rest of a frame: answers arrive between steps
        }
        Academy.Instance.Dispose();
        lock (output)
        {
            string line;
            while (reported.TryDequeue(out line)) output.WriteLine(line);
            output.Close();
        }
        Console.WriteLine("DONE agents=" + made + " communicator=" + (communicator != null));
        return communicator != null || fallback || bare ? 0 : 1;
    }

    static int[] Ints(string text) { return Array.ConvertAll(text.Split(','), s => int.Parse(s, CultureInfo.InvariantCulture)); }
}
