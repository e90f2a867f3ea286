// --crash: an unhandled exception with an inner exception, thrown from known methods with known
// messages, after the manifest (which describes it) is written. The runtime then reports it on
// stderr and aborts; with DOTNET_DbgEnableMiniDump=1 it runs createdump on itself first.
// --crash-on-thread: the same exception, thrown on a named background thread while the main
// thread sleeps, so that the crashing thread is not the process's first one.

using System;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Runtime.ExceptionServices;
using System.Text.Json.Nodes;
using System.Threading;

namespace Cdac.Testbed
{
    public static class Crash
    {
        public const string OuterMessage = "cdac testbed: unhandled on purpose (--crash)";
        public const string InnerMessage = "cdac testbed: the inner exception of the crash";

        /// <summary>Describes what the crash will do: on the main thread, or on `thread`.</summary>
        internal static JsonObject Describe(CrashThread? thread)
        {
            var outer = typeof(Crash).GetMethod(nameof(CrashOuter))!;
            var inner = typeof(Crash).GetMethod(nameof(CrashInner))!;
            var start = typeof(Crash).GetMethod(nameof(CrashStart))!;
            var run = typeof(Program).GetMethod("Run", BindingFlags.NonPublic | BindingFlags.Static)!;
            var main = typeof(Program).GetMethod(nameof(Program.Main))!;
            var threadStart = typeof(CrashThread).GetMethod(nameof(CrashThread.Run), BindingFlags.NonPublic | BindingFlags.Instance)!;
            MethodBase[] chain = thread == null
                ? new MethodBase[] { outer, start, run, main }
                : new MethodBase[] { outer, start, threadStart };
            return new JsonObject
            {
                ["thread"] = thread == null ? "main" : "background",
                ["thread_name"] = thread?.Name,
                ["os_tid"] = thread?.OsTid ?? Environment.ProcessId,
                ["managed_id"] = thread?.ManagedId ?? Environment.CurrentManagedThreadId,
                ["exception_type"] = typeof(InvalidOperationException).FullName,
                ["message"] = OuterMessage,
                ["method"] = Facts.Name(outer),
                ["method_desc"] = Facts.MethodDesc(outer),
                ["inner"] = new JsonObject
                {
                    ["exception_type"] = typeof(ArgumentException).FullName,
                    ["message"] = InnerMessage,
                    ["method"] = Facts.Name(inner),
                    ["method_desc"] = Facts.MethodDesc(inner),
                    // Rethrown by ExceptionDispatchInfo here: its trace continues "from previous
                    // location" after CrashInner's frame.
                    ["rethrown_by"] = Facts.Name(typeof(Crash).GetMethod(nameof(CrashMiddle))!),
                },
                // Our frames when the outer exception is thrown (from CrashOuter's catch block),
                // innermost first, up to the thread's entry point.
                ["expected_chain"] = Facts.Strings(chain.Select(Facts.Name)),
            };
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashStart() => CrashOuter();

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashOuter()
        {
            try
            {
                CrashMiddle();
            }
            catch (ArgumentException e)
            {
                throw new InvalidOperationException(OuterMessage, e);
            }
        }

        /// <summary>Catches the inner exception and rethrows it through ExceptionDispatchInfo, as an
        /// awaited task does: its captured trace then has the frames from CrashInner, the runtime's
        /// "--- End of stack trace from previous location ---", and the frames from here on.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashMiddle()
        {
            try
            {
                CrashInner();
            }
            catch (ArgumentException e)
            {
                ExceptionDispatchInfo.Capture(e).Throw();
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashInner() => throw new ArgumentException(InnerMessage);
    }

    /// <summary>The background thread of --crash-on-thread: started before the manifest, it says
    /// who it is, then waits for Go to throw the crash.</summary>
    internal sealed class CrashThread
    {
        /// <summary>Longer than the kernel's 15-character thread names, so that a reader has to take
        /// it from the managed Thread object to show it whole.</summary>
        public const string ThreadName = "cdac-crashing-background-thread";

        private readonly ManualResetEventSlim _registered = new(false);
        private readonly ManualResetEventSlim _go = new(false);

        public string Name => ThreadName;
        public int OsTid { get; private set; }
        public int ManagedId { get; private set; }

        public static CrashThread Start()
        {
            var ct = new CrashThread();
            var thread = new Thread(ct.Run) { Name = ThreadName, IsBackground = true };
            thread.Start();
            if (!ct._registered.Wait(TimeSpan.FromSeconds(30)))
            {
                throw new InvalidOperationException("the crash thread did not start");
            }
            return ct;
        }

        public void Go() => _go.Set();

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal void Run()
        {
            OsTid = Libc.gettid();
            ManagedId = Environment.CurrentManagedThreadId;
            _registered.Set();
            _go.Wait();
            Crash.CrashStart();
        }
    }
}
