// Facts about the managed heap, written by the process itself into the manifest ("heap"),
// for tests/real/heap.rs: a type with exactly MarkerCount instances (used nowhere else), held
// in a static list; objects whose addresses do not change (a large-object-heap array, a
// pinned-object-heap array, a frozen string literal); GC handles of every public kind with
// the handle's own address (GCHandle.ToIntPtr); finalizable objects; the GC's configuration.
using System;
using System.Collections.Generic;
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
        };
    }
}
