// The real-runtime testbed for cdac: a self-contained .NET process that makes its runtime hold a
// known, realistic mix of code (framework code, LINQ expression lambdas, Reflection.Emit methods
// with every kind of exception clause, a collectible dynamic assembly, a collectible
// AssemblyLoadContext, ReadyToRun user code, generics, async state machines, tiered and OSR code)
// and threads parked in known call chains, then writes a manifest of what it made, with the
// runtime's own pointers, and waits: cdac is pointed at the live process or at dumps of it.
//
// The runtime reads DOTNET_* variables (perf map, tiering...) itself: set them before starting
// the testbed; it never sets them. See scripts/testbed-start and testbed/README.md.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Reflection.Emit;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.Encodings.Web;
using System.Text.Json;
using System.Text.Json.Nodes;
using System.Threading;
using Cdac.Testbed.Async;
using Cdac.Testbed.Generics;
using Cdac.Testbed.Parked;

namespace Cdac.Testbed
{
    internal static class Log
    {
        public static void Write(string message) =>
            Console.Error.WriteLine($"testbed[{Environment.ProcessId}]: {message}");
    }

    internal sealed class Options
    {
        public string Manifest { get; private set; } = "";
        public double MaxSeconds { get; private set; } = 1800;
        public bool ExitWithParent { get; private set; }
        public bool Busy { get; private set; }
        public int Rounds { get; private set; }
        public bool Crash { get; private set; }
        /// <summary>--crash-on-thread: the crash happens on a named background thread, not main.</summary>
        public bool CrashOnThread { get; private set; }
        public bool CpuWorkload { get; private set; }
        /// <summary>--starve-threadpool: every worker blocked, known work queued (ThreadPoolFacts.cs).</summary>
        public bool StarveThreadPool { get; private set; }
        /// <summary>--allocate: two threads allocating without pause and a full GC every 200 ms (AllocChurn.cs).</summary>
        public bool Allocate { get; private set; }

        public const string Usage =
            "usage: Cdac.Testbed --manifest PATH [--max-seconds N] [--exit-with-parent] [--busy | --rounds N | --crash | --crash-on-thread | --cpu-workload] [--starve-threadpool] [--allocate]";

        public static Options Parse(string[] args)
        {
            var o = new Options();
            for (int i = 0; i < args.Length; i++)
            {
                string Value() => i + 1 < args.Length ? args[++i] : throw new ArgumentException($"{args[i]} needs a value");
                switch (args[i])
                {
                    case "--manifest": o.Manifest = Value(); break;
                    case "--max-seconds": o.MaxSeconds = double.Parse(Value(), CultureInfo.InvariantCulture); break;
                    case "--exit-with-parent": o.ExitWithParent = true; break;
                    case "--busy": o.Busy = true; break;
                    case "--rounds": o.Rounds = int.Parse(Value(), CultureInfo.InvariantCulture); break;
                    case "--crash": o.Crash = true; break;
                    case "--crash-on-thread": o.Crash = true; o.CrashOnThread = true; break;
                    case "--cpu-workload": o.CpuWorkload = true; break;
                    case "--starve-threadpool": o.StarveThreadPool = true; break;
                    case "--allocate": o.Allocate = true; break;
                    default: throw new ArgumentException($"unknown argument {args[i]}");
                }
            }
            if (o.Manifest.Length == 0)
            {
                throw new ArgumentException("--manifest is required");
            }
            if ((o.Busy ? 1 : 0) + (o.Rounds > 0 ? 1 : 0) + (o.Crash ? 1 : 0) + (o.CpuWorkload ? 1 : 0) > 1)
            {
                throw new ArgumentException("--busy, --rounds, --crash, --crash-on-thread and --cpu-workload exclude each other");
            }
            return o;
        }
    }

    public static class Program
    {
        /// <summary>Things that must stay reachable for the process' lifetime.</summary>
        private static readonly List<object> KeepAlive = new();

        private static readonly string[] HandlerNames =
            { "TryCatchTyped", "TryFinally", "TryFilter", "NestedTryCatchFinally", "TwoCatches" };

        public static int Main(string[] args)
        {
            DateTime processStart = Process.GetCurrentProcess().StartTime.ToUniversalTime();
            double startTime = (processStart - DateTime.UnixEpoch).TotalSeconds;
            Options options;
            try
            {
                options = Options.Parse(args);
            }
            catch (Exception e) when (e is ArgumentException or FormatException or OverflowException)
            {
                Console.Error.WriteLine(e.Message);
                Console.Error.WriteLine(Options.Usage);
                return 2;
            }
            int pid = Environment.ProcessId;
            // First thing, so that even a start-up that hangs honours both exit rules.
            StartWatchdog(pid, startTime + options.MaxSeconds, options.ExitWithParent ? Libc.getppid() : (int?)null);
            try
            {
                return Run(options, pid, startTime);
            }
            catch
            {
                // A testbed that fails leaves no manifest for testbed-stop to clean up after.
                RemovePerfFiles(pid);
                throw;
            }
        }

        private static int Run(Options options, int pid, double startTime)
        {
            var phases = new JsonObject();
            var sw = Stopwatch.StartNew();
            void Phase(string name)
            {
                phases[name] = Math.Round(sw.Elapsed.TotalSeconds, 3);
                sw.Restart();
            }
            string appDir = Path.TrimEndingDirectorySeparator(AppContext.BaseDirectory);
            Log.Write($"runtime {Environment.Version} ({RuntimeInformation.FrameworkDescription}) up after {Now() - startTime:F2}s");

            var lambdas = new Lambdas();
            lambdas.Exercise();
            var fw = new FrameworkWork(lambdas);
            fw.RunAll();
            KeepAlive.Add(lambdas);
            Phase("framework");

            // Reflection.Emit: Big first (Handlers' Drive calls Large), then Handlers, then the
            // collectible Worker.
            (AssemblyBuilder ab, ModuleBuilder module) = Emitter.NewAssembly("Cdac.Testbed.Emitted", collectible: false);
            (TypeBuilder bigBuilder, MethodBuilder largeBuilder) = Emitter.DefineLarge(module, "Cdac.Testbed.Big", steps: 1500);
            Type bigType = bigBuilder.CreateType();
            EmittedType handlers = Emitter.EmitHandlers(module, "Cdac.Testbed.Handlers", largeBuilder);
            (AssemblyBuilder cab, ModuleBuilder cmodule) = Emitter.NewAssembly("Cdac.Testbed.Collectible", collectible: true);
            EmittedType worker = Emitter.EmitCollectibleWorker(cmodule, "Cdac.Testbed.Collectible.Worker");
            var d = new Dictionary<string, Func<int, int>>(StringComparer.Ordinal);
            var emittedMethods = new List<JsonObject>();
            emittedMethods.AddRange(Emitter.Describe(handlers, collectible: false, d));
            emittedMethods.AddRange(Emitter.Describe(new EmittedType(bigType, new Dictionary<string, string[]> { ["Large"] = Array.Empty<string>() }),
                collectible: false, d, large: true));
            emittedMethods.AddRange(Emitter.Describe(worker, collectible: true, d));
            // The collectible assembly lives as long as something references it: keep them all.
            KeepAlive.AddRange(new object[] { ab, cab, bigType, handlers, worker, d });
            var layout = new LayoutTypes();
            KeepAlive.AddRange(new object[] { layout.Assembly, layout.Shape, layout.Point });
            SelfCheck(d);
            // A long run while Drive is still at tier 0: its loop goes through OSR.
            d["Drive"](20000);
            Phase("emit");

            var plugin = new PluginHost(appDir);
            plugin.Exercise(5);
            KeepAlive.Add(plugin);
            PrecompiledWork.CallFew();
            GenericShapes.Exercise();
            AsyncChains.Run();
            AsyncParked.Run();
            List<ParkedThread> parked = ParkedThreads.StartAll(out int[] pipeFds);
            KeepAlive.Add(parked);
            Phase("shapes");

            // Enough calls, with pauses, for the tiered compiler to promote the hot methods.
            Exercise(d, plugin, rounds: 4, perRound: 40, pause: 300);
            for (int i = 0; i < 3; i++)
            {
                fw.RunAll();
            }
            Exercise(d, plugin, rounds: 2, perRound: 40, pause: 200);
            for (int i = 0; i < 40; i++)
            {
                d["Drive"](40);
            }
            Thread.Sleep(300);
            Phase("tiering");

            (string? perfMap, string? perfInfo, string? jitDump) = PerfPaths(pid);
            JsonObject? cpuWorkload = null;
            if (options.CpuWorkload)
            {
                // Two busy threads; the manifest is written once their loops run tier-1 code.
                List<CpuThread> cpuThreads = CpuWork.Start();
                KeepAlive.Add(cpuThreads);
                JsonObject tiering = CpuWork.WaitForTier1(perfMap, timeoutSeconds: 30, settle: 1.0, fallbackSeconds: 5.0);
                string rateFile = CpuWork.RateFileFor(options.Manifest);
                CpuWork.StartRateFile(rateFile);
                cpuWorkload = CpuWork.Describe(cpuThreads, tiering, rateFile);
                Phase("cpu_warmup");
            }
            if (perfMap != null && !File.Exists(perfMap))
            {
                Log.Write($"warning: perf map enabled but {perfMap} does not exist");
            }
            string libcoreclr = MappedFile("libcoreclr.so") ?? Path.Combine(appDir, "libcoreclr.so");
            JsonObject? composite = PrecompiledWork.Composite(appDir);
            var extraTypes = new List<(string, Type, bool)>
            {
                ("R2R.Precompiled", typeof(R2R.Precompiled), true),
                ("R2R.Accumulator", typeof(R2R.Accumulator), true),
                ("Box<String>", typeof(Box<string>), true),
                ("Box<Int32>", typeof(Box<int>), true),
                ("Generics.Pair", typeof(Pair), true),
            };
            extraTypes.AddRange(plugin.Types());
            // --crash-on-thread: the thread that will throw is started (and has said who it is)
            // before the manifest, which names it.
            CrashThread? crashThread = options.CrashOnThread ? CrashThread.Start() : null;
            if (options.Allocate)
            {
                AllocChurn.Start();
            }
            // Last, as nothing after it may need a thread pool worker.
            if (options.StarveThreadPool)
            {
                Pool.ThreadPoolFacts.Starve();
            }
            var manifest = new JsonObject
            {
                ["pid"] = pid,
                ["variant"] = BuildInfo("CdacVariant"),
                ["app_dir"] = appDir,
                // The folder holding libcoreclr.so, createdump and libmscordaccore.so (self-contained:
                // the app's own folder).
                ["runtime_dir"] = Path.GetDirectoryName(libcoreclr),
                ["libcoreclr"] = libcoreclr,
                ["runtime_version"] = Environment.Version.ToString(),
                ["runtime_description"] = RuntimeInformation.FrameworkDescription,
                ["pinned_runtime_version"] = BuildInfo("CdacRuntimeVersion"),
                ["perf_map"] = perfMap,
                ["perf_map_enabled"] = perfMap != null,
                // .NET 9 and 10 write no perfinfo file (8 does): null when there is none.
                ["perfinfo"] = perfInfo != null && File.Exists(perfInfo) ? perfInfo : null,
                ["jitdump"] = jitDump,
                ["dotnet_env"] = DotnetEnv(),
                ["busy"] = options.Busy,
                ["allocate"] = options.Allocate,
                ["mode"] = options.Crash ? "crash" : options.Rounds > 0 ? "rounds" : options.Busy ? "busy"
                    : options.CpuWorkload ? "cpu" : "idle",
                ["lcg_count"] = lambdas.Count,
                // Times finally (+1) and fault (+100) handlers ran in Cdac.Testbed.Handlers so far.
                ["handlers_counter"] = (int)handlers.Type.GetField("Counter")!.GetValue(null)!,
                ["emitted_methods"] = Facts.Array(emittedMethods),
                // MethodDesc and MethodHandle.GetFunctionPointer() of some framework methods and of
                // the named LCG lambdas (whose entry point is their JIT'ed code).
                ["framework_methods"] = FrameworkEntryPoints(),
                ["lcg_methods"] = LcgEntryPoints(lambdas),
                ["r2r"] = PrecompiledWork.Describe(appDir, composite),
                ["composite"] = composite,
                ["generics"] = GenericShapes.Describe(),
                ["async_methods"] = AsyncChains.DescribeAll(),
                // Async chains parked for good (on a TaskCompletionSource, a Task.Delay, a pipe
                // read), outermost method first, with await states and await texts (AsyncParked.cs).
                ["async"] = AsyncParked.Describe(),
                ["collectible_alc"] = plugin.Describe(),
                ["threads"] = Facts.Array(parked.Select(p => (JsonNode?)p.Describe())),
                ["pipe_fds"] = new JsonArray(pipeFds[0], pipeFds[1]),
                ["crash"] = options.Crash ? Crash.Describe(crashThread) : null,
                // --cpu-workload: the busy threads, their hot methods and intended shares, and how
                // to read the throughput (testbed/README.md); null in the other modes.
                ["cpu_workload"] = cpuWorkload,
                // The heap's facts: a type with exactly 1,000 instances, objects that do not move,
                // handles of every kind, finalizable objects, the GC's configuration (HeapFacts.cs).
                ["heap"] = Heap.HeapFacts.Describe(),
                // Threads stuck on locks: a two-monitor deadlock, a contended monitor, and on
                // .NET 9+ a System.Threading.Lock deadlock (LockFacts.cs).
                ["locks"] = Locks.LockFacts.Describe(),
                // --starve-threadpool: limits, blocked workers and the work queued behind them.
                ["threadpool"] = options.StarveThreadPool ? Pool.ThreadPoolFacts.Describe() : null,
                // Reflection's view of types, methods, fields, assemblies and generic and dynamic
                // methods, with the native pointers behind them (tests/real/net8_type_layouts.rs).
                ["type_system"] = TypeSystemFacts.GroundTruth(layout, new[] { handlers.Type, bigType, worker.Type },
                    extraTypes, KeepAlive),
            };
            Phase("facts");
            manifest["phases"] = phases;
            manifest["start_time"] = startTime;
            manifest["ready_time"] = Now();
            WriteManifest(options.Manifest, manifest);
            Log.Write($"manifest written to {options.Manifest} after {Now() - startTime:F2}s");

            if (crashThread != null)
            {
                // The background thread throws; main goes on sleeping below until the runtime
                // takes the process down.
                crashThread.Go();
            }
            else if (options.Crash)
            {
                Crash.CrashStart();
            }
            if (options.CpuWorkload)
            {
                // "rate" / "total" lines until the end of stdin (at once for /dev/null), then idle.
                CpuWork.ServeStdin(Console.In, Console.Out);
            }
            if (options.Rounds > 0)
            {
                Console.In.ReadLine();
                var rsw = Stopwatch.StartNew();
                ChecksumRounds(fw, d, lambdas, plugin, options.Rounds, Console.Out);
                Log.Write($"{options.Rounds} rounds in {rsw.Elapsed.TotalSeconds:F2}s");
                Console.Out.WriteLine("done");
                Console.Out.Flush();
                // The caller may still look at the process: wait for the end of stdin.
                while (Console.In.ReadLine() != null)
                {
                }
                RemovePerfFiles(pid);
                Libc._exit(0);
            }
            while (true)
            {
                if (options.Busy)
                {
                    // Mostly managed frames: emitted loop, compiled Regex, LINQ over LCG lambdas.
                    d["Drive"](2000);
                    fw.Regexes();
                    fw.Linq();
                    d["SumTo"](10000);
                }
                else
                {
                    Thread.Sleep(500);
                }
            }
        }

        private static double Now() => (DateTime.UtcNow - DateTime.UnixEpoch).TotalSeconds;

        private static string? BuildInfo(string key) =>
            typeof(Program).Assembly.GetCustomAttributes<AssemblyMetadataAttribute>()
                .FirstOrDefault(a => a.Key == key)?.Value;

        private static JsonObject DotnetEnv()
        {
            var env = new JsonObject();
            var all = Environment.GetEnvironmentVariables();
            foreach (string key in all.Keys.Cast<string>().OrderBy(k => k, StringComparer.Ordinal))
            {
                if (key.StartsWith("DOTNET_", StringComparison.Ordinal) || key.StartsWith("COMPlus_", StringComparison.Ordinal)
                    || key.StartsWith("CORECLR_", StringComparison.Ordinal))
                {
                    env[key] = (string?)all[key];
                }
            }
            return env;
        }

        /// <summary>Absolute path of the first mapping of /proc/self/maps whose file name is `name`.</summary>
        internal static string? MappedFile(string name)
        {
            foreach (string line in File.ReadLines("/proc/self/maps"))
            {
                int slash = line.IndexOf('/');
                if (slash >= 0)
                {
                    string path = line.Substring(slash).Trim();
                    if (Path.GetFileName(path) == Path.GetFileName(name))
                    {
                        return path;
                    }
                }
            }
            return null;
        }

        // Calling emitted methods ----------------------------------------------------------------

        /// <summary>Calls fn(arg), which must throw; 1 when it did.</summary>
        private static int CallExpectThrow(Func<int, int> fn, int arg)
        {
            try
            {
                fn(arg);
            }
            catch (Exception)
            {
                return 1;
            }
            return 0;
        }

        /// <summary>Each handler does what it was emitted to do (so the EH tables are the ones
        /// described).</summary>
        private static void SelfCheck(Dictionary<string, Func<int, int>> d)
        {
            var want = new (string Name, int Arg, int Expected)[]
            {
                ("TryCatchTyped", -1, -1), ("TryCatchTyped", 4, 13), ("TryFinally", 1, 8),
                ("TryFault", 1, 0x54), ("TryFilter", -1, -2), ("TryFilter", 9, 4),
                ("NestedTryCatchFinally", -1, -20), ("NestedTryCatchFinally", 0, -10),
                ("NestedTryCatchFinally", 3, 9), ("TwoCatches", -1, -30), ("TwoCatches", 0, -40),
                ("TwoCatches", 1, 101), ("Guarded", -1, -3), ("Guarded", 2, 22), ("SumTo", 4, 18),
            };
            foreach ((string name, int arg, int expected) in want)
            {
                int got = d[name](arg);
                if (got != expected)
                {
                    throw new InvalidOperationException($"{name}({arg}) returned {got}, expected {expected}");
                }
            }
            if (CallExpectThrow(d["TryFault"], -1) != 1 || CallExpectThrow(d["TryFilter"], -5000) != 1)
            {
                throw new InvalidOperationException("TryFault(-1) / TryFilter(-5000) should have thrown");
            }
        }

        /// <summary>Calls every emitted method `perRound` times per round, with handler-running
        /// arguments mixed in, and the generic, precompiled and plugin code, pausing between
        /// rounds so that the tiered compiler's call counting and tier-1 background compilation
        /// can happen.</summary>
        private static long Exercise(Dictionary<string, Func<int, int>> d, PluginHost plugin, int rounds, int perRound, int pause)
        {
            long total = 0;
            for (int rnd = 0; rnd < rounds; rnd++)
            {
                for (int k = 0; k < perRound; k++)
                {
                    int v = k - 2; // -2, -1 and 0 make the handlers run
                    foreach (string name in HandlerNames)
                    {
                        total += d[name](v);
                    }
                    total += d["TryFault"](k);
                    if (k % 10 == 0)
                    {
                        total += CallExpectThrow(d["TryFault"], -1);     // fault handler runs
                        total += CallExpectThrow(d["TryFilter"], -5000); // filter says no
                    }
                    total += d["Large"](k);
                    total += d["Guarded"](v) + d["SumTo"](k);
                    total += GenericShapes.Exercise();
                }
                total += d["Drive"](500 * (rnd + 1));
                total += PrecompiledWork.CallHot(perRound);
                total += plugin.Exercise(perRound);
                Thread.Sleep(pause);
            }
            return total;
        }

        /// <summary>Deterministic mode: `rounds` rounds of managed computations (emitted methods
        /// with their exception handlers, framework code, LINQ over LCG lambdas, generics,
        /// precompiled and plugin code, sorting), one checksum line per round. Nothing depends on
        /// addresses, time or hash seeds, so every run prints the same lines: a reader that
        /// disturbed the process (stopped it, wrote to it) would show.</summary>
        private static void ChecksumRounds(FrameworkWork fw, Dictionary<string, Func<int, int>> d, Lambdas lambdas,
            PluginHost plugin, int rounds, TextWriter output)
        {
            CultureInfo inv = CultureInfo.InvariantCulture;
            for (int rnd = 0; rnd < rounds; rnd++)
            {
                // Heavy enough (about 0.3 s a round on a 2-core machine) that a reader hammering
                // the process gets many runs in while the rounds run (tests/real/live_safety.rs).
                var vals = new List<long>();
                for (int i = 0; i < RoundRepeats; i++)
                {
                    vals.Add(fw.RunAll());
                }
                for (int k = 0; k < 60; k++)
                {
                    int v = (k * 7 + rnd) % 50 - 3; // -3..-1 and 0 make the handlers run
                    foreach (string name in HandlerNames.Append("Guarded"))
                    {
                        vals.Add(d[name](v));
                    }
                    vals.Add(d["TryFault"](Math.Abs(v)));
                    vals.Add(d["Large"](k + rnd));
                    vals.Add(d["SumTo"](k * 10));
                }
                vals.Add(d["Drive"](RoundDriveIterations + rnd));
                vals.Add(CallExpectThrow(d["TryFilter"], -5000));
                vals.Add(GenericShapes.Exercise());
                vals.Add(PrecompiledWork.CallHot(20));
                vals.Add(plugin.Exercise(20));
                // LINQ over the LCG lambdas, then sorts of numbers and strings.
                int[] nums = Enumerable.Range(rnd, 20000).Select(lambdas.Select).ToArray();
                Array.Sort(nums);
                vals.AddRange(new long[] { nums[0], nums[nums.Length / 2], nums[^1], nums.Count(lambdas.Where) });
                string[] words = Enumerable.Range(0, 3000)
                    .Select(i => ((i * 2654435761L + rnd) & 0xFFFFFFF).ToString("x7", inv) + "-" + (i % 13).ToString(inv))
                    .ToArray();
                Array.Sort(words, StringComparer.Ordinal);
                ulong h = Fnv1a(Fnv1a(14695981039346656037UL, string.Join(",", words)),
                    string.Join(",", vals.Select(x => x.ToString(inv))));
                output.WriteLine($"round {rnd} {h:x16}");
                output.Flush();
            }
        }

        private const int RoundRepeats = 8;
        private const int RoundDriveIterations = 60000;

        /// <summary>FNV-1a (64-bit) over the UTF-8 bytes of `text`: a checksum with no seed.</summary>
        private static ulong Fnv1a(ulong h, string text)
        {
            foreach (byte b in Encoding.UTF8.GetBytes(text))
            {
                h = unchecked((h ^ b) * 1099511628211UL);
            }
            return h;
        }

        // Framework methods and LCG lambdas --------------------------------------------------------

        /// <summary>MethodDesc and entry point of a few framework methods of different kinds:
        /// static and instance, virtual (its entry point is a separate function-pointer precode),
        /// a generic instantiation, and P/Invokes (stub precodes). Methods not found on this
        /// runtime are left out.</summary>
        private static JsonArray FrameworkEntryPoints()
        {
            Assembly corelib = typeof(object).Assembly;
            Type? globalization = corelib.GetType("Interop+Globalization");
            var wanted = new (string Label, Func<MethodInfo?> Find)[]
            {
                ("String.Concat(String,String)", () => typeof(string).GetMethod("Concat", new[] { typeof(string), typeof(string) })),
                ("String.IsNullOrEmpty", () => typeof(string).GetMethod("IsNullOrEmpty")),
                ("String.GetHashCode", () => typeof(string).GetMethod("GetHashCode", Type.EmptyTypes)),
                ("Object.ToString", () => typeof(object).GetMethod("ToString")),
                ("Array.Empty<Int32>", () => typeof(Array).GetMethod("Empty")!.MakeGenericMethod(typeof(int))),
                ("Enumerable.Range", () => typeof(Enumerable).GetMethod("Range")),
                ("Regex.IsMatch(String)", () => typeof(System.Text.RegularExpressions.Regex).GetMethod("IsMatch", new[] { typeof(string) })),
                ("CastHelpers.StelemRef", () => corelib.GetType("System.Runtime.CompilerServices.CastHelpers")?.GetMethod("StelemRef", Facts.AnyDeclared)),
                ("Interop.Globalization.LoadICU", () => globalization?.GetMethod("LoadICU", Facts.AnyDeclared)),
                ("Interop.Globalization.GetICUVersion", () => globalization?.GetMethod("GetICUVersion", Facts.AnyDeclared)),
            };
            var result = new JsonArray();
            foreach ((string label, Func<MethodInfo?> find) in wanted)
            {
                try
                {
                    MethodInfo? mi = find();
                    if (mi == null)
                    {
                        Log.Write($"framework entry point {label}: not found on this runtime");
                        continue;
                    }
                    JsonObject o = Facts.Method(mi, label);
                    o["pinvoke"] = (mi.Attributes & MethodAttributes.PinvokeImpl) != 0;
                    o["virtual"] = mi.IsVirtual;
                    result.Add(o);
                }
                catch (Exception e)
                {
                    // A missing internal member must not stop the testbed.
                    Log.Write($"framework entry point {label}: {e.Message}");
                }
            }
            return result;
        }

        /// <summary>MethodDesc and entry point of the named expression lambdas (LCG
        /// DynamicMethods, never tiered: once JIT'ed their entry point is their code).</summary>
        private static JsonArray LcgEntryPoints(Lambdas lambdas)
        {
            var result = new JsonArray();
            foreach ((string name, Delegate fn) in lambdas.Named.OrderBy(n => n.Name, StringComparer.Ordinal))
            {
                try
                {
                    RuntimeMethodHandle? handle = TypeSystemFacts.DynamicMethodHandle(fn.Method);
                    if (handle is not { } h)
                    {
                        Log.Write($"LCG entry point {name}: no GetMethodDescriptor on {fn.Method.GetType()}");
                        continue;
                    }
                    result.Add(new JsonObject
                    {
                        ["name"] = name,
                        ["method_desc"] = Facts.Hex(h.Value),
                        ["function_pointer"] = Facts.FunctionPointer(h),
                        // The DynamicMethod's own name (what DynamicMethodDesc.MethodName holds).
                        ["method_name"] = fn.Method.Name,
                        ["is_static"] = fn.Method.IsStatic,
                    });
                }
                catch (Exception e)
                {
                    Log.Write($"LCG entry point {name}: {e.Message}");
                }
            }
            return result;
        }

        // Manifest, perf files, exit rules ----------------------------------------------------------

        /// <summary>Perf map / perfinfo / jitdump paths as the runtime names them, or null when not
        /// enabled (DOTNET_PerfMapEnabled: 1 all, 2 jitdump only, 3 perf map and perfinfo only).</summary>
        private static (string? PerfMap, string? PerfInfo, string? JitDump) PerfPaths(int pid)
        {
            string raw = (Environment.GetEnvironmentVariable("DOTNET_PerfMapEnabled")
                          ?? Environment.GetEnvironmentVariable("COMPlus_PerfMapEnabled") ?? "0").Trim();
            int mode = raw.StartsWith("0x", StringComparison.OrdinalIgnoreCase)
                ? int.TryParse(raw.AsSpan(2), NumberStyles.HexNumber, CultureInfo.InvariantCulture, out int hx) ? hx : 0
                : int.TryParse(raw, NumberStyles.Integer, CultureInfo.InvariantCulture, out int dec) ? dec : 0;
            string folder = Environment.GetEnvironmentVariable("DOTNET_PerfMapJitDumpPath") is { Length: > 0 } f ? f : "/tmp";
            return (
                mode is 1 or 3 ? Path.Combine(folder, $"perf-{pid}.map") : null,
                mode is 1 or 3 ? Path.Combine(folder, $"perfinfo-{pid}.map") : null,
                mode is 1 or 2 ? Path.Combine(folder, $"jit-{pid}.dump") : null);
        }

        private static void RemovePerfFiles(int pid)
        {
            (string? a, string? b, string? c) = PerfPaths(pid);
            foreach (string? p in new[] { a, b, c })
            {
                if (p != null)
                {
                    try
                    {
                        File.Delete(p);
                    }
                    catch (IOException)
                    {
                    }
                    catch (UnauthorizedAccessException)
                    {
                    }
                }
            }
        }

        /// <summary>Writes the manifest atomically: readers never see a partial file.</summary>
        private static void WriteManifest(string path, JsonObject manifest)
        {
            path = Path.GetFullPath(path);
            Directory.CreateDirectory(Path.GetDirectoryName(path)!);
            string tmp = path + ".tmp";
            var options = new JsonSerializerOptions
            {
                WriteIndented = true,
                // Keep '<', '>', '+' and non-ASCII method names readable.
                Encoder = JavaScriptEncoder.UnsafeRelaxedJsonEscaping,
            };
            using (var stream = new FileStream(tmp, FileMode.Create, FileAccess.Write))
            {
                byte[] bytes = Encoding.UTF8.GetBytes(manifest.ToJsonString(options) + "\n");
                stream.Write(bytes);
                stream.Flush(flushToDisk: true);
            }
            File.Move(tmp, path, overwrite: true);
        }

        /// <summary>A background thread that ends the process after the deadline, or once the
        /// parent (when given) has gone; it polls every 0.5 s. Nobody is left to read the perf map
        /// of a testbed that ends on its own, so its files go too. _exit skips the runtime's
        /// shutdown, which would wait for nothing useful.</summary>
        private static void StartWatchdog(int pid, double deadline, int? parent)
        {
            var thread = new Thread(() =>
            {
                while (true)
                {
                    Thread.Sleep(500);
                    string why;
                    if (Now() >= deadline)
                    {
                        why = "--max-seconds reached";
                    }
                    else if (parent is { } p && Libc.getppid() != p)
                    {
                        why = "parent went away";
                    }
                    else
                    {
                        continue;
                    }
                    Log.Write($"{why}, exiting");
                    RemovePerfFiles(pid);
                    Libc._exit(0);
                }
            })
            {
                Name = "cdac-watchdog",
                IsBackground = true,
            };
            thread.Start();
        }
    }
}
