// The fallback where the player cannot be started with --mlagents-port: Behavior Type "Heuristic Only" and this base
// class. Heuristic() puts the agent's CollectObservations vector (Agent.GetObservations()) into a ServedCommunicator of
// its own (not the Academy's), which sends it when the next Academy step begins and never waits; Heuristic() gives the
// newest answer that has arrived. Limits: the CollectObservations vector only (no camera, buffer or other sensor
// component, no action masks), and answers at least one decision late (zeros before the first).
// With --mlagents-port and Behavior Type Default this class's Heuristic() is never called: ServePolicies serves it.
using System.Collections.Generic;
using MLAgentsInference;
using Unity.MLAgents;
using Unity.MLAgents.Actuators;
using Unity.MLAgents.Policies;
using Unity.MLAgents.Sensors;

public abstract class ServedHeuristicAgent : Agent
{
    static ServedCommunicator s_Fallback;
    readonly List<ISensor> m_Sensors = new List<ISensor>();
    VectorSensor m_Vector;
    string m_Behaviour;

    static ServedCommunicator Fallback
    {
        get
        {
            if (s_Fallback == null)
            {
                var addresses = ServePolicies.Addresses(System.Environment.GetCommandLineArgs());
                s_Fallback = new ServedCommunicator(behaviour => ServePolicies.AddressFor(addresses, behaviour), 0);
                Academy.Instance.AgentPreStep += step => s_Fallback.DecideBatch(); // the last step's lines go out
                UnityEngine.Application.quitting += () => { s_Fallback.Dispose(); s_Fallback = null; };
            }
            return s_Fallback;
        }
    }

    public override void Heuristic(in ActionBuffers actionsOut)
    {
        var observations = GetObservations();
        if (m_Vector == null)
        {
            var parameters = GetComponent<BehaviorParameters>();
            m_Behaviour = parameters.FullyQualifiedBehaviorName;
            Fallback.SubscribeBrain(m_Behaviour, parameters.BrainParameters.ActionSpec);
            m_Vector = new VectorSensor(observations.Count);
            m_Sensors.Add(m_Vector);
        }
        m_Vector.Reset();
        m_Vector.AddObservation(observations);
        Fallback.PutObservations(m_Behaviour, new AgentInfo { episodeId = GetInstanceID() }, m_Sensors);
        ActionBuffers answer = Fallback.GetActions(m_Behaviour, GetInstanceID());
        ActionSegment<float> continuous = actionsOut.ContinuousActions;
        for (int i = 0; i < continuous.Length && i < answer.ContinuousActions.Length; i++) continuous[i] = answer.ContinuousActions[i];
        ActionSegment<int> discrete = actionsOut.DiscreteActions;
        for (int i = 0; i < discrete.Length && i < answer.DiscreteActions.Length; i++) discrete[i] = answer.DiscreteActions[i];
    }

    public override void OnEpisodeBegin()
    {
        // the server's memory of this agent (LSTM policies) starts over on its next line
        if (m_Vector != null) Fallback.PutObservations(m_Behaviour, new AgentInfo { episodeId = GetInstanceID(), done = true }, m_Sensors);
    }
}
