// Async chains of runtime-async methods (.NET 11), parked for good. The runtime, not a
// compiler-made state machine, suspends these: each suspended method is a Continuation
// object on the heap, linked to its caller's, with the code address it resumes at; the
// Task the outermost method's caller holds is an AsyncHelpers+RuntimeAsyncTask.
//
// - RaOuter -> RaMiddle -> RaInner, RaInner at its second await (index 1) on a
//   TaskCompletionSource nobody completes.
// - RaDelay on an hour-long Task.Delay.
// - RaLeaf on the same TaskCompletionSource, awaited by a classic (state machine) async
//   method of the testbed (AsyncParked.ClassicOverRuntimeAsync): a mixed chain.
//
// The testbed's manifest lists them (AsyncParked.DescribeRuntimeAsync), with the text of
// each await so that the tests find its line in this file.

using System;
using System.Runtime.CompilerServices;
using System.Threading;
using System.Threading.Tasks;

namespace Cdac.Testbed.RuntimeAsync
{
    public static class RuntimeAsyncParked
    {
        /// <summary>Never completed.</summary>
        public static readonly TaskCompletionSource<int> Gate = new(TaskCreationOptions.RunContinuationsAsynchronously);
        /// <summary>Set by RaInner just before its second await.</summary>
        public static readonly ManualResetEventSlim AtGate = new();
        /// <summary>Set by RaDelay just before its await.</summary>
        public static readonly ManualResetEventSlim AtDelay = new();
        /// <summary>Kept alive.</summary>
        public static Task? Chain, Delay;
        public static int Sink;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task RaOuter()
        {
            int z = await RaMiddle(5);
            Sink = z;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RaMiddle(int n)
        {
            int y = await RaInner(n + 1);
            return y * 2;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RaInner(int n)
        {
            await Task.Yield();
            AtGate.Set();
            int x = await Gate.Task;
            return x + n;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RaDelay()
        {
            await Task.Yield();
            AtDelay.Set();
            await Task.Delay(TimeSpan.FromHours(1));
            return 3;
        }

        /// <summary>Awaited by a classic async method.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> RaLeaf()
        {
            int v = await Gate.Task;
            return v - 1;
        }

        /// <summary>Starts the runtime-async chains and waits until each is at the await the
        /// manifest names.</summary>
        public static void Run()
        {
            Chain = RaOuter();
            Delay = RaDelay();
            if (!AtGate.Wait(TimeSpan.FromSeconds(10)) || !AtDelay.Wait(TimeSpan.FromSeconds(10)))
            {
                throw new InvalidOperationException("a runtime-async chain did not reach its await");
            }
        }
    }
}
