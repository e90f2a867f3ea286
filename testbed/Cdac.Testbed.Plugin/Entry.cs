// A small real assembly that the testbed loads from its file into a collectible
// AssemblyLoadContext and keeps alive (the context is never unloaded). Its methods are JIT'ed
// into the collectible loader allocator's code heap.

using System;
using System.Runtime.CompilerServices;

namespace Cdac.Testbed.Plugin
{
    public static class Entry
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Twice(int x) => x * 2;

        /// <summary>A typed catch clause in collectible code.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Guarded(int x)
        {
            try
            {
                if (x < 0)
                {
                    throw new InvalidOperationException("negative plugin");
                }
                return x + 1;
            }
            catch (InvalidOperationException)
            {
                return -7;
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int Loop(int n)
        {
            int acc = 0;
            for (int i = 0; i < n; i++)
            {
                acc += i ^ 5;
            }
            return acc;
        }
    }

    /// <summary>An instance type with state, allocated and kept alive by the host.</summary>
    public sealed class Counter
    {
        public int Value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public int Bump() => ++Value;
    }
}
