// A small strict JSON reader and the float formatting of the serve line protocol (docs/serve.md).
// C# 7 syntax, .NET Standard 2.0 types only; no culture is ever consulted.
using System;
using System.Collections.Generic;
using System.Globalization;
using System.Runtime.InteropServices;
using System.Text;

namespace MLAgentsInference
{
    /// <summary>
    /// Strict JSON (RFC 8259) for the policy server's lines: <see cref="Parse"/> reads a value into
    /// <c>Dictionary&lt;string, object&gt;</c>, <c>List&lt;object&gt;</c>, <c>string</c>, <c>long</c> (integers that fit),
    /// <c>double</c>, <c>bool</c> and <c>null</c>; <see cref="Number"/> writes a float32 so that it reads back exactly.
    /// Culture-invariant: a thread in a de-DE or fr-FR culture reads and writes the same text.
    /// </summary>
    public static class Json
    {
        /// <summary>One JSON value and nothing after it but white space; FormatException (one line) otherwise.
        /// NaN, Infinity, comments, trailing commas, leading zeros, lone surrogates and duplicate keys are refused.</summary>
        public static object Parse(string text)
        {
            if (text == null) throw new ArgumentNullException("text");
            byte[] bytes = Encoding.UTF8.GetBytes(text);
            var reader = new JsonReader(bytes, 0, bytes.Length);
            object value = reader.ReadValue();
            reader.End();
            return value;
        }

        /// <summary>The shortest decimal text (at most 9 significant digits) that reads back as exactly
        /// <paramref name="value"/> as a float32, culture-invariant: 0.1f is "0.1", -0f is "-0.0".
        /// ArgumentException for NaN and infinities, which JSON cannot hold.</summary>
        public static string Number(float value)
        {
            var buffer = new byte[Numbers.MaxFloatChars];
            int end = Numbers.WriteFloat(buffer, 0, value);
            return Encoding.ASCII.GetString(buffer, 0, end);
        }

        /// <summary>A JSON string literal (quotes included) for <paramref name="text"/>.</summary>
        public static string Quote(string text)
        {
            if (text == null) throw new ArgumentNullException("text");
            var sb = new StringBuilder(text.Length + 2);
            sb.Append('"');
            foreach (char c in text)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    default:
                        if (c < 0x20) sb.Append("\\u").Append(((int)c).ToString("x4", CultureInfo.InvariantCulture));
                        else sb.Append(c);
                        break;
                }
            }
            return sb.Append('"').ToString();
        }
    }

    [StructLayout(LayoutKind.Explicit)]
    internal struct FloatBits
    {
        [FieldOffset(0)] public float Value;
        [FieldOffset(0)] public int Bits;
    }

    /// <summary>float32 to round-trip text (the shortest, or 9 fixed digits: faster) and back, on bytes (ASCII), without
    /// culture or allocation.</summary>
    internal static class Numbers
    {
        internal const int MaxFloatChars = 24; // "-1.17549435e-38" and the like, with room

        internal static readonly byte[] Base64Digits = Encoding.ASCII.GetBytes("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
        /// <summary><c>{"b64":"</c>: how a binary value starts, in serve's compact form (the client's and serve's).</summary>
        internal static readonly byte[] Base64Head = Encoding.ASCII.GetBytes("{\"b64\":\"");
        // the two digits of each 12 bits in one int (three bytes are two such halves): one lookup for two digits. 64 x 59
        // floats took 18.5-19.1 us against 21.3-22.8 with a table each for the first and the second digit (a scratch
        // timing under Mono 6.8, best of 300 passes, five rounds)
        private static readonly int[] Base64Pairs = BuildBase64Pairs();

        private static int[] BuildBase64Pairs()
        {
            var table = new int[4096];
            for (int i = 0; i < table.Length; i++) table[i] = Base64Digits[i >> 6] | Base64Digits[i & 63] << 8;
            return table;
        }

        /// <summary>The base64 length (RFC 4648, padded) of `count` float32.</summary>
        internal static int Base64Length(int count)
        {
            return (4 * count + 2) / 3 * 4;
        }

        /// <summary>values[start..start+count) as the base64 (RFC 4648, padded) of their little-endian float32 bytes,
        /// written at b[p..] (Base64Length(count) bytes): the end, or -1 - i where values[i] is NaN or infinite. Each
        /// float's bytes are taken from its bits by shifts, never copied from memory, so the host's byte order does not
        /// enter (a big-endian host writes the same text). The bits are the values: serve reads them back exactly.</summary>
        internal static int TryWriteBase64Floats(byte[] b, int p, float[] values, int start, int count)
        {
            FloatBits u = default(FloatBits);
            int[] pairs = Base64Pairs;
            int k = start, whole = start + count - count % 3;
            for (; k < whole; k += 3) // (three floats: twelve bytes, sixteen digits)
            {
                u.Value = values[k];
                int x = u.Bits;
                u.Value = values[k + 1];
                int y = u.Bits;
                u.Value = values[k + 2];
                int z = u.Bits;
                if ((x & 0x7F800000) == 0x7F800000 || (y & 0x7F800000) == 0x7F800000 || (z & 0x7F800000) == 0x7F800000)
                    return Infinite(values, k, start); // (an exponent of all ones)
                int t0 = (x & 255) << 16 | (x & 0xFF00) | (x >> 16 & 255);
                int t1 = (x >> 24 & 255) << 16 | (y & 255) << 8 | (y >> 8 & 255);
                int t2 = (y >> 16 & 255) << 16 | (y >> 24 & 255) << 8 | (z & 255);
                int t3 = (z >> 8 & 255) << 16 | (z >> 16 & 255) << 8 | (z >> 24 & 255);
                int c = pairs[t0 >> 12];
                b[p] = (byte)c;
                b[p + 1] = (byte)(c >> 8);
                c = pairs[t0 & 4095];
                b[p + 2] = (byte)c;
                b[p + 3] = (byte)(c >> 8);
                c = pairs[t1 >> 12];
                b[p + 4] = (byte)c;
                b[p + 5] = (byte)(c >> 8);
                c = pairs[t1 & 4095];
                b[p + 6] = (byte)c;
                b[p + 7] = (byte)(c >> 8);
                c = pairs[t2 >> 12];
                b[p + 8] = (byte)c;
                b[p + 9] = (byte)(c >> 8);
                c = pairs[t2 & 4095];
                b[p + 10] = (byte)c;
                b[p + 11] = (byte)(c >> 8);
                c = pairs[t3 >> 12];
                b[p + 12] = (byte)c;
                b[p + 13] = (byte)(c >> 8);
                c = pairs[t3 & 4095];
                b[p + 14] = (byte)c;
                b[p + 15] = (byte)(c >> 8);
                p += 16;
            }
            if (k < start + count) // (one float: four bytes, "xxxxxx=="; two: eight bytes, "xxxxxxxxxxx=")
            {
                u.Value = values[k];
                int x = u.Bits, y = 0;
                bool two = k + 1 < start + count;
                if (two)
                {
                    u.Value = values[k + 1];
                    y = u.Bits;
                }
                if ((x & 0x7F800000) == 0x7F800000 || (y & 0x7F800000) == 0x7F800000) return Infinite(values, k, start);
                byte[] d = Base64Digits;
                int t0 = (x & 255) << 16 | (x & 0xFF00) | (x >> 16 & 255);
                int t1 = (x >> 24 & 255) << 16 | (y & 255) << 8 | (y >> 8 & 255);
                int t2 = (y >> 16 & 255) << 16 | (y >> 24 & 255) << 8;
                b[p] = d[t0 >> 18];
                b[p + 1] = d[t0 >> 12 & 63];
                b[p + 2] = d[t0 >> 6 & 63];
                b[p + 3] = d[t0 & 63];
                b[p + 4] = d[t1 >> 18];
                b[p + 5] = d[t1 >> 12 & 63];
                p += 6;
                if (two)
                {
                    b[p] = d[t1 >> 6 & 63];
                    b[p + 1] = d[t1 & 63];
                    b[p + 2] = d[t2 >> 18];
                    b[p + 3] = d[t2 >> 12 & 63];
                    b[p + 4] = d[t2 >> 6 & 63];
                    b[p + 5] = (byte)'=';
                    p += 6;
                }
                else
                {
                    b[p] = (byte)'=';
                    b[p + 1] = (byte)'=';
                    p += 2;
                }
            }
            return p;
        }

        /// <summary>-1 - (i - start) for the first values[i] from `from` on that is NaN or infinite.</summary>
        private static int Infinite(float[] values, int from, int start)
        {
            FloatBits u = default(FloatBits);
            int i = from;
            for (u.Value = values[i]; (u.Bits & 0x7F800000) != 0x7F800000; u.Value = values[++i]) { }
            return -1 - (i - start);
        }

        // 10^0 .. 10^89, each the double nearest the power (the compiler rounds the literals)
        internal static readonly double[] Pow10 =
        {
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19,
            1e20, 1e21, 1e22, 1e23, 1e24, 1e25, 1e26, 1e27, 1e28, 1e29, 1e30, 1e31, 1e32, 1e33, 1e34, 1e35, 1e36, 1e37,
            1e38, 1e39, 1e40, 1e41, 1e42, 1e43, 1e44, 1e45, 1e46, 1e47, 1e48, 1e49, 1e50, 1e51, 1e52, 1e53, 1e54, 1e55,
            1e56, 1e57, 1e58, 1e59, 1e60, 1e61, 1e62, 1e63, 1e64, 1e65, 1e66, 1e67, 1e68, 1e69, 1e70, 1e71, 1e72, 1e73,
            1e74, 1e75, 1e76, 1e77, 1e78, 1e79, 1e80, 1e81, 1e82, 1e83, 1e84, 1e85, 1e86, 1e87, 1e88, 1e89,
        };

        // 10^-0 .. 10^-89, each the double nearest (1 ulp at most from the power)
        internal static readonly double[] Pow10Negative =
        {
            1e-0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14, 1e-15, 1e-16, 1e-17,
            1e-18, 1e-19, 1e-20, 1e-21, 1e-22, 1e-23, 1e-24, 1e-25, 1e-26, 1e-27, 1e-28, 1e-29, 1e-30, 1e-31, 1e-32, 1e-33,
            1e-34, 1e-35, 1e-36, 1e-37, 1e-38, 1e-39, 1e-40, 1e-41, 1e-42, 1e-43, 1e-44, 1e-45, 1e-46, 1e-47, 1e-48, 1e-49,
            1e-50, 1e-51, 1e-52, 1e-53, 1e-54, 1e-55, 1e-56, 1e-57, 1e-58, 1e-59, 1e-60, 1e-61, 1e-62, 1e-63, 1e-64, 1e-65,
            1e-66, 1e-67, 1e-68, 1e-69, 1e-70, 1e-71, 1e-72, 1e-73, 1e-74, 1e-75, 1e-76, 1e-77, 1e-78, 1e-79, 1e-80, 1e-81,
            1e-82, 1e-83, 1e-84, 1e-85, 1e-86, 1e-87, 1e-88, 1e-89,
        };

        // the writer's scaling: one correctly rounded operation on an exact power (to 10^22) or the nearest double
        internal static double ScaleExact(double value, int power)
        {
            return power >= 0 ? value * Pow10[power] : value / Pow10[-power];
        }

        private static double Pow2(int power) // exact, for -1022 <= power <= 1023
        {
            return BitConverter.Int64BitsToDouble((long)(power + 1023) << 52);
        }

        /// <summary>Writes <paramref name="f"/> at buffer[pos] (MaxFloatChars bytes of room needed); the new position.
        /// The digits chosen lie inside the float's rounding interval by a margin far above the double arithmetic's error,
        /// so any reader rounding correctly (or reading a double first, then rounding to float32) gets f back.</summary>
        internal static int WriteFloat(byte[] b, int p, float f)
        {
            p = TryWriteFloat(b, p, f);
            if (p < 0) throw new ArgumentException("NaN or infinity cannot be written as JSON");
            return p;
        }

        /// <summary><see cref="WriteFloat"/>, but -1 (and nothing written) for NaN and infinities.</summary>
        internal static int TryWriteFloat(byte[] b, int p, float f)
        {
            FloatBits u = default(FloatBits);
            u.Value = f;
            int bits = u.Bits, exponent = (bits >> 23) & 0xFF, mantissa = bits & 0x7FFFFF;
            if (exponent == 0xFF) return -1;
            if (bits < 0) b[p++] = (byte)'-';
            if (exponent == 0 && mantissa == 0)
            {
                b[p++] = (byte)'0';
                if (bits < 0) { b[p++] = (byte)'.'; b[p++] = (byte)'0'; } // "-0" would read as the integer 0
                return p;
            }
            double x = Math.Abs((double)f);
            double ulp = exponent == 0 ? Pow2(-149) : Pow2(exponent - 150);
            double above = ulp * 0.5, below = mantissa == 0 && exponent > 1 ? ulp * 0.25 : above; // (a power of two: narrower below)
            // k = floor(log10 x): from the binary exponent (floor(e2 log10 2), by 78913 / 2^18), one short at most
            int k = exponent == 0 ? (int)Math.Floor(Math.Log10(x)) : ((exponent - 127) * 78913) >> 18;
            double y = ScaleExact(x, 8 - k);          // x with 9 digits before the point: 1e8 <= y < 1e9
            if (y >= 1e9) { k++; y = ScaleExact(x, 8 - k); }
            else if (y < 1e8) { k--; y = ScaleExact(x, 8 - k); }
            // the float's rounding interval in units of y, less a margin (y's own error is below 1e-6 units): [low, high],
            // within 1e8 - 1 .. 1e9 + 64 (an int; the casts truncate positive values: floor)
            double lowEdge = y - ScaleExact(below, 8 - k) + 1e-6;
            int low = (int)lowEdge, high = (int)(y + ScaleExact(above, 8 - k) - 1e-6);
            if (low < lowEdge) low++; // (ceiling)
            // the fewest digits: the largest power of ten 10^zeros with a multiple in [low, high] (one always at 10^0: the
            // interval is wider than 1 unit), the multiples being q * 10^zeros for q in [qLow, qHigh]; then the q nearest y
            int qLow = low, qHigh = high, zeros = 0;
            while (zeros < 9)
            {
                int up = (qLow + 9) / 10, down = qHigh / 10;
                if (up > down) break;
                qLow = up;
                qHigh = down;
                zeros++;
            }
            int digits = (int)(y / Pow10[zeros] + 0.5), e10 = k - 8 + zeros; // value = digits * 10^e10
            if (digits < qLow) digits = qLow;
            else if (digits > qHigh) digits = qHigh;
            while (digits % 10 == 0) { digits /= 10; e10++; } // (none left but where y itself rounded to one)
            int length = Length(digits);
            int point = length + e10; // digits before the decimal point
            if (e10 >= 0 && point <= 15)
            {
                p = WriteDigits(b, p, digits, length);
                for (int i = 0; i < e10; i++) b[p++] = (byte)'0';
            }
            else if (point > 0 && point < length) // ddd.ddd: the digits from the last, the point in its place
            {
                int i = p + length + 1, dot = p + point;
                p = i;
                while (i > dot + 1)
                {
                    int next = digits / 10;
                    b[--i] = (byte)('0' + (digits - next * 10));
                    digits = next;
                }
                b[--i] = (byte)'.';
                while (i > dot - point)
                {
                    int next = digits / 10;
                    b[--i] = (byte)('0' + (digits - next * 10));
                    digits = next;
                }
            }
            else if (point <= 0 && point > -6)
            {
                b[p++] = (byte)'0';
                b[p++] = (byte)'.';
                for (int i = 0; i < -point; i++) b[p++] = (byte)'0';
                p = WriteDigits(b, p, digits, length);
            }
            else
            {
                int start = p;
                p = WriteDigits(b, p + 1, digits, length);
                b[start] = b[start + 1];
                if (length > 1) b[start + 1] = (byte)'.';
                else p--;
                b[p++] = (byte)'e';
                int e = point - 1;
                if (e < 0) { b[p++] = (byte)'-'; e = -e; }
                if (e >= 10) b[p++] = (byte)('0' + e / 10);
                b[p++] = (byte)('0' + e % 10);
            }
            return p;
        }

        // 10^-31 .. 10^54 (at index power + 31), each the double nearest the power: the fixed-digit writer's scales
        private static readonly double[] Scales = BuildScales();

        private static double[] BuildScales()
        {
            var scales = new double[86];
            for (int i = 0; i < scales.Length; i++) scales[i] = i >= 31 ? Pow10[i - 31] : Pow10Negative[31 - i];
            return scales;
        }

        /// <summary>Writes <paramref name="f"/> at buffer[pos] as 9 significant digits and a power of ten, "-123456789e-9"
        /// for -0.123456789 (MaxFloatChars bytes of room needed); the new position, or -1 (and nothing written) for NaN
        /// and infinities. Not the shortest text (<see cref="TryWriteFloat"/> searches for that), but exact all the same,
        /// also for a reader that goes through a double first (as serve does: a JSON number, then float32):
        /// - the scaled value y = |f| * 10^(8-k), 1e8 &lt;= y &lt; 1e9, is one product by the double nearest 10^(8-k):
        ///   within 2.3e-16 relative of the exact product, 2.3e-7 units of the last digit at most;
        /// - its rounding d, a 9-digit integer, is within 0.5 + 2.3e-7 units of the exact product: within 5.1e-9
        ///   relative of |f| (one unit is at most 1e-8 of the value);
        /// - the nearest float32 rounding boundary lies half an ulp from f, at least 2^-25 = 2.98e-8 relative (below
        ///   a power of two, where the ulp halves, too; subnormals: more); a reader that rounds correctly, or reads the
        ///   nearest double (1.1e-16 relative off) and rounds that, lands on f.
        /// The digits are written as one integer with an exponent (trailing zeros kept), with no decimal point to place:
        /// 18-19 ns a float against 21-25 for d.ddd / 0.0ddd, and serve's orjson reads these numbers about a tenth faster
        /// (docs/performance.md). Integers below 10^9 are written whole, exactly.</summary>
        internal static int TryWriteFloat9(byte[] b, int p, float f)
        {
            FloatBits u = default(FloatBits);
            u.Value = f;
            int bits = u.Bits, exponent = (bits >> 23) & 0xFF;
            if (exponent == 0xFF) return -1;
            b[p] = (byte)'-';
            p += (int)((uint)bits >> 31); // (no branch on the sign: random signs would mispredict half the time)
            double x = Math.Abs((double)f);
            if (x < 1e9)
            {
                int whole = (int)x;
                if (whole == x)
                {
                    if (whole == 0)
                    {
                        b[p++] = (byte)'0';
                        if (bits < 0) { b[p++] = (byte)'.'; b[p++] = (byte)'0'; } // "-0" would read as the integer 0
                        return p;
                    }
                    return WriteDigits(b, p, whole, Length(whole));
                }
            }
            // k = floor(log10 x), one short at most: floor(e2 log10 2) by 78913 / 2^18 (subnormals: by Log10, rare)
            int k = exponent != 0 ? ((exponent - 127) * 78913) >> 18 : (int)Math.Floor(Math.Log10(x));
            double y = x * Scales[39 - k]; // 10^(8-k)
            if (y >= 1e9) { k++; y = x * Scales[39 - k]; }
            else if (y < 1e8) { k--; y = x * Scales[39 - k]; }
            int d = (int)(y + 0.5);
            if (d >= 1000000000) { d = 100000000; k++; } // (y rounded up to 10^9)
            // the nine digits as an integer, then the exponent: no decimal point to place (serve's JSON reader also
            // takes this form faster than ddd.ddd)
            p = WriteNine(b, p, d);
            int e = k - 8;
            b[p] = (byte)'e';
            b[p + 1] = (byte)'-';
            p += 1 + (int)((uint)e >> 31);
            if (e < 0) e = -e;
            if (e < 10)
            {
                b[p] = (byte)('0' + e);
                return p + 1;
            }
            b[p] = Pairs[2 * e];
            b[p + 1] = Pairs[2 * e + 1];
            return p + 2;
        }

        // 2^57 / 10^8, rounded up: d * Nine57 holds d / 10^8 above bit 57 and the rest of d as a binary fraction below
        private const ulong Nine57 = 1441151881UL;
        private const ulong Below57 = (1UL << 57) - 1;

        /// <summary>100000000 &lt;= d &lt; 1000000000: its nine digits, the first from one product, then four pairs, each
        /// one product by 100 of the fraction left: no division (the fixed-point digits of James Anhalt's itoa,
        /// github.com/jeaiii/itoa). Exact: the rounded-up constant adds under 10^9 units of 2^-57 to the fraction, under
        /// 10^17 &lt; 2^57 after the four products (a digit's step, 2^57 / 10^(2m) with m pairs left, times 100^(4-m)),
        /// never enough to carry into the next digit; a scratch program compared every d with its digits by division.</summary>
        private static int WriteNine(byte[] b, int p, int d)
        {
            ulong t = (ulong)d * Nine57;
            byte[] pairs = Pairs;
            b[p] = (byte)('0' + (int)(t >> 57));
            t = (t & Below57) * 100;
            int q = (int)(t >> 57) * 2;
            b[p + 1] = pairs[q];
            b[p + 2] = pairs[q + 1];
            t = (t & Below57) * 100;
            q = (int)(t >> 57) * 2;
            b[p + 3] = pairs[q];
            b[p + 4] = pairs[q + 1];
            t = (t & Below57) * 100;
            q = (int)(t >> 57) * 2;
            b[p + 5] = pairs[q];
            b[p + 6] = pairs[q + 1];
            t = (t & Below57) * 100;
            q = (int)(t >> 57) * 2;
            b[p + 7] = pairs[q];
            b[p + 8] = pairs[q + 1];
            return p + 9;
        }

        private static int Length(int value) // value > 0
        {
            if (value >= 100000)
                return value >= 100000000 ? (value >= 1000000000 ? 10 : 9) : value >= 10000000 ? 8 : value >= 1000000 ? 7 : 6;
            return value >= 1000 ? (value >= 10000 ? 5 : 4) : value >= 100 ? 3 : value >= 10 ? 2 : 1;
        }

        private static readonly byte[] Pairs = BuildPairs(); // "00" .. "99"

        private static byte[] BuildPairs()
        {
            var pairs = new byte[200];
            for (int i = 0; i < 100; i++)
            {
                pairs[2 * i] = (byte)('0' + i / 10);
                pairs[2 * i + 1] = (byte)('0' + i % 10);
            }
            return pairs;
        }

        private static int WriteDigits(byte[] b, int p, int value, int length)
        {
            int i = p + length;
            while (value >= 100)
            {
                int next = value / 100, pair = (value - next * 100) * 2;
                b[--i] = Pairs[pair + 1];
                b[--i] = Pairs[pair];
                value = next;
            }
            if (value >= 10)
            {
                b[--i] = Pairs[value * 2 + 1];
                b[--i] = Pairs[value * 2];
            }
            else b[--i] = (byte)('0' + value);
            return p + length;
        }

        private static int WriteDigits(byte[] b, int p, long value, int length)
        {
            for (int i = length - 1; i >= 0; i--)
            {
                b[p + i] = (byte)('0' + (int)(value % 10));
                value /= 10;
            }
            return p + length;
        }

        internal static int WriteLong(byte[] b, int p, long value)
        {
            if (value < 0)
            {
                b[p++] = (byte)'-';
                if (value == long.MinValue) { foreach (char c in "9223372036854775808") b[p++] = (byte)c; return p; }
                value = -value;
            }
            if (value == 0) { b[p++] = (byte)'0'; return p; }
            if (value < 1000000000) // (agent ids mostly: 32-bit arithmetic, whose divisions by constants are products)
            {
                int small = (int)value;
                return WriteDigits(b, p, small, Length(small));
            }
            int length = 0;
            for (long t = value; t > 0; t /= 10) length++;
            return WriteDigits(b, p, value, length);
        }
    }

    /// <summary>A strict JSON reader over UTF-8 bytes; FormatException with a one-line message on anything else.</summary>
    internal sealed class JsonReader
    {
        private const int MaxDepth = 64;
        private static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);
        private readonly byte[] _b;
        private readonly int _end;
        private readonly byte _newline; // '\n' (white space), or ' ' for a line's reader, where a newline ends the line
        private int _p;
        private StringBuilder _chars;

        internal JsonReader(byte[] bytes, int start, int end)
        {
            _b = bytes;
            _p = start;
            _end = end;
            _newline = (byte)'\n';
        }

        /// <summary>A reader of one line of the bytes from start, which holds the newline that ends it before end: white
        /// space leaves the newline out (no value holds one, so reading stops there), and <see cref="End"/> wants it next,
        /// <see cref="Position"/> then on it.</summary>
        internal JsonReader(byte[] bytes, int start, int end, bool line)
        {
            _b = bytes;
            _p = start;
            _end = end;
            _newline = line ? (byte)' ' : (byte)'\n';
        }

        internal int Position { get { return _p; } }

        internal FormatException Fail(string what)
        {
            return new FormatException(what + " at byte " + _p.ToString(CultureInfo.InvariantCulture));
        }

        internal void SkipSpace()
        {
            while (_p < _end)
            {
                byte c = _b[_p];
                if (c == ' ' || c == '\t' || c == _newline || c == '\r') _p++;
                else break;
            }
        }

        /// <summary>The next significant byte (white space skipped), or -1 at the end.</summary>
        internal int Peek()
        {
            SkipSpace();
            return _p < _end ? _b[_p] : -1;
        }

        internal void Expect(char c)
        {
            if (Peek() != c) throw Fail(_p < _end ? "expected '" + c + "'" : "unexpected end, expected '" + c + "'");
            _p++;
        }

        internal bool TryTake(char c)
        {
            if (Peek() != c) return false;
            _p++;
            return true;
        }

        internal void End()
        {
            if (Peek() != (_newline == '\n' ? -1 : '\n')) throw Fail("unexpected text after the value");
        }

        // objects: BeginObject(); while (NextKey(out key)) { ...read the value... }
        internal void BeginObject()
        {
            Expect('{');
            _first = true;
        }

        private bool _first;

        internal bool NextKey(out string key)
        {
            if (_first)
            {
                _first = false;
                if (TryTake('}')) { key = null; return false; }
            }
            else
            {
                if (TryTake('}')) { key = null; return false; }
                Expect(',');
            }
            if (Peek() != '"') throw Fail("expected a key");
            key = ReadString();
            Expect(':');
            return true;
        }

        /// <summary>NextKey for the keys a caller knows: the index of the key in <paramref name="known"/> (ASCII keys), -1 for
        /// another key (then in <paramref name="other"/>), -2 at the end of the object. No allocation for a known key.
        /// known[<paramref name="expected"/>] (-1: none) is tried first, written compactly (<c>,"key":</c>, no white
        /// space): serve writes its answers' keys in one order, so a caller that passes the key read at the same place
        /// in the previous object reads each key in one comparison. Anything else takes the general path.</summary>
        internal int NextKnownKey(byte[][] known, int expected, out string other)
        {
            other = null;
            if (expected >= 0)
            {
                byte[] key = known[expected], b = _b;
                int n = key.Length, p = _first ? _p : _p + 1;
                if (p + n + 3 <= _end && (_first || b[_p] == ',') && b[p] == '"' && b[p + n + 1] == '"' && b[p + n + 2] == ':')
                {
                    int i = 0;
                    while (i < n && b[p + 1 + i] == key[i]) i++;
                    if (i == n)
                    {
                        _first = false;
                        _p = p + n + 3;
                        return expected;
                    }
                }
            }
            if (TryTake('}')) { _first = false; return -2; }
            if (_first) _first = false;
            else Expect(',');
            if (Peek() != '"') throw Fail("expected a key");
            int start = _p + 1, end = start;
            while (end < _end && _b[end] != '"' && _b[end] != '\\' && _b[end] >= 0x20 && _b[end] < 0x80) end++;
            int found = -1;
            if (end < _end && _b[end] == '"')
            {
                for (int k = 0; k < known.Length && found < 0; k++)
                {
                    byte[] key = known[k];
                    if (key.Length != end - start) continue;
                    int i = 0;
                    while (i < key.Length && key[i] == _b[start + i]) i++;
                    if (i == key.Length) found = k;
                }
            }
            if (found >= 0) _p = end + 1;
            else other = ReadString();
            Expect(':');
            return found;
        }

        internal object ReadValue()
        {
            return ReadValue(0);
        }

        private object ReadValue(int depth)
        {
            if (depth > MaxDepth) throw Fail("nested deeper than " + MaxDepth);
            int c = Peek();
            switch (c)
            {
                case '{':
                {
                    _p++;
                    var dict = new Dictionary<string, object>();
                    if (TryTake('}')) return dict;
                    while (true)
                    {
                        if (Peek() != '"') throw Fail("expected a key");
                        string key = ReadString();
                        Expect(':');
                        if (dict.ContainsKey(key)) throw Fail("duplicate key \"" + Clip(key) + "\"");
                        dict[key] = ReadValue(depth + 1);
                        if (TryTake('}')) return dict;
                        Expect(',');
                    }
                }
                case '[':
                {
                    _p++;
                    var list = new List<object>();
                    if (TryTake(']')) return list;
                    while (true)
                    {
                        list.Add(ReadValue(depth + 1));
                        if (TryTake(']')) return list;
                        Expect(',');
                    }
                }
                case '"':
                    return ReadString();
                case 't':
                    Word("true");
                    return true;
                case 'f':
                    Word("false");
                    return false;
                case 'n':
                    Word("null");
                    return null;
                case -1:
                    throw Fail("unexpected end");
                default:
                {
                    int start, end;
                    bool integer = ReadNumber(out start, out end);
                    string text = Encoding.ASCII.GetString(_b, start, end - start);
                    long whole;
                    if (integer && long.TryParse(text, NumberStyles.AllowLeadingSign, CultureInfo.InvariantCulture, out whole))
                        return whole;
                    double value;
                    try
                    {
                        value = double.Parse(text, NumberStyles.Float, CultureInfo.InvariantCulture);
                    }
                    catch (OverflowException)
                    {
                        value = double.PositiveInfinity;
                    }
                    if (double.IsInfinity(value)) throw Fail("number beyond double");
                    return value == 0 && text[0] == '-' ? -0.0 : value; // (Mono's double.Parse drops the sign of "-0.0")
                }
            }
        }

        private static string Clip(string text)
        {
            return text.Length > 40 ? text.Substring(0, 40) + "..." : text;
        }

        private void Word(string word)
        {
            if (_p + word.Length > _end) throw Fail("unexpected end");
            for (int i = 0; i < word.Length; i++)
                if (_b[_p + i] != word[i]) throw Fail("unexpected character");
            _p += word.Length;
        }

        /// <summary>A number's extent, checked against JSON's grammar; true when it has no fraction and no exponent.</summary>
        internal bool ReadNumber(out int start, out int end)
        {
            SkipSpace();
            start = _p;
            bool integer = true;
            if (_p < _end && _b[_p] == '-') _p++;
            if (_p >= _end || _b[_p] < '0' || _b[_p] > '9') throw Fail("unexpected character");
            if (_b[_p] == '0') _p++;
            else while (_p < _end && _b[_p] >= '0' && _b[_p] <= '9') _p++;
            if (_p < _end && _b[_p] == '.')
            {
                integer = false;
                _p++;
                if (_p >= _end || _b[_p] < '0' || _b[_p] > '9') throw Fail("a digit must follow the decimal point");
                while (_p < _end && _b[_p] >= '0' && _b[_p] <= '9') _p++;
            }
            if (_p < _end && (_b[_p] == 'e' || _b[_p] == 'E'))
            {
                integer = false;
                _p++;
                if (_p < _end && (_b[_p] == '+' || _b[_p] == '-')) _p++;
                if (_p >= _end || _b[_p] < '0' || _b[_p] > '9') throw Fail("a digit must follow the exponent");
                while (_p < _end && _b[_p] >= '0' && _b[_p] <= '9') _p++;
            }
            end = _p;
            if (_p < _end && _b[_p] >= '0' && _b[_p] <= '9') throw Fail("leading zeros");
            return integer;
        }

        // significant digits ReadFloat keeps (the rest are checked and dropped): 1e-16 relative at most, far below a
        // float32's half ulp (3e-8 relative); 17 digits fit a long
        private const int MaxDigits = 17;

        /// <summary>A number as float32, checked against JSON's grammar and read in one pass. Exactly the float32 the
        /// text denotes when it is the decimal of a float32 value, as the server writes its actions (its first 17
        /// significant digits, the fraction's eight at a time, as a long; in double, scaled by one power of ten: within
        /// 5e-16 relative of that float32, which is 3e-8 from any rounding boundary). Other decimals land on the
        /// nearest float32 but within 1e-15 of a boundary, where they may land on its neighbour.</summary>
        internal float ReadFloat()
        {
            if (_p >= _end || _b[_p] <= ' ') SkipSpace();
            byte[] b = _b;
            int i = _p, end = _end, start = _p;
            bool negative = i < end && b[i] == '-';
            if (negative) i++;
            int c = i < end ? b[i] - '0' : -1;
            if ((uint)c > 9) throw Fail("unexpected character");
            long mantissa = 0;
            int digits = 0, e10 = 0;
            i++;
            if (c != 0)
            {
                mantissa = c;
                int first = i, limit = end - i < MaxDigits - 1 ? end : i + MaxDigits - 1;
                for (; i < limit && (uint)(c = b[i] - '0') <= 9; i++) mantissa = mantissa * 10 + c;
                digits = 1 + i - first;
                int kept = i;
                while (i < end && (uint)(b[i] - '0') <= 9) i++; // (the digits past MaxDigits: checked, dropped)
                e10 = i - kept;
            }
            else if (i < end && (uint)(b[i] - '0') <= 9) throw Fail("leading zeros");
            if (i < end && b[i] == '.')
            {
                i++;
                if (i >= end || (uint)(b[i] - '0') > 9) throw Fail("a digit must follow the decimal point");
                int first = i;
                if (mantissa == 0) while (i < end && b[i] == '0') i++; // (zeros before the first significant digit)
                int room = MaxDigits - digits;
                while (room >= 8 && end - i >= 8) // eight digits at a time (the server's 17-digit actions: twice)
                {
                    ulong eight = BitConverter.ToUInt64(b, i); // (the first digit in the lowest byte)
                    if ((eight & 0xF0F0F0F0F0F0F0F0UL) != 0x3030303030303030UL ||
                        ((eight + 0x0606060606060606UL) & 0xF0F0F0F0F0F0F0F0UL) != 0x3030303030303030UL)
                        break; // (not eight digits: byte by byte below)
                    eight = (eight & 0x0F0F0F0F0F0F0F0FUL) * 2561 >> 8; // pairs: 10 * first + second
                    eight = (eight & 0x00FF00FF00FF00FFUL) * 6553601 >> 16; // fours: 100 * pair + pair
                    eight = (eight & 0x0000FFFF0000FFFFUL) * 42949672960001 >> 32; // 10000 * four + four
                    mantissa = mantissa * 100000000 + (long)eight;
                    i += 8;
                    room -= 8;
                }
                int limit = end - i < room ? end : i + room;
                for (; i < limit && (uint)(c = b[i] - '0') <= 9; i++) mantissa = mantissa * 10 + c;
                e10 -= i - first;
                while (i < end && (uint)(b[i] - '0') <= 9) i++;
            }
            if (i < end && (b[i] | 0x20) == 'e')
            {
                i++;
                bool minus = i < end && b[i] == '-';
                if (i < end && (b[i] == '-' || b[i] == '+')) i++;
                if (i >= end || (uint)(b[i] - '0') > 9) throw Fail("a digit must follow the exponent");
                int e = 0;
                for (; i < end && (uint)(c = b[i] - '0') <= 9; i++)
                    if (e < 100000) e = e * 10 + c;
                e10 += minus ? -e : e;
            }
            _p = i;
            double value;
            if (mantissa == 0) value = 0;
            else if (e10 > -Numbers.Pow10.Length && e10 < Numbers.Pow10.Length) // (a product either way: within 3e-16)
                value = e10 >= 0 ? mantissa * Numbers.Pow10[e10] : mantissa * Numbers.Pow10Negative[-e10];
            else value = ParseAbs(start, i);
            float result = (float)(negative ? -value : value);
            if (result > float.MaxValue || result < -float.MaxValue) throw Fail("number beyond float32");
            return result;
        }

        // (apart: a method holding a try block keeps its locals in memory under Mono's JIT, which would slow ReadFloat)
        private double ParseAbs(int start, int end)
        {
            double value;
            try
            {
                value = double.Parse(Encoding.ASCII.GetString(_b, start, end - start), NumberStyles.Float, CultureInfo.InvariantCulture);
            }
            catch (OverflowException)
            {
                value = double.PositiveInfinity;
            }
            return Math.Abs(value);
        }

        internal long ReadLong()
        {
            int start, end;
            if (!ReadNumber(out start, out end)) throw Fail("expected an integer");
            long value = 0;
            int i = start;
            bool negative = _b[i] == '-';
            if (negative) i++;
            if (end - i > 18) throw Fail("integer too large");
            for (; i < end; i++) value = value * 10 + (_b[i] - '0');
            return negative ? -value : value;
        }

        /// <summary>An array of numbers as float32s (<paramref name="scratch"/>: a buffer to reuse, grown when short).</summary>
        internal float[] ReadFloats(ref float[] scratch)
        {
            Expect('[');
            if (TryTake(']')) return new float[0];
            int n = 0;
            while (true)
            {
                if (n == scratch.Length) Array.Resize(ref scratch, scratch.Length * 2);
                scratch[n++] = ReadFloat();
                int c = _p < _end && _b[_p] > ' ' ? _b[_p] : Peek();
                _p++;
                if (c == ',') continue;
                if (c == ']')
                {
                    var values = new float[n];
                    Array.Copy(scratch, values, n);
                    return values;
                }
                _p--;
                throw Fail(c < 0 ? "unexpected end, expected ',' or ']'" : "expected ',' or ']'");
            }
        }

        private static readonly byte[][] BinaryKey = { Encoding.ASCII.GetBytes("b64") };
        private static readonly int[] Base64Values = BuildBase64Values();

        private static int[] BuildBase64Values()
        {
            var values = new int[256];
            for (int i = 0; i < values.Length; i++) values[i] = -1;
            byte[] digits = Numbers.Base64Digits;
            for (int i = 0; i < digits.Length; i++) values[digits[i]] = i;
            return values;
        }

        /// <summary>Float32 values given as <c>{"b64": "..."}</c>: the base64 (RFC 4648, padded) of their little-endian
        /// bytes, a whole number of floats, each finite (serve's answers to a line with <c>"answer_b64": true</c>). Each
        /// float's bits are put together from its bytes by shifts, never copied from memory: the host's byte order does
        /// not enter (a big-endian host reads the same values).</summary>
        internal float[] ReadFloatBytes()
        {
            byte[] b = _b, head = Numbers.Base64Head;
            int start, end, p = _p, stop = _end, h = 0;
            // (serve's own form, {"b64":"..., taken by one comparison; anything else through the general reader)
            while (h < head.Length && p + h < stop && b[p + h] == head[h]) h++;
            if (h == head.Length)
            {
                start = p + h;
            }
            else
            {
                BeginObject();
                string other;
                if (NextKnownKey(BinaryKey, 0, out other) != 0) throw Fail("expected {\"b64\": \"...\"}");
                if (Peek() != '"') throw Fail("expected a base64 string");
                start = _p + 1;
            }
            end = start;
            while (end < stop && b[end] != '"') end++; // (a local: a field's loads and stores cost more under Mono)
            _p = end;
            if (end >= stop) throw Fail("unterminated string");
            _p = end + 1;
            _first = false;
            if (_p < stop && b[_p] == '}') _p++;
            else
            {
                string other;
                if (NextKnownKey(BinaryKey, -1, out other) != -2) throw Fail("expected {\"b64\": \"...\"} and nothing else");
            }
            int chars = end - start;
            if (chars % 4 != 0) throw Fail("\"b64\" is not base64 (its length is not a multiple of 4)");
            int pad = chars > 0 && b[end - 1] == '=' ? (b[end - 2] == '=' ? 2 : 1) : 0;
            int n = chars / 4 * 3 - pad;
            if (n % 4 != 0) throw Fail("\"b64\" holds " + n.ToString(CultureInfo.InvariantCulture) + " bytes, not a whole number of float32");
            int[] v = Base64Values;
            var values = new float[n / 4];
            FloatBits u = default(FloatBits);
            int bad = 0, nan = 0, k = 0, i = start, whole = n / 12 * 3;
            for (; k < whole; k += 3, i += 16) // (sixteen digits: twelve bytes, three floats, their bits put together by
            {                                  // shifts: the host's byte order does not enter)
                int t0 = v[b[i]] << 18 | v[b[i + 1]] << 12 | v[b[i + 2]] << 6 | v[b[i + 3]];
                int t1 = v[b[i + 4]] << 18 | v[b[i + 5]] << 12 | v[b[i + 6]] << 6 | v[b[i + 7]];
                int t2 = v[b[i + 8]] << 18 | v[b[i + 9]] << 12 | v[b[i + 10]] << 6 | v[b[i + 11]];
                int t3 = v[b[i + 12]] << 18 | v[b[i + 13]] << 12 | v[b[i + 14]] << 6 | v[b[i + 15]];
                bad |= t0 | t1 | t2 | t3; // (a byte outside the alphabet is -1: the sign of its group set)
                u.Bits = (t0 >> 16 & 255) | (t0 & 0xFF00) | (t0 & 255) << 16 | (t1 >> 16 & 255) << 24;
                if ((u.Bits & 0x7F800000) == 0x7F800000) nan = -1;
                values[k] = u.Value;
                u.Bits = (t1 >> 8 & 255) | (t1 & 255) << 8 | (t2 >> 16 & 255) << 16 | (t2 >> 8 & 255) << 24;
                if ((u.Bits & 0x7F800000) == 0x7F800000) nan = -1;
                values[k + 1] = u.Value;
                u.Bits = (t2 & 255) | (t3 >> 16 & 255) << 8 | (t3 >> 8 & 255) << 16 | (t3 & 255) << 24;
                if ((u.Bits & 0x7F800000) == 0x7F800000) nan = -1;
                values[k + 2] = u.Value;
            }
            if (k < values.Length) // (one float left: "xxxxxx=="; two: "xxxxxxxxxxx=")
            {
                bool two = k + 1 < values.Length;
                int t0 = v[b[i]] << 18 | v[b[i + 1]] << 12 | v[b[i + 2]] << 6 | v[b[i + 3]];
                int t1 = v[b[i + 4]] << 18 | v[b[i + 5]] << 12 | (two ? v[b[i + 6]] << 6 | v[b[i + 7]] : 0);
                int t2 = two ? v[b[i + 8]] << 18 | v[b[i + 9]] << 12 | v[b[i + 10]] << 6 : 0;
                bad |= t0 | t1 | t2;
                u.Bits = (t0 >> 16 & 255) | (t0 & 0xFF00) | (t0 & 255) << 16 | (t1 >> 16 & 255) << 24;
                if ((u.Bits & 0x7F800000) == 0x7F800000) nan = -1;
                values[k] = u.Value;
                if (two)
                {
                    u.Bits = (t1 >> 8 & 255) | (t1 & 255) << 8 | (t2 >> 16 & 255) << 16 | (t2 >> 8 & 255) << 24;
                    if ((u.Bits & 0x7F800000) == 0x7F800000) nan = -1;
                    values[k + 1] = u.Value;
                }
            }
            if (bad < 0) throw Fail("\"b64\" is not base64");
            if (nan < 0) throw Fail("\"b64\" holds NaN or an infinity");
            return values;
        }

        internal int[] ReadInts()
        {
            Expect('[');
            var values = new List<int>();
            if (!TryTake(']'))
            {
                do
                {
                    long v = ReadLong();
                    if (v < int.MinValue || v > int.MaxValue) throw Fail("integer too large");
                    values.Add((int)v);
                }
                while (TryTake(','));
                Expect(']');
            }
            return values.ToArray();
        }

        internal bool IsNull()
        {
            if (Peek() != 'n') return false;
            Word("null");
            return true;
        }

        internal string ReadString()
        {
            if (Peek() != '"') throw Fail("expected a string");
            _p++;
            int start = _p;
            while (_p < _end && _b[_p] != '"' && _b[_p] != '\\' && _b[_p] >= 0x20) _p++;
            if (_p < _end && _b[_p] == '"')
            {
                string plain = Decode(start, _p);
                _p++;
                return plain;
            }
            if (_chars == null) _chars = new StringBuilder();
            _chars.Length = 0;
            _chars.Append(Decode(start, _p));
            while (true)
            {
                if (_p >= _end) throw Fail("unterminated string");
                byte c = _b[_p];
                if (c == '"') { _p++; return _chars.ToString(); }
                if (c < 0x20) throw Fail("control character in a string");
                if (c != '\\')
                {
                    int run = _p;
                    while (_p < _end && _b[_p] != '"' && _b[_p] != '\\' && _b[_p] >= 0x20) _p++;
                    _chars.Append(Decode(run, _p));
                    continue;
                }
                _p++;
                if (_p >= _end) throw Fail("unterminated string");
                c = _b[_p++];
                switch (c)
                {
                    case (byte)'"': _chars.Append('"'); break;
                    case (byte)'\\': _chars.Append('\\'); break;
                    case (byte)'/': _chars.Append('/'); break;
                    case (byte)'b': _chars.Append('\b'); break;
                    case (byte)'f': _chars.Append('\f'); break;
                    case (byte)'n': _chars.Append('\n'); break;
                    case (byte)'r': _chars.Append('\r'); break;
                    case (byte)'t': _chars.Append('\t'); break;
                    case (byte)'u':
                    {
                        int unit = Hex4();
                        if (unit >= 0xD800 && unit <= 0xDBFF)
                        {
                            if (_p + 2 > _end || _b[_p] != '\\' || _b[_p + 1] != 'u') throw Fail("lone surrogate");
                            _p += 2;
                            int low = Hex4();
                            if (low < 0xDC00 || low > 0xDFFF) throw Fail("lone surrogate");
                            _chars.Append((char)unit).Append((char)low);
                        }
                        else if (unit >= 0xDC00 && unit <= 0xDFFF) throw Fail("lone surrogate");
                        else _chars.Append((char)unit);
                        break;
                    }
                    default:
                        throw Fail("bad escape in a string");
                }
            }
        }

        private int Hex4()
        {
            if (_p + 4 > _end) throw Fail("unterminated string");
            int value = 0;
            for (int i = 0; i < 4; i++)
            {
                int c = _b[_p++], d;
                if (c >= '0' && c <= '9') d = c - '0';
                else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
                else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
                else throw Fail("bad \\u escape");
                value = value * 16 + d;
            }
            return value;
        }

        private string Decode(int start, int end)
        {
            if (start == end) return string.Empty;
            try
            {
                return StrictUtf8.GetString(_b, start, end - start);
            }
            catch (ArgumentException)
            {
                throw Fail("invalid UTF-8");
            }
        }

        /// <summary>Skips the next value when its text is byte for byte the (already checked) text at [start, end) of the
        /// same line; false, and nothing read, otherwise.</summary>
        internal bool TrySkipCopy(int start, int end, ref long[] words)
        {
            SkipSpace();
            int length = end - start, p = _p;
            if (length <= 0 || p + length > _end) return false;
            byte[] b = _b;
            // eight bytes at a time: both texts copied into longs (two native copies), then compared as longs (a
            // BitConverter.ToInt64 call per eight bytes cost more under Mono 6.8)
            int n = length >> 3;
            if (words.Length < 2 * n) words = new long[2 * n];
            Buffer.BlockCopy(b, start, words, 0, n << 3);
            Buffer.BlockCopy(b, p, words, n << 3, n << 3);
            long[] w = words;
            for (int k = 0; k < n; k++)
                if (w[k] != w[n + k]) return false;
            int shift = p - start;
            for (int i = start + (n << 3); i < end; i++)
                if (b[i + shift] != b[i]) return false;
            _p = p + length;
            return true;
        }

        /// <summary>Skips the next value when it is byte for byte <paramref name="text"/> (a value's text known to be
        /// valid JSON); false, and nothing read, otherwise (or when <paramref name="text"/> is null).</summary>
        internal bool TrySkipText(byte[] text)
        {
            if (text == null) return false;
            SkipSpace();
            int length = text.Length, p = _p;
            if (p + length > _end) return false;
            byte[] b = _b;
            for (int i = 0; i < length; i++)
                if (b[p + i] != text[i]) return false;
            _p = p + length;
            return true;
        }

        /// <summary>Reads any value and drops it, its JSON checked all the same, without building it.</summary>
        internal void SkipValue()
        {
            SkipValue(1);
        }

        private void SkipValue(int depth)
        {
            if (depth > MaxDepth) throw Fail("nested deeper than " + MaxDepth);
            int c = Peek();
            switch (c)
            {
                case '{':
                {
                    _p++;
                    if (TryTake('}')) return;
                    HashSet<string> keys = null;
                    while (true)
                    {
                        if (Peek() != '"') throw Fail("expected a key");
                        string key = ReadString();
                        if (keys == null) keys = new HashSet<string>();
                        if (!keys.Add(key)) throw Fail("duplicate key \"" + Clip(key) + "\"");
                        Expect(':');
                        SkipValue(depth + 1);
                        if (TryTake('}')) return;
                        Expect(',');
                    }
                }
                case '[':
                    _p++;
                    if (TryTake(']')) return;
                    do SkipValue(depth + 1); while (TryTake(','));
                    Expect(']');
                    return;
                case '"':
                    ReadString();
                    return;
                case 't': Word("true"); return;
                case 'f': Word("false"); return;
                case 'n': Word("null"); return;
                case -1: throw Fail("unexpected end");
                default:
                {
                    int start, end;
                    ReadNumber(out start, out end); // (its grammar checked; its value not needed)
                    return;
                }
            }
        }
    }
}
