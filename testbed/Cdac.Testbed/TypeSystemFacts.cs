// The "type_system" part of the manifest: reflection's view of types, methods, fields, assemblies
// and generic and dynamic methods, with the native pointers behind them. The oracle for the
// Loader and RuntimeTypeSystem layouts (tests/real/net8_type_layouts.rs).

using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Reflection.Emit;
using System.Text.Json.Nodes;

namespace Cdac.Testbed
{
    internal static class TypeSystemFacts
    {
        /// <summary>Virtual slots a MethodTable has: a class has its parent's, plus one per virtual
        /// method it declares that does not override one (C#'s implicit interface implementations
        /// and explicit ones are virtual too); an interface has one per virtual method it declares.</summary>
        public static int NumVirtuals(Type? t)
        {
            if (t == null)
            {
                return 0;
            }
            if (t.IsInterface)
            {
                return t.GetMethods(Facts.AnyDeclared).Count(m => m.IsVirtual);
            }
            int own = t.GetMethods(Facts.AnyDeclared).Count(m => m.IsVirtual && m.GetBaseDefinition().DeclaringType == t);
            return NumVirtuals(t.BaseType) + own;
        }

        /// <summary>Reflection's view of one type: handle, token, module, attributes, parent,
        /// interfaces, generic arguments, and (unless withMembers is false) every declared method,
        /// constructor and field.</summary>
        public static JsonObject TypeFacts(string label, Type t, IReadOnlyDictionary<string, long> baseSizes, bool withMembers)
        {
            IntPtr th = t.TypeHandle.Value; // also makes the runtime load the type
            bool isInstance = t.IsGenericType && !t.IsGenericTypeDefinition;
            var o = new JsonObject
            {
                ["label"] = label,
                ["full_name"] = t.FullName,
                ["type_handle"] = Facts.Hex(th),
                ["module_handle"] = Facts.NativeModule(t.Module),
                ["module_path"] = t.Module.FullyQualifiedName,
                ["assembly"] = t.Assembly.GetName().Name,
                ["attributes"] = (long)unchecked((uint)t.Attributes),
                ["parent_type_handle"] = t.BaseType != null ? Facts.Hex(t.BaseType.TypeHandle.Value) : null,
                ["num_interfaces"] = t.GetInterfaces().Length,
                ["is_value_type"] = t.IsValueType,
                ["is_array"] = t.IsArray,
                ["is_enum"] = t.IsEnum,
                ["is_primitive"] = t.IsPrimitive,
                ["is_interface"] = t.IsInterface,
                ["is_generic_instance"] = isInstance,
                ["generic_args"] = Facts.Strings(isInstance
                    ? t.GetGenericArguments().Select(a => Facts.Hex(a.TypeHandle.Value))
                    : Enumerable.Empty<string>()),
                ["num_virtuals"] = NumVirtuals(t),
                ["has_cctor"] = t.TypeInitializer != null,
            };
            if (!t.IsArray)
            {
                o["metadata_token"] = Facts.Token(t.MetadataToken);
            }
            if (t.FullName != null && baseSizes.TryGetValue(t.FullName, out long size))
            {
                o["base_size"] = size;
            }
            if (!withMembers)
            {
                return o;
            }
            var methods = new JsonArray();
            IEnumerable<MethodBase> members = t.GetMethods(Facts.AnyDeclared).Cast<MethodBase>()
                .Concat(t.GetConstructors(Facts.AnyDeclared));
            foreach (MethodBase mi in members)
            {
                var entry = new JsonObject
                {
                    ["name"] = mi.Name,
                    ["method_desc"] = Facts.MethodDesc(mi),
                    ["is_static"] = mi.IsStatic,
                    ["is_virtual"] = mi.IsVirtual,
                    ["is_abstract"] = mi.IsAbstract,
                    ["is_constructor"] = mi.IsConstructor,
                    ["is_generic_definition"] = mi.IsGenericMethodDefinition,
                    ["attributes"] = (int)mi.Attributes & 0xFFFF,
                    ["impl_attributes"] = (int)mi.MethodImplementationFlags & 0xFFFF,
                    ["num_params"] = mi.GetParameters().Length,
                };
                if (mi is MethodInfo m && m.IsVirtual)
                {
                    MethodInfo baseDef = m.GetBaseDefinition();
                    if (baseDef.DeclaringType != m.DeclaringType)
                    {
                        // An override: it takes the vtable slot of the method it overrides.
                        entry["base_definition"] = Facts.MethodDesc(baseDef);
                    }
                }
                if (!t.IsArray)
                {
                    entry["metadata_token"] = Facts.Token(mi.MetadataToken);
                }
                methods.Add(entry);
            }
            o["methods"] = methods;
            var fields = new JsonArray();
            if (!t.IsArray)
            {
                foreach (FieldInfo f in t.GetFields(Facts.AnyDeclared))
                {
                    bool literal = f.IsLiteral;
                    fields.Add(new JsonObject
                    {
                        ["name"] = f.Name,
                        ["metadata_token"] = Facts.Token(f.MetadataToken),
                        ["is_static"] = f.IsStatic,
                        ["is_literal"] = literal,
                        ["is_thread_static"] = f.CustomAttributes.Any(a => a.AttributeType.Name.Contains("ThreadStatic", StringComparison.Ordinal)),
                        // FieldHandle.Value is the FieldDesc (literal fields have none).
                        ["field_desc"] = literal ? null : Facts.Hex(f.FieldHandle.Value),
                    });
                }
            }
            o["fields"] = fields;
            return o;
        }

        /// <summary>resolve(token) for rid 1, 2, ... of a metadata table until the runtime says the
        /// token is out of range; null for a token it cannot resolve.</summary>
        private static List<(int Token, T? Value)> ResolveTokens<T>(int table, Func<int, T?> resolve) where T : class
        {
            var result = new List<(int, T?)>();
            for (int rid = 1; rid < 1 << 24; rid++)
            {
                int token = table | rid;
                try
                {
                    result.Add((token, resolve(token)));
                }
                catch (ArgumentOutOfRangeException)
                {
                    break;
                }
                catch (Exception e) when (e.Message.Contains("not a valid", StringComparison.OrdinalIgnoreCase)
                                          || e.Message.Contains("out of range", StringComparison.OrdinalIgnoreCase))
                {
                    break;
                }
                catch (Exception)
                {
                    result.Add((token, null));
                }
            }
            return result;
        }

        /// <summary>What each TypeRef and MemberRef token of the assembly's manifest module resolves
        /// to: the type handle, or the MethodDesc (MethodHandle.Value) / FieldDesc (FieldHandle.Value).</summary>
        public static (JsonArray TypeRefs, JsonArray MemberRefs) ModuleRefFacts(Assembly assembly)
        {
            Module module = assembly.ManifestModule;
            var typeRefs = new JsonArray();
            foreach ((int token, Type? t) in ResolveTokens<Type>(0x01000000, module.ResolveType))
            {
                var entry = new JsonObject { ["token"] = Facts.Token(token), ["type_handle"] = null };
                if (t != null)
                {
                    entry["type_handle"] = Facts.Hex(t.TypeHandle.Value);
                    entry["name"] = t.FullName;
                }
                typeRefs.Add(entry);
            }
            var memberRefs = new JsonArray();
            foreach ((int token, MemberInfo? m) in ResolveTokens<MemberInfo>(0x0A000000, module.ResolveMember))
            {
                var entry = new JsonObject { ["token"] = Facts.Token(token), ["handle"] = null };
                if (m != null)
                {
                    entry["name"] = m.Name;
                    if (m is MethodBase mb)
                    {
                        entry["handle"] = Facts.MethodDesc(mb);
                        entry["kind"] = "method";
                    }
                    else if (m is FieldInfo f)
                    {
                        entry["handle"] = Facts.Hex(f.FieldHandle.Value);
                        entry["kind"] = "field";
                    }
                }
                memberRefs.Add(entry);
            }
            return (typeRefs, memberRefs);
        }

        /// <summary>The MethodDesc of a DynamicMethod, from its internal GetMethodDescriptor().</summary>
        public static RuntimeMethodHandle? DynamicMethodHandle(MethodInfo method)
        {
            for (Type? t = method.GetType(); t != null; t = t.BaseType)
            {
                MethodInfo? getter = t.GetMethod("GetMethodDescriptor", BindingFlags.NonPublic | BindingFlags.Instance);
                if (getter != null && getter.Invoke(method, null) is RuntimeMethodHandle handle)
                {
                    return handle;
                }
            }
            return null;
        }

        /// <summary>DynamicMethods with chosen names (one of them not ASCII), each static int(int),
        /// created and called once: their MethodDescs and names, for DynamicMethodDesc.MethodName,
        /// and the signature blob Reflection.Emit makes for static int(int) (DEFAULT, 1 parameter,
        /// I4 return, I4 parameter, then the end-of-signature byte DynamicMethod adds), for
        /// StoredSigMethodDesc.Sig / cSig.</summary>
        public static JsonArray NamedDynamicMethods(List<object> keepAlive)
        {
            SignatureHelper helper = SignatureHelper.GetMethodSigHelper(null, CallingConventions.Standard, typeof(int));
            helper.AddArgument(typeof(int));
            string signature = string.Join(" ", helper.GetSignature().Select(b => b.ToString("x2", System.Globalization.CultureInfo.InvariantCulture)));
            var result = new JsonArray();
            string[] names = { "Cdac_Lcg_Square", "Cdac_Lcg_Cube", "Cdac_Lcg_\u00dcnic\u00f8de_\u03bb" };
            for (int i = 0; i < names.Length; i++)
            {
                var dm = new DynamicMethod(names[i], typeof(int), new[] { typeof(int) });
                ILGenerator il = dm.GetILGenerator();
                il.Emit(OpCodes.Ldarg_0);
                for (int k = 0; k <= i; k++)
                {
                    il.Emit(OpCodes.Ldarg_0);
                    il.Emit(OpCodes.Mul);
                }
                il.Emit(OpCodes.Ret);
                var fn = dm.CreateDelegate<Func<int, int>>();
                fn(3);
                keepAlive.Add(dm);
                keepAlive.Add(fn);
                RuntimeMethodHandle? handle = DynamicMethodHandle(dm);
                result.Add(new JsonObject
                {
                    ["method_name"] = names[i],
                    ["method_desc"] = handle is { } h ? Facts.Hex(h.Value) : null,
                    ["signature"] = signature,
                    ["is_static"] = true,
                });
            }
            return result;
        }

        /// <summary>Generic methods: a definition, an unshared instantiation over a value type,
        /// shared instantiations over reference types (framework and emitted), with the type
        /// arguments.</summary>
        private static JsonArray GenericMethodInstances(LayoutTypes layout)
        {
            MethodInfo empty = typeof(System.Array).GetMethod("Empty")!;
            MethodInfo enumerableEmpty = typeof(Enumerable).GetMethod("Empty")!;
            MethodInfo echo = layout.Shape.GetMethod("Echo")!;
            var cases = new (string Label, Func<MethodInfo> Find)[]
            {
                ("Array.Empty<T>", () => empty),
                ("Array.Empty<Int32>", () => empty.MakeGenericMethod(typeof(int))),
                ("Array.Empty<String>", () => empty.MakeGenericMethod(typeof(string))),
                ("Enumerable.Empty<Int32>", () => enumerableEmpty.MakeGenericMethod(typeof(int))),
                ("Shape.Echo<T>", () => echo),
                ("Shape.Echo<Int32>", () => echo.MakeGenericMethod(typeof(int))),
                ("Shape.Echo<Point>", () => echo.MakeGenericMethod(layout.Point)),
                ("Shape.Echo<String>", () => echo.MakeGenericMethod(typeof(string))),
            };
            var result = new JsonArray();
            foreach ((string label, Func<MethodInfo> find) in cases)
            {
                try
                {
                    MethodInfo mi = find();
                    // MethodHandle makes the runtime create the instantiation's MethodDesc.
                    var o = new JsonObject
                    {
                        ["label"] = label,
                        ["name"] = mi.Name,
                        ["method_desc"] = Facts.MethodDesc(mi),
                        ["is_generic_definition"] = mi.IsGenericMethodDefinition,
                        ["generic_args"] = Facts.Strings(mi.IsGenericMethodDefinition
                            ? Enumerable.Empty<string>()
                            : mi.GetGenericArguments().Select(a => Facts.Hex(a.TypeHandle.Value))),
                        ["args_are_value_types"] = Facts.Array(mi.GetGenericArguments().Select(a => (JsonNode?)a.IsValueType)),
                    };
                    Facts.AddMethodFacts(o, mi);
                    result.Add(o);
                }
                catch (Exception e)
                {
                    Log.Write($"generic method {label}: {e.Message}");
                }
            }
            return result;
        }

        /// <summary>Everything tests/real/net8_type_layouts.rs checks the runtime's structures against.</summary>
        public static JsonObject GroundTruth(LayoutTypes layout, IEnumerable<Type> emittedTypes,
            IEnumerable<(string Label, Type Type, bool Members)> extraTypes, List<object> keepAlive)
        {
            Dictionary<string, long> baseSizes = layout.BaseSizes();
            Assembly corelib = typeof(object).Assembly;
            Type listInt = typeof(List<>).MakeGenericType(typeof(int));
            Type listString = typeof(List<>).MakeGenericType(typeof(string));
            Type listShape = typeof(List<>).MakeGenericType(layout.Shape);
            Type dictStringInt = typeof(Dictionary<,>).MakeGenericType(typeof(string), typeof(int));
            foreach (Type t in new[] { listInt, listString, listShape, dictStringInt })
            {
                keepAlive.Add(Activator.CreateInstance(t)!);
            }

            var types = new List<(string Label, Type? Type, bool Members)>
            {
                ("Shape", layout.Shape, true),
                ("Point", layout.Point, true),
            };
            types.AddRange(emittedTypes.Select(t => (t.Name, (Type?)t, true)));
            types.Add(("Object", typeof(object), true));
            types.Add(("String", typeof(string), true));
            types.Add(("Int32", typeof(int), true));
            types.Add(("DayOfWeek", typeof(DayOfWeek), true));
            types.Add(("Action", typeof(Action), true));
            types.Add(("IDisposable", typeof(IDisposable), true));
            types.Add(("Array", typeof(System.Array), false));
            types.Add(("Interop+Globalization", corelib.GetType("Interop+Globalization"), true));
            types.Add(("Int32[,]", typeof(int).MakeArrayType(2), true));
            types.Add(("Int32[]", typeof(int).MakeArrayType(), false));
            types.Add(("List<Int32>", listInt, true));
            types.Add(("List<String>", listString, false));
            types.Add(("List<Shape>", listShape, false));
            types.Add(("Dictionary<String,Int32>", dictStringInt, false));
            types.AddRange(extraTypes.Select(e => (e.Label, (Type?)e.Type, e.Members)));

            var typeEntries = new JsonArray();
            foreach ((string label, Type? t, bool members) in types)
            {
                if (t == null)
                {
                    Log.Write($"type {label}: not found on this runtime");
                    continue;
                }
                try
                {
                    typeEntries.Add(TypeFacts(label, t, baseSizes, members));
                }
                catch (Exception e)
                {
                    Log.Write($"type {label}: {e.Message}");
                }
            }

            AppDomain domain = AppDomain.CurrentDomain;
            Type? canon = corelib.GetType("System.__Canon");
            var result = new JsonObject
            {
                ["app_domain"] = new JsonObject { ["friendly_name"] = domain.FriendlyName, ["id"] = domain.Id },
                ["canon_type_handle"] = canon != null ? Facts.Hex(canon.TypeHandle.Value) : null,
                ["types"] = typeEntries,
                ["generic_methods"] = GenericMethodInstances(layout),
                ["dynamic_methods"] = NamedDynamicMethods(keepAlive),
            };

            // Resolving every TypeRef and MemberRef loads types (and the exceptions of unresolvable
            // ones load assemblies): do it first, then list the assemblies, last of all.
            var resolve = new HashSet<string>(StringComparer.Ordinal)
            {
                "System.Linq", "System.Collections", "System.Text.RegularExpressions",
            };
            var refs = new Dictionary<string, (JsonArray, JsonArray)>(StringComparer.Ordinal);
            foreach (Assembly a in domain.GetAssemblies())
            {
                string name = a.GetName().Name ?? "";
                if (resolve.Contains(name) && !refs.ContainsKey(name))
                {
                    try
                    {
                        refs[name] = ModuleRefFacts(a);
                    }
                    catch (Exception e)
                    {
                        Log.Write($"references of {name}: {e.Message}");
                    }
                }
            }
            var assemblies = new JsonArray();
            foreach (Assembly a in domain.GetAssemblies())
            {
                try
                {
                    JsonObject facts = Facts.AssemblyFacts(a);
                    if (refs.TryGetValue(a.GetName().Name ?? "", out (JsonArray TypeRefs, JsonArray MemberRefs) r))
                    {
                        // Each array goes into one manifest only once.
                        facts["type_refs"] = r.TypeRefs.DeepClone();
                        facts["member_refs"] = r.MemberRefs.DeepClone();
                    }
                    assemblies.Add(facts);
                }
                catch (Exception e)
                {
                    Log.Write($"assembly {a}: {e.Message}");
                }
            }
            result["assemblies"] = assemblies;
            return result;
        }
    }
}
