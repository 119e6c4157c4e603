// An example ServedAgent: the 8 observations of ML-Agents' RollerBall tutorial, for a policy with one vector input of
// 8 and 2 continuous actions (examples/vector in this repository has that shape). NOT compiled here: see README.md.
using UnityEngine;

public sealed class RollerServedAgent : ServedAgent
{
    public Transform target;
    private Rigidbody _body;

    public override void Initialize()
    {
        _body = GetComponent<Rigidbody>();
    }

    public override object[] ServedObservations()
    {
        Vector3 self = transform.localPosition, goal = target.localPosition, velocity = _body.velocity;
        return new object[] { new[] { goal.x, goal.y, goal.z, self.x, self.y, self.z, velocity.x, velocity.z } };
    }

    public override void OnActionReceived(Unity.MLAgents.Actuators.ActionBuffers actions)
    {
        _body.AddForce(new Vector3(actions.ContinuousActions[0], 0, actions.ContinuousActions[1]) * 10f);
    }
}
