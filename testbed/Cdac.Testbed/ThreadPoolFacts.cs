// A thread pool that cannot make progress (--starve-threadpool): its worker limit is set to
// its minimum, every worker is blocked in a work item that waits forever, and known work
// stays queued behind them: QueueUserWorkItem callbacks and Tasks in the global queue, and
// callbacks in one blocked worker's own (local) queue. The manifest's "threadpool" section
// lists the limits, the blocked workers and each queued item's method.

using System;
using System.Collections.Generic;
using System.Reflection;
using System.Text.Json.Nodes;
using System.Threading;
using System.Threading.Tasks;

namespace Cdac.Testbed.Pool
{
    public static class ThreadPoolFacts
    {
        private const int GlobalCallbacks = 3;
        private const int GlobalTasks = 2;
        private const int LocalCallbacks = 2;

        private static readonly ManualResetEventSlim s_never = new();
        private static int s_blockedWorkers;
        private static int s_parkedWorkers;
        private static int s_callbacksRan;
        private static int s_workers;

        public static void QueuedCallback(object? state) => Ran($"queued callback {state}");

        public static void QueuedTask() => Ran("queued task");

        public static void LocalCallback(object? state) => Ran($"local callback {state}");

        private static void Ran(string what)
        {
            Interlocked.Increment(ref s_callbacksRan);
            Console.WriteLine($"{what} ran");
        }

        /// <summary>Runs on every worker: the first one to start waits until every other
        /// worker is parked, so that none is left to steal, then queues work to its own local
        /// queue; then each waits forever.</summary>
        public static void Blocker(object? state)
        {
            if (Interlocked.Increment(ref s_blockedWorkers) == 1)
            {
                DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(20);
                while (Volatile.Read(ref s_parkedWorkers) < s_workers - 1 && DateTime.UtcNow < deadline)
                {
                    Thread.Sleep(10);
                }
                for (int i = 0; i < LocalCallbacks; i++)
                {
                    ThreadPool.UnsafeQueueUserWorkItem(LocalCallback, (object?)i, preferLocal: true);
                }
            }
            Interlocked.Increment(ref s_parkedWorkers);
            s_never.Wait();
        }

        internal static void Starve()
        {
            ThreadPool.GetMinThreads(out int minWorkers, out int minIo);
            ThreadPool.GetMaxThreads(out _, out int maxIo);
            if (!ThreadPool.SetMaxThreads(minWorkers, maxIo))
            {
                throw new InvalidOperationException($"cannot limit the thread pool to {minWorkers} workers");
            }
            s_workers = minWorkers;
            for (int i = 0; i < minWorkers; i++)
            {
                ThreadPool.QueueUserWorkItem(Blocker, i);
            }
            DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(20);
            while (Volatile.Read(ref s_parkedWorkers) < minWorkers && DateTime.UtcNow < deadline)
            {
                Thread.Sleep(10);
            }
            if (Volatile.Read(ref s_parkedWorkers) < minWorkers)
            {
                throw new InvalidOperationException($"only {s_parkedWorkers} of {minWorkers} workers blocked");
            }
            for (int i = 0; i < GlobalCallbacks; i++)
            {
                ThreadPool.QueueUserWorkItem(QueuedCallback, i);
            }
            for (int i = 0; i < GlobalTasks; i++)
            {
                Task.Run(QueuedTask);
            }
            // The workers' states settle (a worker that found no work parks).
            Thread.Sleep(200);
            // A queued item that ran would make the manifest wrong: say so instead.
            if (Volatile.Read(ref s_callbacksRan) != 0)
            {
                throw new InvalidOperationException($"{s_callbacksRan} queued work items ran: the pool is not starved");
            }
        }

        private static string Name(string method) => $"{typeof(ThreadPoolFacts).FullName}.{method}";

        internal static JsonObject Describe()
        {
            ThreadPool.GetMinThreads(out int minWorkers, out _);
            ThreadPool.GetMaxThreads(out int maxWorkers, out _);
            return new JsonObject
            {
                ["min_workers"] = minWorkers,
                ["max_workers"] = maxWorkers,
                ["blocked_workers"] = s_workers,
                ["thread_count"] = ThreadPool.ThreadCount,
                ["pending_work_items"] = ThreadPool.PendingWorkItemCount,
                ["blocker"] = Name(nameof(Blocker)),
                ["global"] = new JsonArray(
                    new JsonObject { ["kind"] = "work", ["method"] = Name(nameof(QueuedCallback)), ["count"] = GlobalCallbacks },
                    new JsonObject { ["kind"] = "task", ["method"] = Name(nameof(QueuedTask)), ["count"] = GlobalTasks }),
                ["local"] = new JsonArray(
                    new JsonObject { ["kind"] = "work", ["method"] = Name(nameof(LocalCallback)), ["count"] = LocalCallbacks }),
            };
        }
    }
}
