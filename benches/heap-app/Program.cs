// A process with a large managed heap for scripts/bench-heap: `heap-app N` allocates N objects
// (small objects with references, strings, int and byte arrays, a few large arrays), drops
// about a quarter of them and collects, so the heap holds live objects and free gaps in every
// generation; then prints its pid and waits for its stdin to close.
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
        Console.WriteLine($"ready {Environment.ProcessId} {Keep.Count}");
        Console.Out.Flush();
        Console.In.ReadToEnd();
        GC.KeepAlive(Keep);
        return 0;
    }
}
