// The CPU workload (--cpu-workload): two threads that burn CPU forever in known methods, so that a
// sampling profiler (cdac record, dotnet-trace, perf) can be checked against intended shares, and
// a throughput counter so that a harness can measure how much a profiler slows the process down.
//
//   cpu-split-heavy-light (named past the kernel's 15 bytes: profilers show the managed name):
//              SplitThread -> SplitLoop -> HeavyPart (3/4 of the thread's time)
//                                       -> LightPart (1/4)
//   cpu-solo:  SoloThread  -> SoloLoop  -> SoloWork  (all of it)
//
// HeavyPart, LightPart and SoloWork run the same loop (a serial 64-bit hash mix of a field: no
// vectorization, nothing to hoist, one multiply latency per step), only the iteration counts
// differ: 3K, K and 4K per unit. SplitLoop and SoloLoop do a batch of units per call and return,
// so that they are called again and again and go through call counting to tier 1; the forever
// loops are in the thread start methods, which take no time of their own (their OSR version does
// the looping).
//
// Throughput: each completed unit (4K mix steps) adds one to SplitUnits or SoloUnits.
//   - stdin: a line "rate" prints "rate SPLIT SOLO SECONDS": units of each thread done since the
//     previous "rate" (or since the manifest was written) and the seconds that took; "total"
//     prints "total SPLIT SOLO SECONDS" since the workload started. Other lines are ignored.
//   - the rate file (manifest cpu_workload.rate_file), rewritten atomically every second:
//     "SPLIT SOLO MONOTONIC_SECONDS", cumulative units and CLOCK_MONOTONIC (Python's
//     time.monotonic()) when they were read.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;
using System.Threading;

namespace Cdac.Testbed
{
    public static class CpuWork
    {
        /// <summary>Mix steps of one LightPart call; HeavyPart does 3x, SoloWork 4x.</summary>
        public const int K = 1 << 15;

        /// <summary>Units per SplitLoop / SoloLoop call.</summary>
        public const int Batch = 16;

        // Iteration counts read from fields, not constants, so that the JIT treats all three loops
        // alike (no unrolling or range folding of a constant trip count).
        private static int s_lightIterations = K;
        private static int s_heavyIterations = 3 * K;
        private static int s_soloIterations = 4 * K;

        // Hash states: the loops' results go back to these, so nothing is dead code.
        private static ulong s_splitState = 0x243F6A8885A308D3UL;
        private static ulong s_soloState = 0x13198A2E03707344UL;

        public static long SplitUnits;
        public static long SoloUnits;

        private static readonly long StartTimestamp = Stopwatch.GetTimestamp();

        // The threads -------------------------------------------------------------------------

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SplitThread(object? state)
        {
            var t = (CpuThread)state!;
            t.Register();
            while (true)
            {
                SplitLoop(Batch);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SplitLoop(int units)
        {
            for (int u = 0; u < units; u++)
            {
                HeavyPart(s_heavyIterations);
                LightPart(s_lightIterations);
                Interlocked.Increment(ref SplitUnits);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void HeavyPart(int n)
        {
            ulong h = s_splitState;
            for (int i = 0; i < n; i++)
            {
                h ^= h >> 29;
                h *= 0xBF58476D1CE4E5B9UL;
                h += (uint)i;
            }
            s_splitState = h;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void LightPart(int n)
        {
            ulong h = s_splitState;
            for (int i = 0; i < n; i++)
            {
                h ^= h >> 29;
                h *= 0xBF58476D1CE4E5B9UL;
                h += (uint)i;
            }
            s_splitState = h;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SoloThread(object? state)
        {
            var t = (CpuThread)state!;
            t.Register();
            while (true)
            {
                SoloLoop(Batch);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SoloLoop(int units)
        {
            for (int u = 0; u < units; u++)
            {
                SoloWork(s_soloIterations);
                Interlocked.Increment(ref SoloUnits);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SoloWork(int n)
        {
            ulong h = s_soloState;
            for (int i = 0; i < n; i++)
            {
                h ^= h >> 29;
                h *= 0xBF58476D1CE4E5B9UL;
                h += (uint)i;
            }
            s_soloState = h;
        }

        // Start-up, tiering, manifest ----------------------------------------------------------

        private static readonly string[] TieredMethods =
            { nameof(SplitLoop), nameof(HeavyPart), nameof(LightPart), nameof(SoloLoop), nameof(SoloWork) };

        private static MethodInfo M(string name) =>
            typeof(CpuWork).GetMethod(name, Facts.AnyDeclared) ?? throw new InvalidOperationException(name);

        /// <summary>Starts both threads and waits until they have registered.</summary>
        public static List<CpuThread> Start()
        {
            var threads = new List<CpuThread>
            {
                new("cpu_split", "cpu-split-heavy-light", M(nameof(SplitThread)), M(nameof(SplitLoop)),
                    new[] { (M(nameof(HeavyPart)), 0.75), (M(nameof(LightPart)), 0.25) }),
                new("cpu_solo", "cpu-solo", M(nameof(SoloThread)), M(nameof(SoloLoop)),
                    new[] { (M(nameof(SoloWork)), 1.0) }),
            };
            foreach (CpuThread t in threads)
            {
                var thread = new Thread(t.Start.CreateDelegate<ParameterizedThreadStart>())
                {
                    Name = t.Name,
                    IsBackground = true,
                };
                thread.Start(t);
                if (!t.WaitReady(TimeSpan.FromSeconds(30)))
                {
                    throw new InvalidOperationException($"CPU thread {t.Name} did not start");
                }
            }
            return threads;
        }

        /// <summary>Waits until the perf map (when there is one) shows tier-1 code for every
        /// method of the loops, then `settle` more seconds; without a perf map, waits
        /// `fallbackSeconds`. Returns each method's code versions as the perf map lists them
        /// (empty lists without one).</summary>
        public static JsonObject WaitForTier1(string? perfMap, double timeoutSeconds, double settle, double fallbackSeconds)
        {
            var sw = Stopwatch.StartNew();
            Dictionary<string, List<string>> tiers = ReadTiers(perfMap);
            bool reached = false;
            if (perfMap != null && File.Exists(perfMap))
            {
                while (sw.Elapsed.TotalSeconds < timeoutSeconds)
                {
                    tiers = ReadTiers(perfMap);
                    if (TieredMethods.All(m => tiers[m].Any(IsTier1)))
                    {
                        reached = true;
                        break;
                    }
                    Thread.Sleep(200);
                }
                if (!reached)
                {
                    Log.Write($"CPU workload: not every loop method reached tier 1 in {timeoutSeconds}s");
                }
                Thread.Sleep(TimeSpan.FromSeconds(settle));
            }
            else
            {
                Thread.Sleep(TimeSpan.FromSeconds(fallbackSeconds));
            }
            var perMethod = new JsonObject();
            foreach (string m in TieredMethods)
            {
                perMethod[Facts.Name(M(m))] = Facts.Strings(tiers[m]);
            }
            return new JsonObject
            {
                ["tier1_reached"] = perfMap != null ? reached : null,
                ["waited_seconds"] = Math.Round(sw.Elapsed.TotalSeconds, 3),
                ["perf_map_tiers"] = perMethod,
            };
        }

        // The perf map's tier annotation of optimized code: "[OptimizedTier1]", and on .NET 8
        // "[Optimized]" / "[OptimizedTier1]"; OSR versions are "[OptimizedTier1OSR]".
        private static bool IsTier1(string tier) => tier == "OptimizedTier1" || tier == "Optimized";

        private static Dictionary<string, List<string>> ReadTiers(string? perfMap)
        {
            var result = TieredMethods.ToDictionary(m => m, _ => new List<string>());
            if (perfMap == null || !File.Exists(perfMap))
            {
                return result;
            }
            string text;
            try
            {
                using var fs = new FileStream(perfMap, FileMode.Open, FileAccess.Read, FileShare.ReadWrite);
                text = new StreamReader(fs).ReadToEnd();
            }
            catch (IOException)
            {
                return result;
            }
            foreach (string line in text.Split('\n', '\0'))
            {
                foreach (string m in TieredMethods)
                {
                    // "START SIZE [return type] Cdac.Testbed.CpuWork::Name(args)[Tier]"
                    int at = line.IndexOf("Cdac.Testbed.CpuWork::" + m + "(", StringComparison.Ordinal);
                    if (at < 0)
                    {
                        continue;
                    }
                    int open = line.LastIndexOf('[');
                    int close = line.LastIndexOf(']');
                    if (open > at && close > open)
                    {
                        result[m].Add(line.Substring(open + 1, close - open - 1));
                    }
                }
            }
            return result;
        }

        public static string RateFileFor(string manifest) => Path.Combine(Path.GetDirectoryName(Path.GetFullPath(manifest))!, "cpu-rate.txt");

        /// <summary>A background thread rewriting the rate file every second.</summary>
        public static void StartRateFile(string path)
        {
            var thread = new Thread(() =>
            {
                while (true)
                {
                    try
                    {
                        string tmp = path + ".tmp";
                        File.WriteAllText(tmp, string.Create(CultureInfo.InvariantCulture,
                            $"{Volatile.Read(ref SplitUnits)} {Volatile.Read(ref SoloUnits)} {MonotonicSeconds():F6}\n"));
                        File.Move(tmp, path, overwrite: true);
                    }
                    catch (IOException)
                    {
                    }
                    Thread.Sleep(1000);
                }
            })
            {
                Name = "cpu-rate-file",
                IsBackground = true,
            };
            thread.Start();
        }

        /// <summary>CLOCK_MONOTONIC in seconds (Stopwatch's clock on Linux).</summary>
        public static double MonotonicSeconds() => Stopwatch.GetTimestamp() / (double)Stopwatch.Frequency;

        /// <summary>Answers "rate" and "total" lines on stdin until its end; then returns.</summary>
        public static void ServeStdin(TextReader input, TextWriter output)
        {
            long lastSplit = Volatile.Read(ref SplitUnits), lastSolo = Volatile.Read(ref SoloUnits);
            long lastTs = Stopwatch.GetTimestamp();
            string? line;
            while ((line = input.ReadLine()) != null)
            {
                string cmd = line.Trim();
                long ts = Stopwatch.GetTimestamp();
                long split = Volatile.Read(ref SplitUnits), solo = Volatile.Read(ref SoloUnits);
                if (cmd == "rate")
                {
                    double secs = (ts - lastTs) / (double)Stopwatch.Frequency;
                    output.WriteLine(string.Create(CultureInfo.InvariantCulture, $"rate {split - lastSplit} {solo - lastSolo} {secs:F6}"));
                    output.Flush();
                    (lastSplit, lastSolo, lastTs) = (split, solo, ts);
                }
                else if (cmd == "total")
                {
                    double secs = (ts - StartTimestamp) / (double)Stopwatch.Frequency;
                    output.WriteLine(string.Create(CultureInfo.InvariantCulture, $"total {split} {solo} {secs:F6}"));
                    output.Flush();
                }
            }
        }

        public static JsonObject Describe(List<CpuThread> threads, JsonObject tiering, string rateFile)
        {
            var expected = new JsonArray();
            int busy = threads.Count;
            foreach (CpuThread t in threads)
            {
                foreach ((MethodInfo m, double share) in t.Hot)
                {
                    expected.Add(new JsonObject
                    {
                        ["method"] = Facts.Name(m),
                        ["method_desc"] = Facts.MethodDesc(m),
                        ["thread"] = t.Name,
                        ["os_tid"] = t.OsTid,
                        // Of the samples of its thread, taken as self (innermost managed frame).
                        ["share_of_thread"] = share,
                        // Of the samples of the CPU threads together (each thread gets one core
                        // or an equal part of the machine).
                        ["share_of_workload"] = share / busy,
                        // Innermost first, as the parked threads' expected_chain.
                        ["chain"] = Facts.Strings(new[] { m, t.Loop, t.Start }.Select(Facts.Name)),
                    });
                }
            }
            return new JsonObject
            {
                ["threads"] = Facts.Array(threads.Select(t => (JsonNode?)t.Describe())),
                ["expected"] = expected,
                ["unit"] = $"one SplitLoop or SoloLoop iteration: {4 * K} mix steps (HeavyPart {3 * K} + LightPart {K}, or SoloWork {4 * K})",
                ["batch"] = Batch,
                ["rate_protocol"] = "stdin line 'rate' -> 'rate SPLIT SOLO SECONDS' (units since the previous 'rate'); 'total' -> 'total SPLIT SOLO SECONDS' (since start)",
                ["rate_file"] = rateFile,
                ["rate_file_format"] = "SPLIT SOLO MONOTONIC_SECONDS (cumulative units; CLOCK_MONOTONIC), rewritten every second",
                ["tiering"] = tiering,
                ["units_at_ready"] = new JsonObject
                {
                    ["split"] = Volatile.Read(ref SplitUnits),
                    ["solo"] = Volatile.Read(ref SoloUnits),
                    ["monotonic_seconds"] = MonotonicSeconds(),
                },
            };
        }
    }

    /// <summary>One CPU thread: its methods and who it turned out to be.</summary>
    public sealed class CpuThread
    {
        private readonly ManualResetEventSlim _ready = new(false);

        internal CpuThread(string kind, string name, MethodInfo start, MethodInfo loop, (MethodInfo, double)[] hot)
        {
            Kind = kind;
            Name = name;
            Start = start;
            Loop = loop;
            Hot = hot;
        }

        public string Kind { get; }
        public string Name { get; }
        internal MethodInfo Start { get; }
        internal MethodInfo Loop { get; }
        internal (MethodInfo Method, double Share)[] Hot { get; }
        public int OsTid { get; private set; }
        public int ManagedId { get; private set; }

        public void Register()
        {
            OsTid = Libc.gettid();
            ManagedId = Environment.CurrentManagedThreadId;
            _ready.Set();
        }

        internal bool WaitReady(TimeSpan timeout) => _ready.Wait(timeout);

        internal JsonObject Describe()
        {
            string? comm = null;
            try
            {
                comm = File.ReadAllText($"/proc/self/task/{OsTid}/comm").Trim();
            }
            catch (IOException)
            {
            }
            return new JsonObject
            {
                ["kind"] = Kind,
                ["name"] = Name,
                ["comm"] = comm,
                ["os_tid"] = OsTid,
                ["managed_id"] = ManagedId,
                ["start_method"] = Facts.Name(Start),
                ["loop_method"] = Facts.Name(Loop),
                ["hot_methods"] = Facts.Array(Hot.Select(h => (JsonNode?)new JsonObject
                {
                    ["method"] = Facts.Name(h.Method),
                    ["share"] = h.Share,
                })),
                // Logical chain of the loop, innermost first (below the hot method).
                ["expected_chain"] = Facts.Strings(new[] { Loop, Start }.Select(Facts.Name)),
            };
        }
    }
}
