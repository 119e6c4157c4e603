// The C# client's side of tools/bench_csharp.py: a lone agent's round trips (Act) or N agents through ActMany, against
// a running `--mode serve`, on observations the Python side wrote (float32, little-endian, [steps, agents, size]).
// Prints one JSON line. Warm-up rounds are not timed.
using System;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using MLAgentsInference;

internal static class Bench
{
    private static int Main(string[] args)
    {
        if (args.Length != 6)
        {
            Console.Error.WriteLine("usage: Bench.exe ADDRESS lone|many OBS_FILE AGENTS ROUNDS WARMUP");
            return 2;
        }
        string address = args[0], mode = args[1];
        int agents = int.Parse(args[3], CultureInfo.InvariantCulture);
        int rounds = int.Parse(args[4], CultureInfo.InvariantCulture), warmup = int.Parse(args[5], CultureInfo.InvariantCulture);
        byte[] raw = File.ReadAllBytes(args[2]);
        using (PolicyClient client = PolicyClient.Open(address))
        {
            int size = client.Info.Inputs[0].Size;
            int steps = raw.Length / 4 / size / agents;
            var obs = new float[steps][][];
            for (int s = 0; s < steps; s++)
            {
                obs[s] = new float[agents][];
                for (int a = 0; a < agents; a++)
                {
                    obs[s][a] = new float[size];
                    Buffer.BlockCopy(raw, ((s * agents + a) * size) * 4, obs[s][a], 0, size * 4);
                }
            }
            var inv = CultureInfo.InvariantCulture;
            if (mode == "lone")
            {
                var times = new double[rounds];
                for (int i = 0; i < warmup + rounds; i++)
                {
                    long t0 = Stopwatch.GetTimestamp();
                    PolicyAction action = client.Act(0, obs[i % steps][0]);
                    long t1 = Stopwatch.GetTimestamp();
                    if (action.ContinuousActions.Length != client.Info.ContinuousSize) return 1;
                    if (i >= warmup) times[i - warmup] = (t1 - t0) * 1000.0 / Stopwatch.Frequency;
                }
                Array.Sort(times);
                Console.WriteLine("{\"p50_ms\": " + Percentile(times, 50).ToString("R", inv) + ", \"p99_ms\": " + Percentile(times, 99).ToString("R", inv) + "}");
                return 0;
            }
            var requests = new AgentRequest[agents];
            for (int a = 0; a < agents; a++) requests[a] = new AgentRequest(a, obs[0][a]);
            long start = 0;
            TimeSpan cpu = TimeSpan.Zero;
            for (int i = 0; i < warmup + rounds; i++)
            {
                if (i == warmup)
                {
                    start = Stopwatch.GetTimestamp();
                    cpu = Process.GetCurrentProcess().TotalProcessorTime;
                }
                float[][] step = obs[i % steps];
                for (int a = 0; a < agents; a++) requests[a].Observations[0] = step[a];
                PolicyAction[] actions = client.ActMany(requests);
                if (actions.Length != agents || actions[agents - 1].ContinuousActions.Length != client.Info.ContinuousSize) return 1;
            }
            double seconds = (Stopwatch.GetTimestamp() - start) / (double)Stopwatch.Frequency;
            double cpuMs = (Process.GetCurrentProcess().TotalProcessorTime - cpu).TotalMilliseconds / rounds; // (user + system)
            Console.WriteLine("{\"agent_steps_per_s\": " + (agents * rounds / seconds).ToString("R", inv) +
                              ", \"cpu_ms_per_step\": " + cpuMs.ToString("R", inv) + "}");
            return 0;
        }
    }

    private static double Percentile(double[] sorted, double q) // numpy's default (linear) percentile
    {
        double rank = q / 100 * (sorted.Length - 1);
        int lo = (int)Math.Floor(rank), hi = Math.Min(lo + 1, sorted.Length - 1);
        return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
    }
}
