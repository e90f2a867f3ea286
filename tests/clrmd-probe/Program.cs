// clrmd-probe: what ClrMD (Microsoft.Diagnostics.Runtime, reading through the runtime's own
// DAC) says about a core dump or a live process, as JSON, so that cdac's tests and benchmarks
// can hold cdac against Microsoft's reader. See README.md for every command and key.

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using System.Text.Json;
using Microsoft.Diagnostics.Runtime;

namespace Cdac.ClrMdProbe;

internal static class Program
{
    private const string Usage =
        "usage: clrmd-probe [--dac PATH] (--dump FILE | --pid PID) " +
        "(info | modules | methods | ip2md ADDR... | ip2md - | stacks | stack-roots --thread OSID | heap-segments | heap-objects | handles | finalizer | bench-heap | bench-methods | bench-ip2md FILE)";

    private static int Main(string[] args)
    {
        try
        {
            return Run(args);
        }
        catch (Exception e) when (e is not OutOfMemoryException)
        {
            Console.Error.WriteLine($"clrmd-probe: error: {e.GetType().Name}: {e.Message}");
            return 1;
        }
    }

    private static int Run(string[] args)
    {
        string? dump = null, dac = null;
        int? pid = null;
        var rest = new List<string>();
        for (int i = 0; i < args.Length; i++)
        {
            switch (args[i])
            {
                case "--dump" when i + 1 < args.Length: dump = args[++i]; break;
                case "--pid" when i + 1 < args.Length: pid = int.Parse(args[++i], CultureInfo.InvariantCulture); break;
                case "--dac" when i + 1 < args.Length: dac = args[++i]; break;
                default: rest.Add(args[i]); break;
            }
        }
        if ((dump is null) == (pid is null) || rest.Count == 0)
        {
            Console.Error.WriteLine(Usage);
            return 2;
        }

        var clock = Stopwatch.StartNew();
        // Attaching stops the process (ptrace) until the DataTarget is disposed.
        using DataTarget target = dump is not null
            ? DataTarget.LoadDump(dump)
            : DataTarget.AttachToProcess(pid!.Value, suspend: true);
        double openMs = clock.Elapsed.TotalMilliseconds;
        if (target.ClrVersions.Length == 0)
            throw new InvalidOperationException("no CLR in the target");
        ClrInfo clr = target.ClrVersions[0];
        dac ??= DefaultDac(clr);
        using ClrRuntime runtime = dac is null ? clr.CreateRuntime() : clr.CreateRuntime(dac, ignoreMismatch: true);
        double runtimeMs = clock.Elapsed.TotalMilliseconds - openMs;

        using var output = Console.OpenStandardOutput();
        using var json = new Utf8JsonWriter(output, new JsonWriterOptions { Indented = true });
        string command = rest[0];
        var operands = rest.Skip(1).ToList();
        switch (command)
        {
            case "info": Info(json, clr, runtime, dac); break;
            case "modules": Modules(json, runtime); break;
            case "methods": Methods(json, runtime); break;
            case "ip2md": Ip2md(json, runtime, ReadAddresses(operands)); break;
            case "stacks": Stacks(json, runtime); break;
            case "stack-roots" when operands.Count == 2 && operands[0] == "--thread":
                StackRoots(json, runtime, uint.Parse(operands[1], CultureInfo.InvariantCulture));
                break;
            case "heap-segments": HeapSegments(json, runtime); break;
            case "heap-objects": HeapObjects(runtime); return 0;
            case "handles": Handles(runtime); return 0;
            case "finalizer": Finalizer(json, runtime); break;
            case "live-objects": LiveObjects(runtime, operands); return 0;
            case "bench-heap":
                {
                    // What `dumpheap -stat` does: every object, its size, totals per MethodTable.
                    var work = Stopwatch.StartNew();
                    var stats = new Dictionary<ulong, (long Count, ulong Size)>();
                    long objects = 0;
                    foreach (ClrObject o in runtime.Heap.EnumerateObjects())
                    {
                        ulong mt = o.Type?.MethodTable ?? 0;
                        stats.TryGetValue(mt, out var s);
                        stats[mt] = (s.Count + 1, s.Size + o.Size);
                        objects++;
                    }
                    Timing(json, openMs, runtimeMs, work.Elapsed.TotalMilliseconds, clock,
                        ("objects", (int)Math.Min(objects, int.MaxValue)), ("types", stats.Count));
                    break;
                }
            case "bench-methods":
                {
                    var work = Stopwatch.StartNew();
                    int count = EnumerateMethods(runtime).Count(m => m.Signature is not null);
                    Timing(json, openMs, runtimeMs, work.Elapsed.TotalMilliseconds, clock, ("methods", count));
                    break;
                }
            case "bench-ip2md":
                {
                    var addresses = ReadAddresses(operands);
                    var work = Stopwatch.StartNew();
                    int resolved = 0;
                    foreach (ulong ip in addresses)
                    {
                        ClrMethod? m = runtime.GetMethodByInstructionPointer(ip);
                        if (m is not null && m.Signature is not null)
                            resolved++;
                    }
                    Timing(json, openMs, runtimeMs, work.Elapsed.TotalMilliseconds, clock,
                        ("addresses", addresses.Count), ("resolved", resolved));
                    break;
                }
            default:
                Console.Error.WriteLine(Usage);
                return 2;
        }
        json.Flush();
        output.WriteByte((byte)'\n');
        return 0;
    }

    /// <summary>The GC heap's segments (regions): kind, ranges, flags and heap, with the heap's shape.</summary>
    private static void HeapSegments(Utf8JsonWriter json, ClrRuntime runtime)
    {
        ClrHeap heap = runtime.Heap;
        json.WriteStartObject();
        json.WriteBoolean("can_walk_heap", heap.CanWalkHeap);
        json.WriteBoolean("is_server", heap.IsServer);
        json.WriteNumber("sub_heaps", heap.SubHeaps.Length);
        json.WriteStartArray("segments");
        foreach (ClrSegment seg in heap.Segments)
        {
            json.WriteStartObject();
            json.WriteString("address", Hex(seg.Address));
            json.WriteString("kind", seg.Kind.ToString());
            json.WriteString("start", Hex(seg.Start));
            json.WriteString("end", Hex(seg.End));
            json.WriteString("object_start", Hex(seg.ObjectRange.Start));
            json.WriteString("object_end", Hex(seg.ObjectRange.End));
            json.WriteString("committed_start", Hex(seg.CommittedMemory.Start));
            json.WriteString("committed_end", Hex(seg.CommittedMemory.End));
            json.WriteString("reserved_start", Hex(seg.ReservedMemory.Start));
            json.WriteString("reserved_end", Hex(seg.ReservedMemory.End));
            json.WriteString("flags", seg.Flags.ToString());
            json.WriteNumber("sub_heap", seg.SubHeap.Index);
            json.WriteEndObject();
        }
        json.WriteEndArray();
        json.WriteEndObject();
    }

    /// <summary>Every object of the heap, one line each: address, method table, size (unaligned, as
    /// ClrMD gives it) and 1 for a free object; text, not JSON, since a heap has tens of thousands.</summary>
    private static void HeapObjects(ClrRuntime runtime)
    {
        ClrHeap heap = runtime.Heap;
        using var stdout = new StreamWriter(Console.OpenStandardOutput());
        foreach (ClrObject o in heap.EnumerateObjects())
        {
            ulong mt = o.Type?.MethodTable ?? heap.GetObjectType(o.Address)?.MethodTable ?? 0;
            stdout.Write(Hex(o.Address));
            stdout.Write(' ');
            stdout.Write(Hex(mt));
            stdout.Write(' ');
            stdout.Write(o.Size.ToString(CultureInfo.InvariantCulture));
            stdout.Write(o.IsFree ? " 1\n" : " 0\n");
        }
    }

    /// <summary>Every handle, one text line each: address, object, kind (ClrHandleKind), dependent
    /// object (0 for none).</summary>
    private static void Handles(ClrRuntime runtime)
    {
        using var stdout = new StreamWriter(Console.OpenStandardOutput());
        foreach (ClrHandle h in runtime.EnumerateHandles())
            stdout.Write($"{Hex(h.Address)} {Hex(h.Object.Address)} {h.HandleKind} {Hex(h.Dependent.Address)}\n");
    }

    /// <summary>The finalization queues: objects registered for finalization and those ready for
    /// their finalizer (roots).</summary>
    private static void Finalizer(Utf8JsonWriter json, ClrRuntime runtime)
    {
        ClrHeap heap = runtime.Heap;
        json.WriteStartObject();
        json.WriteStartArray("registered");
        foreach (ClrObject o in heap.EnumerateFinalizableObjects())
            json.WriteStringValue(Hex(o.Address));
        json.WriteEndArray();
        json.WriteStartArray("ready");
        foreach (ClrRoot r in heap.EnumerateFinalizerRoots())
            json.WriteStringValue(Hex(r.Object.Address));
        json.WriteEndArray();
        json.WriteEndObject();
    }

    /// <summary>Every object reachable from the roots of the kinds named (ClrRootKind names:
    /// StrongHandle, PinnedHandle, FinalizerQueue, Stack, ...), one address per line, and on
    /// standard error the number of roots of each kind used.</summary>
    private static void LiveObjects(ClrRuntime runtime, List<string> kinds)
    {
        ClrHeap heap = runtime.Heap;
        var wanted = new HashSet<string>(kinds);
        var marked = new HashSet<ulong>();
        var stack = new Stack<ClrObject>();
        var used = new SortedDictionary<string, int>();
        // Handles and the finalizer queue directly: EnumerateRoots also walks every stack,
        // which crashes ClrMD on 10.0.14 (a thread parked in an exception filter).
        var roots = new List<(string Kind, ClrObject Object)>();
        foreach (ClrHandle h in runtime.EnumerateHandles())
        {
            string? kind = h.HandleKind switch
            {
                ClrHandleKind.Strong => "StrongHandle",
                ClrHandleKind.Pinned => "PinnedHandle",
                ClrHandleKind.AsyncPinned => "AsyncPinnedHandle",
                ClrHandleKind.SizedRef => "SizedRefHandle",
                _ => null,
            };
            if (kind is not null)
                roots.Add((kind, h.Object));
        }
        foreach (ClrRoot r in heap.EnumerateFinalizerRoots())
            roots.Add(("FinalizerQueue", r.Object));
        // Thread statics (.NET 9 and 10 keep them in thread-local storage, not handles) and
        // statics buckets, without walking stacks.
        foreach (ClrRoot r in heap.EnumerateAdditionalRoots())
            roots.Add((r.RootKind.ToString(), r.Object));
        foreach (var (kind, obj) in roots)
        {
            if (!wanted.Contains(kind) || obj.Address == 0)
                continue;
            used[kind] = used.GetValueOrDefault(kind) + 1;
            if (marked.Add(obj.Address))
                stack.Push(obj);
        }
        while (stack.Count > 0)
        {
            ClrObject o = stack.Pop();
            foreach (ClrObject r in o.EnumerateReferences(carefully: false, considerDependantHandles: true))
            {
                if (r.Address != 0 && marked.Add(r.Address))
                    stack.Push(r);
            }
        }
        using var stdout = new StreamWriter(Console.OpenStandardOutput());
        foreach (ulong a in marked.OrderBy(a => a))
            stdout.Write($"{Hex(a)}\n");
        foreach (var (kind, n) in used)
            Console.Error.WriteLine($"{kind} {n}");
    }

    /// <summary>The DAC of the runtime build: libmscordaccore.so beside its libcoreclr.so.</summary>
    private static string? DefaultDac(ClrInfo clr)
    {
        string? dir = Path.GetDirectoryName(clr.ModuleInfo.FileName);
        if (dir is null)
            return null;
        string candidate = Path.Combine(dir, "libmscordaccore.so");
        return File.Exists(candidate) ? candidate : null;
    }

    private static string Hex(ulong v) => "0x" + v.ToString("x", CultureInfo.InvariantCulture);

    private static List<ulong> ReadAddresses(List<string> operands)
    {
        IEnumerable<string> words = operands;
        if (operands.Count == 1 && operands[0] == "-")
            words = Console.In.ReadToEnd().Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries);
        else if (operands.Count == 1 && File.Exists(operands[0]))
            words = File.ReadAllText(operands[0]).Split((char[]?)null, StringSplitOptions.RemoveEmptyEntries);
        return words
            .Select(w => ulong.Parse(w.StartsWith("0x", StringComparison.OrdinalIgnoreCase) ? w[2..] : w,
                NumberStyles.HexNumber, CultureInfo.InvariantCulture))
            .ToList();
    }

    private static void Info(Utf8JsonWriter json, ClrInfo clr, ClrRuntime runtime, string? dac)
    {
        json.WriteStartObject();
        json.WriteString("version", clr.Version.ToString());
        json.WriteString("flavor", clr.Flavor.ToString());
        json.WriteString("runtime_module", clr.ModuleInfo.FileName);
        json.WriteString("runtime_base", Hex(clr.ModuleInfo.ImageBase));
        json.WriteString("dac", dac ?? "(ClrMD's own choice)");
        json.WriteString("contract_descriptor", Hex(clr.ContractDescriptorAddress));
        json.WriteNumber("threads", runtime.Threads.Length);
        json.WriteNumber("modules", runtime.EnumerateModules().Count());
        json.WriteEndObject();
    }

    private static void Modules(Utf8JsonWriter json, ClrRuntime runtime)
    {
        json.WriteStartArray();
        foreach (ClrModule m in runtime.EnumerateModules().OrderBy(m => m.Address))
        {
            json.WriteStartObject();
            json.WriteString("address", Hex(m.Address));
            json.WriteString("assembly_address", Hex(m.AssemblyAddress));
            json.WriteString("assembly_name", m.AssemblyName);
            json.WriteString("name", m.Name);
            json.WriteString("image_base", Hex(m.ImageBase));
            json.WriteNumber("size", m.Size);
            json.WriteBoolean("is_dynamic", m.IsDynamic);
            json.WriteBoolean("is_pe_file", m.IsPEFile);
            json.WriteString("layout", m.Layout.ToString());
            json.WriteEndObject();
        }
        json.WriteEndArray();
    }

    /// <summary>
    /// Every method ClrMD can reach with native code: the methods of every type of every
    /// module's TypeDef map (ClrMD has no walk of the code heaps; generic instantiations
    /// other than the typical ones are not reachable this way).
    /// </summary>
    private static IEnumerable<ClrMethod> EnumerateMethods(ClrRuntime runtime)
    {
        var seen = new HashSet<ulong>();
        foreach (ClrModule module in runtime.EnumerateModules())
        {
            foreach ((ulong mt, int _) in module.EnumerateTypeDefToMethodTableMap())
            {
                ClrType? type = runtime.GetTypeByMethodTable(mt);
                if (type is null)
                    continue;
                foreach (ClrMethod method in type.Methods)
                {
                    if (method.NativeCode == 0 || method.NativeCode == ulong.MaxValue)
                        continue;
                    if (seen.Add(method.MethodDesc))
                        yield return method;
                }
            }
        }
    }

    private static void Methods(Utf8JsonWriter json, ClrRuntime runtime)
    {
        var methods = EnumerateMethods(runtime).OrderBy(m => m.NativeCode).ToList();
        Console.Error.WriteLine($"clrmd-probe: {methods.Count} methods with native code");
        json.WriteStartArray();
        foreach (ClrMethod m in methods)
            Method(json, m, null);
        json.WriteEndArray();
    }

    private static void Method(Utf8JsonWriter json, ClrMethod m, ulong? address)
    {
        json.WriteStartObject();
        if (address is ulong a)
            json.WriteString("address", Hex(a));
        json.WriteString("method_desc", Hex(m.MethodDesc));
        json.WriteString("start", Hex(m.NativeCode));
        HotColdRegions hc = m.HotColdInfo;
        json.WriteString("hot_start", Hex(hc.HotStart));
        json.WriteNumber("hot_size", hc.HotSize);
        json.WriteString("cold_start", Hex(hc.ColdStart));
        json.WriteNumber("cold_size", hc.ColdSize);
        json.WriteString("compilation", m.CompilationType.ToString());
        json.WriteString("name", m.Name);
        json.WriteString("signature", m.Signature);
        json.WriteString("type", m.Type?.Name);
        json.WriteString("module", m.Type?.Module?.Name);
        json.WriteString("token", "0x" + m.MetadataToken.ToString("x8", CultureInfo.InvariantCulture));
        json.WriteEndObject();
    }

    private static void Ip2md(Utf8JsonWriter json, ClrRuntime runtime, List<ulong> addresses)
    {
        json.WriteStartArray();
        foreach (ulong ip in addresses)
        {
            ClrMethod? m = runtime.GetMethodByInstructionPointer(ip);
            if (m is null)
            {
                json.WriteStartObject();
                json.WriteString("address", Hex(ip));
                json.WriteNull("method_desc");
                json.WriteEndObject();
            }
            else
            {
                Method(json, m, ip);
            }
        }
        json.WriteEndArray();
    }

    private static void Stacks(Utf8JsonWriter json, ClrRuntime runtime)
    {
        json.WriteStartArray();
        foreach (ClrThread t in runtime.Threads.OrderBy(t => t.OSThreadId))
        {
            json.WriteStartObject();
            json.WriteNumber("os_thread_id", t.OSThreadId);
            json.WriteNumber("managed_thread_id", t.ManagedThreadId);
            json.WriteBoolean("is_alive", t.IsAlive);
            json.WriteString("gc_mode", t.GCMode.ToString());
            json.WriteString("state", t.State.ToString());
            json.WriteStartArray("frames");
            if (t.IsAlive)
            {
                foreach (ClrStackFrame f in t.EnumerateStackTrace(includeContext: false))
                {
                    json.WriteStartObject();
                    json.WriteString("ip", Hex(f.InstructionPointer));
                    json.WriteString("sp", Hex(f.StackPointer));
                    json.WriteString("kind", f.Kind.ToString());
                    if (f.Method is ClrMethod m)
                    {
                        json.WriteString("method_desc", Hex(m.MethodDesc));
                        json.WriteString("signature", m.Signature);
                    }
                    if (f.FrameName is string name)
                        json.WriteString("frame_name", name);
                    json.WriteEndObject();
                }
            }
            json.WriteEndArray();
            json.WritePropertyName("exception");
            WriteException(json, t.CurrentException, 0);
            json.WriteEndObject();
        }
        json.WriteEndArray();
    }

    /// <summary>One thread's stack roots (`ClrThread.EnumerateStackRoots`). Run one thread per
    /// process: on 10.0.14 the DAC crashes the process on a thread parked in a filter.</summary>
    private static void StackRoots(Utf8JsonWriter json, ClrRuntime runtime, uint osId)
    {
        ClrThread thread = runtime.Threads.FirstOrDefault(t => t.OSThreadId == osId)
            ?? throw new InvalidOperationException($"no managed thread {osId}");
        json.WriteStartArray();
        foreach (ClrStackRoot r in thread.EnumerateStackRoots())
        {
            json.WriteStartObject();
            json.WriteString("address", Hex(r.Address));
            json.WriteString("object", Hex(r.Object.Address));
            json.WriteBoolean("interior", r.IsInterior);
            json.WriteBoolean("pinned", r.IsPinned);
            json.WriteString("register", r.RegisterName);
            json.WriteNumber("register_offset", r.RegisterOffset);
            ClrStackFrame? f = r.StackFrame;
            json.WriteString("frame_ip", f is null ? null : Hex(f.InstructionPointer));
            json.WriteString("frame_sp", f is null ? null : Hex(f.StackPointer));
            json.WriteString("frame_kind", f?.Kind.ToString());
            json.WriteString("frame_name", f?.FrameName);
            json.WriteString("method_desc", f?.Method is ClrMethod m ? Hex(m.MethodDesc) : null);
            json.WriteEndObject();
        }
        json.WriteEndArray();
    }

    private static void WriteException(Utf8JsonWriter json, ClrException? e, int depth)
    {
        if (e is null || depth > 16)
        {
            json.WriteNullValue();
            return;
        }
        json.WriteStartObject();
        json.WriteString("address", Hex(e.Address));
        json.WriteString("type", e.Type?.Name);
        json.WriteString("message", e.Message);
        json.WriteString("hresult", "0x" + e.HResult.ToString("x8", CultureInfo.InvariantCulture));
        json.WritePropertyName("inner");
        WriteException(json, e.Inner, depth + 1);
        json.WriteEndObject();
    }

    private static void Timing(Utf8JsonWriter json, double openMs, double runtimeMs, double workMs, Stopwatch total,
        params (string Key, int Value)[] counts)
    {
        json.WriteStartObject();
        foreach ((string key, int value) in counts)
            json.WriteNumber(key, value);
        json.WriteNumber("open_ms", Math.Round(openMs, 1));
        json.WriteNumber("create_runtime_ms", Math.Round(runtimeMs, 1));
        json.WriteNumber("work_ms", Math.Round(workMs, 1));
        json.WriteNumber("total_ms", Math.Round(total.Elapsed.TotalMilliseconds, 1));
        json.WriteEndObject();
    }
}
