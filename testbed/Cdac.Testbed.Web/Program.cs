// The web testbed for cdac: an ordinary ASP.NET Core service (minimal API, the web SDK's
// defaults: server GC, and DATAS on .NET 9 and later) whose requests leave a service's usual
// troubles behind: a leak (orders kept in a static cache), monitors (objects locked after
// their hash code was taken, which gives each a sync block and grows the sync table), a
// deadlock, async requests that never complete, and on request a crash on a background
// thread. It listens on 127.0.0.1 (a port of its choosing), writes a manifest with its
// address and pid, and answers /facts with what it made, for the tests to compare.
//
//   Cdac.Testbed.Web --manifest PATH [--max-seconds N] [--exit-with-parent]

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Text.Json;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Hosting.Server;
using Microsoft.AspNetCore.Hosting.Server.Features;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.DependencyInjection;
using Microsoft.Extensions.Hosting;
using Microsoft.Extensions.Logging;

namespace Cdac.Testbed.Web
{
    /// <summary>An order the /orders endpoint makes and the leak keeps.</summary>
    public sealed class Order
    {
        public Order(int id, string customer, decimal total)
        {
            Id = id;
            Customer = customer;
            Total = total;
            Lines = new List<OrderLine> { new OrderLine("item-" + id, 1 + id % 5) };
        }

        public int Id { get; }
        public string Customer { get; }
        public decimal Total { get; }
        public List<OrderLine> Lines { get; }
    }

    /// <summary>One line of an order.</summary>
    public sealed record OrderLine(string Sku, int Quantity);

    /// <summary>The leak: every order ever made, never removed.</summary>
    public static class OrderCache
    {
        public static readonly ConcurrentDictionary<int, Order> Orders = new();
        private static int s_next;

        public static Order Add(string customer)
        {
            int id = Interlocked.Increment(ref s_next);
            var order = new Order(id, customer, id * 1.25m);
            Orders[id] = order;
            return order;
        }
    }

    /// <summary>Objects with a sync block each (hashed, then locked), kept alive.</summary>
    public sealed class Monitored
    {
        public Monitored(int n) => N = n;
        public int N { get; }
    }

    public static class Monitors
    {
        public static readonly List<Monitored> Kept = new();

        /// <summary>Gives <paramref name="count"/> new objects a sync block each.</summary>
        public static int Inflate(int count)
        {
            for (int i = 0; i < count; i++)
            {
                var o = new Monitored(i);
                // A hash code in the header, then a lock: the header cannot hold both, so
                // the runtime moves them into a sync block (a sync table entry).
                RuntimeHelpers.GetHashCode(o);
                lock (o)
                {
                    lock (Kept)
                    {
                        Kept.Add(o);
                    }
                }
            }
            lock (Kept)
            {
                return Kept.Count;
            }
        }
    }

    /// <summary>Two threads that take two monitors in opposite orders.</summary>
    public sealed class DeadlockA { }

    public sealed class DeadlockB { }

    public static class Deadlock
    {
        public static readonly DeadlockA A = new();
        public static readonly DeadlockB B = new();
        public static readonly List<int> ThreadIds = new();
        private static int s_started;

        public static void Start()
        {
            if (Interlocked.Exchange(ref s_started, 1) == 1)
            {
                return;
            }
            using var bothHold = new Barrier(2);
            Thread first = Named("web-deadlock-a", () => Take(A, B, bothHold));
            Thread second = Named("web-deadlock-b", () => Take(B, A, bothHold));
            // Each has its first monitor when the barrier releases them.
            SpinWait.SpinUntil(() => bothHold.ParticipantsRemaining == 0 || (first.ThreadState & System.Threading.ThreadState.WaitSleepJoin) != 0, 5000);
            Thread.Sleep(200);
            lock (ThreadIds)
            {
                ThreadIds.Add(first.ManagedThreadId);
                ThreadIds.Add(second.ManagedThreadId);
            }
        }

        private static Thread Named(string name, ThreadStart body)
        {
            var t = new Thread(body) { Name = name, IsBackground = true };
            t.Start();
            return t;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void Take(object mine, object theirs, Barrier bothHold)
        {
            lock (mine)
            {
                bothHold.SignalAndWait();
                lock (theirs)
                {
                    Console.Error.WriteLine("web-testbed: the deadlock did not happen");
                }
            }
        }
    }

    /// <summary>Async requests that wait for a signal that never comes.</summary>
    public static class Stuck
    {
        public static readonly TaskCompletionSource<int> Never = new(TaskCreationOptions.RunContinuationsAsynchronously);
        private static int s_waiting;

        public static int Waiting => Volatile.Read(ref s_waiting);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> WaitForInventoryAsync(int order)
        {
            Interlocked.Increment(ref s_waiting);
            int reserved = await ReserveAsync(order).ConfigureAwait(false);
            return reserved;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static async Task<int> ReserveAsync(int order)
        {
            await Task.Yield();
            return await Never.Task.ConfigureAwait(false) + order;
        }
    }

    public sealed class CrashException : Exception
    {
        public CrashException(string message) : base(message) { }
    }

    public static class Program
    {
        public static int Main(string[] args)
        {
            string manifest = "";
            double maxSeconds = 1800;
            bool exitWithParent = false;
            for (int i = 0; i < args.Length; i++)
            {
                switch (args[i])
                {
                    case "--manifest": manifest = args[++i]; break;
                    case "--max-seconds": maxSeconds = double.Parse(args[++i], CultureInfo.InvariantCulture); break;
                    case "--exit-with-parent": exitWithParent = true; break;
                    default:
                        Console.Error.WriteLine("usage: Cdac.Testbed.Web --manifest PATH [--max-seconds N] [--exit-with-parent]");
                        return 2;
                }
            }
            if (manifest.Length == 0)
            {
                Console.Error.WriteLine("--manifest is required");
                return 2;
            }

            var builder = WebApplication.CreateBuilder(new WebApplicationOptions { Args = Array.Empty<string>() });
            builder.WebHost.UseUrls("http://127.0.0.1:0");
            builder.Logging.ClearProviders();
            var app = builder.Build();

            app.MapGet("/", () => "cdac web testbed");
            app.MapGet("/orders", (int? n, string? customer) =>
            {
                int count = n ?? 1;
                Order last = null!;
                for (int i = 0; i < count; i++)
                {
                    last = OrderCache.Add(customer ?? "customer-" + (i % 17));
                }
                return Results.Json(new { id = last.Id, total = last.Total, kept = OrderCache.Orders.Count });
            });
            app.MapGet("/monitors", (int? n) => Results.Json(new { kept = Monitors.Inflate(n ?? 100) }));
            app.MapGet("/deadlock", () =>
            {
                Deadlock.Start();
                return Results.Json(new { threads = Deadlock.ThreadIds });
            });
            app.MapGet("/stuck", (int? n) =>
            {
                int count = n ?? 1;
                for (int i = 0; i < count; i++)
                {
                    _ = Stuck.WaitForInventoryAsync(i);
                }
                return Results.Json(new { waiting = Stuck.Waiting });
            });
            app.MapGet("/json", () =>
            {
                var orders = OrderCache.Orders.Values.Take(50).Select(o => new { o.Id, o.Customer, o.Total, lines = o.Lines.Count }).ToList();
                return Results.Text(JsonSerializer.Serialize(orders), "application/json");
            });
            app.MapGet("/gc", () =>
            {
                GC.Collect();
                GC.WaitForPendingFinalizers();
                return Results.Json(new { collections = GC.CollectionCount(2) });
            });
            app.MapGet("/crash", (string? message) =>
            {
                var t = new Thread(() => throw new CrashException(message ?? "web testbed crash")) { Name = "web-crash", IsBackground = true };
                t.Start();
                return Results.Json(new { crashing = t.ManagedThreadId });
            });
            app.MapGet("/facts", () =>
            {
                var info = GC.GetGCMemoryInfo();
                return Results.Json(new Dictionary<string, object?>
                {
                    ["pid"] = Environment.ProcessId,
                    ["runtime_version"] = Environment.Version.ToString(),
                    ["server_gc"] = GCSettings.IsServerGC,
                    // The GC's own configuration: GCDynamicAdaptationMode 1 is DATAS (the
                    // default with server GC from .NET 9 on), GCHeapCount its heaps.
                    ["gc_config"] = GC.GetConfigurationVariables().ToDictionary(kv => kv.Key, kv => kv.Value.ToString()),
                    ["orders_kept"] = OrderCache.Orders.Count,
                    ["monitored_kept"] = Monitors.Kept.Count,
                    ["deadlock_threads"] = Deadlock.ThreadIds,
                    ["stuck_waiting"] = Stuck.Waiting,
                    ["total_allocated_bytes"] = GC.GetTotalAllocatedBytes(false),
                    ["heap_size_bytes"] = info.HeapSizeBytes,
                    ["gc_count"] = GC.CollectionCount(0),
                });
            });

            app.Start();
            string url = app.Services.GetRequiredService<IServer>().Features.Get<IServerAddressesFeature>()!.Addresses.First();
            var m = new Dictionary<string, object?>
            {
                ["pid"] = Environment.ProcessId,
                ["url"] = url,
                ["variant"] = typeof(Program).Assembly.GetCustomAttributes(typeof(System.Reflection.AssemblyMetadataAttribute), false)
                    .Cast<System.Reflection.AssemblyMetadataAttribute>().FirstOrDefault(a => a.Key == "CdacVariant")?.Value,
                ["runtime_version"] = Environment.Version.ToString(),
                ["runtime_dir"] = Path.GetDirectoryName(typeof(object).Assembly.Location),
                ["app_dir"] = AppContext.BaseDirectory,
                ["server_gc"] = GCSettings.IsServerGC,
            };
            string tmp = manifest + ".tmp";
            File.WriteAllText(tmp, JsonSerializer.Serialize(m, new JsonSerializerOptions { WriteIndented = true }));
            File.Move(tmp, manifest, true);
            Console.Error.WriteLine($"web-testbed[{Environment.ProcessId}]: listening on {url}");

            int parent = exitWithParent ? ParentPid() : 0;
            var deadline = Stopwatch.StartNew();
            while (deadline.Elapsed.TotalSeconds < maxSeconds)
            {
                Thread.Sleep(200);
                if (parent > 1 && ParentPid() != parent)
                {
                    break;
                }
            }
            return 0;
        }

        private static int ParentPid()
        {
            // /proc/self/stat: "pid (comm) state ppid ..."; comm may hold spaces.
            string stat = File.ReadAllText("/proc/self/stat");
            string[] rest = stat.Substring(stat.LastIndexOf(')') + 2).Split(' ');
            return int.Parse(rest[1], CultureInfo.InvariantCulture);
        }
    }
}
