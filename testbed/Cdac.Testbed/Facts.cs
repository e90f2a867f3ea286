// Reflection's view of methods, types and assemblies, with the native pointers the runtime keeps
// behind them: what the manifest gives cdac's tests as ground truth.

using System;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Reflection;
using System.Text.Json.Nodes;

namespace Cdac.Testbed
{
    internal static class Facts
    {
        /// <summary>Every declared member: public and not, static and instance.</summary>
        public const BindingFlags AnyDeclared = BindingFlags.Public | BindingFlags.NonPublic
            | BindingFlags.Static | BindingFlags.Instance | BindingFlags.DeclaredOnly;

        public static string Hex(IntPtr value) => Hex(unchecked((ulong)value.ToInt64()));

        public static string Hex(ulong value) => "0x" + value.ToString("x", CultureInfo.InvariantCulture);

        public static string Token(int token) =>
            "0x" + unchecked((uint)token).ToString("x8", CultureInfo.InvariantCulture);

        /// <summary>The MethodDesc: RuntimeMethodHandle.Value.</summary>
        public static string MethodDesc(MethodBase method) => Hex(method.MethodHandle.Value);

        /// <summary>What a caller gets as the method's entry point: usually a precode stub.</summary>
        public static string FunctionPointer(RuntimeMethodHandle handle) => Hex(handle.GetFunctionPointer());

        /// <summary>"Namespace.Type::Method", nested types joined with '+' (Type.FullName).</summary>
        public static string Name(MethodBase method) =>
            (method.DeclaringType is { } t ? TypeName(t) : "<no type>") + "::" + method.Name;

        /// <summary>Type.FullName, but a generic instantiation's arguments by their own short
        /// names, as the runtime's perf map writes them: "Ns.Box`1[System.String]", not the
        /// assembly-qualified arguments of FullName.</summary>
        public static string TypeName(Type t)
        {
            if (t.IsGenericType && !t.IsGenericTypeDefinition)
            {
                Type def = t.GetGenericTypeDefinition();
                return (def.FullName ?? def.Name) + "[" + string.Join(",", t.GetGenericArguments().Select(TypeName)) + "]";
            }
            return t.FullName ?? t.Name;
        }

        public static JsonArray Array(IEnumerable<JsonNode?> items) => new JsonArray(items.ToArray());

        public static JsonArray Strings(IEnumerable<string> items) => Array(items.Select(s => (JsonNode?)s));

        /// <summary>The native Module* behind a System.Reflection.Module: RuntimeModule.m_pData
        /// (what the internal RuntimeModule.GetUnderlyingNativeHandle() returns).</summary>
        public static string? NativeModule(Module module)
        {
            for (Type? t = module.GetType(); t != null; t = t.BaseType)
            {
                FieldInfo? f = t.GetField("m_pData", BindingFlags.NonPublic | BindingFlags.Instance);
                if (f != null && f.GetValue(module) is IntPtr p)
                {
                    return Hex(p);
                }
            }
            return null;
        }

        /// <summary>RuntimeAssembly.m_assembly: the native Assembly* the managed object keeps.</summary>
        public static string? NativeAssembly(Assembly assembly)
        {
            FieldInfo? f = assembly.GetType().GetField("m_assembly", BindingFlags.NonPublic | BindingFlags.Instance);
            return f?.GetValue(assembly) is IntPtr p ? Hex(p) : null;
        }

        /// <summary>What reflection says about a method, for the RuntimeTypeSystem checks (the
        /// per-method facts every method entry of the manifest carries).</summary>
        public static void AddMethodFacts(JsonObject o, MethodBase method)
        {
            o["is_static"] = method.IsStatic;
            o["is_generic"] = method.IsGenericMethod;
            try
            {
                o["metadata_token"] = Token(method.MetadataToken);
            }
            catch (InvalidOperationException)
            {
                // Some dynamic methods have no token.
            }
            Type? declaring = method.DeclaringType;
            if (declaring != null)
            {
                o["declaring_type"] = declaring.FullName;
                o["declaring_type_handle"] = Hex(declaring.TypeHandle.Value);
            }
            o["module_path"] = method.Module.FullyQualifiedName;
            o["module_handle"] = NativeModule(method.Module);
            o["assembly_location"] = method.Module.Assembly.Location;
        }

        /// <summary>One method as most manifest lists describe it.</summary>
        public static JsonObject Method(MethodBase method, string? label = null)
        {
            var o = new JsonObject();
            if (label != null)
            {
                o["label"] = label;
            }
            o["type"] = method.DeclaringType is { } t ? TypeName(t) : null;
            o["name"] = method.Name;
            o["full_name"] = Name(method);
            o["method_desc"] = MethodDesc(method);
            o["function_pointer"] = FunctionPointer(method.MethodHandle);
            AddMethodFacts(o, method);
            return o;
        }

        /// <summary>The kinds of a method's IL exception clauses, in EH-table order.</summary>
        public static List<string> ClauseKinds(MethodBase method)
        {
            MethodBody? body = method.GetMethodBody();
            if (body == null)
            {
                return new List<string>();
            }
            return body.ExceptionHandlingClauses.Select(c => ClauseKind(c.Flags)).ToList();
        }

        public static string ClauseKind(ExceptionHandlingClauseOptions flags) => flags switch
        {
            ExceptionHandlingClauseOptions.Clause => "typed",
            ExceptionHandlingClauseOptions.Filter => "filter",
            ExceptionHandlingClauseOptions.Finally => "finally",
            ExceptionHandlingClauseOptions.Fault => "fault",
            _ => "unknown",
        };

        /// <summary>One loaded assembly: names, location, kind, the native pointers behind it and the
        /// assemblies it references (in AssemblyRef order).</summary>
        public static JsonObject AssemblyFacts(Assembly assembly)
        {
            Module module = assembly.ManifestModule;
            var o = new JsonObject
            {
                ["name"] = assembly.GetName().Name,
                ["full_name"] = assembly.FullName,
                ["location"] = assembly.Location,
                ["is_dynamic"] = assembly.IsDynamic,
                ["is_collectible"] = assembly.IsCollectible,
                ["native_assembly"] = NativeAssembly(assembly),
                ["module_handle"] = NativeModule(module),
                ["module_path"] = module.FullyQualifiedName,
                ["module_name"] = module.ScopeName,
                ["load_context"] = System.Runtime.Loader.AssemblyLoadContext.GetLoadContext(assembly)?.Name,
            };
            try
            {
                o["references"] = Strings(assembly.GetReferencedAssemblies().Select(n => n.Name ?? ""));
            }
            catch (NotSupportedException)
            {
                o["references"] = null;
            }
            return o;
        }
    }
}
