// NOT Unity's or ML-Agents' code: hand-written stand-ins for the few types the sample (Samples~/SharedPolicy) uses, with
// the signatures com.unity.ml-agents 2.x documents, so that tests/test_csharp_client.py can compile the sample against
// the library's current API here, where neither Unity nor ML-Agents can be installed. Compiling against these proves
// the sample's calls of the library and its C# syntax, not that Unity or ML-Agents accept it.
using System;

namespace UnityEngine
{
    public class Object
    {
        public int GetInstanceID() { return GetHashCode(); }
    }

    public class Component : Object
    {
        public Transform transform { get { return null; } }
        public T GetComponent<T>() { return default(T); }
    }

    public class Behaviour : Component
    {
    }

    public class MonoBehaviour : Behaviour
    {
    }

    public class Transform : Component
    {
        public Vector3 localPosition { get; set; }
    }

    public class Rigidbody : Component
    {
        public Vector3 velocity { get; set; }
        public void AddForce(Vector3 force) { }
    }

    public struct Vector3
    {
        public float x, y, z;
        public Vector3(float x, float y, float z) { this.x = x; this.y = y; this.z = z; }
        public static Vector3 operator *(Vector3 a, float d) { return new Vector3(a.x * d, a.y * d, a.z * d); }
    }

    public static class Debug
    {
        public static void LogError(object message) { }
    }

    [AttributeUsage(AttributeTargets.Field)]
    public sealed class TooltipAttribute : Attribute
    {
        public TooltipAttribute(string tooltip) { }
    }
}

namespace Unity.MLAgents.Actuators
{
    public struct ActionSegment<T> where T : struct
    {
        public int Length { get { return 0; } }
        public T this[int index] { get { return default(T); } set { } }
    }

    public struct ActionBuffers
    {
        public ActionSegment<float> ContinuousActions { get { return default(ActionSegment<float>); } }
        public ActionSegment<int> DiscreteActions { get { return default(ActionSegment<int>); } }
    }
}

namespace Unity.MLAgents
{
    using Unity.MLAgents.Actuators;

    public class Academy
    {
        public static Academy Instance { get { return null; } }
        public int TotalStepCount { get { return 0; } }
    }

    public class Agent : UnityEngine.MonoBehaviour
    {
        protected virtual void OnEnable() { }
        protected virtual void OnDisable() { }
        public virtual void Initialize() { }
        public virtual void OnEpisodeBegin() { }
        public virtual void OnActionReceived(ActionBuffers actions) { }
        public virtual void Heuristic(in ActionBuffers actionsOut) { }
    }
}
