// ML-Agents' RollerBall tutorial agent, unchanged but for its base class: 8 observations, 2 continuous actions (the
// shape of examples/vector). Served through ServedCommunicator (Behavior Type Default, --mlagents-port), nothing here
// talks to the server: its observations are what CollectObservations writes, read by ML-Agents' own sensor.
using Unity.MLAgents.Actuators;
using Unity.MLAgents.Sensors;
using UnityEngine;

public sealed class RollerAgent : ServedHeuristicAgent
{
    public Transform target;
    Rigidbody m_Body;

    public override void Initialize()
    {
        m_Body = GetComponent<Rigidbody>();
    }

    public override void CollectObservations(VectorSensor sensor)
    {
        sensor.AddObservation(target.localPosition);
        sensor.AddObservation(transform.localPosition);
        sensor.AddObservation(m_Body.velocity.x);
        sensor.AddObservation(m_Body.velocity.z);
    }

    public override void OnActionReceived(ActionBuffers actions)
    {
        m_Body.AddForce(new Vector3(actions.ContinuousActions[0], 0, actions.ContinuousActions[1]) * 10f);
    }
}
