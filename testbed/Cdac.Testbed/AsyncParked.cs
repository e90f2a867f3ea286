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
//
// On the net11 variant (CDAC_RUNTIME_ASYNC) the chains of runtime-async methods of
// Cdac.Testbed.RuntimeAsync are parked too, with one mixed chain: ClassicOverRuntimeAsync,
// a state machine of this assembly, awaiting RaLeaf, a runtime-async method. The
// manifest's "runtime_async" entry lists them (null on other variants).

using System;
using System.IO;
using System.IO.Pipes;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Text.Json.Nodes;
using System.Threading.Tasks;
#if CDAC_RUNTIME_ASYNC
using Cdac.Testbed.RuntimeAsync;
#endif

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

#if CDAC_RUNTIME_ASYNC
        private static Task<int>? s_mixed;

        /// <summary>A state machine awaiting a runtime-async method.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> ClassicOverRuntimeAsync()
        {
            int v = await RuntimeAsyncParked.RaLeaf().ConfigureAwait(false);
            return v + 1;
        }

        private static JsonObject RaFrame(string method, int state, string awaitText)
        {
            JsonObject o = Facts.Method(typeof(RuntimeAsyncParked).GetMethod(method)!);
            o["kind"] = "runtime_async";
            o["file"] = "Cdac.Testbed.RuntimeAsync/RuntimeAsyncParked.cs";
            o["state"] = state;
            o["await"] = awaitText;
            return o;
        }

        private static JsonObject DescribeRuntimeAsync()
        {
            JsonObject mixedOuter = Frame(nameof(ClassicOverRuntimeAsync), 0, "await RuntimeAsyncParked.RaLeaf()");
            mixedOuter["kind"] = "state_machine";
            mixedOuter["file"] = "Cdac.Testbed/AsyncParked.cs";
            return new JsonObject
            {
                ["chains"] = new JsonArray(
                    Chain("task_completion_source", "System.Threading.Tasks.Task`1[System.Int32]",
                        RaFrame(nameof(RuntimeAsyncParked.RaOuter), 0, "await RaMiddle(5)"),
                        RaFrame(nameof(RuntimeAsyncParked.RaMiddle), 0, "await RaInner(n + 1)"),
                        RaFrame(nameof(RuntimeAsyncParked.RaInner), 1, "int x = await Gate.Task")),
                    Chain("delay", "System.Threading.Tasks.Task+DelayPromise",
                        RaFrame(nameof(RuntimeAsyncParked.RaDelay), 1, "await Task.Delay(TimeSpan.FromHours(1))")),
                    Chain("mixed", "System.Threading.Tasks.Task`1[System.Int32]",
                        mixedOuter,
                        RaFrame(nameof(RuntimeAsyncParked.RaLeaf), 0, "int v = await Gate.Task"))),
            };
        }
#endif

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
#if CDAC_RUNTIME_ASYNC
            RuntimeAsyncParked.Run();
            s_mixed = ClassicOverRuntimeAsync();
#endif
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
#if CDAC_RUNTIME_ASYNC
            ["runtime_async"] = DescribeRuntimeAsync(),
#else
            ["runtime_async"] = null,
#endif
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
