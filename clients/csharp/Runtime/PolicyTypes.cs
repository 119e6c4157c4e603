// What the policy server says about its policy, what one agent asks, what it gets back, and how a call fails.
using System;
using System.Collections.Generic;
using System.Globalization;

namespace MLAgentsInference
{
    /// <summary>How a call to the server failed (<see cref="PolicyException.Failure"/>).</summary>
    public enum PolicyFailure
    {
        /// <summary>No connection could be made (nothing listens there, refused, unresolved, or the connect timeout).</summary>
        Connect,
        /// <summary>The server answered the line with an error (a bad observation, say); the connection goes on.</summary>
        ErrorAnswer,
        /// <summary>The server's answer is not what the protocol promises (not strict JSON, another id, a wrong size);
        /// the connection is closed.</summary>
        BadAnswer,
        /// <summary>The connection closed or broke (the server went away); the client is closed.</summary>
        Closed,
        /// <summary>No answer within the read timeout; the connection is closed (a late answer could not be told apart).</summary>
        Timeout,
    }

    /// <summary>A call to the policy server that failed. The message is one line.</summary>
    public sealed class PolicyException : Exception
    {
        internal PolicyException(PolicyFailure failure, string message, long? agentId = null, PolicyAction[] actions = null)
            : base(OneLine(message))
        {
            Failure = failure;
            AgentId = agentId;
            Actions = actions;
        }

        /// <summary>Which kind of failure.</summary>
        public PolicyFailure Failure { get; private set; }

        /// <summary>The agent whose line failed (error answers), when one did.</summary>
        public long? AgentId { get; private set; }

        /// <summary><see cref="PolicyClient.ActMany(IList{AgentRequest})"/>'s error answers: every agent's actions in
        /// request order, null for the agents whose lines were answered with an error. Null otherwise.</summary>
        public PolicyAction[] Actions { get; private set; }

        internal static string OneLine(string text)
        {
            if (text == null) return string.Empty;
            text = text.Replace("\r\n", " ").Replace('\n', ' ').Replace('\r', ' ');
            return text.Length > 500 ? text.Substring(0, 500) + "..." : text;
        }
    }

    /// <summary>One input of the policy, in the order the server takes them (ML-Agents' sensor order).</summary>
    public sealed class PolicyInput
    {
        internal PolicyInput(string name, string kind, int[] shape)
        {
            Name = name;
            Kind = kind;
            Shape = shape;
            long size = 1;
            foreach (int s in shape)
            {
                size *= s;  // (each at most int.MaxValue: the product is checked before it can pass long's range)
                if (size > int.MaxValue)
                    throw new FormatException("info: input " + name + "'s \"shape\" holds more than " +
                                              int.MaxValue.ToString(CultureInfo.InvariantCulture) + " values");
            }
            Size = (int)size;
        }

        /// <summary>"obs_0", "obs_1", ...</summary>
        public string Name { get; private set; }

        /// <summary>"vector" ([n]: a float[] of n), "visual" ([C, H, W]: a float[] or byte[] of C*H*W values,
        /// channel-first), or "entities" ([N, F]: up to N rows of F floats, a float[][]).</summary>
        public string Kind { get; private set; }

        /// <summary>The input's shape as the server gives it.</summary>
        public int[] Shape { get; private set; }

        /// <summary>The product of <see cref="Shape"/>.</summary>
        public int Size { get; private set; }
    }

    /// <summary>The server's <c>{"info": true}</c> answer: the policy's inputs, action sizes and memory size.</summary>
    public sealed class PolicyInfo
    {
        internal PolicyInfo(Dictionary<string, object> raw)
        {
            Raw = raw;
            Behavior = Get<string>(raw, "behavior", true);
            var inputs = new List<PolicyInput>();
            foreach (object item in Get<List<object>>(raw, "inputs", false))
            {
                var input = item as Dictionary<string, object>;
                if (input == null) throw new FormatException("info: an input is not an object");
                inputs.Add(new PolicyInput(Get<string>(input, "name", false), Get<string>(input, "kind", false), Ints(Get<List<object>>(input, "shape", false), "shape")));
            }
            if (inputs.Count == 0) throw new FormatException("info: the policy has no inputs");
            Inputs = inputs.ToArray();
            ContinuousSize = Size(raw, "continuous_size");
            DiscreteBranches = Ints(Get<List<object>>(raw, "discrete_branches", false), "discrete_branches");
            MemorySize = Size(raw, "memory_size");
            long maskWidth = 0;
            foreach (int branch in DiscreteBranches)
            {
                if (branch < 1) throw new FormatException("info: a discrete branch of size " + branch.ToString(CultureInfo.InvariantCulture));
                maskWidth += branch;
            }
            if (maskWidth > int.MaxValue)
                throw new FormatException("info: \"discrete_branches\" add up to more than " + int.MaxValue.ToString(CultureInfo.InvariantCulture));
            MaskWidth = (int)maskWidth;
        }

        /// <summary>The behavior name (null when the server does not say).</summary>
        public string Behavior { get; private set; }

        /// <summary>The inputs, in order: Act's observations follow them.</summary>
        public PolicyInput[] Inputs { get; private set; }

        /// <summary>Number of continuous actions (0 for none).</summary>
        public int ContinuousSize { get; private set; }

        /// <summary>The size of each discrete branch (empty for none).</summary>
        public int[] DiscreteBranches { get; private set; }

        /// <summary>The sum of the branch sizes: the length of an action mask.</summary>
        public int MaskWidth { get; private set; }

        /// <summary>The LSTM memory size (0 for none). The server keeps each agent's memory per connection.</summary>
        public int MemorySize { get; private set; }

        /// <summary>The whole info object as <see cref="Json.Parse"/> reads it (engine, checkpoint, ...).</summary>
        public Dictionary<string, object> Raw { get; private set; }

        private static T Get<T>(Dictionary<string, object> dict, string key, bool optional)
        {
            object value;
            if (!dict.TryGetValue(key, out value) || value == null)
            {
                if (optional) return default(T);
                throw new FormatException("info: \"" + key + "\" is missing");
            }
            if (!(value is T)) throw new FormatException("info: \"" + key + "\" is not a " + typeof(T).Name);
            return (T)value;
        }

        /// <summary>A size the info gives (continuous_size, memory_size): an integer from 0 to int.MaxValue, never one cut to
        /// an int's low bits (2^32 + 2 is not 2).</summary>
        private static int Size(Dictionary<string, object> dict, string key)
        {
            long value = Get<long>(dict, key, false);
            if (value < 0 || value > int.MaxValue)
                throw new FormatException("info: \"" + key + "\" is " + value.ToString(CultureInfo.InvariantCulture) + ", outside 0 to " +
                                          int.MaxValue.ToString(CultureInfo.InvariantCulture));
            return (int)value;
        }

        private static int[] Ints(List<object> list, string what)
        {
            var result = new int[list.Count];
            for (int i = 0; i < list.Count; i++)
            {
                if (!(list[i] is long) || (long)list[i] < 0 || (long)list[i] > int.MaxValue)
                    throw new FormatException("info: \"" + what + "\" must hold non-negative integers");
                result[i] = (int)(long)list[i];
            }
            return result;
        }
    }

    /// <summary>One agent's line for <see cref="PolicyClient.ActMany(IList{AgentRequest})"/>.</summary>
    public sealed class AgentRequest
    {
        /// <summary>A request with one observation per input (see <see cref="PolicyClient.Act(long, object[], int[], bool, long?)"/>).</summary>
        public AgentRequest(long agentId, object[] observations, int[] actionMasks = null)
        {
            AgentId = agentId;
            Observations = observations;
            ActionMasks = actionMasks;
        }

        /// <summary>A request for a policy with one vector input.</summary>
        public AgentRequest(long agentId, float[] observation, int[] actionMasks = null)
            : this(agentId, new object[] { observation }, actionMasks)
        {
        }

        /// <summary>The agent's id: the server keeps its LSTM memory per connection and id. Within +-2^53.</summary>
        public long AgentId;

        /// <summary>One entry per input, in <see cref="PolicyInfo.Inputs"/> order.</summary>
        public object[] Observations;

        /// <summary>1 = allowed, 0 = masked, the branches side by side (<see cref="PolicyInfo.MaskWidth"/> values); null: all allowed.</summary>
        public int[] ActionMasks;

        /// <summary>Sample the actions instead of taking the deterministic ones.</summary>
        public bool Stochastic;

        /// <summary>The sampling seed (0 to 2^63-1); null with Stochastic: one is drawn.</summary>
        public long? Seed;
    }

    /// <summary>The actions the server answered for one agent.</summary>
    public sealed class PolicyAction
    {
        internal PolicyAction(long agentId, float[] continuous, int[] discrete, float[] memory, string model = null, string version = null)
        {
            AgentId = agentId;
            ContinuousActions = continuous;
            DiscreteActions = discrete;
            Memory = memory;
            Model = model;
            Version = version;
        }

        /// <summary>The agent the actions are for.</summary>
        public long AgentId { get; private set; }

        /// <summary><see cref="PolicyInfo.ContinuousSize"/> values (empty when the policy has none).</summary>
        public float[] ContinuousActions { get; private set; }

        /// <summary>One chosen action per discrete branch (empty when the policy has none).</summary>
        public int[] DiscreteActions { get; private set; }

        /// <summary>The agent's next LSTM memory, which the server keeps (empty for a policy without memory).</summary>
        public float[] Memory { get; private set; }

        /// <summary>The model that answered (its behaviour name).</summary>
        public string Model { get; private set; }

        /// <summary>The version of the model that answered (text: a checkpoint's step, "1" for one policy served as
        /// before); null from a server that does not say. An LSTM agent keeps the version its memory started on while
        /// that version stays loaded.</summary>
        public string Version { get; private set; }
    }
}
