// Threads parked for good in known call chains, so that a reader of the process (or of a dump)
// can check the stacks it walks against what the manifest says: asleep, waiting on a monitor,
// blocked entering one, blocked in a P/Invoke read(2), spinning in managed code, and blocked
// inside a finally, a filter and a catch funclet. Every frame of ours is NoInlining (the
// finally owner is also NoOptimization: optimized code would clone the finally into the
// method body instead of calling its funclet), and every method name is unique.

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;
using System.Threading;

namespace Cdac.Testbed.Parked
{
    /// <summary>One parked thread: what it is meant to be doing, and what it recorded about itself.</summary>
    internal sealed class ParkedThread
    {
        private readonly ManualResetEventSlim _ready = new(false);

        public ParkedThread(string kind, string name, Type chainType, string[] chain, string[]? physical = null,
            string? funclet = null, string? blockedIn = null)
        {
            Kind = kind;
            Name = name;
            ExpectedChain = chain.Select(n => Find(chainType, n)).ToArray();
            PhysicalFrames = (physical ?? chain).Select(n => Find(chainType, n)).ToArray();
            FuncletKind = funclet;
            BlockedIn = blockedIn;
        }

        public string Kind { get; }
        public string Name { get; }

        /// <summary>The thread's logical call chain of our methods, innermost first, each method
        /// once: from the method that blocks (or the P/Invoke it is blocked in) up to the thread's
        /// start method. A funclet counts as its method, and what runs between a funclet and its
        /// method's own frame (exception dispatch, the thrower) is left out: the chain a frame
        /// pointer walk finds, since a funclet shares its parent frame's rbp.</summary>
        public MethodBase[] ExpectedChain { get; }

        /// <summary>Our frames that are physically on the stack, innermost first, in the order a
        /// native unwinder following unwind info meets them: a method whose funclet runs is there
        /// twice (the funclet, then the method's own frame); frames an exception dispatch has
        /// logically unwound but not yet popped are there too; a P/Invoke inlined into its caller
        /// is not. Runtime and framework frames in between are left out, and OSR can add a second
        /// frame for a looping method (the OSR frame sits on its tier-0 frame).</summary>
        public MethodBase[] PhysicalFrames { get; }

        /// <summary>"finally", "filter" or "catch" when the second frame of the chain is a funclet.</summary>
        public string? FuncletKind { get; }

        /// <summary>What the innermost frame of ours calls to block (below it: framework and native frames).</summary>
        public string? BlockedIn { get; }

        public Thread? Thread { get; set; }
        public int OsTid { get; private set; }
        public int ManagedId { get; private set; }

        /// <summary>Called by the thread's start method: who am I.</summary>
        public void Register()
        {
            OsTid = Libc.gettid();
            ManagedId = Environment.CurrentManagedThreadId;
        }

        /// <summary>Called by the thread right before it blocks.</summary>
        public void MarkReady() => _ready.Set();

        public bool WaitReady(TimeSpan timeout) => _ready.Wait(timeout);

        private static MethodBase Find(Type chainType, string name)
        {
            // "Type::Method" names a method of another type (the P/Invoke).
            int sep = name.IndexOf("::", StringComparison.Ordinal);
            Type t = sep < 0 ? chainType : typeof(ParkedThread).Assembly.GetType(name.Substring(0, sep), throwOnError: true)!;
            string method = sep < 0 ? name : name.Substring(sep + 2);
            return t.GetMethod(method, Facts.AnyDeclared)
                ?? throw new InvalidOperationException($"{t.FullName}::{method} not found");
        }

        /// <summary>Field `index` of /proc/self/task/TID/stat (after the command name), or null.</summary>
        private string? ProcStatField(int index)
        {
            string? stat = ReadProc("stat");
            if (stat == null)
            {
                return null;
            }
            string[] rest = stat.Substring(stat.LastIndexOf(')') + 2).Split(' ');
            return index < rest.Length ? rest[index] : null;
        }

        private string? ReadProc(string file)
        {
            try
            {
                return File.ReadAllText($"/proc/self/task/{OsTid}/{file}").Trim();
            }
            catch (IOException)
            {
                return null;
            }
            catch (UnauthorizedAccessException)
            {
                return null;
            }
        }

        public string? State => ProcStatField(0);

        public JsonObject Describe()
        {
            var o = new JsonObject
            {
                ["kind"] = Kind,
                ["name"] = Name,
                ["comm"] = ReadProc("comm"),
                ["os_tid"] = OsTid,
                ["managed_id"] = ManagedId,
                ["expected_chain"] = Facts.Strings(ExpectedChain.Select(Facts.Name)),
                ["chain_method_descs"] = Facts.Strings(ExpectedChain.Select(Facts.MethodDesc)),
                ["physical_frames"] = Facts.Strings(PhysicalFrames.Select(Facts.Name)),
                ["funclet"] = FuncletKind == null ? null : new JsonObject
                {
                    ["kind"] = FuncletKind,
                    ["method"] = Facts.Name(ExpectedChain[1]),
                },
                ["blocked_in"] = BlockedIn,
                // What the kernel said once the thread had parked.
                ["state"] = State,
                ["wchan"] = ReadProc("wchan"),
                ["syscall"] = ReadProc("syscall")?.Split(' ')[0],
            };
            return o;
        }
    }

    internal static class ParkedThreads
    {
        /// <summary>Starts every parked thread and waits until each has parked (its kernel state is
        /// S, or R for the spinner). Returns them in start order.</summary>
        public static List<ParkedThread> StartAll(out int[] pipeFds)
        {
            pipeFds = PipeReader.MakePipe();
            var threads = new List<ParkedThread>
            {
                new("sleep", "cdac-sleep", typeof(Sleeper),
                    new[] { nameof(Sleeper.SleepInner), nameof(Sleeper.SleepMiddle), nameof(Sleeper.SleepStart) },
                    blockedIn: "System.Threading.Thread::Sleep"),
                // Holds Monitors.Held while it waits on Monitors.Cond: monitor_enter blocks on Held.
                new("monitor_wait", "cdac-mon-wait", typeof(MonitorWaiter),
                    new[] { nameof(MonitorWaiter.WaitInner), nameof(MonitorWaiter.WaitMiddle), nameof(MonitorWaiter.WaitStart) },
                    blockedIn: "System.Threading.Monitor::Wait"),
                new("monitor_enter", "cdac-monitor-enter-blocked", typeof(MonitorEnterer),
                    new[] { nameof(MonitorEnterer.EnterInner), nameof(MonitorEnterer.EnterMiddle), nameof(MonitorEnterer.EnterStart) },
                    blockedIn: "System.Threading.Monitor::Enter"),
                // The P/Invoke is inlined into ReadInner (no IL stub): it names the innermost
                // managed frame (a runtime stack walk reports it through ReadInner's
                // InlinedCallFrame) but has no native frame of its own.
                new("pinvoke_read", "cdac-read", typeof(PipeReader),
                    new[] { "Cdac.Testbed.Libc::read", nameof(PipeReader.ReadInner), nameof(PipeReader.ReadMiddle), nameof(PipeReader.ReadStart) },
                    new[] { nameof(PipeReader.ReadInner), nameof(PipeReader.ReadMiddle), nameof(PipeReader.ReadStart) },
                    blockedIn: "libc read(2) on an empty pipe"),
                // Once its loop has gone through OSR, SpinInner has two frames: the OSR one on
                // top of the tier-0 one it replaced.
                new("spin", "cdac-spin", typeof(Spinner),
                    new[] { nameof(Spinner.SpinInner), nameof(Spinner.SpinMiddle), nameof(Spinner.SpinStart) },
                    blockedIn: null),
                new("finally", "cdac-finally", typeof(FinallyBlocker),
                    new[] { nameof(FinallyBlocker.FinallyWait), nameof(FinallyBlocker.FinallyOwner), nameof(FinallyBlocker.FinallyMiddle), nameof(FinallyBlocker.FinallyStart) },
                    new[] { nameof(FinallyBlocker.FinallyWait), nameof(FinallyBlocker.FinallyOwner), nameof(FinallyBlocker.FinallyOwner), nameof(FinallyBlocker.FinallyMiddle), nameof(FinallyBlocker.FinallyStart) },
                    funclet: "finally", blockedIn: "System.Threading.Thread::Sleep"),
                // The filter runs in the exception's first pass: nothing is unwound yet, so the
                // thrower and the filter's own method body are still below the filter funclet.
                new("filter", "cdac-filter", typeof(FilterBlocker),
                    new[] { nameof(FilterBlocker.FilterWait), nameof(FilterBlocker.FilterOwner), nameof(FilterBlocker.FilterMiddle), nameof(FilterBlocker.FilterStart) },
                    new[] { nameof(FilterBlocker.FilterWait), nameof(FilterBlocker.FilterOwner), nameof(FilterBlocker.FilterThrow), nameof(FilterBlocker.FilterOwner), nameof(FilterBlocker.FilterMiddle), nameof(FilterBlocker.FilterStart) },
                    funclet: "filter", blockedIn: "System.Threading.Thread::Sleep"),
                // The catch funclet runs in the second pass: CatchThrow is logically unwound, but
                // its frame is still on the stack below the funclet until the catch returns.
                new("catch", "cdac-catch", typeof(CatchBlocker),
                    new[] { nameof(CatchBlocker.CatchWait), nameof(CatchBlocker.CatchOwner), nameof(CatchBlocker.CatchMiddle), nameof(CatchBlocker.CatchStart) },
                    new[] { nameof(CatchBlocker.CatchWait), nameof(CatchBlocker.CatchOwner), nameof(CatchBlocker.CatchThrow), nameof(CatchBlocker.CatchOwner), nameof(CatchBlocker.CatchMiddle), nameof(CatchBlocker.CatchStart) },
                    funclet: "catch", blockedIn: "System.Threading.Thread::Sleep"),
            };
            foreach (ParkedThread pt in threads)
            {
                MethodInfo start = (MethodInfo)pt.ExpectedChain[^1];
                var thread = new Thread(start.CreateDelegate<ParameterizedThreadStart>())
                {
                    Name = pt.Name,
                    IsBackground = true,
                };
                pt.Thread = thread;
                thread.Start(pt);
                // In order: monitor_enter must find Monitors.Held already taken by monitor_wait.
                if (!pt.WaitReady(TimeSpan.FromSeconds(30)))
                {
                    throw new InvalidOperationException($"parked thread {pt.Name} did not get ready");
                }
            }
            // "Ready" is said just before blocking: wait until the kernel agrees.
            DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            foreach (ParkedThread pt in threads)
            {
                string want = pt.Kind == "spin" ? "R" : "S";
                while (pt.State != want && !(pt.Kind == "spin" && pt.State == "S") && DateTime.UtcNow < deadline)
                {
                    Thread.Sleep(10);
                }
                if (pt.Kind != "spin" && pt.State != "S")
                {
                    Log.Write($"parked thread {pt.Name} (tid {pt.OsTid}) is in state {pt.State}, not S");
                }
            }
            return threads;
        }
    }

    public static class Sleeper
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SleepStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            SleepMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void SleepMiddle(ParkedThread pt) => SleepInner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void SleepInner(ParkedThread pt)
        {
            pt.MarkReady();
            Thread.Sleep(Timeout.Infinite);
        }
    }

    /// <summary>The monitors of the two monitor threads.</summary>
    internal static class Monitors
    {
        public static readonly object Held = new();
        public static readonly object Cond = new();
    }

    public static class MonitorWaiter
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void WaitStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            WaitMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void WaitMiddle(ParkedThread pt) => WaitInner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void WaitInner(ParkedThread pt)
        {
            lock (Monitors.Held)
            {
                lock (Monitors.Cond)
                {
                    pt.MarkReady();
                    // Releases Cond only: Held stays taken for good.
                    while (true)
                    {
                        Monitor.Wait(Monitors.Cond);
                    }
                }
            }
        }
    }

    public static class MonitorEnterer
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void EnterStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            EnterMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void EnterMiddle(ParkedThread pt) => EnterInner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void EnterInner(ParkedThread pt)
        {
            pt.MarkReady();
            lock (Monitors.Held)
            {
                throw new InvalidOperationException("cdac-monitor-enter-blocked took a monitor that is never released");
            }
        }
    }

    public static unsafe class PipeReader
    {
        private static int s_readFd = -1;

        /// <summary>A pipe nobody ever writes to: [read end, write end], both kept open.</summary>
        internal static int[] MakePipe()
        {
            int* fds = stackalloc int[2];
            if (Libc.pipe(fds) != 0)
            {
                throw new InvalidOperationException("pipe(2) failed");
            }
            s_readFd = fds[0];
            return new[] { fds[0], fds[1] };
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void ReadStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            ReadMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void ReadMiddle(ParkedThread pt) => ReadInner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static nint ReadInner(ParkedThread pt)
        {
            byte buffer;
            pt.MarkReady();
            return Libc.read(s_readFd, &buffer, 1);
        }
    }

    public static class Spinner
    {
        /// <summary>Never set (volatile: the loop reads it every time): the spinner spins for good.</summary>
        private static volatile bool s_stop;

        /// <summary>Lets the spinner return; nothing calls it.</summary>
        internal static void Release() => s_stop = true;

        /// <summary>Read by nobody; keeps the loop's work from being optimized away.</summary>
        internal static long Sink;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void SpinStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            LowerPriority(pt.OsTid);
            SpinMiddle(pt);
        }

        /// <summary>SCHED_IDLE (or nice 19): the spinner only gets a core nobody else wants, so it
        /// costs the machine next to nothing while staying in managed code.</summary>
        private static unsafe void LowerPriority(int tid)
        {
            int param = 0;
            if (Libc.sched_setscheduler(tid, Libc.SchedIdle, &param) != 0)
            {
                Libc.setpriority(0, tid, 19);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void SpinMiddle(ParkedThread pt) => Sink = SpinInner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static long SpinInner(ParkedThread pt)
        {
            pt.MarkReady();
            long x = 1;
            while (!s_stop)
            {
                x = unchecked(x * 6364136223846793005L + 1442695040888963407L);
            }
            return x;
        }
    }

    public static class FinallyBlocker
    {
        internal static int Entered;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void FinallyStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            FinallyMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void FinallyMiddle(ParkedThread pt) => FinallyOwner(pt);

        /// <summary>No exception: the method body calls its finally funclet on the way out.</summary>
        [MethodImpl(MethodImplOptions.NoInlining | MethodImplOptions.NoOptimization)]
        internal static void FinallyOwner(ParkedThread pt)
        {
            try
            {
                Entered++;
            }
            finally
            {
                FinallyWait(pt);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void FinallyWait(ParkedThread pt)
        {
            pt.MarkReady();
            Thread.Sleep(Timeout.Infinite);
        }
    }

    public static class FilterBlocker
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void FilterStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            FilterMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void FilterMiddle(ParkedThread pt) => FilterOwner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static int FilterOwner(ParkedThread pt)
        {
            try
            {
                FilterThrow();
                return 0;
            }
            catch (InvalidOperationException e) when (FilterWait(pt, e))
            {
                return 1;
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void FilterThrow() =>
            throw new InvalidOperationException("cdac-filter: thrown for a filter that never returns");

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static bool FilterWait(ParkedThread pt, Exception e)
        {
            pt.MarkReady();
            Thread.Sleep(Timeout.Infinite);
            return e != null;
        }
    }

    public static class CatchBlocker
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CatchStart(object? state)
        {
            var pt = (ParkedThread)state!;
            pt.Register();
            CatchMiddle(pt);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void CatchMiddle(ParkedThread pt) => CatchOwner(pt);

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void CatchOwner(ParkedThread pt)
        {
            try
            {
                CatchThrow();
            }
            catch (InvalidOperationException e)
            {
                CatchWait(pt, e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void CatchThrow() =>
            throw new InvalidOperationException("cdac-catch: caught, then parked in the catch block");

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void CatchWait(ParkedThread pt, Exception e)
        {
            pt.MarkReady();
            Thread.Sleep(Timeout.Infinite);
            GC.KeepAlive(e);
        }
    }
}
