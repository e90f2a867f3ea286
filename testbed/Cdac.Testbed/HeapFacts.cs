// Facts about the managed heap, written by the process itself into the manifest ("heap"),
// for tests/real/heap.rs: a type with exactly MarkerCount instances (used nowhere else), held
// in a static list; objects whose addresses do not change (a large-object-heap array, a
// pinned-object-heap array, a frozen string literal); GC handles of every public kind with
// the handle's own address (GCHandle.ToIntPtr); finalizable objects; the GC's configuration.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Runtime;
using System.Runtime.CompilerServices;
using System.Runtime.InteropServices;
using System.Text.Json.Nodes;

namespace Cdac.Testbed.Heap;

/// <summary>A type with exactly <see cref="HeapFacts.MarkerCount"/> instances.</summary>
public sealed class UniqueMarker
{
    public int Index;
    public UniqueMarker(int index) => Index = index;
}

/// <summary>A type with a finalizer; <see cref="HeapFacts.FinalizableCount"/> instances are kept
/// alive, so they stay registered for finalization.</summary>
public sealed class FinalizableMarker
{
    public int Index;
    public FinalizableMarker(int index) => Index = index;
    ~FinalizableMarker() => Index = -1;
}

/// <summary>A handle's target, of a type used nowhere else.</summary>
public sealed class HandleTarget
{
    public string Kind;
    public HandleTarget(string kind) => Kind = kind;
}

/// <summary>A dependent handle's secondary, of a type used nowhere else.</summary>
public sealed class DependentSecondary
{
}

/// <summary>A struct laid out inside <see cref="FieldShapes"/> and in an array.</summary>
public struct ShapePoint
{
    public int X;
    public int Y;
    public ShapePoint(int x, int y) { X = x; Y = y; }
}

/// <summary>The base class of <see cref="FieldShapes"/>: its field comes first.</summary>
public class FieldShapesBase
{
    public int BaseTag = 99;
}

/// <summary>One instance with a field of every shape <c>cdac obj</c> prints (used nowhere else).</summary>
public sealed class FieldShapes : FieldShapesBase
{
    public const int Literal = 7; // a constant: no FieldDesc, no storage
    public static int StaticCounter = 42;
    public static string StaticName = "cdac-static";
    public int IntValue = 0x12345678;
    public long LongValue = -5;
    public double DoubleValue = 2.5;
    public bool Flag = true;
    public char Letter = 'Q';
    public byte Small = 200;
    public string Text = "cdac-field";
    public object? Nothing;
    public ShapePoint Point = new(7, -9);
    public DayOfWeek Day = DayOfWeek.Wednesday;
    public Guid Id = new("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");
    public List<int> Numbers = new() { 1, 2, 3 };
    public int[] Array = { 10, 20, 30 };
    public int[,] Grid = { { 1, 2, 3 }, { 4, 5, 6 } };
    public ShapePoint[] Points = { new(1, 2), new(3, 4) };
    public string[] Words = { "alpha", "beta" };
}

/// <summary>A monitor taken three times by one thread that then sleeps (a thin lock).</summary>
/// <summary>Held only by a local of a parked frame (<see cref="HeapFacts.HoldOnStack"/>): its
/// only root is a stack slot. Used nowhere else, so it is found by its type.</summary>
public sealed class StackRootMarker
{
    public readonly long Stamp = 0x5354_4143_4B52_4F4F;
}

public sealed class ThinLocked
{
}

/// <summary>An object whose hash code the runtime stored in its header.</summary>
public sealed class Hashed
{
}

/// <summary>Held only by a thread-static field of the parked thread "cdac-thread-static".
/// Used nowhere else, so it is found by its type.</summary>
public sealed class ThreadStaticMarker
{
    public readonly long Stamp = 0x5448_5245_4144_5354;
}

/// <summary>Locked twice and then hashed by its owner: a header cannot hold both, so the
/// runtime moves the lock and the hash code into a sync block.</summary>
public sealed class Inflated
{
}

/// <summary>Its finalizer returns only at SIGTERM (.NET 8 and 9 exit through the finalizer
/// thread), so the finalizer thread stays inside it and every object
/// found unreachable afterwards waits in the ready-for-finalization queue.</summary>
public sealed class FinalizerBlocker
{
    internal static readonly System.Threading.ManualResetEventSlim Entered = new();
    internal static readonly System.Threading.ManualResetEventSlim Release = new();

    ~FinalizerBlocker()
    {
        Entered.Set();
        Release.Wait();
    }
}

/// <summary>Unreachable, with a finalizer that cannot run (the finalizer thread is held by
/// <see cref="FinalizerBlocker"/>): only the finalizer queue keeps it alive.</summary>
public sealed class QueuedForFinalization
{
    public readonly long Stamp = 0x4649_4E41_4C51_5545;

    ~QueuedForFinalization() => GC.KeepAlive(Stamp);
}

public static unsafe class HeapFacts
{
    public const int MarkerCount = 1000;
    public const int FinalizableCount = 50;
    public const string FrozenLiteral = "cdac-testbed-frozen-string-literal";

    private static readonly List<UniqueMarker> Markers = new();
    private static readonly List<FinalizableMarker> Finalizable = new();
    private static readonly List<object> Held = new();
    private static readonly List<GCHandle> Handles = new();
    private static DependentHandle s_dependent;
    private static readonly FieldShapes Shapes = new();
    private static readonly ThinLocked ThinLock = new();
    private static readonly Hashed HashedObject = new();
    private static readonly Inflated InflatedObject = new();
    private static System.Runtime.InteropServices.PosixSignalRegistration? s_releaseOnTerm;
    [ThreadStatic] private static ThreadStaticMarker? t_marker;

    /// <summary>Takes <see cref="ThinLock"/> three times on a new thread that then sleeps
    /// holding it; returns the thread's managed id.</summary>
    private static int HoldThinLock()
    {
        int id = 0;
        using var taken = new System.Threading.ManualResetEventSlim();
        var t = new System.Threading.Thread(() =>
        {
            id = Environment.CurrentManagedThreadId;
            lock (ThinLock)
                lock (ThinLock)
                    lock (ThinLock)
                    {
                        taken.Set();
                        System.Threading.Thread.Sleep(System.Threading.Timeout.Infinite);
                    }
        }) { IsBackground = true, Name = "cdac-thin-lock" };
        t.Start();
        taken.Wait();
        return id;
    }

    /// <summary>Takes <see cref="InflatedObject"/> twice on a new thread, hashes it while
    /// holding it (which inflates the lock into a sync block), then sleeps holding it;
    /// returns the thread's managed id and the hash code.</summary>
    private static (int Id, int Hash) HoldInflatedLock()
    {
        int id = 0, hash = 0;
        using var taken = new System.Threading.ManualResetEventSlim();
        var t = new System.Threading.Thread(() =>
        {
            id = Environment.CurrentManagedThreadId;
            lock (InflatedObject)
                lock (InflatedObject)
                {
                    hash = RuntimeHelpers.GetHashCode(InflatedObject);
                    taken.Set();
                    System.Threading.Thread.Sleep(System.Threading.Timeout.Infinite);
                }
        }) { IsBackground = true, Name = "cdac-inflated-lock" };
        t.Start();
        taken.Wait();
        return (id, hash);
    }

    /// <summary>Parks the finalizer thread in <see cref="FinalizerBlocker"/>'s finalizer,
    /// then leaves a <see cref="QueuedForFinalization"/> unreachable and collects: it stays
    /// in the ready-for-finalization queue. Returns a long weak handle to it (which follows
    /// it there) so that tests can find it.</summary>
    private static GCHandle QueueForFinalization()
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Drop() => _ = new FinalizerBlocker();
        [MethodImpl(MethodImplOptions.NoInlining)]
        static GCHandle Queue() => GCHandle.Alloc(new QueuedForFinalization(), GCHandleType.WeakTrackResurrection);

        // .NET 8 and 9 raise ProcessExit on the finalizer thread: let it go at SIGTERM.
        s_releaseOnTerm = System.Runtime.InteropServices.PosixSignalRegistration.Create(
            System.Runtime.InteropServices.PosixSignal.SIGTERM, _ => FinalizerBlocker.Release.Set());
        Drop();
        GC.Collect();
        if (!FinalizerBlocker.Entered.Wait(TimeSpan.FromSeconds(30)))
            throw new InvalidOperationException("the finalizer thread never ran FinalizerBlocker's finalizer");
        GCHandle handle = Queue();
        GC.Collect();
        return handle;
    }

    /// <summary>Starts a thread that stores a new <see cref="ThreadStaticMarker"/> in its
    /// thread-static field and sleeps for ever; returns the thread's managed id.</summary>
    private static int HoldInThreadStatic()
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        static void Store() => t_marker = new ThreadStaticMarker();

        int id = 0;
        using var ready = new System.Threading.ManualResetEventSlim();
        var t = new System.Threading.Thread(() =>
        {
            id = Environment.CurrentManagedThreadId;
            Store();
            ready.Set();
            System.Threading.Thread.Sleep(System.Threading.Timeout.Infinite);
        }) { IsBackground = true, Name = "cdac-thread-static" };
        t.Start();
        ready.Wait();
        return id;
    }

    /// <summary>Starts a thread that parks in <see cref="HoldOnStackBody"/> with a
    /// <see cref="StackRootMarker"/> in a local; returns the thread's managed id.</summary>
    private static int HoldOnStack()
    {
        int id = 0;
        using var ready = new System.Threading.ManualResetEventSlim();
        var t = new System.Threading.Thread(() =>
        {
            id = Environment.CurrentManagedThreadId;
            HoldOnStackBody(ready);
        }) { IsBackground = true, Name = "cdac-stack-root" };
        t.Start();
        ready.Wait();
        return id;
    }

    /// <summary>Keeps a new <see cref="StackRootMarker"/> in a local while it sleeps for ever:
    /// nothing else refers to it.</summary>
    [MethodImpl(MethodImplOptions.NoInlining)]
    internal static void HoldOnStackBody(System.Threading.ManualResetEventSlim ready)
    {
        var marker = new StackRootMarker();
        ready.Set();
        System.Threading.Thread.Sleep(System.Threading.Timeout.Infinite);
        GC.KeepAlive(marker);
    }

    /// <summary>The instance fields of <see cref="Shapes"/> as reflection reads them: numbers,
    /// booleans, chars (as their code), strings, null, and arrays of those.</summary>
    private static JsonObject ShapeValues()
    {
        static JsonNode? Node(object? v) => v switch
        {
            null => null,
            bool b => b,
            char c => (int)c,
            string s => s,
            double d => d,
            Enum e => Convert.ToInt64(e),
            IConvertible n when v.GetType().IsPrimitive => n.ToInt64(null),
            ShapePoint p => new JsonObject { ["X"] = p.X, ["Y"] = p.Y },
            Array a => new JsonArray(a.Cast<object?>().Select(Node).ToArray()),
            _ => "(not recorded)",
        };
        var values = new JsonObject();
        foreach (FieldInfo f in typeof(FieldShapes).GetFields(BindingFlags.Instance | BindingFlags.Public))
            values[f.Name] = Node(f.GetValue(Shapes));
        return values;
    }

    /// <summary>Makes the objects and handles, collects, and describes them.</summary>
    public static JsonObject Describe()
    {
        for (int i = 0; i < MarkerCount; i++)
            Markers.Add(new UniqueMarker(i));
        for (int i = 0; i < FinalizableCount; i++)
            Finalizable.Add(new FinalizableMarker(i));

        byte[] large = new byte[100_000];
        long[] pinned = GC.AllocateArray<long>(1000, pinned: true);
        Held.Add(large);
        Held.Add(pinned);

        var handles = new JsonArray();
        void Handle(string kind, GCHandleType type, object target)
        {
            GCHandle h = GCHandle.Alloc(target, type);
            Handles.Add(h);
            handles.Add(new JsonObject
            {
                ["kind"] = kind,
                ["handle"] = Facts.Hex((ulong)GCHandle.ToIntPtr(h)),
                ["type"] = target.GetType().FullName,
            });
        }
        Handle("strong", GCHandleType.Normal, new HandleTarget("strong"));
        Handle("pinned", GCHandleType.Pinned, new byte[32]);
        var weakTarget = new HandleTarget("weak_short");
        var longWeakTarget = new HandleTarget("weak_long");
        Held.Add(weakTarget);
        Held.Add(longWeakTarget);
        Handle("weak_short", GCHandleType.Weak, weakTarget);
        Handle("weak_long", GCHandleType.WeakTrackResurrection, longWeakTarget);
        var primary = new HandleTarget("dependent");
        Held.Add(primary);
        s_dependent = new DependentHandle(primary, new DependentSecondary());
        // DependentHandle keeps its handle in a private field.
        FieldInfo? field = typeof(DependentHandle).GetField("_handle", BindingFlags.NonPublic | BindingFlags.Instance);
        IntPtr dependentHandle = field?.GetValue(s_dependent) is IntPtr p ? p : IntPtr.Zero;
        handles.Add(new JsonObject
        {
            ["kind"] = "dependent",
            ["handle"] = Facts.Hex((ulong)dependentHandle),
            ["type"] = typeof(HandleTarget).FullName,
            ["secondary_type"] = typeof(DependentSecondary).FullName,
        });

        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();

        // Objects that do not move: the large-object heap is not compacted by default, the
        // pinned-object heap never, and frozen literals live outside the GC's reach.
        ulong largeAddress, pinnedAddress, literalAddress;
        fixed (byte* data = large)
            largeAddress = (ulong)data - 16;
        pinnedAddress = (ulong)Unsafe.AsPointer(ref MemoryMarshal.GetArrayDataReference(pinned)) - 16;
        fixed (char* chars = FrozenLiteral)
            literalAddress = (ulong)chars - 12;

        int thinLockOwner = HoldThinLock();
        int stackRootThread = HoldOnStack();
        int threadStaticThread = HoldInThreadStatic();
        int hash = RuntimeHelpers.GetHashCode(HashedObject);
        (int inflatedOwner, int inflatedHash) = HoldInflatedLock();
        GCHandle queued = QueueForFinalization();
        Handles.Add(queued);

        GCMemoryInfo info = GC.GetGCMemoryInfo();
        var generations = new JsonArray();
        foreach (GCGenerationInfo g in info.GenerationInfo)
            generations.Add(new JsonObject { ["size_after"] = g.SizeAfterBytes, ["fragmentation_after"] = g.FragmentationAfterBytes });
        return new JsonObject
        {
            ["is_server_gc"] = GCSettings.IsServerGC,
            ["processor_count"] = Environment.ProcessorCount,
            ["max_generation"] = GC.MaxGeneration,
            ["heap_size"] = info.HeapSizeBytes,
            ["generations"] = generations,
            ["marker_type"] = typeof(UniqueMarker).FullName,
            ["marker_method_table"] = Facts.Hex((ulong)typeof(UniqueMarker).TypeHandle.Value),
            ["marker_count"] = MarkerCount,
            ["marker_generation"] = GC.GetGeneration(Markers[0]),
            ["finalizable_type"] = typeof(FinalizableMarker).FullName,
            ["finalizable_count"] = FinalizableCount,
            ["large_array"] = new JsonObject
            {
                ["address"] = Facts.Hex(largeAddress),
                ["size"] = 16 + large.Length + 8,
                ["generation"] = GC.GetGeneration(large),
            },
            ["pinned_array"] = new JsonObject
            {
                ["address"] = Facts.Hex(pinnedAddress),
                ["size"] = 24 + pinned.Length * 8,
                ["generation"] = GC.GetGeneration(pinned),
            },
            ["frozen_string"] = new JsonObject
            {
                ["address"] = Facts.Hex(literalAddress),
                ["size"] = 22 + FrozenLiteral.Length * 2,
                ["text"] = FrozenLiteral,
            },
            ["handles"] = handles,
            // Held only by a local of HoldOnStackBody on the thread "cdac-stack-root".
            ["stack_root"] = new JsonObject
            {
                ["type"] = typeof(StackRootMarker).FullName,
                ["method_table"] = Facts.Hex((ulong)typeof(StackRootMarker).TypeHandle.Value),
                ["thread_managed_id"] = stackRootThread,
                ["thread_name"] = "cdac-stack-root",
                ["method"] = nameof(HoldOnStackBody),
            },
            // Held only by a [ThreadStatic] field of the thread "cdac-thread-static".
            ["thread_static"] = new JsonObject
            {
                ["type"] = typeof(ThreadStaticMarker).FullName,
                ["thread_managed_id"] = threadStaticThread,
                ["thread_name"] = "cdac-thread-static",
            },
            // Found by their types (used nowhere else); they may move.
            ["field_shapes"] = new JsonObject
            {
                ["type"] = typeof(FieldShapes).FullName,
                ["method_table"] = Facts.Hex((ulong)typeof(FieldShapes).TypeHandle.Value),
                ["point_method_table"] = Facts.Hex((ulong)typeof(ShapePoint).TypeHandle.Value),
                ["values"] = ShapeValues(),
                ["static_counter"] = FieldShapes.StaticCounter,
                ["static_name"] = FieldShapes.StaticName,
            },
            ["thin_lock"] = new JsonObject
            {
                ["type"] = typeof(ThinLocked).FullName,
                ["owner_managed_id"] = thinLockOwner,
                ["lock_count"] = 3, // three nested `lock`s
            },
            ["hashed"] = new JsonObject
            {
                ["type"] = typeof(Hashed).FullName,
                ["hash"] = hash,
            },
            ["inflated"] = new JsonObject
            {
                ["type"] = typeof(Inflated).FullName,
                ["owner_managed_id"] = inflatedOwner,
                ["thread_name"] = "cdac-inflated-lock",
                ["lock_count"] = 2, // two nested `lock`s
                ["hash"] = inflatedHash,
            },
            // Only the finalizer queue holds it; the finalizer thread is parked in
            // FinalizerBlocker's finalizer for good. The long weak handle leads to it.
            ["finalizer_queued"] = new JsonObject
            {
                ["type"] = typeof(QueuedForFinalization).FullName,
                ["weak_long_handle"] = Facts.Hex((ulong)GCHandle.ToIntPtr(queued)),
                ["blocker_type"] = typeof(FinalizerBlocker).FullName,
            },
        };
    }
}
