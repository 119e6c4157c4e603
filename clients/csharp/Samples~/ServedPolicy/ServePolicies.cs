// Registers ServedCommunicator before the first scene loads, so that ML-Agents asks `python inference.py --mode serve`
// for every agent whose Behavior Type is Default. Start the player with `--mlagents-port 1` (ML-Agents creates a
// communicator only with that flag; the number is not used) and, optionally, `--policy-server ADDRESS` (every
// behaviour) or `--policy-server NAME=ADDRESS` (one behaviour; NAME as in Behavior Parameters), repeated as needed.
using System;
using System.Collections.Generic;
using MLAgentsInference;
using UnityEngine;

public static class ServePolicies
{
    public const string DefaultAddress = "127.0.0.1:8000";

    [RuntimeInitializeOnLoadMethod(RuntimeInitializeLoadType.BeforeSceneLoad)]
    static void Register()
    {
        var addresses = Addresses(Environment.GetCommandLineArgs());
        ServedCommunicator.Register(behaviour => AddressFor(addresses, behaviour));
    }

    /// <summary>The --policy-server values: NAME -> ADDRESS, "" -> the address for every other behaviour.</summary>
    public static Dictionary<string, string> Addresses(string[] args)
    {
        var addresses = new Dictionary<string, string>();
        for (int i = 0; i + 1 < args.Length; i++)
        {
            if (args[i] != "--policy-server") continue;
            string value = args[i + 1];
            int eq = value.IndexOf('=');
            if (eq > 0) addresses[value.Substring(0, eq)] = value.Substring(eq + 1);
            else addresses[""] = value;
        }
        return addresses;
    }

    /// <summary>The address for a behaviour ML-Agents names "NAME?team=N".</summary>
    public static string AddressFor(Dictionary<string, string> addresses, string behaviour)
    {
        int q = behaviour.IndexOf('?');
        string name = q < 0 ? behaviour : behaviour.Substring(0, q);
        string address;
        if (addresses.TryGetValue(name, out address) || addresses.TryGetValue("", out address)) return address;
        return DefaultAddress;
    }
}
