// The C# client against a serve of several models (tests/test_csharp_models.py): one PolicyClient per model (and
// version) of one run folder, both open at once; each answer equal to what inference.load(<that checkpoint>).act()
// gives (discrete equal, continuous within 1e-5), naming its model and version; a client that names no model, an
// unknown model or a version that is not loaded is one PolicyException line. One line per check ("PASS ..." /
// "FAIL ..."), then "RESULT passed=N failed=M"; exit 1 on any failure.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.IO;
using System.Text;
using MLAgentsInference;

internal static class ModelTests
{
    private const double Tolerance = 1e-5;
    private static int _passed, _failed;

    private static int Main(string[] args)
    {
        if (args.Length != 1)
        {
            Console.Error.WriteLine("usage: ModelTests.exe CASES.json");
            return 2;
        }
        try
        {
            Run((Dictionary<string, object>)Json.Parse(File.ReadAllText(args[0], Encoding.UTF8)));
        }
        catch (Exception e)
        {
            Check(false, "uncaught " + e.GetType().Name + ": " + e.Message);
        }
        Console.WriteLine("RESULT passed=" + _passed + " failed=" + _failed);
        return _failed == 0 ? 0 : 1;
    }

    private static void Check(bool ok, string what)
    {
        if (ok) _passed++;
        else _failed++;
        Console.WriteLine((ok ? "PASS " : "FAIL ") + what);
    }

    private static List<object> L(object o) { return (List<object>)o; }
    private static Dictionary<string, object> D(object o) { return (Dictionary<string, object>)o; }

    private static float[] Floats(object o)
    {
        List<object> list = L(o);
        var result = new float[list.Count];
        for (int i = 0; i < list.Count; i++) result[i] = (float)Convert.ToDouble(list[i], CultureInfo.InvariantCulture);
        return result;
    }

    private static long? Version(Dictionary<string, object> c)
    {
        return c.ContainsKey("version") && c["version"] != null ? (long?)(long)c["version"] : null;
    }

    private static void Run(Dictionary<string, object> cases)
    {
        string address = (string)cases["address"];
        var clients = new List<PolicyClient>();
        try
        {
            List<object> models = L(cases["models"]);
            foreach (object m in models)  // (all open at once, on one server)
            {
                Dictionary<string, object> c = D(m);
                clients.Add(PolicyClient.Open(address, model: (string)c["model"], version: Version(c)));
            }
            for (int k = 0; k < models.Count; k++) Model(clients[k], D(models[k]));
        }
        finally
        {
            foreach (PolicyClient client in clients) client.Dispose();
        }
        foreach (object r in L(cases["refusals"])) Refusal(address, D(r));
    }

    private static void Model(PolicyClient client, Dictionary<string, object> c)
    {
        string model = (string)c["model"], answered = (string)c["answered"];
        string tag = model + (Version(c).HasValue ? " version " + Version(c).Value.ToString(CultureInfo.InvariantCulture) : "");
        Check(client.Model == model && client.Info.Behavior == model, tag + ": the client's model is " + client.Model);
        Check(client.AnsweredVersion == answered, tag + ": the info line answered by version " + client.AnsweredVersion);
        List<object> observations = L(c["obs"]), continuous = L(c["continuous"]), discrete = L(c["discrete"]);
        var ids = new long[observations.Count];
        var obs = new float[observations.Count][];
        for (int i = 0; i < ids.Length; i++)
        {
            ids[i] = 100 + i;
            obs[i] = Floats(observations[i]);
        }
        PolicyAction[] many = client.ActMany(ids, obs);
        PolicyAction one = client.Act(ids[0], obs[0]);
        for (int i = 0; i <= ids.Length; i++)
        {
            PolicyAction a = i < ids.Length ? many[i] : one;
            int row = i < ids.Length ? i : 0;
            string where = tag + (i < ids.Length ? " ActMany agent " + ids[i] : " Act agent " + ids[0]);
            Check(a.Model == model && a.Version == answered, where + ": answered by " + a.Model + " version " + a.Version);
            float[] want = Floats(continuous[row]);
            double worst = want.Length == a.ContinuousActions.Length ? 0 : double.PositiveInfinity;
            for (int k = 0; k < Math.Min(want.Length, a.ContinuousActions.Length); k++)
                worst = Math.Max(worst, Math.Abs((double)want[k] - a.ContinuousActions[k]));
            Check(worst <= Tolerance, where + ": continuous actions within " + worst.ToString("R", CultureInfo.InvariantCulture));
            List<object> wantDiscrete = L(discrete[row]);
            bool same = wantDiscrete.Count == a.DiscreteActions.Length;
            for (int k = 0; same && k < wantDiscrete.Count; k++) same = (long)wantDiscrete[k] == a.DiscreteActions[k];
            Check(same, where + ": discrete actions " + string.Join(",", a.DiscreteActions));
        }
        Check(client.AnsweredVersion == answered, tag + ": the latest line answered by version " + client.AnsweredVersion);
    }

    private static void Refusal(string address, Dictionary<string, object> c)
    {
        string model = c["model"] as string, says = (string)c["says"];
        string tag = "refused: model " + (model ?? "(none)") + (Version(c).HasValue ? " version " + Version(c).Value : "");
        try
        {
            using (PolicyClient.Open(address, model: model, version: Version(c)))
                Check(false, tag + ": connected");
        }
        catch (PolicyException e)
        {
            Check(e.Failure == PolicyFailure.ErrorAnswer && e.Message.Contains(says) && e.Message.IndexOf('\n') < 0,
                  tag + ": " + e.Failure + ": " + e.Message);
        }
    }
}
