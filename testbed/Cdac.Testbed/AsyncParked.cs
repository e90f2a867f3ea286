// Async chains parked for good, one per thing an on-call engineer finds async work waiting
// for: a TaskCompletionSource nobody completes (AsyncChains' suspended chain), an hour-long
// Task.Delay (reached at the inner method's second await, so its state is 1), and a read of
// a pipe nobody writes to. The manifest's "async" section lists each chain, outermost first,
// with every method's await state and the text of the await it is suspended at, so that the
// tests find the await's line by searching this source.

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

        /// <summary>Starts the Delay and pipe chains and waits until both are suspended.</summary>
        internal static void Run()
        {
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

        /// <summary>Each parked chain, outermost method first.</summary>
        internal static JsonObject Describe() => new JsonObject
        {
            ["source_file"] = "AsyncParked.cs",
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
