// A process with a large managed heap for scripts/bench-heap: `heap-app N` allocates N objects
// (small objects with references, strings, int and byte arrays, a few large arrays), drops
// about a quarter of them and collects, so the heap holds live objects and free gaps in every
// generation; then prints its pid and waits for its stdin to close. `heap-app N deadlock`
// also leaves two threads deadlocked on two monitors (scripts/bench-locks); `heap-app N async`
// leaves 1,000 chains of three async methods suspended on TaskCompletionSources
// (scripts/bench-async).
using System;
using System.Collections.Generic;

sealed class Node
{
    public Node? Next;
    public object? Payload;
    public long Value;
}

static class Program
{
    static readonly List<object> Keep = new();

    static int Main(string[] args)
    {
        long count = args.Length > 0 ? long.Parse(args[0]) : 1_000_000;
        var rng = new Random(20261126);
        Node? previous = null;
        for (long i = 0; i < count; i++)
        {
            object o = (i % 10) switch
            {
                0 or 1 or 2 => new Node { Next = previous, Value = i },
                3 or 4 => "s" + i.ToString(),
                5 => new int[rng.Next(1, 16)],
                6 => new byte[rng.Next(8, 200)],
                7 => new object(),
                8 => new List<int>(4),
                _ => i % 100_000 == 9 ? new byte[100_000] : new long[3],
            };
            if (o is Node n)
            {
                n.Payload = previous?.Payload;
                previous = n;
            }
            // Keep three in four: the dropped ones become free objects after the collections.
            if (rng.Next(4) != 0)
                Keep.Add(o);
        }
        GC.Collect();
        GC.Collect();
        if (Array.IndexOf(args, "deadlock", 1) > 0)
            Deadlock();
        if (Array.IndexOf(args, "async", 1) > 0)
            ParkAsync(1_000);
        Console.WriteLine($"ready {Environment.ProcessId} {Keep.Count}");
        Console.Out.Flush();
        Console.In.ReadToEnd();
        GC.KeepAlive(Keep);
        return 0;
    }

    static readonly List<System.Threading.Tasks.TaskCompletionSource<int>> Pending = new();

    /// <summary>Chains of three async methods, each suspended on a TaskCompletionSource
    /// nobody completes (as requests waiting for a reply).</summary>
    static void ParkAsync(int chains)
    {
        for (int i = 0; i < chains; i++)
        {
            var source = new System.Threading.Tasks.TaskCompletionSource<int>();
            Pending.Add(source);
            Keep.Add(Outer(source.Task));
        }
    }

    static async System.Threading.Tasks.Task<int> Outer(System.Threading.Tasks.Task<int> t) =>
        await Middle(t).ConfigureAwait(false) + 1;

    static async System.Threading.Tasks.Task<int> Middle(System.Threading.Tasks.Task<int> t) =>
        await Inner(t).ConfigureAwait(false) * 2;

    static async System.Threading.Tasks.Task<int> Inner(System.Threading.Tasks.Task<int> t) =>
        await t.ConfigureAwait(false) + 3;

    static readonly object First = new(), Second = new();

    /// <summary>Two threads each holding one monitor and waiting for the other's.</summary>
    static void Deadlock()
    {
        using var both = new System.Threading.Barrier(3);
        void Take(object a, object b)
        {
            lock (a)
            {
                both.SignalAndWait();
                lock (b) { }
            }
        }
        new System.Threading.Thread(() => Take(First, Second)) { IsBackground = true }.Start();
        new System.Threading.Thread(() => Take(Second, First)) { IsBackground = true }.Start();
        both.SignalAndWait();
        System.Threading.Thread.Sleep(500);
    }
}
