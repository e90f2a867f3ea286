using System;
using System.Collections.Generic;
using System.Threading;

namespace Cdac.Testbed
{
    /// <summary>
    /// --allocate: two threads that allocate without pause (arrays, strings, lists that
    /// replace each other, so that most die young and some survive into gen1 and gen2) and a
    /// third that forces a full collection every 200 ms: a process whose heap moves under
    /// a reader all the time.
    /// </summary>
    internal static class AllocChurn
    {
        private const int CollectEveryMs = 200;
        private static readonly List<Thread> Threads = new List<Thread>();
        private static long allocated;

        public static int ThreadCount => Threads.Count;

        public static long Allocated => Interlocked.Read(ref allocated);

        public static void Start()
        {
            for (int i = 0; i < 2; i++)
            {
                int seed = 1000 + i;
                var t = new Thread(() => Allocate(seed)) { IsBackground = true, Name = $"cdac-alloc-{i}" };
                Threads.Add(t);
                t.Start();
            }
            var collector = new Thread(Collect) { IsBackground = true, Name = "cdac-collector" };
            Threads.Add(collector);
            collector.Start();
        }

        private static void Allocate(int seed)
        {
            var rng = new Random(seed);
            var kept = new List<object>[256];
            while (true)
            {
                int slot = rng.Next(kept.Length);
                var list = new List<object>();
                int n = rng.Next(1, 64);
                for (int k = 0; k < n; k++)
                {
                    switch (rng.Next(3))
                    {
                        case 0: list.Add(new byte[rng.Next(16, 4096)]); break;
                        case 1: list.Add(new string('c', rng.Next(1, 256))); break;
                        default: list.Add(new KeyValuePair<int, object>(k, list)); break;
                    }
                }
                kept[slot] = list;
                Interlocked.Add(ref allocated, n);
            }
        }

        private static void Collect()
        {
            while (true)
            {
                Thread.Sleep(CollectEveryMs);
                GC.Collect();
            }
        }
    }
}
