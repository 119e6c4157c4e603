// An ML-Agents Agent whose actions come from the served policy through Heuristic(in ActionBuffers).
// Set its Behavior Parameters' Behavior Type to "Heuristic Only", the action sizes to the served policy's,
// and give it the scene's SharedPolicy. NOT compiled in this repository's tests: see README.md.
using MLAgentsInference;
using Unity.MLAgents;
using Unity.MLAgents.Actuators;

public abstract class ServedAgent : Agent
{
    public SharedPolicy policy;

    /// <summary>The id the server keeps this agent's memory under (unique among the agents of one SharedPolicy).</summary>
    public long AgentId { get { return GetInstanceID(); } }

    /// <summary>One entry per input of policy.Info.Inputs, in order (the values CollectObservations would write):
    /// float[] for a vector, float[] or byte[] (C*H*W, channel-first; Frames.ChannelFirst) for a camera, float[][] for an
    /// entity buffer.</summary>
    public abstract object[] ServedObservations();

    /// <summary>1 = allowed, 0 = masked, the branches side by side; null: all allowed.</summary>
    public virtual int[] ServedActionMasks() { return null; }

    protected override void OnEnable()
    {
        base.OnEnable();
        policy.Register(this);
    }

    protected override void OnDisable()
    {
        policy.Unregister(this);
        base.OnDisable();
    }

    public override void OnEpisodeBegin()
    {
        policy.ResetAgent(this);
    }

    public override void Heuristic(in ActionBuffers actionsOut)
    {
        PolicyAction action = policy.ActionsFor(this);
        if (action == null) return; // (logged by SharedPolicy; the actions stay zero this step)
        ActionSegment<float> continuous = actionsOut.ContinuousActions;
        for (int i = 0; i < continuous.Length && i < action.ContinuousActions.Length; i++) continuous[i] = action.ContinuousActions[i];
        ActionSegment<int> discrete = actionsOut.DiscreteActions;
        for (int i = 0; i < discrete.Length && i < action.DiscreteActions.Length; i++) discrete[i] = action.DiscreteActions[i];
    }
}
