// The NativeAOT testbed. `park MANIFEST`: parks threads in known call chains (one inside a catch
// funclet with its exception in flight, one holding a monitor another waits for, one in a
// generic instantiation), allocates a known number of Widgets, writes MANIFEST (each parked
// thread's OS id, managed id, name and the runtime's own Environment.StackTrace text, the GC's
// figures) and prints "ready". `crash MANIFEST`: a named thread dies of an unhandled
// InvalidOperationException after MANIFEST says which thread, what and from where.

using System;
using System.Collections.Generic;
using System.IO;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text;
using System.Threading;

namespace Cdac.TestbedAot
{
    public static class Program
    {
        public static int Main(string[] args)
        {
            if (args.Length != 2 || (args[0] != "park" && args[0] != "crash"))
            {
                Console.Error.WriteLine("usage: Cdac.Testbed.Aot park|crash MANIFEST");
                return 2;
            }
            if (args[0] == "crash")
            {
                Crasher.Start(args[1]);
                return 1; // not reached: the crash ends the process
            }
            Parking.ParkAll(args[1]);
            WaitForever();
            return 0;
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void WaitForever() => Thread.Sleep(Timeout.Infinite);
    }

    /// <summary>An object type the testbed allocates a known number of.</summary>
    public sealed class Widget
    {
        public long Serial;
        public string Label = "widget";
        public Widget(long serial) { Serial = serial; }
    }

    public sealed class Order
    {
        public int Id;
        public string Customer;
        public Order(int id, string customer) { Id = id; Customer = customer; }
    }

    internal static class Native
    {
        [DllImport("libc", EntryPoint = "gettid")]
        internal static extern int GetTid();
    }

    /// <summary>What one parked thread reports about itself before it parks.</summary>
    internal sealed class ParkedThread
    {
        public string Name = "";
        public int OsTid;
        public int ManagedId;
        public string StackTrace = "";
        public string? ExceptionType;
        public string? ExceptionMessage;
    }

    public static class Parking
    {
        public const int WidgetCount = 4321;
        static readonly List<ParkedThread> s_parked = new();
        static readonly CountdownEvent s_ready = new(4);
        internal static readonly object Gate = new();
        static Widget[]? s_widgets;

        internal static void ParkAll(string manifest)
        {
            s_widgets = new Widget[WidgetCount];
            for (int i = 0; i < WidgetCount; i++)
                s_widgets[i] = new Widget(i);

            Start("aot-orders", () => Orders.Checkout(42));
            Start("aot-funclet", Funclets.Run);
            Start("aot-generic", () => Shelf<Widget>.Stock<int>(7, s_widgets[0]));
            Start("aot-lock-holder", Locks.Hold);
            s_ready.Wait();
            // The waiter blocks on the monitor the holder keeps: it cannot report a trace.
            var waiter = new Thread(Locks.Wait) { Name = "aot-lock-waiter", IsBackground = true };
            waiter.Start();
            Thread.Sleep(200);

            GC.Collect();
            GC.WaitForPendingFinalizers();
            GC.Collect();
            WriteManifest(manifest);
            Console.WriteLine("ready");
            Console.Out.Flush();
        }

        static void Start(string name, ThreadStart body)
        {
            var t = new Thread(body) { Name = name, IsBackground = true };
            t.Start();
        }

        /// <summary>Records the calling thread (its trace from here) and never returns.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        internal static void Park(Exception? inFlight = null)
        {
            var me = new ParkedThread
            {
                Name = Thread.CurrentThread.Name ?? "",
                OsTid = Native.GetTid(),
                ManagedId = Environment.CurrentManagedThreadId,
                StackTrace = Environment.StackTrace,
                ExceptionType = inFlight?.GetType().FullName,
                ExceptionMessage = inFlight?.Message,
            };
            lock (s_parked) s_parked.Add(me);
            s_ready.Signal();
            Thread.Sleep(Timeout.Infinite);
        }

        static void WriteManifest(string path)
        {
            var info = GC.GetGCMemoryInfo();
            var json = new StringBuilder();
            json.Append("{\n");
            Field(json, "pid", Environment.ProcessId);
            Field(json, "runtime_version", Environment.Version.ToString());
            Field(json, "framework", RuntimeInformation.FrameworkDescription);
            Field(json, "main_os_tid", Environment.ProcessId);
            Field(json, "widget_type", typeof(Widget).FullName!);
            Field(json, "widget_count", WidgetCount);
            Field(json, "total_allocated_bytes", GC.GetTotalAllocatedBytes(true));
            Field(json, "heap_size_bytes", info.HeapSizeBytes);
            Field(json, "fragmented_bytes", info.FragmentedBytes);
            Field(json, "server_gc", System.Runtime.GCSettings.IsServerGC);
            // Each generation's size and free space after the last (full, compacting) GC:
            // gen2, LOH and POH do not change until the next one (new objects go to gen0).
            var generations = info.GenerationInfo;
            json.Append("  \"generations_after_gc\": [");
            for (int g = 0; g < generations.Length; g++)
            {
                json.Append(g == 0 ? "" : ", ");
                json.Append("{\"size\": ").Append(generations[g].SizeAfterBytes);
                json.Append(", \"fragmentation\": ").Append(generations[g].FragmentationAfterBytes).Append('}');
            }
            json.Append("],\n");
            json.Append("  \"threads\": [\n");
            lock (s_parked)
            {
                for (int i = 0; i < s_parked.Count; i++)
                {
                    var t = s_parked[i];
                    json.Append("    {");
                    json.Append("\"name\": ").Append(Quote(t.Name));
                    json.Append(", \"os_tid\": ").Append(t.OsTid);
                    json.Append(", \"managed_id\": ").Append(t.ManagedId);
                    json.Append(", \"exception_type\": ").Append(t.ExceptionType == null ? "null" : Quote(t.ExceptionType));
                    json.Append(", \"exception_message\": ").Append(t.ExceptionMessage == null ? "null" : Quote(t.ExceptionMessage));
                    json.Append(", \"stack_trace\": ").Append(Quote(t.StackTrace));
                    json.Append(i + 1 < s_parked.Count ? "},\n" : "}\n");
                }
            }
            json.Append("  ]\n}\n");
            File.WriteAllText(path + ".tmp", json.ToString());
            File.Move(path + ".tmp", path, true);
        }

        internal static void Field(StringBuilder json, string name, object value)
        {
            json.Append("  ").Append(Quote(name)).Append(": ");
            json.Append(value switch
            {
                string s => Quote(s),
                bool b => b ? "true" : "false",
                _ => Convert.ToString(value, System.Globalization.CultureInfo.InvariantCulture),
            });
            json.Append(",\n");
        }

        internal static string Quote(string s)
        {
            var q = new StringBuilder("\"");
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': q.Append("\\\""); break;
                    case '\\': q.Append("\\\\"); break;
                    case '\n': q.Append("\\n"); break;
                    case '\r': q.Append("\\r"); break;
                    case '\t': q.Append("\\t"); break;
                    default:
                        if (c < ' ') q.Append("\\u").Append(((int)c).ToString("x4"));
                        else q.Append(c);
                        break;
                }
            }
            return q.Append('"').ToString();
        }
    }

    public static class Orders
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Checkout(int orderId) => Validate("cart", new Order(orderId, "contoso"));

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Validate(string stage, Order order)
        {
            if (order.Id > 0 && stage.Length > 0)
                Parking.Park();
        }
    }

    public static class Funclets
    {
        public const string Message = "cdac aot: caught and parked in the handler";

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Run()
        {
            try
            {
                Throw();
            }
            catch (InvalidOperationException ex)
            {
                // Parked inside the catch funclet: the exception is still in flight.
                Parking.Park(ex);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Throw() => throw new InvalidOperationException(Message);
    }

    public static class Shelf<T> where T : class
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Stock<TCount>(TCount count, T item)
        {
            if (item != null && count != null)
                Parking.Park();
        }
    }

    public static class Locks
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Hold()
        {
            lock (Parking.Gate)
                Parking.Park();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Wait()
        {
            lock (Parking.Gate)
                Console.WriteLine("the lock was released");
        }
    }

    public static class Crasher
    {
        public const string Message = "cdac aot: unhandled on purpose (order 42)";

        public static void Start(string manifest)
        {
            var t = new Thread(() => Run(manifest)) { Name = "aot-crasher" };
            t.Start();
            t.Join();
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Run(string manifest) => Fail(42, manifest);

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static void Fail(int orderId, string manifest)
        {
            var json = new StringBuilder("{\n");
            Parking.Field(json, "pid", Environment.ProcessId);
            Parking.Field(json, "runtime_version", Environment.Version.ToString());
            Parking.Field(json, "thread_name", Thread.CurrentThread.Name ?? "");
            Parking.Field(json, "os_tid", Native.GetTid());
            Parking.Field(json, "exception_type", typeof(InvalidOperationException).FullName!);
            Parking.Field(json, "message", Message);
            json.Append("  \"stack_trace\": ").Append(Parking.Quote(Environment.StackTrace)).Append("\n}\n");
            File.WriteAllText(manifest, json.ToString());
            throw new InvalidOperationException(Message);
        }
    }
}
