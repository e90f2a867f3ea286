// A collectible AssemblyLoadContext holding a small real assembly loaded from its file
// (plugins/Cdac.Testbed.Plugin.dll), called through delegates and kept alive for good: never
// unloaded, so its loader allocator, code heap and types stay for the reader to find.

using System;
using System.Collections.Generic;
using System.Reflection;
using System.Runtime.Loader;
using System.Text.Json.Nodes;

namespace Cdac.Testbed
{
    internal sealed class PluginHost
    {
        private const string ContextName = "Cdac.Testbed.PluginContext";

        private readonly AssemblyLoadContext _context;
        private readonly Assembly _assembly;
        private readonly Func<int, int> _twice;
        private readonly Func<int, int> _guarded;
        private readonly Func<int, int> _loop;
        private readonly object _counter;
        private readonly Func<int> _bump;

        public PluginHost(string appDir)
        {
            Path = System.IO.Path.Combine(appDir, "plugins", "Cdac.Testbed.Plugin.dll");
            _context = new AssemblyLoadContext(ContextName, isCollectible: true);
            _assembly = _context.LoadFromAssemblyPath(Path);
            Type entry = _assembly.GetType("Cdac.Testbed.Plugin.Entry", throwOnError: true)!;
            _twice = entry.GetMethod("Twice")!.CreateDelegate<Func<int, int>>();
            _guarded = entry.GetMethod("Guarded")!.CreateDelegate<Func<int, int>>();
            _loop = entry.GetMethod("Loop")!.CreateDelegate<Func<int, int>>();
            Type counterType = _assembly.GetType("Cdac.Testbed.Plugin.Counter", throwOnError: true)!;
            _counter = Activator.CreateInstance(counterType)!;
            _bump = counterType.GetMethod("Bump")!.CreateDelegate<Func<int>>(_counter);
        }

        public string Path { get; }

        public Assembly Assembly => _assembly;

        /// <summary>Calls every plugin method; deterministic.</summary>
        public long Exercise(int rounds)
        {
            long total = 0;
            for (int i = 0; i < rounds; i++)
            {
                total += _twice(i) + _guarded(i - 1) + _loop(i % 50) + _bump();
            }
            return total;
        }

        public JsonObject Describe()
        {
            var methods = new JsonArray();
            foreach (MethodInfo mi in new[] { _twice.Method, _guarded.Method, _loop.Method, _bump.Method })
            {
                JsonObject o = Facts.Method(mi);
                o["clauses"] = Facts.Strings(Facts.ClauseKinds(mi));
                methods.Add(o);
            }
            return new JsonObject
            {
                ["context_name"] = _context.Name,
                ["is_collectible"] = _context.IsCollectible,
                ["assembly"] = Facts.AssemblyFacts(_assembly),
                ["path"] = Path,
                ["counter_type_handle"] = Facts.Hex(_counter.GetType().TypeHandle.Value),
                ["methods"] = methods,
            };
        }

        /// <summary>Types of the plugin for type_system.types.</summary>
        public IEnumerable<(string, Type, bool)> Types()
        {
            yield return ("Plugin.Entry", _assembly.GetType("Cdac.Testbed.Plugin.Entry")!, true);
            yield return ("Plugin.Counter", _counter.GetType(), true);
        }
    }
}
