// Camera frames in the order the policy server takes them: channel-first [C, H, W], the top row first.
using System;

namespace MLAgentsInference
{
    /// <summary>Reorders interleaved pixels (height x width x channels, as a texture holds them) into the
    /// channel-first order a camera input takes (<see cref="PolicyInput.Shape"/> [C, H, W]).</summary>
    public static class Frames
    {
        /// <summary>A channel-first copy of <paramref name="interleaved"/> ((y * width + x) * channels + c).
        /// <paramref name="bottomRowFirst"/>: the buffer starts at the image's bottom row, as Unity's
        /// Texture2D.GetRawTextureData and GetPixels32 do; ML-Agents' camera sensor puts the top row first, and so does this.</summary>
        public static byte[] ChannelFirst(byte[] interleaved, int height, int width, int channels, bool bottomRowFirst = false)
        {
            Check(interleaved == null ? -1 : interleaved.Length, height, width, channels);
            var result = new byte[interleaved.Length];
            Reorder(interleaved, result, height, width, channels, bottomRowFirst);
            return result;
        }

        /// <summary>As the byte[] overload, for float pixels (already scaled to [0, 1]).</summary>
        public static float[] ChannelFirst(float[] interleaved, int height, int width, int channels, bool bottomRowFirst = false)
        {
            Check(interleaved == null ? -1 : interleaved.Length, height, width, channels);
            var result = new float[interleaved.Length];
            Reorder(interleaved, result, height, width, channels, bottomRowFirst);
            return result;
        }

        private static void Check(int length, int height, int width, int channels)
        {
            if (length < 0) throw new ArgumentNullException("interleaved");
            if (height < 1 || width < 1 || channels < 1) throw new ArgumentOutOfRangeException("height", "height, width and channels must be positive");
            if ((long)height * width * channels != length)
                throw new ArgumentException("expected height * width * channels values, got " + length, "interleaved");
        }

        private static void Reorder<T>(T[] source, T[] target, int height, int width, int channels, bool bottomRowFirst)
        {
            int plane = height * width;
            for (int y = 0; y < height; y++)
            {
                int row = bottomRowFirst ? height - 1 - y : y;
                int from = row * width * channels;
                for (int x = 0; x < width; x++)
                    for (int c = 0; c < channels; c++)
                        target[c * plane + y * width + x] = source[from + x * channels + c];
            }
        }
    }
}
