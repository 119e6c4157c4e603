// An ML-Agents ICommunicator that takes the trainer's place and asks `python inference.py --mode serve` instead, without
// ever holding a frame: DecideBatch hands each behaviour's requests to a background thread and returns; GetActions
// reads the newest answer that has arrived. Built against com.unity.ml-agents 3.0.0 (Apache-2.0; its ICommunicator,
// CommunicatorFactory, ObservationWriter and AgentInfo are used as that version defines them).
using System;
using System.Collections.Generic;
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
        public int ReadTimeoutMs { get; set; }
        /// <summary>Back-off after a failed connection or a lost server: doubles from FirstRetryMs up to LastRetryMs.</summary>
        public int FirstRetryMs { get; set; }
        public int LastRetryMs { get; set; }

        /// <summary>Called on a background thread with every batch as it is sent: behaviour name, sequence number (one
        /// per batch handed over), the requests, the agent ids whose memory starts over on this line. For tests and
        /// logs; keep it short.</summary>
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
            var observations = new object[sensors.Count];
            for (int i = 0; i < sensors.Count; i++)
            {
                ObservationSpec spec = sensors[i].GetObservationSpec();
                int size = 1;
                for (int d = 0; d < spec.Shape.Length; d++) size *= spec.Shape[d];
                var values = new float[size];
                SetTarget(_writer, values, spec, 0);
                sensors[i].Write(_writer);
                observations[i] = Layout(values, spec);
            }
            b.Put(info.episodeId, observations, Masks(info.discreteActionMasks));
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

        // ML-Agents writes a [C, H, W] observation at (h * W + w) * C + c; the server takes it channel-first. A
        // [N, F] buffer (attention) is N rows of F.
        private static object Layout(float[] values, ObservationSpec spec)
        {
            var shape = spec.Shape;
            if (shape.Length == 3)
            {
                int c = shape[0], h = shape[1], w = shape[2];
                var chw = new float[values.Length];
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++)
                        for (int k = 0; k < c; k++)
                            chw[(k * h + y) * w + x] = values[(y * w + x) * c + k];
                return chw;
            }
            if (shape.Length == 2)
            {
                var rows = new float[shape[0]][];
                for (int r = 0; r < rows.Length; r++)
                {
                    rows[r] = new float[shape[1]];
                    Array.Copy(values, r * shape[1], rows[r], 0, shape[1]);
                }
                return rows;
            }
            return values;
        }

        // ML-Agents: true = masked; the server: 1 = allowed, 0 = masked.
        private static int[] Masks(bool[] masked)
        {
            if (masked == null) return null;
            var allowed = new int[masked.Length];
            for (int i = 0; i < masked.Length; i++) allowed[i] = masked[i] ? 0 : 1;
            return allowed;
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

        /// <summary>One behaviour: its connection, its thread, the requests of the step being built, the answers.</summary>
        private sealed class Behaviour
        {
            private readonly ServedCommunicator _owner;
            private readonly string _name, _address;
            private readonly ActionSpec _spec;
            private readonly object _lock = new object();
            private readonly Thread _thread;
            private List<AgentRequest> _building = new List<AgentRequest>(); // main thread only
            private List<AgentRequest> _ready; // handed to the thread (newest wins)
            private long _readySeq, _nextSeq;
            private readonly Dictionary<int, Answer> _answers = new Dictionary<int, Answer>();
            private readonly HashSet<int> _resets = new HashSet<int>();
            private readonly Dictionary<int, long> _applied = new Dictionary<int, long>();
            private bool _stop;
            private long _doneSeq = -1, _waitedFor = -1;

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
                _spec = spec;
                _thread = new Thread(Run) { IsBackground = true, Name = "ServedCommunicator " + name };
                _thread.Start();
            }

            public void Put(int agentId, object[] observations, int[] masks)
            {
                _building.Add(new AgentRequest(agentId, observations, masks));
            }

            public void EndEpisode(int agentId)
            {
                lock (_lock)
                {
                    _resets.Add(agentId); // the agent's next line starts from zero memory
                    _answers.Remove(agentId);
                }
                _applied.Remove(agentId);
            }

            public void Send()
            {
                if (_building.Count == 0) return;
                lock (_lock)
                {
                    _ready = _building; // an older batch not yet taken is dropped: only the newest observations matter
                    _readySeq = _nextSeq++;
                    Monitor.Pulse(_lock);
                }
                _building = new List<AgentRequest>();
            }

            public ActionBuffers Actions(int agentId, int waitMs)
            {
                Answer a;
                lock (_lock)
                {
                    if (waitMs > 0 && _waitedFor != _nextSeq - 1 && _doneSeq < _nextSeq - 1)
                    {
                        // this step's answer may be on its way: wait for it, never past the budget
                        var until = DateTime.UtcNow.AddMilliseconds(waitMs);
                        while (_doneSeq < _nextSeq - 1)
                        {
                            var left = until - DateTime.UtcNow;
                            if (left <= TimeSpan.Zero || !Monitor.Wait(_lock, left)) break;
                        }
                        _waitedFor = _nextSeq - 1; // the step's other agents don't wait again
                    }
                    if (!_answers.TryGetValue(agentId, out a)) a.Seq = -1;
                }
                _applied[agentId] = a.Seq;
                if (a.Action == null) return new ActionBuffers(new float[_spec.NumContinuousActions], new int[_spec.NumDiscreteActions]);
                var continuous = new float[_spec.NumContinuousActions];
                Array.Copy(a.Action.ContinuousActions, continuous, Math.Min(continuous.Length, a.Action.ContinuousActions.Length));
                var discrete = new int[_spec.NumDiscreteActions];
                Array.Copy(a.Action.DiscreteActions, discrete, Math.Min(discrete.Length, a.Action.DiscreteActions.Length));
                return new ActionBuffers(continuous, discrete);
            }


            public long AnsweredSeq(int agentId)
            {
                long seq;
                return _applied.TryGetValue(agentId, out seq) ? seq : -1;
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
                try
                {
                    while (true)
                    {
                        List<AgentRequest> batch;
                        long seq;
                        lock (_lock)
                        {
                            while (_ready == null && !_stop) Monitor.Wait(_lock);
                            if (_stop) return;
                            batch = _ready;
                            seq = _readySeq;
                            _ready = null;
                        }
                        if (retryMs > 0) Thread.Sleep(retryMs);
                        try
                        {
                            if (client == null || !client.IsOpen)
                            {
                                if (client != null) client.Dispose();
                                client = PolicyClient.Open(_address, _owner.ConnectTimeoutMs, _owner.ReadTimeoutMs);
                            }
                            var reset = new List<long>();
                            lock (_lock)
                            {
                                foreach (AgentRequest r in batch)
                                    if (_resets.Remove((int)r.AgentId)) reset.Add(r.AgentId);
                            }
                            foreach (long id in reset) client.Reset(id);
                            var sent = _owner.Sent;
                            if (sent != null) sent(_name, seq, batch, reset);
                            PolicyAction[] actions = client.ActMany(batch);
                            Store(batch, actions, seq);
                            if (failing) _owner.Log("policy server " + _address + " (" + _name + "): answering again");
                            failing = false;
                            retryMs = 0;
                        }
                        catch (PolicyException e)
                        {
                            if (e.Actions != null) Store(batch, e.Actions, seq); // the other agents' answers survive
                            if (client != null && client.IsOpen && e.Actions != null) continue;
                            if (client != null) client.Dispose();
                            client = null;
                            if (!failing)
                                _owner.Log("policy server " + _address + " (" + _name + "): " + e.Message +
                                    "; agents keep their last actions, retrying with back-off");
                            failing = true;
                            retryMs = retryMs == 0 ? _owner.FirstRetryMs : Math.Min(retryMs * 2, _owner.LastRetryMs);
                            lock (_lock)
                            {
                                _doneSeq = seq; // nothing more will come for this batch: don't make GetActions wait
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

            private void Store(List<AgentRequest> batch, PolicyAction[] actions, long seq)
            {
                lock (_lock)
                {
                    for (int i = 0; i < batch.Count && i < actions.Length; i++)
                        if (actions[i] != null && !_resets.Contains((int)batch[i].AgentId))
                            _answers[(int)batch[i].AgentId] = new Answer { Action = actions[i], Seq = seq };
                    _doneSeq = seq;
                    Monitor.PulseAll(_lock);
                }
            }
        }
    }
}
