// --crash: an unhandled exception with an inner exception, thrown from known methods with known
// messages, after the manifest (which describes it) is written. The runtime then reports it on
// stderr and aborts; with DOTNET_DbgEnableMiniDump=1 it runs createdump on itself first.

using System;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Cdac.Testbed
{
    public static class Crash
    {
        public const string OuterMessage = "cdac testbed: unhandled on purpose (--crash)";
        public const string InnerMessage = "cdac testbed: the inner exception of the crash";

        /// <summary>Describes what Throw will do.</summary>
        internal static JsonObject Describe()
        {
            var outer = typeof(Crash).GetMethod(nameof(CrashOuter))!;
            var inner = typeof(Crash).GetMethod(nameof(CrashInner))!;
            var start = typeof(Crash).GetMethod(nameof(CrashStart))!;
            var run = typeof(Program).GetMethod("Run", BindingFlags.NonPublic | BindingFlags.Static)!;
            var main = typeof(Program).GetMethod(nameof(Program.Main))!;
            return new JsonObject
            {
                ["thread"] = "main",
                ["os_tid"] = Environment.ProcessId,
                ["managed_id"] = Environment.CurrentManagedThreadId,
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
                },
                // Our frames when the outer exception is thrown (from CrashOuter's catch block),
                // innermost first, up to the main thread's entry point.
                ["expected_chain"] = Facts.Strings(new[] { outer, start, run, main }.Select(Facts.Name)),
            };
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashStart() => CrashOuter();

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashOuter()
        {
            try
            {
                CrashInner();
            }
            catch (ArgumentException e)
            {
                throw new InvalidOperationException(OuterMessage, e);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void CrashInner() => throw new ArgumentException(InnerMessage);
    }
}
