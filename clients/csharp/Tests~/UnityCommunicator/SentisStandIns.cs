// NOT Unity Sentis' code: a small stand-in for the types of com.unity.sentis that com.unity.ml-agents 3.0.0's runtime
// files in Tests~/MLAgentsRuntime name, so that they compile under Mono. Only TensorShape computes anything (its
// dimensions, rank and length, negative axes counted from the end as Sentis counts them): ML-Agents' ObservationWriter
// sizes camera observations with it. No model is loaded or run: the served communicator never uses Sentis.
using System;
using System.Collections.Generic;

namespace Unity.Sentis
{
    public enum DataType { Float, Int }
    public enum BackendType { GPUCompute, GPUPixel, CPU }
    public enum DeviceType { GPU, CPU }

    /// <summary>Up to 4 dimensions in fields, as Sentis' own struct keeps its dimensions: making one allocates nothing
    /// (ML-Agents' ObservationWriter.SetTarget makes one per sensor and step).</summary>
    public struct TensorShape
    {
        readonly int m_Rank, m_D0, m_D1, m_D2, m_D3;

        public TensorShape(int d0, int d1) : this(2, d0, d1, 0, 0) { }
        public TensorShape(int d0, int d1, int d2, int d3) : this(4, d0, d1, d2, d3) { }

        public TensorShape(params int[] dims)
            : this(dims.Length, At(dims, 0), At(dims, 1), At(dims, 2), At(dims, 3))
        {
            if (dims.Length > 4) throw new ArgumentException("rank " + dims.Length + ": this stand-in keeps 4 dimensions");
        }

        TensorShape(int rank, int d0, int d1, int d2, int d3)
        {
            m_Rank = rank;
            m_D0 = d0;
            m_D1 = d1;
            m_D2 = d2;
            m_D3 = d3;
        }

        static int At(int[] dims, int i) { return i < dims.Length ? dims[i] : 0; }

        public int rank { get { return m_Rank; } }

        public int length
        {
            get { int n = 1; for (int i = 0; i < rank; i++) n *= this[i]; return n; }
        }

        public int this[int axis]
        {
            get
            {
                int i = axis < 0 ? rank + axis : axis;
                if (i < 0 || i >= rank) throw new IndexOutOfRangeException("axis " + axis + " of rank " + rank);
                return i == 0 ? m_D0 : i == 1 ? m_D1 : i == 2 ? m_D2 : m_D3;
            }
        }
    }

    public interface ITensorData { BackendType backendType { get; } }

    public abstract class Tensor : IDisposable
    {
        protected Tensor(TensorShape shape) { this.shape = shape; }
        public TensorShape shape { get; private set; }
        public abstract DataType dataType { get; }
        public ITensorData dataOnBackend { get { return null; } }
        public void CompleteAllPendingOperations() { }
        public void Dispose() { }
    }

    public sealed class Tensor<T> : Tensor where T : struct
    {
        public Tensor(TensorShape shape) : base(shape) { }
        public override DataType dataType { get { return typeof(T) == typeof(float) ? DataType.Float : DataType.Int; } }
        public T this[int d0] { get { throw NoData(); } set { throw NoData(); } }
        public T this[int d0, int d1] { get { throw NoData(); } set { throw NoData(); } }
        public T this[int d0, int d1, int d2] { get { throw NoData(); } set { throw NoData(); } }
        public T this[int d0, int d1, int d2, int d3] { get { throw NoData(); } set { throw NoData(); } }
        static Exception NoData() { return new NotSupportedException("Sentis stand-in: tensors hold no data here"); }
    }

    public sealed class Worker : IDisposable
    {
        public Worker(Model model, BackendType backend) { throw new NotSupportedException("Sentis stand-in: no model runs here"); }
        public Worker(Model model, DeviceType device) { throw new NotSupportedException("Sentis stand-in: no model runs here"); }
        public void CopyOutput(string name, ref Tensor output) { }
        public void SetInput(string name, Tensor input) { }
        public void Schedule() { }
        public Tensor PeekOutput(string name) { return null; }
        public void Dispose() { }
    }

    public class ModelAsset : UnityEngine.Object { }
    public struct DynamicTensorShape
    {
        public int rank { get { return 0; } }
        public int[] ToIntArray() { return new int[0]; }
    }

    public class Model
    {
        public class Input { public string name; public DynamicTensorShape shape; public DataType dataType; }
        public class Output { public string name; }
        public class Constant { public int lengthBytes; }
        public List<Input> inputs = new List<Input>();
        public List<Output> outputs = new List<Output>();
        public List<Constant> constants = new List<Constant>();
        public string ProducerName = "";
    }

    public static class ModelLoader
    {
        public static Model Load(ModelAsset asset) { throw new NotSupportedException("Sentis stand-in: no model loads here"); }
    }
}
