// Calls into Cdac.Testbed.R2R (precompiled by crossgen2) and describes it for the manifest: which
// methods ran (so their entry points were resolved to ReadyToRun code, or, for Hot, tiered up to
// JIT'ed code beside it) and which never did.

using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Reflection;
using System.Text.Json.Nodes;
using Cdac.Testbed.R2R;

namespace Cdac.Testbed
{
    internal static class PrecompiledWork
    {
        /// <summary>Calls per method so far; a method not in here was never called.</summary>
        private static readonly Dictionary<string, int> s_calls = new(StringComparer.Ordinal);
        private static readonly Accumulator s_accumulator = new();
        private static readonly int[] s_values = { 3, 1, 4, 1, 5, 9, 2, 6 };

        private static void Count(string method, int n = 1) =>
            s_calls[method] = s_calls.GetValueOrDefault(method) + n;

        /// <summary>Each called method a few times: under the 30 calls that would make the
        /// tiered compiler replace its ReadyToRun code. Deterministic.</summary>
        public static long CallFew()
        {
            long total = Precompiled.Add(2, 3);
            Count("Precompiled::Add");
            total += Precompiled.ParseOrMinusOne("1234") + Precompiled.ParseOrMinusOne("not a number");
            Count("Precompiled::ParseOrMinusOne", 2);
            total += Precompiled.SumWithFinally(s_values);
            Count("Precompiled::SumWithFinally");
            total += Precompiled.FilterOrFinally(21) + Precompiled.FilterOrFinally(-5);
            Count("Precompiled::FilterOrFinally", 2);
            s_accumulator.Add(7);
            Count("Accumulator::Add");
            total += s_accumulator.Total + s_accumulator.ToString().Length;
            Count("Accumulator::get_Total");
            Count("Accumulator::ToString");
            total += PrecompiledGenerics.UseEcho(5);
            Count("PrecompiledGenerics::UseEcho");
            Count("PrecompiledGenerics::Echo<Int32>");
            Count("PrecompiledGenerics::Echo<String>");
            return total;
        }

        /// <summary>Precompiled.Hot, `n` times: enough calls and it is tiered up.</summary>
        public static long CallHot(int n)
        {
            long total = 0;
            for (int i = 0; i < n; i++)
            {
                total += Precompiled.Hot(i);
            }
            Count("Precompiled::Hot", n);
            return total;
        }

        private static IEnumerable<(string Key, MethodBase Method)> Methods()
        {
            Type p = typeof(Precompiled);
            foreach (string name in new[] { "Add", "ParseOrMinusOne", "SumWithFinally", "FilterOrFinally", "Hot", "NeverCalledSum", "NeverCalledFormat" })
            {
                yield return ("Precompiled::" + name, p.GetMethod(name)!);
            }
            Type a = typeof(Accumulator);
            yield return ("Accumulator::.ctor", a.GetConstructor(Type.EmptyTypes)!);
            foreach (string name in new[] { "Add", "get_Total", "ToString", "NeverCalledReset" })
            {
                yield return ("Accumulator::" + name, a.GetMethod(name, Facts.AnyDeclared)!);
            }
            Type g = typeof(PrecompiledGenerics);
            yield return ("PrecompiledGenerics::UseEcho", g.GetMethod("UseEcho")!);
            MethodInfo echo = g.GetMethod("Echo")!;
            yield return ("PrecompiledGenerics::Echo<Int32>", echo.MakeGenericMethod(typeof(int)));
            yield return ("PrecompiledGenerics::Echo<String>", echo.MakeGenericMethod(typeof(string)));
        }

        public static JsonObject Describe(string appDir, JsonObject? composite)
        {
            string image = typeof(Precompiled).Assembly.Location;
            string map = Path.ChangeExtension(image, ".ni.r2rmap");
            var methods = new JsonArray();
            s_calls["Accumulator::.ctor"] = 1;
            foreach ((string key, MethodBase mb) in Methods())
            {
                JsonObject o = Facts.Method(mb, key);
                int calls = s_calls.GetValueOrDefault(key);
                o["called"] = calls > 0;
                o["calls"] = calls;
                o["clauses"] = Facts.Strings(Facts.ClauseKinds(mb));
                o["generic_args"] = Facts.Strings(mb.IsGenericMethod ? mb.GetGenericArguments().Select(t => t.FullName ?? t.Name) : Enumerable.Empty<string>());
                methods.Add(o);
            }
            return new JsonObject
            {
                ["assembly"] = typeof(Precompiled).Assembly.GetName().Name,
                ["image"] = image,
                // crossgen2's own map of the image; in the composite variant the code is in the
                // composite image, whose map is the "composite" key's r2rmap.
                ["r2rmap"] = File.Exists(map) ? map : null,
                ["in_composite"] = composite != null,
                ["hot_calls_to_tier_up"] = 30,
                ["methods"] = methods,
            };
        }

        /// <summary>The composite image of the net10-composite variant (null in the others).</summary>
        public static JsonObject? Composite(string appDir)
        {
            string list = Path.Combine(appDir, "cdac-composite-components.txt");
            if (!File.Exists(list))
            {
                return null;
            }
            string image = Path.Combine(appDir, "Cdac.Testbed.r2r.dll");
            string map = Path.Combine(appDir, "Cdac.Testbed.r2r.ni.r2rmap");
            string[] components = File.ReadAllLines(list).Where(l => l.Length > 0).ToArray();
            return new JsonObject
            {
                ["image"] = image,
                ["r2rmap"] = File.Exists(map) ? map : null,
                ["components"] = Facts.Strings(components),
                ["component_paths"] = Facts.Strings(components.Select(c => Path.Combine(appDir, c))),
                ["mapped"] = Program.MappedFile(image) != null,
            };
        }
    }
}
