// Async chains parked for good, one per thing an on-call engineer finds async work waiting
// for: a TaskCompletionSource nobody completes (AsyncChains' suspended chain), an hour-long
// Task.Delay (reached at the inner method's second await, so its state is 1), and a read of
// a pipe nobody writes to. The manifest's "async" section lists each chain, outermost first,
// with every method's await state and the text of the await it is suspended at, so that the
// tests find the await's line by searching this source.
//
// One chain is running, not parked: a thread named cdac-async-resumer completes the
// TaskCompletionSource RunningInner awaits, RunningInner's MoveNext resumes on that thread
// (the continuation runs inline) and blocks there for good, with RunningOuter awaiting it.
// The manifest's "running" entry names the thread and the two methods, so that
// `cdac async --stacks` can be checked to tie the thread's MoveNext frame to its box and
// to list RunningOuter as its async caller.

using System;
using System.IO;
using System.IO.Pipes;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Text.Json.Nodes;
using System.Threading.Tasks;

namespace Cdac.Testbed.Async
{
    public static class AsyncParked
    {
        /// <summary>The parked chains' outermost Tasks, kept alive.</summary>
        private static Task<int>? s_delay;
        private static Task<int>? s_pipe;
        private static AnonymousPipeServerStream? s_server;
        private static AnonymousPipeClientStream? s_client;
        /// <summary>Set by DelayInner just before its second await.</summary>
        private static readonly ManualResetEventSlim s_atDelay = new();
        /// <summary>Completed by the resumer thread: RunningInner resumes inline on it.</summary>
        private static readonly TaskCompletionSource<int> s_resume = new();
        private static readonly ManualResetEventSlim s_running = new();
        private static readonly ManualResetEventSlim s_never = new();
        private static Task<int>? s_runningChain;
        private static Thread? s_resumer;
        private static int s_resumerOsTid;
        private static int s_resumerManagedId;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> DelayOuter()
        {
            int v = await DelayInner().ConfigureAwait(false);
            return v + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> DelayInner()
        {
            await Task.Yield();
            s_atDelay.Set();
            await Task.Delay(TimeSpan.FromHours(1)).ConfigureAwait(false);
            return 7;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> PipeOuter(Stream pipe)
        {
            int n = await PipeInner(pipe).ConfigureAwait(false);
            return n + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> PipeInner(Stream pipe)
        {
            byte[] buffer = new byte[16];
            return await pipe.ReadAsync(buffer, 0, buffer.Length).ConfigureAwait(false);
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RunningOuter()
        {
            int v = await RunningInner().ConfigureAwait(false);
            return v + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RunningInner()
        {
            int v = await s_resume.Task.ConfigureAwait(false);
            BlockForGood();
            return v;
        }

        /// <summary>Runs inside RunningInner's resumed MoveNext, on the resumer thread.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void BlockForGood()
        {
            s_resumerOsTid = Libc.gettid();
            s_resumerManagedId = Environment.CurrentManagedThreadId;
            s_running.Set();
            s_never.Wait();
        }

        /// <summary>Starts the Delay, pipe and running chains and waits until each is where
        /// the manifest says.</summary>
        internal static void Run()
        {
            s_runningChain = RunningOuter();
            s_resumer = new Thread(() => s_resume.SetResult(41)) { IsBackground = true, Name = "cdac-async-resumer" };
            s_resumer.Start();
            if (!s_running.Wait(TimeSpan.FromSeconds(10)))
            {
                throw new InvalidOperationException("RunningInner did not resume on the resumer thread");
            }
            s_server = new AnonymousPipeServerStream(PipeDirection.In);
            // The write end stays open and silent, so the read never ends.
            s_client = new AnonymousPipeClientStream(PipeDirection.Out, s_server.ClientSafePipeHandle);
            s_delay = DelayOuter();
            s_pipe = PipeOuter(s_server);
            // The testbed says it is ready seconds later, long after the await that follows.
            if (!s_atDelay.Wait(TimeSpan.FromSeconds(10)))
            {
                throw new InvalidOperationException("DelayInner did not reach its second await");
            }
        }

        private static JsonObject Frame(string method, int state, string awaitText)
        {
            var mi = typeof(AsyncParked).GetMethod(method) ?? typeof(AsyncChains).GetMethod(method)!;
            JsonObject o = Facts.Method(mi);
            o["state_machine_type"] = mi.GetCustomAttribute<AsyncStateMachineAttribute>()?.StateMachineType.FullName;
            o["state"] = state;
            o["await"] = awaitText;
            return o;
        }

        private static JsonObject Chain(string name, string waitsFor, params JsonObject[] frames)
        {
            var list = new JsonArray();
            foreach (JsonObject f in frames)
            {
                list.Add(f);
            }
            return new JsonObject { ["name"] = name, ["waits_for"] = waitsFor, ["frames"] = list };
        }

        /// <summary>Each parked chain, outermost method first, and the running one.</summary>
        internal static JsonObject Describe() => new JsonObject
        {
            ["source_file"] = "AsyncParked.cs",
            ["running"] = new JsonObject
            {
                ["thread_name"] = s_resumer?.Name,
                ["os_tid"] = s_resumerOsTid,
                ["managed_id"] = s_resumerManagedId,
                ["blocked_in"] = Facts.Method(typeof(AsyncParked).GetMethod(nameof(BlockForGood))!),
                ["frames"] = new JsonArray(
                    Frame(nameof(RunningOuter), 0, "await RunningInner()"),
                    Frame(nameof(RunningInner), -1, "")),
            },
            ["chains"] = new JsonArray(
                Chain("task_completion_source", "System.Threading.Tasks.Task`1[System.Int32]",
                    Frame(nameof(AsyncChains.SuspendedOuter), 0, "await SuspendedMiddle(x)"),
                    Frame(nameof(AsyncChains.SuspendedMiddle), 0, "await SuspendedInner(x)"),
                    Frame(nameof(AsyncChains.SuspendedInner), 0, "await s_never.Task")),
                Chain("delay", "System.Threading.Tasks.Task+DelayPromise",
                    Frame(nameof(DelayOuter), 0, "await DelayInner()"),
                    Frame(nameof(DelayInner), 1, "await Task.Delay(TimeSpan.FromHours(1))")),
                Chain("pipe_read", "System.Net.Sockets.Socket+AwaitableSocketAsyncEventArgs",
                    Frame(nameof(PipeOuter), 0, "await PipeInner(pipe)"),
                    Frame(nameof(PipeInner), 0, "await pipe.ReadAsync(buffer, 0, buffer.Length)"))),
        };
    }
}
