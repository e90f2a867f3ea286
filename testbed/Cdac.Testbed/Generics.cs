// Generic code of every sharing kind, all of it called (and called often enough to be tiered up):
// instantiations over reference types share one canonical body (over System.__Canon) and get
// their exact types from a generic dictionary; instantiations over int and over a struct get
// code of their own. Both generic methods and methods of generic types.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;

namespace Cdac.Testbed.Generics
{
    public readonly struct Pair
    {
        public Pair(int left, int right)
        {
            Left = left;
            Right = right;
        }

        public int Left { get; }
        public int Right { get; }
    }

    public sealed class Box<T>
    {
        private readonly T _value;

        public Box(T value) => _value = value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public T Get() => _value;

        /// <summary>A generic method of a generic type.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        public TOut Map<TOut>(Func<T, TOut> f) => f(_value);
    }

    public static class GenericMethods
    {
        [MethodImpl(MethodImplOptions.NoInlining)]
        public static T Identity<T>(T value) => value;

        [MethodImpl(MethodImplOptions.NoInlining)]
        public static int CountDistinct<T>(IEnumerable<T> items) => new HashSet<T>(items).Count;
    }

    internal static class GenericShapes
    {
        private static readonly Box<string> s_boxString = new("shared");
        private static readonly Box<object> s_boxObject = new(new object());
        private static readonly Box<int> s_boxInt = new(42);
        private static readonly Box<Pair> s_boxPair = new(new Pair(3, 4));
        private static readonly string[] s_words = { "a", "b", "a", "c" };
        private static readonly int[] s_numbers = { 1, 2, 2, 3, 3, 3 };
        private static readonly Func<string, int> s_length = s => s.Length;
        private static readonly Func<int, string> s_text = i => i.ToString(System.Globalization.CultureInfo.InvariantCulture);

        /// <summary>Calls every instantiation once; deterministic.</summary>
        public static long Exercise()
        {
            long total = 0;
            total += s_boxString.Get().Length;
            total += s_boxObject.Get().GetHashCode() != 0 ? 1 : 0;
            total += s_boxInt.Get();
            total += s_boxPair.Get().Left;
            total += s_boxString.Map(s_length);
            total += s_boxInt.Map(s_text).Length;
            total += GenericMethods.Identity("identity").Length;
            total += GenericMethods.Identity(7);
            total += GenericMethods.Identity(new Pair(5, 6)).Right;
            total += GenericMethods.CountDistinct(s_words);
            total += GenericMethods.CountDistinct(s_numbers);
            return total;
        }

        /// <summary>The instantiations Exercise calls: label, method (exact instantiation), and
        /// the type and method arguments.</summary>
        private static IEnumerable<(string Label, MethodInfo Method)> Instantiations()
        {
            MethodInfo identity = typeof(GenericMethods).GetMethod(nameof(GenericMethods.Identity))!;
            MethodInfo countDistinct = typeof(GenericMethods).GetMethod(nameof(GenericMethods.CountDistinct))!;
            yield return ("Box<String>.Get", typeof(Box<string>).GetMethod("Get")!);
            yield return ("Box<Object>.Get", typeof(Box<object>).GetMethod("Get")!);
            yield return ("Box<Int32>.Get", typeof(Box<int>).GetMethod("Get")!);
            yield return ("Box<Pair>.Get", typeof(Box<Pair>).GetMethod("Get")!);
            yield return ("Box<String>.Map<Int32>", typeof(Box<string>).GetMethod("Map")!.MakeGenericMethod(typeof(int)));
            yield return ("Box<Int32>.Map<String>", typeof(Box<int>).GetMethod("Map")!.MakeGenericMethod(typeof(string)));
            yield return ("Identity<String>", identity.MakeGenericMethod(typeof(string)));
            yield return ("Identity<Int32>", identity.MakeGenericMethod(typeof(int)));
            yield return ("Identity<Pair>", identity.MakeGenericMethod(typeof(Pair)));
            yield return ("CountDistinct<String>", countDistinct.MakeGenericMethod(typeof(string)));
            yield return ("CountDistinct<Int32>", countDistinct.MakeGenericMethod(typeof(int)));
        }

        /// <summary>The same method with every reference-type argument replaced by __Canon: the
        /// instantiation whose code the shared ones run. Null when reflection refuses it.</summary>
        private static MethodInfo? Canonical(MethodInfo method, Type canon)
        {
            Type Canonize(Type t) => t.IsValueType ? t : canon;
            try
            {
                Type declaring = method.DeclaringType!;
                if (declaring.IsGenericType)
                {
                    Type def = declaring.GetGenericTypeDefinition();
                    declaring = def.MakeGenericType(declaring.GetGenericArguments().Select(Canonize).ToArray());
                }
                MethodInfo m = (MethodInfo)MethodBase.GetMethodFromHandle(
                    (method.IsGenericMethod ? method.GetGenericMethodDefinition() : method).MethodHandle,
                    declaring.TypeHandle)!;
                if (method.IsGenericMethod)
                {
                    m = m.MakeGenericMethod(method.GetGenericArguments().Select(Canonize).ToArray());
                }
                return m;
            }
            catch (Exception e) when (e is ArgumentException or NotSupportedException or InvalidOperationException)
            {
                return null;
            }
        }

        public static JsonArray Describe()
        {
            Type? canon = typeof(object).Assembly.GetType("System.__Canon");
            var result = new JsonArray();
            foreach ((string label, MethodInfo mi) in Instantiations())
            {
                Type[] typeArgs = mi.DeclaringType!.IsGenericType ? mi.DeclaringType.GetGenericArguments() : Type.EmptyTypes;
                Type[] methodArgs = mi.IsGenericMethod ? mi.GetGenericArguments() : Type.EmptyTypes;
                bool shared = typeArgs.Concat(methodArgs).Any(t => !t.IsValueType);
                JsonObject o = Facts.Method(mi, label);
                o["shared"] = shared;
                o["type_args"] = Facts.Strings(typeArgs.Select(t => t.FullName ?? t.Name));
                o["method_args"] = Facts.Strings(methodArgs.Select(t => t.FullName ?? t.Name));
                o["type_arg_handles"] = Facts.Strings(typeArgs.Select(t => Facts.Hex(t.TypeHandle.Value)));
                o["method_arg_handles"] = Facts.Strings(methodArgs.Select(t => Facts.Hex(t.TypeHandle.Value)));
                MethodInfo? canonical = shared && canon != null ? Canonical(mi, canon) : null;
                o["canonical_method_desc"] = canonical != null ? Facts.MethodDesc(canonical) : null;
                result.Add(o);
            }
            return result;
        }
    }
}
