// User code that crossgen2 compiles ahead of time (see Cdac.Testbed.csproj: PublishReadyToRun).
// The testbed calls some of these methods and leaves others alone, so a reader finds both kinds of
// ReadyToRun methods in the process: ones whose entry point was resolved to the precompiled code
// and ones that still sit behind their temporary entry point. NoInlining keeps every method a
// method of its own, in the image and on the stack.

using System;
using System.Globalization;
using System.Runtime.CompilerServices;

namespace Cdac.Testbed.R2R
{
    public static class Precompiled
    {
        /// <summary>Bumped by the finally clauses below, so that they do observable work.</summary>
        public static int FinallyCount;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Add(int a, int b) => a + b;

        /// <summary>A typed catch clause.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int ParseOrMinusOne(string text)
        {
            try
            {
                return int.Parse(text, NumberStyles.Integer, CultureInfo.InvariantCulture);
            }
            catch (FormatException)
            {
                return -1;
            }
        }

        /// <summary>A finally clause.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int SumWithFinally(int[] values)
        {
            int sum = 0;
            try
            {
                foreach (int v in values)
                {
                    sum += v;
                }
            }
            finally
            {
                FinallyCount++;
            }
            return sum;
        }

        /// <summary>A filter, its catch, and a finally around both.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int FilterOrFinally(int x)
        {
            try
            {
                try
                {
                    if (x < 0)
                    {
                        throw new ArgumentOutOfRangeException(nameof(x), "negative for the filter");
                    }
                    return x * 2;
                }
                catch (ArgumentOutOfRangeException) when (x > -100)
                {
                    return -1;
                }
            }
            finally
            {
                FinallyCount++;
            }
        }

        /// <summary>Called hundreds of times: the tiered compiler replaces its ReadyToRun code
        /// with JIT'ed tier-1 code, so both exist for one method.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Hot(int x)
        {
            int acc = x;
            for (int i = 0; i < 16; i++)
            {
                acc = (acc * 31) ^ (acc >> 3) ^ i;
            }
            return acc;
        }

        /// <summary>Never called.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int NeverCalledSum(int[] values)
        {
            int sum = 0;
            try
            {
                foreach (int v in values)
                {
                    sum = checked(sum + v);
                }
            }
            catch (OverflowException)
            {
                sum = int.MaxValue;
            }
            return sum;
        }

        /// <summary>Never called.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static string NeverCalledFormat(int x) =>
            string.Format(CultureInfo.InvariantCulture, "never {0:X8}", x);
    }

    /// <summary>Instance methods, a virtual override and a constructor, precompiled.</summary>
    public sealed class Accumulator
    {
        private long _total;
        private int _count;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public void Add(int value)
        {
            _total += value;
            _count++;
        }

        public long Total
        {
            [MethodImpl(MethodImplOptions.NoInlining)]
            get => _total;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public override string ToString() =>
            string.Create(CultureInfo.InvariantCulture, $"{_count} values, total {_total}");

        /// <summary>Never called.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public void NeverCalledReset()
        {
            _total = 0;
            _count = 0;
        }
    }

    /// <summary>Generic code instantiated inside this assembly, so crossgen2 precompiles both an
    /// unshared instantiation (over int) and the shared canonical one (over __Canon).</summary>
    public static class PrecompiledGenerics
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static T Echo<T>(T value) => value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int UseEcho(int x) => Echo(x) + Echo("precompiled").Length;
    }
}
