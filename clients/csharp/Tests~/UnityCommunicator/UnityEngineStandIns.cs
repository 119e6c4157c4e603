// NOT Unity's code: a small stand-in for the part of UnityEngine that com.unity.ml-agents 3.0.0's runtime files in
// Tests~/MLAgentsRuntime use, so that tests/test_unity_communicator.py can compile and run ML-Agents' own Academy, Agent,
// sensors and actuators under Mono, where Unity cannot be installed. The component model is the least that ML-Agents'
// code needs to run: a GameObject holds components; AddComponent calls Awake then OnEnable, SetActive(false) and Destroy
// call OnDisable (then OnDestroy), found by name as Unity finds its messages. No rendering, physics, serialization or
// frame loop: the harness calls Academy.EnvironmentStep itself.
using System;
using System.Collections.Generic;
using System.Reflection;

namespace UnityEngine
{
    [Flags]
    public enum HideFlags { None = 0, HideInHierarchy = 1 }

    public class Object
    {
        static int s_NextId = 1;
        readonly int m_Id = s_NextId++;
        public string name { get; set; }
        public HideFlags hideFlags { get; set; }
        public int GetInstanceID() { return m_Id; }

        public static void Destroy(Object obj)
        {
            GameObject go = obj as GameObject;
            if (go != null) { go.DestroyAll(); return; }
            Component c = obj as Component;
            if (c != null) c.gameObject.DestroyComponent(c);
        }

        public static void DestroyImmediate(Object obj) { Destroy(obj); }
        public static void DontDestroyOnLoad(Object target) { }

        public static bool operator ==(Object a, Object b)
        {
            bool aNull = ReferenceEquals(a, null) || a.m_Destroyed, bNull = ReferenceEquals(b, null) || b.m_Destroyed;
            if (aNull || bNull) return aNull && bNull;
            return ReferenceEquals(a, b);
        }

        public static bool operator !=(Object a, Object b) { return !(a == b); }
        public static implicit operator bool(Object o) { return o != null; }
        public override bool Equals(object other) { return ReferenceEquals(this, other); }
        public override int GetHashCode() { return m_Id; }

        internal bool m_Destroyed;

        internal static void Send(object target, string message)
        {
            for (Type t = target.GetType(); t != null && t != typeof(Object); t = t.BaseType)
            {
                MethodInfo m = t.GetMethod(message, BindingFlags.Instance | BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.DeclaredOnly, null, Type.EmptyTypes, null);
                if (m != null) { m.Invoke(target, null); return; }
            }
        }
    }

    public class GameObject : Object
    {
        readonly List<Component> m_Components = new List<Component>();
        bool m_Active = true;

        public GameObject() : this("GameObject") { }
        public GameObject(string name) { this.name = name; }
        public GameObject gameObject { get { return this; } }
        public bool activeSelf { get { return m_Active; } }
        public bool activeInHierarchy { get { return m_Active; } }

        public T AddComponent<T>() where T : Component, new()
        {
            T c = new T();
            c.m_GameObject = this;
            m_Components.Add(c);
            Send(c, "Awake");
            if (m_Active) Send(c, "OnEnable");
            return c;
        }

        public T GetComponent<T>() { foreach (Component c in m_Components) if (c is T) return (T)(object)c; return default(T); }

        public T[] GetComponents<T>()
        {
            List<T> found = new List<T>();
            foreach (Component c in m_Components) if (c is T) found.Add((T)(object)c);
            return found.ToArray();
        }

        public void SetActive(bool value)
        {
            if (value == m_Active) return;
            m_Active = value;
            foreach (Component c in m_Components.ToArray()) Send(c, value ? "OnEnable" : "OnDisable");
        }

        internal void DestroyComponent(Component c)
        {
            if (m_Active) Send(c, "OnDisable");
            Send(c, "OnDestroy");
            m_Components.Remove(c);
            c.m_Destroyed = true;
        }

        // As Unity destroys a GameObject: every component's OnDisable (all still attached), then every OnDestroy.
        internal void DestroyAll()
        {
            Component[] all = m_Components.ToArray();
            if (m_Active) foreach (Component c in all) Send(c, "OnDisable");
            foreach (Component c in all) Send(c, "OnDestroy");
            foreach (Component c in all) c.m_Destroyed = true;
            m_Components.Clear();
            m_Active = false;
            m_Destroyed = true;
        }
    }

    public class Component : Object
    {
        internal GameObject m_GameObject;
        public GameObject gameObject { get { return m_GameObject; } }
        public Transform transform { get { return m_GameObject.GetComponent<Transform>(); } }
        public T GetComponent<T>() { return m_GameObject.GetComponent<T>(); }
        public T[] GetComponents<T>() { return m_GameObject.GetComponents<T>(); }
        public T[] GetComponentsInChildren<T>() { return m_GameObject.GetComponents<T>(); }
    }

    public class Behaviour : Component
    {
        public bool enabled { get { return m_GameObject != null && m_GameObject.activeSelf; } set { } }
    }

    public class MonoBehaviour : Behaviour { }

    public class ScriptableObject : Object { }

    public class Transform : Component { public Vector3 localPosition { get; set; } }

    public class Rigidbody : Component
    {
        public Vector3 velocity { get; set; }
        public void AddForce(Vector3 force) { velocity = new Vector3(velocity.x + force.x, velocity.y + force.y, velocity.z + force.z); }
    }

    public enum RuntimeInitializeLoadType { AfterSceneLoad, BeforeSceneLoad }

    [AttributeUsage(AttributeTargets.Method)]
    public sealed class RuntimeInitializeOnLoadMethodAttribute : Attribute
    {
        public RuntimeInitializeOnLoadMethodAttribute(RuntimeInitializeLoadType loadType) { }
    }

    public interface ISerializationCallbackReceiver
    {
        void OnBeforeSerialize();
        void OnAfterDeserialize();
    }

    public static class Application
    {
        public static event Action quitting = delegate { };
        public static bool isEditor { get { return false; } }
        public static int targetFrameRate { get; set; }
        public static string unityVersion { get { return "stand-in"; } }
        public static string dataPath { get { return System.IO.Path.GetTempPath(); } }
        public static void Quit() { quitting(); }
    }

    public static class Debug
    {
        // One line per call on stderr, so that a test can count what was logged.
        public static void Log(object message) { Console.Error.WriteLine("LOG " + message); }
        public static void LogWarning(object message) { Console.Error.WriteLine("WARNING " + message); }
        public static void LogError(object message) { Console.Error.WriteLine("ERROR " + message); }
        public static void LogWarningFormat(string format, params object[] args) { LogWarning(string.Format(format, args)); }
        public static void Assert(bool condition) { if (!condition) LogError("assertion failed"); }
        public static void Assert(bool condition, object message) { if (!condition) LogError(message); }
        public static void AssertFormat(bool condition, string format, params object[] args) { if (!condition) LogError(string.Format(format, args)); }
    }

    public static class Mathf
    {
        public static int Clamp(int value, int min, int max) { return value < min ? min : value > max ? max : value; }
        public static float Clamp(float value, float min, float max) { return value < min ? min : value > max ? max : value; }
        public static int Min(int a, int b) { return a < b ? a : b; }
        public static float Min(float a, float b) { return a < b ? a : b; }
        public static int Max(int a, int b) { return a > b ? a : b; }
        public static float Max(float a, float b) { return a > b ? a : b; }
        public static int Max(params int[] values) { int m = int.MinValue; foreach (int v in values) m = Math.Max(m, v); return m; }
        public static float Max(params float[] values) { float m = float.NegativeInfinity; foreach (float v in values) m = Math.Max(m, v); return m; }
        public static float Exp(float power) { return (float)Math.Exp(power); }
    }

    public static class Random
    {
        public static void InitState(int seed) { }
    }

    public static class Time
    {
        public static int captureFramerate { get; set; }
        public static float timeScale { get; set; }
    }

    public struct Vector2 { public float x, y; }

    public struct Vector3
    {
        public float x, y, z;
        public Vector3(float x, float y, float z) { this.x = x; this.y = y; this.z = z; }
        public static Vector3 operator *(Vector3 a, float d) { return new Vector3(a.x * d, a.y * d, a.z * d); }
    }

    public struct Vector4 { public float x, y, z, w; }

    public struct Quaternion { public float x, y, z, w; }

    public struct Hash128
    {
        public static Hash128 Compute(string data) { return new Hash128(); }
        public void Append(float[] data, int start, int count) { }
        public void Append(string data) { }
    }

    public static class HashUtilities
    {
        public static void ComputeHash128<T>(ref T value, ref Hash128 hash) where T : struct { }
        public static void AppendHash(ref Hash128 inHash, ref Hash128 outHash) { }
    }

    public struct Color32
    {
        public byte r, g, b, a;
        public Color32(byte r, byte g, byte b, byte a) { this.r = r; this.g = g; this.b = b; this.a = a; }
    }

    public enum TextureFormat { RGB24 = 3, RGBA32 = 4 }

    // Holds no pixels: ML-Agents' camera sensors and PNG compression are not exercised here.
    public class Texture2D : Object
    {
        public Texture2D(int width, int height, TextureFormat format, bool mipChain) { this.width = width; this.height = height; this.format = format; }
        public int width { get; private set; }
        public int height { get; private set; }
        public TextureFormat format { get; private set; }
        public Color32[] GetPixels32() { return new Color32[width * height]; }
        public T[] GetRawTextureData<T>() where T : struct { return new T[width * height * 3]; }
        public void SetPixels32(Color32[] colors) { }
        public void Apply() { }
        public byte[] EncodeToPNG() { return new byte[0]; }
    }

    public static class Screen { public static void SetResolution(int width, int height, bool fullscreen) { } }
    public static class QualitySettings { public static void SetQualityLevel(int index, bool applyExpensiveChanges) { } }

    [AttributeUsage(AttributeTargets.Class)] public sealed class AddComponentMenuAttribute : Attribute { public AddComponentMenuAttribute(string menuName, int order = 0) { } }
    [AttributeUsage(AttributeTargets.Class)] public sealed class DefaultExecutionOrderAttribute : Attribute { public DefaultExecutionOrderAttribute(int order) { } }
    [AttributeUsage(AttributeTargets.Class)] public sealed class HelpURLAttribute : Attribute { public HelpURLAttribute(string url) { } }
    [AttributeUsage(AttributeTargets.Class, AllowMultiple = true)] public sealed class RequireComponent : Attribute { public RequireComponent(Type type) { } }
    [AttributeUsage(AttributeTargets.Class)] public sealed class DisallowMultipleComponent : Attribute { }
    [AttributeUsage(AttributeTargets.Field)] public sealed class HideInInspector : Attribute { }
    [AttributeUsage(AttributeTargets.Field)] public sealed class SerializeField : Attribute { }
    [AttributeUsage(AttributeTargets.Field)] public sealed class TooltipAttribute : Attribute { public TooltipAttribute(string tooltip) { } }
    [AttributeUsage(AttributeTargets.Field)] public sealed class RangeAttribute : Attribute { public RangeAttribute(float min, float max) { } }
    [AttributeUsage(AttributeTargets.Field)] public sealed class MinAttribute : Attribute { public MinAttribute(float min) { } }
}

namespace UnityEngine.Serialization
{
    [AttributeUsage(AttributeTargets.Field, AllowMultiple = true)]
    public sealed class FormerlySerializedAsAttribute : Attribute { public FormerlySerializedAsAttribute(string oldName) { } }
}

namespace UnityEngine.SceneManagement
{
    public struct Scene { public string name { get { return "stand-in"; } } }
    public static class SceneManager { public static Scene GetActiveScene() { return new Scene(); } }
}

namespace UnityEngine.Profiling
{
    public class CustomSampler
    {
        public static CustomSampler Create(string name) { return new CustomSampler(); }
        public void Begin() { }
        public void End() { }
    }

    public static class Profiler
    {
        public static void BeginSample(string name) { }
        public static void EndSample() { }
    }
}

namespace UnityEngine.Assertions
{
    public static class Assert
    {
        public static void IsTrue(bool condition) { if (!condition) throw new Exception("assertion failed"); }
    }
}
