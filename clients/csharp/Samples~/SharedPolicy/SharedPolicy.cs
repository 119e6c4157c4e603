// One per scene (or per group of agents that decide on the same steps): the connection the scene's ServedAgents
// share, and one ActMany per decision step for all of them. Needs com.unity.ml-agents 2.x or later and this package.
// NOT compiled in this repository's tests (no Unity or ML-Agents assemblies there): see README.md.
using System.Collections.Generic;
using MLAgentsInference;
using Unity.MLAgents;
using UnityEngine;

public sealed class SharedPolicy : MonoBehaviour
{
    [Tooltip("Where python inference.py --mode serve --listen ... listens: HOST:PORT or unix:PATH")]
    public string address = "127.0.0.1:8000";
    public int connectTimeoutMs = 5000;
    public int readTimeoutMs = 2000;

    private readonly List<ServedAgent> _agents = new List<ServedAgent>();
    private readonly List<AgentRequest> _requests = new List<AgentRequest>();
    private readonly Dictionary<ServedAgent, PolicyAction> _actions = new Dictionary<ServedAgent, PolicyAction>();
    private PolicyClient _client;
    private int _decidedAt = -1;

    /// <summary>The served policy's inputs and action sizes (connects on first use).</summary>
    public PolicyInfo Info { get { return Client.Info; } }

    private PolicyClient Client
    {
        get
        {
            if (_client == null || !_client.IsOpen) // (a closed client: the server went away; try again)
                _client = PolicyClient.Open(address, connectTimeoutMs, readTimeoutMs);
            return _client;
        }
    }

    public void Register(ServedAgent agent) { if (!_agents.Contains(agent)) _agents.Add(agent); }

    public void Unregister(ServedAgent agent) { _agents.Remove(agent); _actions.Remove(agent); }

    /// <summary>The agent's memory (LSTM policies) starts over on its next decision.</summary>
    public void ResetAgent(ServedAgent agent) { if (_client != null && _client.IsOpen) _client.Reset(agent.AgentId); }

    /// <summary>Called from each agent's Heuristic: the first call of an Academy step asks the server for every
    /// registered agent at once (one ActMany), the others read the answers. Null when the server could not answer.</summary>
    public PolicyAction ActionsFor(ServedAgent agent)
    {
        int step = Academy.Instance.TotalStepCount;
        if (step != _decidedAt)
        {
            _decidedAt = step;
            DecideAll();
        }
        PolicyAction action;
        return _actions.TryGetValue(agent, out action) ? action : null;
    }

    private void DecideAll()
    {
        _actions.Clear();
        _requests.Clear();
        foreach (ServedAgent agent in _agents)
            _requests.Add(new AgentRequest(agent.AgentId, agent.ServedObservations(), agent.ServedActionMasks()));
        PolicyAction[] actions;
        try
        {
            actions = Client.ActMany(_requests);
        }
        catch (PolicyException e) // one line; the other agents' answers survive an error answer
        {
            Debug.LogError("policy server " + address + ": " + e.Message);
            if (e.Actions == null) return;
            actions = e.Actions;
        }
        for (int i = 0; i < actions.Length; i++)
            if (actions[i] != null) _actions[_agents[i]] = actions[i];
    }

    private void OnDestroy()
    {
        if (_client != null) _client.Dispose();
    }
}
