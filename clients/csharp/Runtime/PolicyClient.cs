// The client of `python inference.py --mode serve` (docs/serve.md): one connection, one JSON line per agent,
// one answer per line, in order. C# 7 syntax; System.Net.Sockets and System.Globalization (.NET Standard 2.0) only.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Text;

namespace MLAgentsInference
{
    /// <summary>
    /// A policy served by <c>python inference.py --mode serve --listen HOST:PORT</c> (or <c>unix:PATH</c>).
    /// <see cref="Act(long, object[], int[], bool, long?)"/> sends one agent's line and reads its answer;
    /// <see cref="ActMany(IList{AgentRequest})"/> sends every agent's line in one write and reads all the answers,
    /// which the server computes in one batch. The server keeps each agent's LSTM memory for this connection, by agent id;
    /// <see cref="Reset(long)"/> starts an agent over. Not thread-safe: one thread (Unity's main thread) uses a client.
    /// Caller mistakes (a wrong observation size, NaN, a bad mask) raise ArgumentException before anything is sent;
    /// everything that comes from the connection raises <see cref="PolicyException"/> with a one-line message.
    /// </summary>
    public sealed class PolicyClient : IDisposable
    {
        /// <summary>The connect timeout used when none is given (milliseconds).</summary>
        public const int DefaultConnectTimeoutMs = 10000;

        /// <summary>The read timeout used when none is given (milliseconds).</summary>
        public const int DefaultReadTimeoutMs = 30000;

        private const long MaxId = 1L << 53; // the server echoes integer ids within +-2^53
        private const int MaxAnswerBytes = 64 << 20;
        private static readonly byte[][] PixelText = BuildPixelText();
        private static readonly float[] NoFloats = new float[0];
        private static readonly int[] NoInts = new int[0];
        private static readonly byte[][] AnswerKeys = Array.ConvertAll(
            new[] { "id", "error", "continuous_actions", "discrete_actions", "memory", "actions", "model", "version" }, key => Encoding.ASCII.GetBytes(key));

        private readonly string _address;
        private readonly HashSet<long> _resets = new HashSet<long>();
        private readonly HashSet<long> _known = new HashSet<long>();
        private float[] _scratch = new float[64];
        private bool _binary = true;
        private bool _binaryActions = true;
        private long[] _words = new long[128]; // (TrySkipCopy's)
        private readonly List<Socket> _readable = new List<Socket>(1);
        private readonly List<Socket> _writable = new List<Socket>(1);
        private readonly Random _random = new Random();
        private Socket _socket;
        private bool _disposed;
        private string _closedBecause;
        private byte[] _in = new byte[1 << 16];
        private int _inStart, _inEnd, _scan;
        private int _complete; // _in[.._complete) ends with a newline: whole lines (received ones only)
        private byte[] _out = new byte[1 << 16];
        private int _outLength, _outSent;
        private long[] _ids = new long[64];
        private byte[][] _inputKeys; // ,"obs": or ,"obs_0": ... per input
        private byte[] _route = new byte[0]; // ,"model":"NAME" and ,"version":STEP, as asked for: written into every line
        private string _askedModel;
        private int _readTimeoutMs;
        // the answers' "model" and "version" values as text (quotes included), each with its string: an answer that
        // repeats the text byte for byte gets the same string, without decoding it again (64 answers a step name both)
        private byte[] _modelText;
        private byte[] _versionText;
        private string _version;
        // the keys of the previous answer, in order (AnswerKeys' indexes; -1: another): each is the guess for the key at
        // the same place in the next answer, which serve writes in the same order
        private readonly int[] _keyOrder = { -1, -1, -1, -1, -1, -1, -1, -1 };

        private PolicyClient(Socket socket, string address, int readTimeoutMs, string model, long? version)
        {
            _socket = socket;
            _address = address;
            ReadTimeoutMs = readTimeoutMs;
            _askedModel = model;
            Version = version;
            string route = (model == null ? "" : ",\"model\":" + Json.Quote(model)) +
                           (version.HasValue ? ",\"version\":" + version.Value.ToString(CultureInfo.InvariantCulture) : "");
            _route = Encoding.UTF8.GetBytes(route);
        }

        /// <summary>"HOST:PORT" or "unix:PATH", as connected.</summary>
        public string Address { get { return _address; } }

        /// <summary>The policy's inputs and action sizes (the server's <c>{"info": true}</c> answer, read at connect).</summary>
        public PolicyInfo Info { get; private set; }

        /// <summary>The model this client's lines go to, as the server names it (the behaviour name; the one model served
        /// where none was given at connect). Every line names it where one was given.</summary>
        public string Model { get; private set; }

        /// <summary>The version every line asks for (a loaded checkpoint's step), as given at connect; null: the version
        /// serving at each line.</summary>
        public long? Version { get; private set; }

        /// <summary>The version that answered the latest line (text: a checkpoint's step, "1" for one policy served as
        /// before), the info line's at first; null from a server that does not say. Each <see cref="PolicyAction"/>
        /// carries its own.</summary>
        public string AnsweredVersion { get; private set; }

        /// <summary>False once disposed, or closed after a broken connection, a bad answer or a timeout.</summary>
        public bool IsOpen { get { return _socket != null; } }

        /// <summary>Whether a float[] observation (a vector, camera or grid input) goes out as
        /// <c>{"b64": "..."}</c>, the base64 of its little-endian float32 bytes (true, the default: exact by construction,
        /// and cheaper to write and to read than decimal text), or as a list of JSON numbers (false: for a server that does
        /// not take the binary form). Pixels (byte[]) and entity buffers go out as numbers either way.</summary>
        public bool BinaryObservations
        {
            get { return _binary; }
            set { _binary = value; }
        }

        /// <summary>Whether every line asks for its answer's floats (continuous actions, memory) as <c>{"b64": "..."}</c>,
        /// the base64 of their little-endian float32 bytes (<c>"answer_b64": true</c>; true, the default: cheaper to
        /// read than decimal text), or as JSON numbers (false: the answers every server writes).</summary>
        public bool BinaryActions
        {
            get { return _binaryActions; }
            set { _binaryActions = value; }
        }

        /// <summary>How long one Act or ActMany waits for all its answers (milliseconds; -1: no limit).</summary>
        public int ReadTimeoutMs
        {
            get { return _readTimeoutMs; }
            set
            {
                if (value <= 0 && value != -1) throw new ArgumentOutOfRangeException("value", "a positive number of milliseconds, or -1 for no limit");
                _readTimeoutMs = value;
            }
        }

        /// <summary>Connects over TCP (TCP_NODELAY) and reads the policy's info. PolicyException (Connect) when nothing
        /// answers; every address the host resolves to is tried in turn.</summary>
        public static PolicyClient Connect(string host, int port, int connectTimeoutMs = DefaultConnectTimeoutMs,
                                           int readTimeoutMs = DefaultReadTimeoutMs, string model = null, long? version = null)
        {
            CheckRoute(model, version);
            if (string.IsNullOrEmpty(host)) throw new ArgumentException("a host name or address is needed", "host");
            if (port < 1 || port > 65535) throw new ArgumentOutOfRangeException("port", "a port from 1 to 65535");
            CheckTimeout(connectTimeoutMs, "connectTimeoutMs");
            CheckTimeout(readTimeoutMs, "readTimeoutMs");
            string address = (host.IndexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + port.ToString(CultureInfo.InvariantCulture);
            IPAddress[] candidates;
            IPAddress one;
            if (IPAddress.TryParse(host, out one)) candidates = new[] { one };
            else
            {
                try
                {
                    candidates = Dns.GetHostAddresses(host);
                }
                catch (SocketException e)
                {
                    throw new PolicyException(PolicyFailure.Connect, "cannot connect to " + address + ": the host is not known (" + e.SocketErrorCode + ")");
                }
            }
            PolicyException last = new PolicyException(PolicyFailure.Connect, "cannot connect to " + address + ": the host has no address");
            foreach (IPAddress ip in candidates)
            {
                var socket = new Socket(ip.AddressFamily, SocketType.Stream, ProtocolType.Tcp);
                try
                {
                    ConnectSocket(socket, new IPEndPoint(ip, port), connectTimeoutMs, address);
                    socket.NoDelay = true;
                }
                catch (PolicyException e)
                {
                    socket.Close();
                    last = e;
                    continue;
                }
                return Start(socket, address, readTimeoutMs, model, version);
            }
            throw last;
        }

        /// <summary>Connects to a Unix socket (<c>--listen unix:PATH</c>) and reads the policy's info, where the runtime
        /// opens AF_UNIX stream sockets through a plain EndPoint (.NET Standard 2.0 has no UnixDomainSocketEndPoint).
        /// Tested on Mono 6.8 on Linux only; a platform that refuses it makes this a PolicyException (Connect).</summary>
        public static PolicyClient ConnectUnix(string path, int connectTimeoutMs = DefaultConnectTimeoutMs,
                                               int readTimeoutMs = DefaultReadTimeoutMs, string model = null, long? version = null)
        {
            CheckRoute(model, version);
            if (string.IsNullOrEmpty(path)) throw new ArgumentException("a socket path is needed", "path");
            CheckTimeout(connectTimeoutMs, "connectTimeoutMs");
            CheckTimeout(readTimeoutMs, "readTimeoutMs");
            string address = "unix:" + path;
            Socket socket;
            try
            {
                socket = new Socket(AddressFamily.Unix, SocketType.Stream, ProtocolType.Unspecified);
            }
            catch (Exception e) when (e is SocketException || e is NotSupportedException || e is PlatformNotSupportedException)
            {
                throw new PolicyException(PolicyFailure.Connect, "cannot connect to " + address + ": Unix sockets are not available here (" + e.Message + ")");
            }
            try
            {
                ConnectSocket(socket, new UnixSocketEndPoint(path), connectTimeoutMs, address);
            }
            catch
            {
                socket.Close();
                throw;
            }
            return Start(socket, address, readTimeoutMs, model, version);
        }

        /// <summary>Connects to "HOST:PORT", "[IPv6]:PORT" or "unix:PATH" (the server's --listen text). <paramref name="model"/>:
        /// the served model (behaviour name) every line names, needed where the server serves several; <paramref name="version"/>:
        /// a loaded version (checkpoint step) every line asks for, null for the one serving at each line.</summary>
        public static PolicyClient Open(string address, int connectTimeoutMs = DefaultConnectTimeoutMs,
                                        int readTimeoutMs = DefaultReadTimeoutMs, string model = null, long? version = null)
        {
            if (address == null) throw new ArgumentNullException("address");
            address = address.Trim();
            if (address.StartsWith("unix:", StringComparison.Ordinal)) return ConnectUnix(address.Substring(5), connectTimeoutMs, readTimeoutMs, model, version);
            int colon = address.LastIndexOf(':');
            int port;
            if (colon <= 0 || !int.TryParse(address.Substring(colon + 1), NumberStyles.None, CultureInfo.InvariantCulture, out port))
                throw new ArgumentException("expected HOST:PORT or unix:PATH, got \"" + address + "\"", "address");
            string host = address.Substring(0, colon);
            if (host.StartsWith("[", StringComparison.Ordinal) && host.EndsWith("]", StringComparison.Ordinal)) host = host.Substring(1, host.Length - 2);
            return Connect(host, port, connectTimeoutMs, readTimeoutMs, model, version);
        }

        private static void CheckRoute(string model, long? version)
        {
            if (model != null && model.Trim().Length == 0) throw new ArgumentException("a served model's name, or null", "model");
            if (version.HasValue && version.Value < 0) throw new ArgumentOutOfRangeException("version", "a loaded version (a checkpoint's step, 0 or more), or null");
        }

        private static void CheckTimeout(int ms, string name)
        {
            if (ms <= 0 && ms != -1) throw new ArgumentOutOfRangeException(name, "a positive number of milliseconds, or -1 for no limit");
        }

        private static void ConnectSocket(Socket socket, EndPoint endPoint, int timeoutMs, string address)
        {
            string prefix = "cannot connect to " + address + ": ";
            try
            {
                socket.Blocking = false;
                try
                {
                    socket.Connect(endPoint);
                    return;
                }
                catch (SocketException e)
                {
                    if (e.SocketErrorCode != SocketError.WouldBlock && e.SocketErrorCode != SocketError.InProgress &&
                        e.SocketErrorCode != SocketError.AlreadyInProgress)
                        throw;
                }
                if (!socket.Poll(timeoutMs == -1 ? -1 : (int)Math.Min((long)timeoutMs * 1000, int.MaxValue), SelectMode.SelectWrite))
                    throw new PolicyException(PolicyFailure.Connect, prefix + "no connection within " + timeoutMs.ToString(CultureInfo.InvariantCulture) + " ms");
                int error = (int)socket.GetSocketOption(SocketOptionLevel.Socket, SocketOptionName.Error);
                if (error != 0) throw new SocketException(error);
            }
            catch (SocketException e)
            {
                string why = e.SocketErrorCode == SocketError.ConnectionRefused || e.SocketErrorCode == SocketError.AddressNotAvailable
                    ? "nothing listens there (start python inference.py --mode serve --listen " + address + ")"
                    : e.SocketErrorCode + (string.IsNullOrEmpty(e.Message) ? "" : ", " + e.Message);
                throw new PolicyException(PolicyFailure.Connect, prefix + why);
            }
        }

        private static PolicyClient Start(Socket socket, string address, int readTimeoutMs, string model, long? version)
        {
            var client = new PolicyClient(socket, address, readTimeoutMs, model, version);
            try
            {
                client.ReadInfo();
            }
            catch
            {
                client.Dispose();
                throw;
            }
            return client;
        }

        private void ReadInfo()
        {
            _outLength = 0;
            PutAscii("{\"info\":true");
            PutBytes(_route);
            PutAscii("}\n");
            Dictionary<string, object> info = null;
            string error = null, model = null, version = null;
            Exchange(0, () =>
            {
                int start, end;
                NextLine(out start, out end);
                if (end - start >= 5 && Encoding.ASCII.GetString(_in, start, 5) == "HTTP/")  // (--http's port, say)
                    throw new FormatException("an HTTP server answered (\"" + Encoding.ASCII.GetString(_in, start, Math.Min(end - start, 60)).TrimEnd('\r') +
                                              "\"): PolicyClient speaks serve's JSON lines; give the address of --listen, not of --http");
                var r = new JsonReader(_in, start, end);
                r.BeginObject();
                string key;
                bool id = false;
                while (r.NextKey(out key))
                {
                    if (key == "id" && !id) { id = true; if (!r.IsNull()) throw r.Fail("the info answer's id is not null"); }
                    else if (key == "info" && info == null) { info = r.ReadValue() as Dictionary<string, object>; if (info == null) throw r.Fail("\"info\" is not an object"); }
                    else if (key == "error" && error == null) error = r.ReadString();
                    else if (key == "bounds") r.ReadValue();  // (the server's memory bounds: read, not needed here)
                    else if (key == "model" && model == null) model = r.ReadString();
                    else if (key == "version" && version == null) version = r.ReadString();
                    else throw r.Fail("unexpected key \"" + key + "\"");
                }
                r.End();
            });
            if (error != null && (_route.Length > 0 || error.StartsWith("name the model", StringComparison.Ordinal)))  // (which model or version)
                throw Fail(PolicyFailure.ErrorAnswer, Address + ": " + error + (_askedModel == null ? " (PolicyClient.Open(address, model: NAME))" : ""));
            if (error != null)
                throw Fail(PolicyFailure.BadAnswer, Address + " answered {\"info\": true} with an error (is it python inference.py --mode serve?): " + error);
            if (model != null && _askedModel != null && model != _askedModel)
                throw Fail(PolicyFailure.BadAnswer, "bad answer from " + Address + ": the info of model " + Json.Quote(model) + " for model " + Json.Quote(_askedModel));
            if (info == null) throw Fail(PolicyFailure.BadAnswer, "bad answer from " + Address + ": no \"info\" in the info answer");
            try
            {
                Info = new PolicyInfo(info);
                Model = model ?? _askedModel ?? Info.Behavior;
                _modelText = QuotedText(Model);
                AnsweredVersion = version;
                _inputKeys = Array.ConvertAll(Info.Inputs, input => Encoding.UTF8.GetBytes(
                    Info.Inputs.Length == 1 ? ",\"obs\":" : "," + Json.Quote(input.Name) + ":"));
            }
            catch (FormatException e)
            {
                throw Fail(PolicyFailure.BadAnswer, "bad answer from " + Address + ": " + e.Message);
            }
        }

        // -- the policy's API

        /// <summary>One agent's actions, for a policy with one vector input.</summary>
        public PolicyAction Act(long agentId, float[] observation, int[] actionMasks = null, bool stochastic = false, long? seed = null)
        {
            return Act(agentId, new object[] { observation }, actionMasks, stochastic, seed);
        }

        /// <summary>One agent's actions. <paramref name="observations"/>: one entry per input of <see cref="Info"/>, in
        /// order: a float[] for a vector input; a float[] or byte[] (pixels, scaled by 1/255 as ML-Agents' camera does) of
        /// C*H*W values, channel-first, for a camera or grid; a float[][] of up to N rows of F floats for an entity buffer.
        /// <paramref name="actionMasks"/>: 1 = allowed, 0 = masked, <see cref="PolicyInfo.MaskWidth"/> values (null: all
        /// allowed). <paramref name="stochastic"/>: sample the actions, with <paramref name="seed"/> (0 to 2^63-1; drawn
        /// here when null). PolicyException for an error answer (the connection goes on) and for everything else that
        /// fails on the connection (which is then closed).</summary>
        public PolicyAction Act(long agentId, object[] observations, int[] actionMasks = null, bool stochastic = false, long? seed = null)
        {
            EnsureOpen();
            _outLength = 0;
            WriteLine(agentId, observations, actionMasks, stochastic, seed, -1);
            _ids[0] = agentId;
            PolicyAction[] actions = Exchange(1, null);
            return actions[0];
        }

        /// <summary>Every agent's actions: all the lines in one write, all the answers in one read (the server answers
        /// them in one batch). The answers come in request order. When some lines are answered with an error, the others
        /// still count: PolicyException (ErrorAnswer) names the first, and its <see cref="PolicyException.Actions"/>
        /// holds every agent's actions (null for those that failed).</summary>
        public PolicyAction[] ActMany(IList<AgentRequest> agents)
        {
            if (agents == null) throw new ArgumentNullException("agents");
            EnsureOpen();
            _outLength = 0;
            if (_ids.Length < agents.Count) _ids = new long[Math.Max(agents.Count, _ids.Length * 2)];
            for (int i = 0; i < agents.Count; i++)
            {
                AgentRequest a = agents[i];
                if (a == null) throw new ArgumentException("agents[" + i.ToString(CultureInfo.InvariantCulture) + "] is null", "agents");
                WriteLine(a.AgentId, a.Observations, a.ActionMasks, a.Stochastic, a.Seed, i);
                _ids[i] = a.AgentId;
            }
            return Exchange(agents.Count, null);
        }

        /// <summary>ActMany for a policy with one vector input: agent i's observation is observations[i].</summary>
        public PolicyAction[] ActMany(long[] agentIds, float[][] observations, int[][] actionMasks = null)
        {
            if (agentIds == null) throw new ArgumentNullException("agentIds");
            if (observations == null) throw new ArgumentNullException("observations");
            if (observations.Length != agentIds.Length || (actionMasks != null && actionMasks.Length != agentIds.Length))
                throw new ArgumentException("one observation (and one mask, when masks are given) per agent id");
            var requests = new AgentRequest[agentIds.Length];
            for (int i = 0; i < requests.Length; i++)
                requests[i] = new AgentRequest(agentIds[i], observations[i], actionMasks == null ? null : actionMasks[i]);
            return ActMany(requests);
        }

        /// <summary>The agent starts over from zero memory on its next line (an episode's start). Costs no round trip.</summary>
        public void Reset(long agentId)
        {
            CheckId(agentId, -1);
            _resets.Add(agentId);
        }

        /// <summary>Every agent this connection has sent a line for starts over on its next line.</summary>
        public void ResetAll()
        {
            _resets.UnionWith(_known);
        }

        /// <summary>Closes the connection; the server forgets this connection's memories.</summary>
        public void Dispose()
        {
            _disposed = true;
            Close("the client was disposed");
        }

        // -- writing lines

        private void EnsureOpen()
        {
            if (_disposed) throw new ObjectDisposedException("PolicyClient", "the client for " + _address + " was disposed");
            if (_socket == null) throw new PolicyException(PolicyFailure.Closed, "the connection to " + _address + " is closed (" + _closedBecause + ")");
        }

        private static void CheckId(long agentId, int index)
        {
            if (agentId < -MaxId || agentId > MaxId)
                throw new ArgumentOutOfRangeException("agentId", Where(index) + "an agent id must lie within +-2^53 (the server echoes no other)");
        }

        private static string Where(int index) // (ActMany's request index, -1 for Act)
        {
            return index < 0 ? "" : "agents[" + index.ToString(CultureInfo.InvariantCulture) + "]: ";
        }

        // the line being written, for the messages of ArgumentException (built only when one is thrown)
        private long _lineAgent;
        private int _lineIndex;

        private string Agent()
        {
            return Where(_lineIndex) + "agent " + _lineAgent.ToString(CultureInfo.InvariantCulture) + ": ";
        }

        private void WriteLine(long agentId, object[] observations, int[] masks, bool stochastic, long? seed, int index)
        {
            CheckId(agentId, index);
            _lineAgent = agentId;
            _lineIndex = index;
            PolicyInput[] inputs = Info.Inputs;
            if (observations == null) throw new ArgumentNullException("observations", Agent() + "no observations");
            if (observations.Length != inputs.Length)
                throw new ArgumentException(Agent() + "this policy takes " + inputs.Length.ToString(CultureInfo.InvariantCulture) + " input(s), got " +
                                            observations.Length.ToString(CultureInfo.InvariantCulture) + " observation(s)", "observations");
            if (seed.HasValue && seed.Value < 0) throw new ArgumentOutOfRangeException("seed", Agent() + "a seed from 0 to 2^63-1");
            // (no rollback of a line cut short by an ArgumentException: Act and ActMany start _out over at every call)
            PutAscii("{\"id\":");
            Ensure(24);
            _outLength = Numbers.WriteLong(_out, _outLength, agentId);
            PutBytes(_route);
            for (int i = 0; i < inputs.Length; i++)
            {
                PutBytes(_inputKeys[i]);
                WriteObservation(inputs[i], observations[i]);
            }
            if (masks != null)
            {
                if (Info.MaskWidth == 0) throw new ArgumentException(Agent() + "action masks given, but this policy has no discrete actions", "actionMasks");
                if (masks.Length != Info.MaskWidth)
                    throw new ArgumentException(Agent() + "action masks: expected " + Info.MaskWidth.ToString(CultureInfo.InvariantCulture) +
                                                " values (the branches side by side), got " + masks.Length.ToString(CultureInfo.InvariantCulture), "actionMasks");
                PutAscii(",\"action_masks\":[");
                Ensure(2 * masks.Length + 1);
                for (int k = 0; k < masks.Length; k++)
                {
                    if (masks[k] != 0 && masks[k] != 1) throw new ArgumentException(Agent() + "action masks hold 1 (allowed) or 0 (masked) only", "actionMasks");
                    if (k > 0) _out[_outLength++] = (byte)',';
                    _out[_outLength++] = (byte)('0' + masks[k]);
                }
                _out[_outLength++] = (byte)']';
            }
            if (_resets.Count > 0 && _resets.Contains(agentId)) PutAscii(",\"reset\":true");
            if (_binaryActions) PutBytes(AnswerBinary);
            if (stochastic)
            {
                PutAscii(",\"stochastic\":true,\"seed\":");
                Ensure(24);
                _outLength = Numbers.WriteLong(_out, _outLength, seed.HasValue ? seed.Value : DrawSeed());
            }
            PutAscii("}\n");
        }

        private long DrawSeed()
        {
            var bytes = new byte[8];
            _random.NextBytes(bytes);
            return BitConverter.ToInt64(bytes, 0) & long.MaxValue;
        }

        private void WriteObservation(PolicyInput input, object value)
        {
            if (value == null) throw new ArgumentNullException("observations", What(input) + " is null");
            if (input.Kind == "entities")
            {
                var rows = value as float[][];
                if (rows == null || input.Shape.Length != 2)
                    throw new ArgumentException(What(input) + " is an entity buffer: give a float[][] of up to " + Dim(input, 0) + " rows of " + Dim(input, 1) + " floats", "observations");
                if (rows.Length > input.Shape[0])
                    throw new ArgumentException(What(input) + ": " + rows.Length.ToString(CultureInfo.InvariantCulture) + " entities, this policy takes at most " + Dim(input, 0), "observations");
                Put('[');
                for (int r = 0; r < rows.Length; r++)
                {
                    if (rows[r] == null || rows[r].Length != input.Shape[1])
                        throw new ArgumentException(What(input) + ": each entity row holds " + Dim(input, 1) + " floats", "observations");
                    if (r > 0) Put(',');
                    WriteFloats(rows[r], 0, rows[r].Length, input);
                }
                Put(']');
                return;
            }
            var floats = value as float[];
            var pixels = value as byte[];
            int length = floats != null ? floats.Length : pixels != null ? pixels.Length : -1;
            if (length < 0 || (pixels != null && input.Kind == "vector"))
                throw new ArgumentException(What(input) + " is a " + input.Kind + " input: give a float[]" + (input.Kind == "vector" ? "" : " or byte[] (pixels)") +
                                            ", not " + value.GetType().Name, "observations");
            if (length != input.Size)
                throw new ArgumentException(What(input) + ": expected " + input.Size.ToString(CultureInfo.InvariantCulture) + " values (shape [" +
                                            string.Join(", ", Array.ConvertAll(input.Shape, s => s.ToString(CultureInfo.InvariantCulture))) + "]), got " +
                                            length.ToString(CultureInfo.InvariantCulture), "observations");
            if (floats != null && _binary)
            {
                WriteBinary(floats, input);
                return;
            }
            if (input.Shape.Length <= 1)
            {
                if (floats != null) WriteFloats(floats, 0, floats.Length, input);
                else WritePixels(pixels, 0, pixels.Length);
                return;
            }
            int index = 0;
            WriteNested(input.Shape, 0, floats, pixels, ref index, input);
        }

        private string What(PolicyInput input)
        {
            return Agent() + input.Name;
        }

        private static string Dim(PolicyInput input, int k)
        {
            return k < input.Shape.Length ? input.Shape[k].ToString(CultureInfo.InvariantCulture) : "?";
        }

        private void WriteNested(int[] shape, int dim, float[] floats, byte[] pixels, ref int index, PolicyInput input)
        {
            if (dim == shape.Length - 1)
            {
                if (floats != null) WriteFloats(floats, index, shape[dim], input);
                else WritePixels(pixels, index, shape[dim]);
                index += shape[dim];
                return;
            }
            Put('[');
            for (int i = 0; i < shape[dim]; i++)
            {
                if (i > 0) Put(',');
                WriteNested(shape, dim + 1, floats, pixels, ref index, input);
            }
            Put(']');
        }

        private void WriteFloats(float[] values, int start, int count, PolicyInput input)
        {
            Ensure(count * (Numbers.MaxFloatChars + 1) + 2);
            byte[] b = _out;
            int p = _outLength;
            b[p++] = (byte)'[';
            for (int i = start, end = start + count; i < end; i++)
            {
                p = Numbers.TryWriteFloat9(b, p, values[i]);
                if (p < 0) throw new ArgumentException(What(input) + "[" + i.ToString(CultureInfo.InvariantCulture) + "] is NaN or infinite", "observations");
                b[p++] = (byte)',';
            }
            if (count > 0) p--; // (the last comma)
            b[p++] = (byte)']';
            _outLength = p;
        }

        private static readonly byte[] AnswerBinary = Encoding.ASCII.GetBytes(",\"answer_b64\":true");

        /// <summary>An observation as {"b64":"..."}: the base64 of its little-endian float32 bytes (serve's binary
        /// form; docs/inputs.md).</summary>
        private void WriteBinary(float[] values, PolicyInput input)
        {
            int count = values.Length;
            Ensure(Numbers.Base64Head.Length + Numbers.Base64Length(count) + 2);
            byte[] b = _out, start = Numbers.Base64Head;
            int p = _outLength;
            for (int i = 0; i < start.Length; i++) b[p + i] = start[i];
            p = Numbers.TryWriteBase64Floats(b, p + start.Length, values, 0, count);
            if (p < 0) throw new ArgumentException(What(input) + "[" + (-1 - p).ToString(CultureInfo.InvariantCulture) + "] is NaN or infinite", "observations");
            b[p++] = (byte)'"';
            b[p++] = (byte)'}';
            _outLength = p;
        }

        private void WritePixels(byte[] values, int start, int count)
        {
            Ensure(count * 13 + 2);
            byte[] b = _out;
            int p = _outLength;
            b[p++] = (byte)'[';
            for (int i = 0; i < count; i++)
            {
                if (i > 0) b[p++] = (byte)',';
                byte[] text = PixelText[values[start + i]];
                for (int k = 0; k < text.Length; k++) b[p++] = text[k];
            }
            b[p++] = (byte)']';
            _outLength = p;
        }

        private static byte[][] BuildPixelText()
        {
            var table = new byte[256][];
            var buffer = new byte[Numbers.MaxFloatChars];
            for (int i = 0; i < 256; i++)
            {
                int end = Numbers.WriteFloat(buffer, 0, i / 255f); // (float32 division, as numpy's uint8 frame / 255)
                table[i] = new byte[end];
                Array.Copy(buffer, table[i], end);
            }
            return table;
        }

        private void Ensure(int more)
        {
            if (_outLength + more <= _out.Length) return;
            var bigger = new byte[Math.Max(_out.Length * 2, _outLength + more)];
            Buffer.BlockCopy(_out, 0, bigger, 0, _outLength);
            _out = bigger;
        }

        private void Put(char c)
        {
            Ensure(1);
            _out[_outLength++] = (byte)c;
        }

        private void PutBytes(byte[] bytes)
        {
            int n = bytes.Length;
            Ensure(n);
            if (n > 32) Buffer.BlockCopy(bytes, 0, _out, _outLength, n);
            else // (a key or the route, most often: a loop costs less than BlockCopy's call under Mono 6.8)
            {
                byte[] b = _out;
                int p = _outLength;
                for (int i = 0; i < n; i++) b[p + i] = bytes[i];
            }
            _outLength += n;
        }

        private void PutAscii(string text)
        {
            Ensure(text.Length);
            for (int i = 0; i < text.Length; i++) _out[_outLength++] = (byte)text[i];
        }

        // -- the exchange: send _out, read the answers

        /// <summary>Sends the lines in _out and reads `count` answers for _ids[0..count) (or runs `custom` once instead).</summary>
        private PolicyAction[] Exchange(int count, Action custom)
        {
            _outSent = 0;
            _deadline = _readTimeoutMs == -1 ? long.MaxValue : Stopwatch.GetTimestamp() + (long)_readTimeoutMs * Stopwatch.Frequency / 1000;
            var actions = new PolicyAction[count];
            string firstError = null;
            int errors = 0, firstFailed = -1;
            try
            {
                TrySend();
                if (custom != null) custom();
                for (int i = 0; i < count; i++)
                {
                    string error;
                    actions[i] = NextAnswer(_ids[i], out error);
                    if (error != null)
                    {
                        errors++;
                        if (firstError == null) { firstError = error; firstFailed = i; }
                    }
                }
            }
            catch (FormatException e)
            {
                throw Fail(PolicyFailure.BadAnswer, "bad answer from " + _address + ": " + e.Message);
            }
            if (errors > 0)
            {
                string more = errors > 1 ? " (and " + (errors - 1).ToString(CultureInfo.InvariantCulture) + " more agents' lines answered with errors)" : "";
                throw new PolicyException(PolicyFailure.ErrorAnswer, "agent " + _ids[firstFailed].ToString(CultureInfo.InvariantCulture) + ": " + firstError + more,
                                          _ids[firstFailed], count > 1 ? actions : null);
            }
            return actions;
        }

        private long _deadline;

        /// <summary>The next answer, read where it starts without looking for its newline first: the reader, whose
        /// white space then leaves out the newline, reads the line's JSON up to that newline, which is the line's end (no
        /// value holds a newline). When that fails, the line is framed by its newline and read again, and fails as such
        /// (its error, its excerpt). A scan for the newline of every line took 0.2 ns a byte, 11 us a 64-agent step.</summary>
        private PolicyAction NextAnswer(long expected, out string error)
        {
            while (_inStart >= _complete) Pump(); // (until a whole line has come)
            int lineEnd;
            PolicyAction action = TryReadAnswer(_inStart, expected, out error, out lineEnd);
            if (lineEnd >= 0)
            {
                _inStart = _scan = lineEnd + 1;
                return action;
            }
            int start, end;
            NextLine(out start, out end);
            return ReadAnswer(start, end, false, expected, out error, out lineEnd);
        }

        // (apart: a try block keeps a method's locals in memory under Mono's JIT)
        private PolicyAction TryReadAnswer(int start, long expected, out string error, out int lineEnd)
        {
            try
            {
                return ReadAnswer(start, _complete, true, expected, out error, out lineEnd);
            }
            catch (FormatException)
            {
                error = null;
                lineEnd = -1;
                return null;
            }
        }

        /// <summary>The answer on _in[start, end), or (line) from start to its newline before end, whose position is then
        /// lineEnd.</summary>
        private PolicyAction ReadAnswer(int start, int end, bool line, long expected, out string error, out int lineEnd)
        {
            var r = new JsonReader(_in, start, end, line);
            PolicyInfo info = Info;
            error = null;
            float[] continuous = null, memory = null;
            int[] discrete = null;
            string model = null, version = null;
            bool haveId = false, seenActions = false;
            int continuousStart = 0, continuousEnd = 0;
            HashSet<string> others = null;
            long id = 0;
            r.BeginObject();
            string other;
            int key;
            int place = 0;
            while ((key = r.NextKnownKey(AnswerKeys, place < _keyOrder.Length ? _keyOrder[place] : -1, out other)) != -2)
            {
                if (place < _keyOrder.Length) _keyOrder[place++] = key;
                switch (key)
                {
                    case 0: // "id"
                        if (haveId) throw r.Fail("duplicate key \"id\"");
                        haveId = true;
                        if (r.IsNull()) throw Mismatch(expected, "null", start, end);
                        if (r.Peek() == '"') throw Mismatch(expected, Json.Quote(r.ReadString()), start, end);
                        id = r.ReadLong();
                        break;
                    case 1: // "error"
                        if (error != null) throw r.Fail("duplicate key \"error\"");
                        error = r.ReadString();
                        break;
                    case 2: // "continuous_actions"
                        if (continuous != null) throw r.Fail("duplicate key \"continuous_actions\"");
                        r.SkipSpace();
                        continuousStart = r.Position;
                        continuous = r.Peek() == '{' ? r.ReadFloatBytes() : r.ReadFloats(ref _scratch);
                        continuousEnd = r.Position;
                        break;
                    case 3: // "discrete_actions"
                        if (discrete != null) throw r.Fail("duplicate key \"discrete_actions\"");
                        discrete = r.ReadInts();
                        break;
                    case 4: // "memory"
                        if (memory != null) throw r.Fail("duplicate key \"memory\"");
                        memory = r.Peek() == '{' ? r.ReadFloatBytes() : r.ReadFloats(ref _scratch);
                        break;
                    case 5: // "actions": the continuous actions again (a continuous-only policy), most often their very text
                        if (seenActions) throw r.Fail("duplicate key \"actions\"");
                        seenActions = true;
                        if (!r.TrySkipCopy(continuousStart, continuousEnd, ref _words)) r.SkipValue();
                        break;
                    case 6: // "model": which model answered
                        if (model != null) throw r.Fail("duplicate key \"model\"");
                        model = r.TrySkipText(_modelText) ? Model : r.ReadString();
                        break;
                    case 7: // "version": which of its versions answered (text)
                        if (version != null) throw r.Fail("duplicate key \"version\"");
                        version = ReadVersion(r);
                        break;
                    default: // keys a later server may add
                        if (others == null) others = new HashSet<string>();
                        if (!others.Add(other)) throw r.Fail("duplicate key \"" + other + "\"");
                        r.SkipValue();
                        break;
                }
            }
            r.End();
            lineEnd = r.Position;
            if (!haveId) throw new FormatException("the answer has no \"id\"" + Excerpt(start, end));
            if (id != expected) throw new FormatException("the answer is for id " + id.ToString(CultureInfo.InvariantCulture) + ", the line was agent " +
                                                          expected.ToString(CultureInfo.InvariantCulture) + "'s" + Excerpt(start, end));
            if (model != null && model != Model)
                throw new FormatException("an answer from model " + Json.Quote(model) + " to a line for model " + Json.Quote(Model) + Excerpt(start, end));
            if (version != null && Version.HasValue && version != Version.Value.ToString(CultureInfo.InvariantCulture))
                throw new FormatException("an answer from version " + Json.Quote(version) + " to a line for version " +
                                          Version.Value.ToString(CultureInfo.InvariantCulture) + Excerpt(start, end));
            if (error != null) return null;
            CheckSize(continuous, info.ContinuousSize, "continuous_actions", start, end);
            CheckSize(memory, info.MemorySize, "memory", start, end);
            if (info.DiscreteBranches.Length > 0 || discrete != null)
            {
                int got = discrete == null ? -1 : discrete.Length;
                if (got != info.DiscreteBranches.Length)
                    throw new FormatException("\"discrete_actions\" holds " + (got < 0 ? "nothing" : got.ToString(CultureInfo.InvariantCulture)) + ", expected one action per branch (" +
                                              info.DiscreteBranches.Length.ToString(CultureInfo.InvariantCulture) + ")" + Excerpt(start, end));
                for (int k = 0; k < got; k++)
                    if (discrete[k] < 0 || discrete[k] >= info.DiscreteBranches[k])
                        throw new FormatException("discrete action " + discrete[k].ToString(CultureInfo.InvariantCulture) + " is outside branch " + k.ToString(CultureInfo.InvariantCulture) + Excerpt(start, end));
            }
            if (_resets.Count > 0) _resets.Remove(expected);
            if (info.MemorySize > 0) _known.Add(expected);
            if (version != null) AnsweredVersion = version;
            return new PolicyAction(expected, continuous ?? NoFloats, discrete ?? NoInts, memory ?? NoFloats, model ?? Model, version);
        }

        /// <summary>The text (quotes included, UTF-8) that a strict reader reads as exactly <paramref name="text"/>;
        /// null when there is none to compare with (a lone surrogate).</summary>
        private static byte[] QuotedText(string text)
        {
            if (text == null) return null;
            try
            {
                return StrictUtf8.GetBytes(Json.Quote(text));
            }
            catch (ArgumentException)
            {
                return null;
            }
        }

        private static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);

        /// <summary>A "version" value: the previous answer's string when its text is the same, byte for byte.</summary>
        private string ReadVersion(JsonReader r)
        {
            if (r.TrySkipText(_versionText)) return _version;
            r.SkipSpace();
            int start = r.Position;
            string version = r.ReadString();
            int length = r.Position - start;
            if (_versionText == null || _versionText.Length != length) _versionText = new byte[length];
            Buffer.BlockCopy(_in, start, _versionText, 0, length);
            _version = version;
            return version;
        }

        private FormatException Mismatch(long expected, string got, int start, int end)
        {
            return new FormatException("the answer is for id " + got + ", the line was agent " + expected.ToString(CultureInfo.InvariantCulture) + "'s" + Excerpt(start, end));
        }

        private void CheckSize(float[] values, int size, string key, int start, int end)
        {
            int got = values == null ? -1 : values.Length;
            if (size == 0 && values == null) return;
            if (got != size)
                throw new FormatException("\"" + key + "\" holds " + (got < 0 ? "nothing" : got.ToString(CultureInfo.InvariantCulture) + " values") +
                                          ", the policy has " + size.ToString(CultureInfo.InvariantCulture) + Excerpt(start, end));
        }

        private string Excerpt(int start, int end)
        {
            int n = Math.Min(end - start, 80);
            string text = Encoding.UTF8.GetString(_in, start, n);
            return " (" + text + (end - start > n ? "..." : "") + ")";
        }

        /// <summary>The next answer line's extent in _in (without its newline), reading until one is complete.</summary>
        private void NextLine(out int start, out int end)
        {
            while (true)
            {
                int newline = _scan < _inEnd ? Array.IndexOf(_in, (byte)'\n', _scan, _inEnd - _scan) : -1;
                if (newline >= 0)
                {
                    start = _inStart;
                    end = newline;
                    _inStart = _scan = newline + 1;
                    return;
                }
                _scan = _inEnd;
                Pump();
            }
        }

        /// <summary>Progress: send what is left of _out, and/or receive, waiting at most until the deadline.</summary>
        private void Pump()
        {
            if (_outSent < _outLength)
            {
                TrySend();
                if (_outSent < _outLength) // the server is not reading yet: wait to write or to read, whichever comes
                {
                    _readable.Clear();
                    _readable.Add(_socket);
                    _writable.Clear();
                    _writable.Add(_socket);
                    Socket.Select(_readable, _writable, null, WaitMicroseconds());
                    if (_readable.Count > 0) Receive();
                    return;
                }
            }
            if (_socket.Poll(WaitMicroseconds(), SelectMode.SelectRead)) Receive();
        }

        private int WaitMicroseconds()
        {
            if (_deadline == long.MaxValue) return -1;
            long left = (_deadline - Stopwatch.GetTimestamp()) * 1000000 / Stopwatch.Frequency;
            if (left <= 0)
                throw Fail(PolicyFailure.Timeout, "no answer from " + _address + " within " + _readTimeoutMs.ToString(CultureInfo.InvariantCulture) + " ms (ReadTimeoutMs)");
            return (int)Math.Min(left, int.MaxValue);
        }

        private void TrySend()
        {
            SocketError error;
            int n = _socket.Send(_out, _outSent, _outLength - _outSent, SocketFlags.None, out error);
            if (error == SocketError.Success) _outSent += n;
            else if (error != SocketError.WouldBlock) throw Fail(PolicyFailure.Closed, "the connection to " + _address + " broke while sending (" + error + ")");
        }

        private void Receive()
        {
            if (_inStart == _inEnd) _inStart = _inEnd = _scan = _complete = 0;
            if (_inEnd == _in.Length)
            {
                if (_inStart > 0)
                {
                    Buffer.BlockCopy(_in, _inStart, _in, 0, _inEnd - _inStart);
                    _inEnd -= _inStart;
                    _scan -= _inStart;
                    _complete = Math.Max(_complete - _inStart, 0);
                    _inStart = 0;
                }
                else
                {
                    if (_in.Length >= MaxAnswerBytes) throw Fail(PolicyFailure.BadAnswer, "bad answer from " + _address + ": a line longer than " + MaxAnswerBytes.ToString(CultureInfo.InvariantCulture) + " bytes");
                    var bigger = new byte[_in.Length * 2];
                    Buffer.BlockCopy(_in, 0, bigger, 0, _inEnd);
                    _in = bigger;
                }
            }
            SocketError error;
            int n = _socket.Receive(_in, _inEnd, _in.Length - _inEnd, SocketFlags.None, out error);
            if (error == SocketError.WouldBlock) return;
            if (error != SocketError.Success) throw Fail(PolicyFailure.Closed, "the connection to " + _address + " broke (" + error + ")");
            if (n == 0) throw Fail(PolicyFailure.Closed, "the server at " + _address + " closed the connection");
            int last = Array.LastIndexOf(_in, (byte)'\n', _inEnd + n - 1, n); // (the bytes of a part line at most)
            if (last >= 0) _complete = last + 1;
            _inEnd += n;
        }

        private PolicyException Fail(PolicyFailure failure, string message)
        {
            Close(PolicyException.OneLine(message));
            return new PolicyException(failure, message);
        }

        private void Close(string because)
        {
            if (_socket == null) return;
            _closedBecause = because;
            try
            {
                _socket.Close();
            }
            catch (SocketException)
            {
            }
            _socket = null;
            _inStart = _inEnd = _scan = _complete = 0;
        }
    }

    /// <summary>An AF_UNIX stream socket address for .NET Standard 2.0, which has no UnixDomainSocketEndPoint:
    /// sockaddr_un's path after the two family bytes, as Mono.Posix's UnixEndPoint writes it.</summary>
    internal sealed class UnixSocketEndPoint : EndPoint
    {
        private readonly string _path;
        private readonly byte[] _bytes;

        internal UnixSocketEndPoint(string path)
        {
            _path = path;
            _bytes = Encoding.UTF8.GetBytes(path);
            if (_bytes.Length > 107) throw new ArgumentException("a Unix socket path is at most 107 bytes: " + path, "path");
        }

        public override AddressFamily AddressFamily { get { return AddressFamily.Unix; } }

        public override SocketAddress Serialize()
        {
            var address = new SocketAddress(AddressFamily.Unix, 2 + _bytes.Length + 1);
            for (int i = 0; i < _bytes.Length; i++) address[2 + i] = _bytes[i];
            address[2 + _bytes.Length] = 0;
            return address;
        }

        public override EndPoint Create(SocketAddress address)
        {
            int length = 0;
            while (2 + length < address.Size && address[2 + length] != 0) length++;
            var bytes = new byte[length];
            for (int i = 0; i < length; i++) bytes[i] = address[2 + i];
            return new UnixSocketEndPoint(Encoding.UTF8.GetString(bytes));
        }

        public override string ToString()
        {
            return "unix:" + _path;
        }
    }
}
