// The console tests of the C# client, run by tests/test_csharp_client.py against live `--mode serve` servers (and a
// scripted fake one). The Python side writes the inputs and the answers inference.load(...).act(...) gives for them;
// this program sends the inputs through PolicyClient and compares: discrete actions equal, continuous values and memories
// within 1e-6. One line per check ("PASS ..." / "FAIL ..."), then "RESULT passed=N failed=M"; exit 1 on any failure.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Text;
using System.Threading;
using MLAgentsInference;

internal static class ClientTests
{
    private const double Tolerance = 1e-6;
    private static int _passed, _failed;

    private static int Main(string[] args)
    {
        if (args.Length < 1)
        {
            Console.Error.WriteLine("usage: ClientTests.exe policy|faults|goaway|floats|answers|routes|sends|json|refs ARGS...");
            return 2;
        }
        try
        {
            switch (args[0])
            {
                case "policy": Policy(Load(args[1])); break;
                case "faults": Faults(Load(args[1])); break;
                case "goaway": GoAway(args[1]); break;
                case "floats": return Floats(args[1], args[2]);
                case "answers": return Answers(args[1], int.Parse(args[2], CultureInfo.InvariantCulture));
                case "routes": return Routes(args[1], int.Parse(args[2], CultureInfo.InvariantCulture));
                case "sends": return Sends(args[1], args[2], int.Parse(args[3], CultureInfo.InvariantCulture), args.Length > 4 && args[4] == "text");
                case "base64": return Base64(args[1]);
                case "json": JsonCases(Load(args[1])); break;
                case "refs": // the assemblies the library references: .NET Standard 2.0's own only
                    foreach (var name in System.Reflection.Assembly.LoadFrom(args[1]).GetReferencedAssemblies()) Console.WriteLine("REF " + name.Name);
                    return 0;
                default: Console.Error.WriteLine("unknown mode " + args[0]); return 2;
            }
        }
        catch (Exception e)
        {
            Fail("uncaught " + e.GetType().Name + ": " + e.Message + "\n" + e.StackTrace);
        }
        Console.WriteLine("RESULT passed=" + _passed + " failed=" + _failed);
        return _failed == 0 ? 0 : 1;
    }

    private static Dictionary<string, object> Load(string path)
    {
        return (Dictionary<string, object>)Json.Parse(File.ReadAllText(path, Encoding.UTF8));
    }

    private static void Pass(string what)
    {
        _passed++;
        Console.WriteLine("PASS " + what);
    }

    private static void Fail(string what)
    {
        _failed++;
        Console.WriteLine("FAIL " + what);
    }

    private static void Check(bool ok, string what)
    {
        if (ok) Pass(what);
        else Fail(what);
    }

    // -- reading the case file

    private static List<object> L(object o) { return (List<object>)o; }
    private static Dictionary<string, object> D(object o) { return (Dictionary<string, object>)o; }

    private static float[] Floats(object o)
    {
        List<object> list = L(o);
        var result = new float[list.Count];
        for (int i = 0; i < list.Count; i++) result[i] = (float)Convert.ToDouble(list[i], CultureInfo.InvariantCulture);
        return result;
    }

    private static int[] Ints(object o)
    {
        List<object> list = L(o);
        var result = new int[list.Count];
        for (int i = 0; i < list.Count; i++) result[i] = (int)(long)list[i];
        return result;
    }

    private static object[] Observations(object o)
    {
        var result = new List<object>();
        foreach (object item in L(o))
        {
            Dictionary<string, object> input = D(item);
            if (input.ContainsKey("floats")) result.Add(Floats(input["floats"]));
            else if (input.ContainsKey("pixels"))
            {
                int[] values = Ints(input["pixels"]);
                var pixels = new byte[values.Length];
                for (int i = 0; i < values.Length; i++) pixels[i] = (byte)values[i];
                if (input.ContainsKey("interleaved")) // [H, W, C], bottom row first: the client's Frames helper reorders it
                {
                    int[] hwc = Ints(input["interleaved"]);
                    pixels = Frames.ChannelFirst(pixels, hwc[0], hwc[1], hwc[2], true);
                }
                result.Add(pixels);
            }
            else
            {
                List<object> rows = L(input["rows"]);
                var buffer = new float[rows.Count][];
                for (int r = 0; r < rows.Count; r++) buffer[r] = Floats(rows[r]);
                result.Add(buffer);
            }
        }
        return result.ToArray();
    }

    private static AgentRequest Request(Dictionary<string, object> step)
    {
        var request = new AgentRequest((long)step["agent"], Observations(step["obs"]), step.ContainsKey("masks") ? Ints(step["masks"]) : null);
        if (step.ContainsKey("seed"))
        {
            request.Stochastic = true;
            request.Seed = (long)step["seed"];
        }
        return request;
    }

    // -- comparing

    private static string Compare(PolicyAction got, Dictionary<string, object> want)
    {
        float[] continuous = want.ContainsKey("continuous") ? Floats(want["continuous"]) : new float[0];
        float[] memory = want.ContainsKey("memory") ? Floats(want["memory"]) : new float[0];
        int[] discrete = want.ContainsKey("discrete") ? Ints(want["discrete"]) : new int[0];
        string why = Close(got.ContinuousActions, continuous, "continuous");
        if (why != null) return why;
        why = Close(got.Memory, memory, "memory");
        if (why != null) return why;
        if (got.DiscreteActions.Length != discrete.Length) return "discrete: " + got.DiscreteActions.Length + " values, expected " + discrete.Length;
        for (int i = 0; i < discrete.Length; i++)
            if (got.DiscreteActions[i] != discrete[i]) return "discrete[" + i + "] = " + got.DiscreteActions[i] + ", expected " + discrete[i];
        return null;
    }

    private static string Close(float[] got, float[] want, string what)
    {
        if (got.Length != want.Length) return what + ": " + got.Length + " values, expected " + want.Length;
        for (int i = 0; i < want.Length; i++)
        {
            double error = Math.Abs((double)got[i] - want[i]);
            if (!(error <= Tolerance)) // (NaN fails)
                return what + "[" + i + "] = " + got[i].ToString("R", CultureInfo.InvariantCulture) + ", expected " +
                       want[i].ToString("R", CultureInfo.InvariantCulture) + " (error " + error.ToString("G3", CultureInfo.InvariantCulture) + " > 1e-6)";
        }
        return null;
    }

    // -- policy: the answers against inference.load(...).act(...), in each culture, by Act and by ActMany

    private static void Policy(Dictionary<string, object> cases)
    {
        string address = (string)cases["address"];
        foreach (object cultureName in L(cases["cultures"]))
        {
            // "process": the thread keeps the culture the process started with (LANG / LC_ALL); "": the invariant culture
            string name = (string)cultureName;
            CultureInfo culture = name == "process" ? null : name.Length == 0 ? CultureInfo.InvariantCulture : new CultureInfo(name);
            RunInCulture(culture, () => PolicyIn(cases, address, name.Length == 0 ? "invariant" : CultureInfo.CurrentCulture.Name + (name == "process" ? " from LANG" : "")));
        }
    }

    private static void RunInCulture(CultureInfo culture, Action body)
    {
        Exception error = null;
        var thread = new Thread(() =>
        {
            if (culture != null)
            {
                Thread.CurrentThread.CurrentCulture = culture;
                Thread.CurrentThread.CurrentUICulture = culture;
            }
            try
            {
                body();
            }
            catch (Exception e)
            {
                error = e;
            }
        });
        thread.Start();
        thread.Join();
        if (error != null) Fail("in " + (culture == null ? "the process's culture" : culture.Name) + ": uncaught " + error.GetType().Name + ": " + error.Message + "\n" + error.StackTrace);
    }

    private static void PolicyIn(Dictionary<string, object> cases, string address, string culture)
    {
        string tag = (string)cases["policy"] + " [" + culture + "]";
        if (culture != "invariant") // the culture bites: a naive float.ToString() would write a decimal comma here
            Check(1.5f.ToString().Contains(","), tag + ": the thread's culture writes 1.5 as " + 1.5f.ToString());
        using (PolicyClient client = PolicyClient.Open(address))
        {
            Dictionary<string, object> info = D(cases["info"]);
            CheckInfo(client.Info, info, tag);
            foreach (object s in L(cases["sequences"]))
            {
                Dictionary<string, object> sequence = D(s);
                string how = (string)sequence["call"];
                List<object> steps = L(sequence["steps"]);
                for (int k = 0; k < steps.Count; k++)
                {
                    List<object> agents = L(steps[k]);
                    string where = tag + " " + (string)sequence["name"] + " step " + k;
                    var requests = new List<AgentRequest>();
                    foreach (object a in agents)
                    {
                        Dictionary<string, object> step = D(a);
                        if (step.ContainsKey("reset") && (bool)step["reset"]) client.Reset((long)step["agent"]);
                        requests.Add(Request(step));
                    }
                    if (how == "many") Many(client, requests, agents, where);
                    else
                        for (int i = 0; i < requests.Count; i++) One(client, requests[i], D(agents[i]), where);
                }
            }
            Arguments(client, tag);
        }
    }

    private static void CheckInfo(PolicyInfo got, Dictionary<string, object> want, string tag)
    {
        var problems = new List<string>();
        if (got.ContinuousSize != (long)want["continuous_size"]) problems.Add("continuous_size " + got.ContinuousSize);
        if (got.MemorySize != (long)want["memory_size"]) problems.Add("memory_size " + got.MemorySize);
        if (string.Join(",", got.DiscreteBranches) != string.Join(",", Ints(want["discrete_branches"]))) problems.Add("discrete_branches");
        if ((string)want["behavior"] != got.Behavior) problems.Add("behavior " + got.Behavior);
        List<object> inputs = L(want["inputs"]);
        if (inputs.Count != got.Inputs.Length) problems.Add(got.Inputs.Length + " inputs");
        else
            for (int i = 0; i < inputs.Count; i++)
            {
                Dictionary<string, object> input = D(inputs[i]);
                if ((string)input["name"] != got.Inputs[i].Name || (string)input["kind"] != got.Inputs[i].Kind ||
                    string.Join(",", Ints(input["shape"])) != string.Join(",", got.Inputs[i].Shape))
                    problems.Add("input " + i);
            }
        Check(problems.Count == 0, tag + ": Info equals inference.load(...).info" + (problems.Count == 0 ? "" : " (differs: " + string.Join("; ", problems) + ")"));
    }

    private static void One(PolicyClient client, AgentRequest request, Dictionary<string, object> step, string where)
    {
        string label = where + " agent " + request.AgentId + " (Act)";
        Dictionary<string, object> want = D(step["expect"]);
        try
        {
            PolicyAction got = request.Observations.Length == 1 && request.Observations[0] is float[] && !request.Stochastic
                ? client.Act(request.AgentId, (float[])request.Observations[0], request.ActionMasks)
                : client.Act(request.AgentId, request.Observations, request.ActionMasks, request.Stochastic, request.Seed);
            if (want.ContainsKey("error")) Fail(label + ": answered, expected the error " + want["error"]);
            else
            {
                string why = got.AgentId == request.AgentId ? Compare(got, want) : "answer for agent " + got.AgentId;
                Check(why == null, label + (why == null ? "" : ": " + why));
            }
        }
        catch (PolicyException e)
        {
            ExpectedError(e, want, label, client);
        }
    }

    private static void ExpectedError(PolicyException e, Dictionary<string, object> want, string label, PolicyClient client)
    {
        bool ok = want.ContainsKey("error") && e.Failure == PolicyFailure.ErrorAnswer && e.Message.Contains((string)want["error"]) &&
                  e.Message.IndexOf('\n') < 0 && client.IsOpen;
        Check(ok, label + ": " + e.Failure + ": " + e.Message + (client.IsOpen ? "" : " (the client closed)"));
    }

    private static void Many(PolicyClient client, List<AgentRequest> requests, List<object> agents, string where)
    {
        PolicyAction[] got;
        string label = where + " (ActMany of " + requests.Count + ")";
        try
        {
            got = client.ActMany(requests);
        }
        catch (PolicyException e)
        {
            if (e.Failure != PolicyFailure.ErrorAnswer || e.Actions == null)
            {
                Fail(label + ": " + e.Failure + ": " + e.Message);
                return;
            }
            got = e.Actions;
            bool named = false;
            for (int i = 0; i < requests.Count; i++)
                if (D(D(agents[i])["expect"]).ContainsKey("error") && e.AgentId == requests[i].AgentId) named = true;
            Check(named && e.Message.IndexOf('\n') < 0 && client.IsOpen, label + ": the error names a failing agent in one line: " + e.Message);
        }
        Check(got.Length == requests.Count, label + ": one answer per agent");
        for (int i = 0; i < requests.Count && i < got.Length; i++)
        {
            Dictionary<string, object> want = D(D(agents[i])["expect"]);
            string agent = label + " agent " + requests[i].AgentId;
            if (want.ContainsKey("error")) Check(got[i] == null, agent + ": answered with an error");
            else if (got[i] == null) Fail(agent + ": no actions");
            else
            {
                string why = got[i].AgentId == requests[i].AgentId ? Compare(got[i], want) : "answer for agent " + got[i].AgentId;
                Check(why == null, agent + (why == null ? "" : ": " + why));
            }
        }
    }

    /// <summary>Caller mistakes raise ArgumentException before anything is sent; the connection goes on.</summary>
    private static void Arguments(PolicyClient client, string tag)
    {
        PolicyInput first = client.Info.Inputs[0];
        var good = new object[client.Info.Inputs.Length];
        for (int i = 0; i < good.Length; i++)
        {
            PolicyInput input = client.Info.Inputs[i];
            good[i] = input.Kind == "entities" ? (object)new float[0][] : new float[input.Size];
        }
        var tooShort = (object[])good.Clone();
        tooShort[0] = first.Kind == "entities" ? (object)new float[first.Shape[0] + 1][] : new float[first.Size - 1];
        var notFinite = (object[])good.Clone();
        notFinite[good.Length - 1] = new float[client.Info.Inputs[good.Length - 1].Size];
        ((float[])notFinite[good.Length - 1])[0] = float.NaN;
        ExpectArgument(() => client.Act(1, tooShort), tag + ": a wrong observation size", first.Kind == "entities" ? "at most" : "expected");
        ExpectArgument(() => client.Act(1, new object[good.Length + 1]), tag + ": one observation too many", "input(s)");
        if (client.Info.Inputs[good.Length - 1].Kind != "entities")
        {
            ExpectArgument(() => client.Act(1, notFinite), tag + ": NaN", "[0] is NaN or infinite");
            int last = client.Info.Inputs[good.Length - 1].Size - 1;
            foreach (float infinite in new[] { float.PositiveInfinity, float.NegativeInfinity })
            {
                var far = (object[])good.Clone();
                far[good.Length - 1] = new float[last + 1];
                ((float[])far[good.Length - 1])[last] = infinite;
                ExpectArgument(() => client.Act(1, far), tag + ": " + infinite.ToString(CultureInfo.InvariantCulture) + " last",
                               "[" + last.ToString(CultureInfo.InvariantCulture) + "] is NaN or infinite");
            }
        }
        ExpectArgument(() => client.Act(1L << 54, good), tag + ": an id beyond 2^53", "2^53");
        if (client.Info.MaskWidth > 0)
        {
            ExpectArgument(() => client.Act(1, good, new int[client.Info.MaskWidth + 1]), tag + ": a mask of the wrong width", "action masks");
            var two = new int[client.Info.MaskWidth];
            two[0] = 2;
            ExpectArgument(() => client.Act(1, good, two), tag + ": a mask value of 2", "1 (allowed) or 0");
        }
        else ExpectArgument(() => client.Act(1, good, new[] { 1 }), tag + ": masks for a policy without discrete actions", "no discrete");
        try
        {
            client.Act(77, good);
            Pass(tag + ": the connection goes on after the caller's mistakes");
        }
        catch (Exception e)
        {
            Fail(tag + ": after the caller's mistakes: " + e.GetType().Name + ": " + e.Message);
        }
    }

    private static void ExpectArgument(Action call, string what, string says)
    {
        try
        {
            call();
            Fail(what + ": no exception");
        }
        catch (ArgumentException e)
        {
            Check(e.Message.Contains(says), what + ": ArgumentException: " + e.Message.Split('\n')[0]);
        }
        catch (Exception e)
        {
            Fail(what + ": " + e.GetType().Name + ": " + e.Message);
        }
    }

    // -- faults: a scripted fake server, refused and silent addresses

    private static void Faults(Dictionary<string, object> cases)
    {
        foreach (object c in L(cases["cases"]))
        {
            Dictionary<string, object> fault = D(c);
            string name = (string)fault["name"], address = (string)fault["address"], says = (string)fault["says"];
            string failure = (string)fault["failure"];
            int connectMs = fault.ContainsKey("connect_ms") ? (int)(long)fault["connect_ms"] : PolicyClient.DefaultConnectTimeoutMs;
            int readMs = fault.ContainsKey("read_ms") ? (int)(long)fault["read_ms"] : PolicyClient.DefaultReadTimeoutMs;
            bool atConnect = fault.ContainsKey("at_connect") && (bool)fault["at_connect"];
            var started = DateTime.UtcNow;
            PolicyClient client = null;
            try
            {
                client = PolicyClient.Open(address, connectMs, readMs);
                if (atConnect)
                {
                    Fail(name + ": connected, expected " + failure);
                    continue;
                }
                PolicyAction got = client.Act(1, new float[client.Info.Inputs[0].Size]);
                if (failure == "none") Check(got.ContinuousActions.Length == client.Info.ContinuousSize, name + ": answered");
                else Fail(name + ": answered, expected " + failure);
            }
            catch (PolicyException e)
            {
                double seconds = (DateTime.UtcNow - started).TotalSeconds;
                bool ok = e.Failure.ToString() == failure && e.Message.Contains(says) && e.Message.IndexOf('\n') < 0 &&
                          (client == null || !client.IsOpen || e.Failure == PolicyFailure.ErrorAnswer) &&
                          (!fault.ContainsKey("within_s") || seconds <= Convert.ToDouble(fault["within_s"], CultureInfo.InvariantCulture));
                Check(ok, name + ": " + e.Failure + " after " + seconds.ToString("F2", CultureInfo.InvariantCulture) + " s: " + e.Message);
                if (client != null && !client.IsOpen)
                {
                    try
                    {
                        client.Act(1, new float[client.Info.Inputs[0].Size]);
                        Fail(name + ": a closed client answered");
                    }
                    catch (PolicyException again)
                    {
                        Check(again.Failure == PolicyFailure.Closed && again.Message.Contains("is closed"), name + ": then " + again.Message);
                    }
                }
            }
            catch (Exception e)
            {
                Fail(name + ": " + e.GetType().Name + ": " + e.Message);
            }
            finally
            {
                if (client != null) client.Dispose();
            }
        }
    }

    // -- a server that goes away: act, say READY, wait for the test to kill it, act again

    private static void GoAway(string address)
    {
        using (PolicyClient client = PolicyClient.Open(address))
        {
            var obs = new float[client.Info.Inputs[0].Size];
            Check(client.Act(1, obs).ContinuousActions.Length == client.Info.ContinuousSize, "goaway: answered while the server runs");
            Console.WriteLine("READY");
            Console.Out.Flush();
            Console.In.ReadLine(); // the test kills the server, then writes a line
            for (int attempt = 0; attempt < 2; attempt++)
            {
                try
                {
                    client.Act(1, obs);
                    Fail("goaway: attempt " + attempt + " answered by a server that is gone");
                }
                catch (PolicyException e)
                {
                    bool ok = e.Failure == PolicyFailure.Closed && e.Message.IndexOf('\n') < 0 && !client.IsOpen;
                    Check(ok, "goaway: attempt " + attempt + ": " + e.Failure + ": " + e.Message);
                }
            }
        }
        try
        {
            PolicyClient.Open(address, 2000).Dispose();
            Fail("goaway: connected again to a server that is gone");
        }
        catch (PolicyException e)
        {
            Check(e.Failure == PolicyFailure.Connect && e.Message.Contains("nothing listens"), "goaway: connect again: " + e.Message);
        }
    }

    // -- floats: Json.Number for float32 bit patterns, one per line, in a given culture

    private static int Floats(string path, string cultureName)
    {
        int code = 0;
        CultureInfo culture = cultureName.Length == 0 ? CultureInfo.InvariantCulture : new CultureInfo(cultureName);
        RunInCulture(culture, () =>
        {
            var output = new StringBuilder();
            foreach (string line in File.ReadAllLines(path))
            {
                var bits = new FloatBits { Bits = int.Parse(line, CultureInfo.InvariantCulture) };
                try
                {
                    output.Append(Json.Number(bits.Value)).Append('\n');
                }
                catch (ArgumentException) // NaN and infinities: JSON has no text for them
                {
                    output.Append("refused\n");
                }
            }
            Console.Out.Write(output.ToString());
        });
        if (_failed > 0) code = 1;
        return code;
    }

    // -- answers: the continuous actions of `count` Act calls, each float as its int32 bits, a line per answer

    private static int Answers(string address, int count)
    {
        var output = new StringBuilder();
        using (PolicyClient client = PolicyClient.Open(address))
        {
            for (int k = 0; k < count; k++)
            {
                PolicyAction action = client.Act(k, new float[client.Info.Inputs[0].Size]);
                for (int i = 0; i < action.ContinuousActions.Length; i++)
                    output.Append(i == 0 ? "" : " ").Append(new FloatBits { Value = action.ContinuousActions[i] }.Bits.ToString(CultureInfo.InvariantCulture));
                output.Append('\n');
            }
        }
        Console.Out.Write(output.ToString());
        return 0;
    }

    // -- routes: `count` Act calls on one connection; for each, the answer's Model and Version as read (Json.Quote'd,
    // "null" for none), or the PolicyException's failure and message (then the calls stop)

    private static int Routes(string address, int count)
    {
        var output = new StringBuilder();
        using (PolicyClient client = PolicyClient.Open(address))
        {
            for (int k = 0; k < count; k++)
            {
                try
                {
                    PolicyAction action = client.Act(k, new float[client.Info.Inputs[0].Size]);
                    output.Append(Json.Quote(action.Model)).Append(' ').Append(action.Version == null ? "null" : Json.Quote(action.Version))
                          .Append(' ').Append(client.AnsweredVersion == null ? "null" : Json.Quote(client.AnsweredVersion)).Append('\n');
                }
                catch (PolicyException e)
                {
                    output.Append(e.Failure).Append(": ").Append(e.Message).Append('\n');
                    break;
                }
            }
        }
        Console.Out.Write(output.ToString());
        return 0;
    }

    // -- sends: the float32s of a file (their int32 bits, a line each) as observations through ActMany, `agents` agents
    // a step, each agent's observation the next Info.Inputs[0].Size values (the file holds a whole number of steps)

    private static int Sends(string address, string path, int agents, bool text)
    {
        string[] lines = File.ReadAllLines(path);
        using (PolicyClient client = PolicyClient.Open(address))
        {
            client.BinaryObservations = !text;
            int size = client.Info.Inputs[0].Size, next = 0;
            var ids = new long[agents];
            for (int a = 0; a < agents; a++) ids[a] = a;
            while (next < lines.Length)
            {
                var observations = new float[agents][];
                for (int a = 0; a < agents; a++)
                {
                    observations[a] = new float[size];
                    for (int i = 0; i < size; i++)
                        observations[a][i] = new FloatBits { Bits = int.Parse(lines[next++], CultureInfo.InvariantCulture) }.Value;
                }
                client.ActMany(ids, observations);
            }
        }
        return 0;
    }

    // -- base64: the library's float32 base64 writer (internal: reached by reflection) on the floats of a file of int32
    // bits, a line per count (1, 2, 3, ... floats: every padding), then "refused" or the index of a NaN or infinity where
    // one is given; each text is also read back by the library's reader of answers ("read back otherwise" after a text
    // whose floats did not come back bit for bit)

    private static int Base64(string path)
    {
        string[] lines = File.ReadAllLines(path);
        var values = new float[lines.Length];
        for (int i = 0; i < lines.Length; i++) values[i] = new FloatBits { Bits = int.Parse(lines[i], CultureInfo.InvariantCulture) }.Value;
        System.Reflection.MethodInfo write = typeof(PolicyClient).Assembly.GetType("MLAgentsInference.Numbers")
            .GetMethod("TryWriteBase64Floats", System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Static);
        var output = new StringBuilder();
        var text = new byte[4 * values.Length + 8];
        for (int start = 0, count = 1; start < values.Length; start += count, count = count % 7 + 1)
        {
            int n = Math.Min(count, values.Length - start);
            int end = (int)write.Invoke(null, new object[] { text, 0, values, start, n });
            output.Append(end < 0 ? "refused " + (-1 - end).ToString(CultureInfo.InvariantCulture) : Encoding.ASCII.GetString(text, 0, end));
            if (end >= 0 && !ReadsBack(Encoding.ASCII.GetString(text, 0, end), values, start, n)) output.Append(" read back otherwise");
            output.Append('\n');
        }
        Console.Out.Write(output.ToString());
        return 0;
    }

    // The library's reader of answers' float32 bytes ({"b64": ...}): values[start..start+n) bit for bit.
    private static bool ReadsBack(string base64, float[] values, int start, int n)
    {
        byte[] line = Encoding.ASCII.GetBytes("{\"b64\":\"" + base64 + "\"}");
        Type type = typeof(PolicyClient).Assembly.GetType("MLAgentsInference.JsonReader");
        const System.Reflection.BindingFlags inside = System.Reflection.BindingFlags.NonPublic | System.Reflection.BindingFlags.Instance;
        object reader = Activator.CreateInstance(type, inside, null, new object[] { line, 0, line.Length }, CultureInfo.InvariantCulture);
        var got = (float[])type.GetMethod("ReadFloatBytes", inside).Invoke(reader, new object[0]);
        if (got.Length != n) return false;
        for (int i = 0; i < n; i++)
            if (new FloatBits { Value = got[i] }.Bits != new FloatBits { Value = values[start + i] }.Bits) return false;
        return true;
    }

    [System.Runtime.InteropServices.StructLayout(System.Runtime.InteropServices.LayoutKind.Explicit)]
    private struct FloatBits
    {
        [System.Runtime.InteropServices.FieldOffset(0)] public float Value;
        [System.Runtime.InteropServices.FieldOffset(0)] public int Bits;
    }

    // -- json: the strict reader accepts what JSON allows and refuses the rest

    private static void JsonCases(Dictionary<string, object> cases)
    {
        foreach (object c in L(cases["cases"]))
        {
            Dictionary<string, object> item = D(c);
            string text = (string)item["text"];
            bool valid = (bool)item["valid"];
            try
            {
                object value = Json.Parse(text);
                string shown = item.ContainsKey("shows") ? Show(value) : null;
                bool ok = valid && (shown == null || shown == (string)item["shows"]);
                Check(ok, "json " + Json.Quote(text) + ": read" + (shown == null ? "" : " as " + shown));
            }
            catch (FormatException e)
            {
                Check(!valid && e.Message.IndexOf('\n') < 0, "json " + Json.Quote(text) + ": refused: " + e.Message);
            }
        }
    }

    private static string Show(object value)
    {
        if (value == null) return "null";
        if (value is bool) return (bool)value ? "true" : "false";
        if (value is long) return "long:" + ((long)value).ToString(CultureInfo.InvariantCulture);
        if (value is double) // ("R" drops the sign of -0 on Mono)
            return "double:" + (1 / (double)value < 0 ? "-" : "") + Math.Abs((double)value).ToString("R", CultureInfo.InvariantCulture);
        if (value is string) return "string:" + Json.Quote((string)value);
        var list = value as List<object>;
        if (list != null) return "[" + string.Join(",", list.ConvertAll(Show).ToArray()) + "]";
        var dict = (Dictionary<string, object>)value;
        var parts = new List<string>();
        foreach (KeyValuePair<string, object> pair in dict) parts.Add(Json.Quote(pair.Key) + ":" + Show(pair.Value));
        return "{" + string.Join(",", parts.ToArray()) + "}";
    }
}
