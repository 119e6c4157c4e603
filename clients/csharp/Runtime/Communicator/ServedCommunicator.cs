// An ML-Agents ICommunicator that takes the trainer's place and asks `python inference.py --mode serve` instead, without
// ever holding a frame: DecideBatch hands each behaviour's requests to a background thread and returns; GetActions
// reads the newest answer that has arrived. Built against com.unity.ml-agents 3.0.0 (Apache-2.0; its ICommunicator,
// CommunicatorFactory, ObservationWriter and AgentInfo are used as that version defines them).
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Reflection;
using System.Threading;
using Unity.MLAgents;
using Unity.MLAgents.Actuators;
using Unity.MLAgents.Sensors;

namespace MLAgentsInference
{
    /// <summary>Serves every agent whose Behavior Type is Default from a `--mode serve` server, one connection and one
    /// background thread per behaviour. Register it before the first scene loads (<see cref="Register"/>); the Academy
    /// creates it when the player starts with <c>--mlagents-port N</c> (any N: the port is not used).</summary>
    public sealed class ServedCommunicator : ICommunicator
    {
        /// <summary>The longest GetActions waits for the answer to this step's observations (0: never waits).</summary>
        public const int MaxWaitMs = 5;

        // ObservationWriter.SetTarget is internal in ML-Agents 3.0.0: reached once through reflection, then called
        // through a delegate (no per-call reflection cost). Unity's managed code stripping must keep it: link.xml.
        private static readonly Action<ObservationWriter, IList<float>, ObservationSpec, int> SetTarget = FindSetTarget();

        private readonly Func<string, string> _addressFor;
        private readonly Dictionary<string, Behaviour> _behaviours = new Dictionary<string, Behaviour>();
        private readonly ObservationWriter _writer = new ObservationWriter();
        private readonly int _waitMs;
        private bool _pending; // observations were put since the last DecideBatch

        /// <param name="addressFor">The server's address (HOST:PORT or unix:PATH) for a behaviour name.</param>
        /// <param name="waitMs">How long the first GetActions of a step may wait for that step's answers, 0 (the
        /// default: never; answers are then at least one decision late) to <see cref="MaxWaitMs"/>.</param>
        public ServedCommunicator(Func<string, string> addressFor, int waitMs = 0)
        {
            if (addressFor == null) throw new ArgumentNullException("addressFor");
            if (waitMs < 0 || waitMs > MaxWaitMs) throw new ArgumentOutOfRangeException("waitMs", "0 to " + MaxWaitMs + " ms");
            _addressFor = addressFor;
            _waitMs = waitMs;
            ConnectTimeoutMs = 1000;
            ReadTimeoutMs = 10000;
            FirstRetryMs = 250;
            LastRetryMs = 8000;
        }

        /// <summary>Registers a ServedCommunicator for the Academy to create (call before the first scene loads,
        /// e.g. from a [RuntimeInitializeOnLoadMethod(RuntimeInitializeLoadType.BeforeSceneLoad)] method).</summary>
        public static void Register(Func<string, string> addressFor, int waitMs = 0)
        {
            CommunicatorFactory.Register(() => new ServedCommunicator(addressFor, waitMs));
        }

        public int ConnectTimeoutMs { get; set; }
        /// <summary>The model a behaviour asks the server for, from its behaviour name (without "?team=N"), where one
        /// server holds several (a run folder of several behaviours: serve names each model by its behaviour name,
        /// so <c>name => name</c> is the usual mapping); null (the default), or a null answer: the server's one
        /// model. Read when a behaviour first subscribes.</summary>
        public Func<string, string> ModelFor { get; set; }
        public int ReadTimeoutMs { get; set; }
        /// <summary>Back-off after a failed connection or a lost server: doubles from FirstRetryMs up to LastRetryMs.</summary>
        public int FirstRetryMs { get; set; }
        public int LastRetryMs { get; set; }

        /// <summary>Called on a background thread with every batch as it is sent: behaviour name, sequence number (one
        /// per batch handed over), the requests, the agent ids whose memory starts over on this line. For tests and
        /// logs; keep it short, and copy what you keep: the requests' buffers are reused once the batch is answered.</summary>
        public Action<string, long, IList<AgentRequest>, ICollection<long>> Sent;

        /// <summary>Where log lines go (default: UnityEngine.Debug.LogWarning). Each failure is logged once, not per step.</summary>
        public Action<string> Log = message => UnityEngine.Debug.LogWarning(message);

        // The Academy's quit/reset commands come from a trainer; a policy server sends none.
        public event QuitCommandHandler QuitCommandReceived { add { } remove { } }
        public event ResetCommandHandler ResetCommandReceived { add { } remove { } }

        public bool Initialize(CommunicatorInitParameters initParameters, out UnityRLInitParameters initParametersOut)
        {
            initParametersOut = new UnityRLInitParameters { TrainerCapabilities = new UnityRLCapabilities() };
            return true;
        }

        public void SubscribeBrain(string name, ActionSpec actionSpec)
        {
            if (_behaviours.ContainsKey(name)) return;
            _behaviours[name] = new Behaviour(this, name, _addressFor(name), actionSpec);
        }

        public void PutObservations(string brainKey, AgentInfo info, List<ISensor> sensors)
        {
            Behaviour b;
            if (!_behaviours.TryGetValue(brainKey, out b)) return;
            if (info.done)
            {
                b.EndEpisode(info.episodeId);
                return;
            }
            b.Put(info.episodeId, sensors, info.discreteActionMasks, _writer);
            _pending = true;
        }

        public void DecideBatch()
        {
            // RemotePolicy calls this once per agent: the first call of a step sends, the others find nothing new.
            if (!_pending) return;
            _pending = false;
            foreach (Behaviour b in _behaviours.Values) b.Send();
        }

        public ActionBuffers GetActions(string key, int agentId)
        {
            Behaviour b;
            return _behaviours.TryGetValue(key, out b) ? b.Actions(agentId, _waitMs) : ActionBuffers.Empty;
        }

        /// <summary>The sequence number of the batch whose answer the last GetActions gave this agent (-1: none yet).</summary>
        public long AnsweredSeq(string behaviour, int agentId)
        {
            Behaviour b;
            return _behaviours.TryGetValue(behaviour, out b) ? b.AnsweredSeq(agentId) : -1;
        }

        public void Dispose()
        {
            foreach (Behaviour b in _behaviours.Values) b.Dispose();
            _behaviours.Clear();
        }

        private static Action<ObservationWriter, IList<float>, ObservationSpec, int> FindSetTarget()
        {
            MethodInfo m = typeof(ObservationWriter).GetMethod(
                "SetTarget", BindingFlags.Instance | BindingFlags.NonPublic | BindingFlags.Public, null,
                new[] { typeof(IList<float>), typeof(ObservationSpec), typeof(int) }, null);
            if (m == null)
                throw new MissingMethodException("ObservationWriter.SetTarget(IList<float>, ObservationSpec, int) not found: " +
                    "ServedCommunicator is built for com.unity.ml-agents 3.0.0");
            return (Action<ObservationWriter, IList<float>, ObservationSpec, int>)Delegate.CreateDelegate(
                typeof(Action<ObservationWriter, IList<float>, ObservationSpec, int>), m);
        }

        /// <summary>One request's buffers, reused step after step: a request is in one batch at a time (the one being
        /// built, the one handed over, or the one being sent), and goes back to its agent's free ones when that batch is
        /// taken up again by the main thread.</summary>
        private sealed class Request
        {
            public readonly Slot Owner;
            public readonly AgentRequest Wire;
            private float[][] _values = new float[0][]; // per sensor: as written; a [C, H, W] one channel-first
            private byte[][] _pixels = new byte[0][];
            private float[][][] _rows = new float[0][][];
            private int[] _masks;

            public Request(Slot owner)
            {
                Owner = owner;
                Wire = new AgentRequest(owner.AgentId, new object[0]);
            }

            public void Fill(List<ISensor> sensors, bool[] masked, ObservationWriter writer, ref float[] scratch)
            {
                int n = sensors.Count;
                if (_values.Length != n)
                {
                    _values = new float[n][];
                    _pixels = new byte[n][];
                    _rows = new float[n][][];
                    Wire.Observations = new object[n];
                }
                for (int i = 0; i < n; i++)
                {
                    ObservationSpec spec = sensors[i].GetObservationSpec();
                    var shape = spec.Shape;
                    int size = 1;
                    for (int d = 0; d < shape.Length; d++) size *= shape[d];
                    if (_values[i] == null || _values[i].Length != size) _values[i] = new float[size];
                    float[] values = _values[i];
                    if (shape.Length == 3)
                    {
                        // ML-Agents writes a [C, H, W] observation at (h * W + w) * C + c; the server takes it
                        // channel-first
                        if (scratch.Length < size) scratch = new float[size];
                        SetTarget(writer, scratch, spec, 0);
                        sensors[i].Write(writer);
                        int c = shape[0], h = shape[1], w = shape[2];
                        for (int y = 0; y < h; y++)
                            for (int x = 0; x < w; x++)
                                for (int k = 0; k < c; k++)
                                    values[(k * h + y) * w + x] = scratch[(y * w + x) * c + k];
                        Wire.Observations[i] = Pixels(i, values) ? (object)_pixels[i] : values;
                        continue;
                    }
                    SetTarget(writer, values, spec, 0);
                    sensors[i].Write(writer);
                    if (shape.Length == 2) // an [N, F] buffer (attention): N rows of F
                    {
                        float[][] rows = _rows[i];
                        if (rows == null || rows.Length != shape[0] || rows[0].Length != shape[1])
                        {
                            rows = _rows[i] = new float[shape[0]][];
                            for (int r = 0; r < rows.Length; r++) rows[r] = new float[shape[1]];
                        }
                        for (int r = 0; r < rows.Length; r++) Array.Copy(values, r * shape[1], rows[r], 0, shape[1]);
                        Wire.Observations[i] = rows;
                    }
                    else Wire.Observations[i] = values;
                }
                if (masked == null) Wire.ActionMasks = null;
                else
                {
                    // ML-Agents: true = masked; the server: 1 = allowed, 0 = masked
                    if (_masks == null || _masks.Length != masked.Length) _masks = new int[masked.Length];
                    for (int i = 0; i < masked.Length; i++) _masks[i] = masked[i] ? 0 : 1;
                    Wire.ActionMasks = _masks;
                }
            }

            // A camera writes each pixel as byte / 255f (ML-Agents' ObservationWriter.WriteTexture): such a frame goes
            // to the client as its bytes (the same numbers on the line, written from a table instead of formatted);
            // any other value (a float render texture, a depth map) keeps the floats.
            private bool Pixels(int i, float[] values)
            {
                if (_pixels[i] == null || _pixels[i].Length != values.Length) _pixels[i] = new byte[values.Length];
                byte[] pixels = _pixels[i];
                for (int j = 0; j < values.Length; j++)
                {
                    float v = values[j];
                    if (!(v >= 0f && v <= 1f)) return false;
                    int k = (int)(v * 255f + 0.5f);
                    if ((float)(k / 255f) != v) return false;
                    pixels[j] = (byte)k;
                }
                return true;
            }
        }

        /// <summary>One agent (ML-Agents' agent id): its free requests, and the actions GetActions hands out (the agent
        /// copies them at once, in Agent.DecideAction).</summary>
        private sealed class Slot
        {
            public readonly int AgentId;
            public readonly long FirstSeq; // answers to earlier batches belong to its previous episode
            public long Seq = -1; // the batch whose answer Continuous and Discrete hold (-1: none yet, zeros)
            public readonly Stack<Request> Free = new Stack<Request>(3);
            public readonly float[] Continuous;
            public readonly int[] Discrete;

            public Slot(int agentId, long firstSeq, ActionSpec spec)
            {
                AgentId = agentId;
                FirstSeq = firstSeq;
                Continuous = new float[spec.NumContinuousActions];
                Discrete = new int[spec.NumDiscreteActions];
            }
        }

        /// <summary>One step's requests of one behaviour, and the agents whose episode ended before it. Owned by the
        /// main thread while built, by the lock while handed over, by the background thread while sent; the main thread
        /// alone gives its requests back.</summary>
        private sealed class Batch
        {
            public readonly List<AgentRequest> Wire = new List<AgentRequest>();
            public readonly List<Request> Requests = new List<Request>();
            public readonly List<int> Ended = new List<int>();
            public long Seq;

            public void Add(Request r)
            {
                Requests.Add(r);
                Wire.Add(r.Wire);
            }

            public void Release()
            {
                foreach (Request r in Requests) r.Owner.Free.Push(r);
                Requests.Clear();
                Wire.Clear();
                Ended.Clear();
            }
        }

        /// <summary>One behaviour: its connection, its thread, the requests of the step being built, the answers.
        /// The main thread never waits for the background thread's socket work: it only tries the lock (Monitor.TryEnter,
        /// at most HandOverMs; when the lock is busy, the step's observations are dropped or the new answers wait for the
        /// next step), and the background thread holds it only to take a batch or store answers, never while it
        /// connects, writes or reads. In a steady step the main thread
        /// allocates nothing (every buffer is reused), so it adds no garbage for the collector to stop the game for.</summary>
        private sealed class Behaviour
        {
            // The longest the main thread tries the lock to hand a step over (answers are only ever taken when it is
            // free at once).
            private const int HandOverMs = 1;
            private readonly ServedCommunicator _owner;
            private readonly string _name, _address, _model;
            private readonly ActionSpec _spec;
            private readonly object _lock = new object();
            private readonly Thread _thread;
            // main thread only
            private readonly Dictionary<int, Slot> _slots = new Dictionary<int, Slot>();
            private readonly List<int> _ended = new List<int>(); // episodes ended since the last hand-over
            private float[] _scratch = new float[0];
            private Batch _building = new Batch();
            private long _nextSeq, _collected = -1, _sentAt;
            private bool _refresh; // a batch was handed over (or tried): the step's first GetActions takes new answers
            // under _lock
            private Batch _ready; // handed to the thread (newest wins)
            private readonly Stack<Batch> _spare = new Stack<Batch>(); // sent or dropped, not yet given back
            private readonly Dictionary<int, Answer> _answers = new Dictionary<int, Answer>();
            private bool _stop;
            private long _doneSeq = -1; // (also read without the lock, through Volatile.Read)
            // background thread only
            private readonly HashSet<int> _resets = new HashSet<int>(); // whose next line starts from zero memory

            private struct Answer
            {
                public PolicyAction Action;
                public long Seq;
            }

            public Behaviour(ServedCommunicator owner, string name, string address, ActionSpec spec)
            {
                _owner = owner;
                _name = name;
                _address = address;
                int team = name.IndexOf('?');
                _model = owner.ModelFor == null ? null : owner.ModelFor(team < 0 ? name : name.Substring(0, team));
                _spec = spec;
                _thread = new Thread(Run) { IsBackground = true, Name = "ServedCommunicator " + name };
                _thread.Start();
            }

            public void Put(int agentId, List<ISensor> sensors, bool[] masked, ObservationWriter writer)
            {
                Slot slot;
                if (!_slots.TryGetValue(agentId, out slot)) _slots[agentId] = slot = new Slot(agentId, _nextSeq, _spec);
                Request r = slot.Free.Count > 0 ? slot.Free.Pop() : new Request(slot);
                r.Fill(sensors, masked, writer, ref _scratch);
                _building.Add(r);
            }

            public void EndEpisode(int agentId)
            {
                _ended.Add(agentId); // sent with the next batch: the agent's next line starts from zero memory
                _slots.Remove(agentId); // its next episode starts with zero actions and takes no older answer
            }

            public void Send()
            {
                if (_building.Requests.Count == 0) return;
                _refresh = true;
                Batch next = null;
                _building.Seq = _nextSeq++; // one number per step, handed over or not
                _sentAt = Stopwatch.GetTimestamp();
                if (!Monitor.TryEnter(_lock, HandOverMs))
                {
                    // the background thread holds the lock (only ever for a few microseconds, never during socket
                    // work, but it may have lost its CPU meanwhile): this step's observations are dropped rather than
                    // waited for; the next step's go
                    _building.Release();
                    return;
                }
                try
                {
                    Batch dropped = _ready; // an older batch not yet taken is dropped: only the newest observations matter
                    if (dropped != null) _building.Ended.AddRange(dropped.Ended);
                    _building.Ended.AddRange(_ended);
                    _ready = _building;
                    next = dropped ?? (_spare.Count > 0 ? _spare.Pop() : null);
                    Monitor.Pulse(_lock);
                }
                finally
                {
                    Monitor.Exit(_lock);
                }
                _ended.Clear();
                if (next == null) next = new Batch(); // only while the first batches are alive
                next.Release();
                _building = next;
            }

            public ActionBuffers Actions(int agentId, int waitMs)
            {
                if (_refresh)
                {
                    _refresh = false;
                    Collect(waitMs);
                }
                Slot slot;
                if (!_slots.TryGetValue(agentId, out slot)) // (asked for an agent that put no observations)
                    return new ActionBuffers(new float[_spec.NumContinuousActions], new int[_spec.NumDiscreteActions]);
                return new ActionBuffers(slot.Continuous, slot.Discrete);
            }

            // Once per step, at its first GetActions: the answers that arrived since the last step, into the agents'
            // action buffers. With waitMs > 0, first waits that long at most for this step's answer.
            private void Collect(int waitMs)
            {
                long step = _nextSeq - 1;
                long done = Volatile.Read(ref _doneSeq);
                if (done == _collected && (waitMs == 0 || done >= step)) return;
                // the budget counts from the hand-over: handing over and waiting together stay within waitMs
                if (!Monitor.TryEnter(_lock, Math.Max(0, waitMs - ElapsedMs(_sentAt)))) return; // the next step takes them
                try
                {
                    while (waitMs > 0 && _doneSeq < step)
                    {
                        // this step's answer may be on its way: wait for it, never past the budget
                        int left = waitMs - ElapsedMs(_sentAt);
                        if (left <= 0 || !Monitor.Wait(_lock, left)) break;
                    }
                    if (_doneSeq == _collected) return;
                    foreach (Slot slot in _slots.Values)
                    {
                        Answer a;
                        if (!_answers.TryGetValue(slot.AgentId, out a) || a.Seq < slot.FirstSeq || a.Seq <= slot.Seq) continue;
                        Array.Copy(a.Action.ContinuousActions, slot.Continuous, Math.Min(slot.Continuous.Length, a.Action.ContinuousActions.Length));
                        Array.Copy(a.Action.DiscreteActions, slot.Discrete, Math.Min(slot.Discrete.Length, a.Action.DiscreteActions.Length));
                        slot.Seq = a.Seq;
                    }
                    _collected = _doneSeq;
                }
                finally
                {
                    Monitor.Exit(_lock);
                }
            }

            // Whole milliseconds since `since`, rounded up: a budget less this is never more than what is left of it.
            private static int ElapsedMs(long since)
            {
                return (int)(((Stopwatch.GetTimestamp() - since) * 1000 + Stopwatch.Frequency - 1) / Stopwatch.Frequency);
            }

            public long AnsweredSeq(int agentId)
            {
                Slot slot;
                return _slots.TryGetValue(agentId, out slot) ? slot.Seq : -1;
            }

            public void Dispose()
            {
                lock (_lock)
                {
                    _stop = true;
                    Monitor.Pulse(_lock);
                }
            }

            private void Run()
            {
                PolicyClient client = null;
                int retryMs = 0;
                bool failing = false;
                var reset = new List<long>();
                Batch batch = null;
                try
                {
                    while (true)
                    {
                        lock (_lock)
                        {
                            if (batch != null) _spare.Push(batch); // the main thread gives its requests back when it takes it up
                            while (_ready == null && !_stop) Monitor.Wait(_lock);
                            if (_stop) return;
                            batch = _ready;
                            _ready = null;
                            foreach (int id in batch.Ended) _answers.Remove(id);
                        }
                        foreach (int id in batch.Ended) _resets.Add(id);
                        try
                        {
                            if (retryMs > 0) Thread.Sleep(retryMs);
                            Exchange(ref client, batch, reset, ref failing);
                            retryMs = 0;
                        }
                        catch (PolicyException e)
                        {
                            if (e.Actions != null) Store(batch, e.Actions); // the other agents' answers survive
                            if (!(client != null && client.IsOpen && e.Actions != null))
                            {
                                if (client != null) client.Dispose();
                                client = null;
                                if (!failing)
                                    _owner.Log("policy server " + _address + " (" + _name + "): " + e.Message +
                                        "; agents keep their last actions, retrying with back-off");
                                failing = true;
                                retryMs = retryMs == 0 ? _owner.FirstRetryMs : Math.Min(retryMs * 2, _owner.LastRetryMs);
                            }
                            lock (_lock)
                            {
                                _doneSeq = batch.Seq; // nothing more will come for this batch: don't make GetActions wait
                                Monitor.PulseAll(_lock);
                            }
                        }
                    }
                }
                finally
                {
                    if (client != null) client.Dispose();
                }
            }

            // Connects when needed and sends the batch: the socket work, with no lock held.
            private void Exchange(ref PolicyClient client, Batch batch, List<long> reset, ref bool failing)
            {
                if (client == null || !client.IsOpen)
                {
                    if (client != null) client.Dispose();
                    client = PolicyClient.Open(_address, _owner.ConnectTimeoutMs, _owner.ReadTimeoutMs, _model);
                }
                reset.Clear();
                foreach (AgentRequest r in batch.Wire)
                    if (_resets.Remove((int)r.AgentId)) reset.Add(r.AgentId);
                foreach (long id in reset) client.Reset(id);
                var sent = _owner.Sent;
                if (sent != null) sent(_name, batch.Seq, batch.Wire, reset);
                PolicyAction[] actions = client.ActMany(batch.Wire);
                Store(batch, actions);
                if (failing) _owner.Log("policy server " + _address + " (" + _name + "): answering again");
                failing = false;
            }

            private void Store(Batch batch, PolicyAction[] actions)
            {
                lock (_lock)
                {
                    List<AgentRequest> wire = batch.Wire;
                    for (int i = 0; i < wire.Count && i < actions.Length; i++)
                        if (actions[i] != null)
                            _answers[(int)wire[i].AgentId] = new Answer { Action = actions[i], Seq = batch.Seq };
                    _doneSeq = batch.Seq;
                    Monitor.PulseAll(_lock);
                }
            }
        }
    }
}
