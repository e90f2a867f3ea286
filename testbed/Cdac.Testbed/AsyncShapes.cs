// Async methods: a chain of three that ran to completion, and a chain of three suspended for good
// on a Task that never completes, so its state machines stay alive on the heap (boxed, each one
// the continuation of the Task it awaits).

using System;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;
using System.Threading.Tasks;

namespace Cdac.Testbed.Async
{
    public static class AsyncChains
    {
        private static readonly TaskCompletionSource<int> s_never = new(TaskCreationOptions.RunContinuationsAsynchronously);

        /// <summary>The suspended chain's outermost Task, kept alive.</summary>
        internal static Task<int>? Suspended;

        /// <summary>The completed chain's Task (and result).</summary>
        internal static Task<int>? Completed;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> CompletedOuter(int x)
        {
            int v = await CompletedMiddle(x).ConfigureAwait(false);
            return v + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> CompletedMiddle(int x)
        {
            int v = await CompletedInner(x).ConfigureAwait(false);
            return v * 2;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> CompletedInner(int x)
        {
            // Really suspends once (continues on the thread pool).
            await Task.Yield();
            return x + 40;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> SuspendedOuter(int x)
        {
            int v = await SuspendedMiddle(x).ConfigureAwait(false);
            return v + 1;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> SuspendedMiddle(int x)
        {
            int v = await SuspendedInner(x).ConfigureAwait(false);
            return v * 2;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static async Task<int> SuspendedInner(int x)
        {
            int v = await s_never.Task.ConfigureAwait(false);
            return v + x;
        }

        internal static void Run()
        {
            Completed = CompletedOuter(1);
            if (Completed.GetAwaiter().GetResult() != 83)
            {
                throw new InvalidOperationException("the completed async chain returned the wrong value");
            }
            Suspended = SuspendedOuter(2);
        }

        private static JsonObject Describe(string name, string state, Task task)
        {
            MethodInfo mi = typeof(AsyncChains).GetMethod(name)!;
            JsonObject o = Facts.Method(mi);
            Type? sm = mi.GetCustomAttribute<AsyncStateMachineAttribute>()?.StateMachineType;
            MethodInfo? moveNext = sm?.GetMethod("MoveNext", Facts.AnyDeclared);
            o["state"] = state;
            o["task_status"] = task.Status.ToString();
            o["state_machine_type"] = sm?.FullName;
            o["state_machine_is_value_type"] = sm?.IsValueType;
            o["move_next"] = moveNext != null ? Facts.Name(moveNext) : null;
            o["move_next_method_desc"] = moveNext != null ? Facts.MethodDesc(moveNext) : null;
            return o;
        }

        /// <summary>Each async method: its stub, its state machine and MoveNext, and whether its
        /// chain completed or is suspended (the suspended ones awaiting innermost-first:
        /// SuspendedInner awaits the never-completing Task, SuspendedMiddle awaits it, ...).</summary>
        internal static JsonArray DescribeAll()
        {
            var result = new JsonArray();
            foreach (string name in new[] { nameof(CompletedOuter), nameof(CompletedMiddle), nameof(CompletedInner) })
            {
                result.Add(Describe(name, "completed", Completed!));
            }
            foreach (string name in new[] { nameof(SuspendedInner), nameof(SuspendedMiddle), nameof(SuspendedOuter) })
            {
                result.Add(Describe(name, "suspended", Suspended!));
            }
            return result;
        }
    }
}
