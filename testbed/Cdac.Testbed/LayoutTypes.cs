// Cdac.Testbed.Types: a dynamic assembly of types with every shape the layout checks need
// (tests/real/net8_type_layouts.rs): instance fields of three sizes, static, thread-static and
// reference statics, a default constructor, virtual, non-virtual, overriding and explicit
// (MethodImpl) interface methods, a generic method, a value type, and methods that measure the GC
// size of a new object.

using System;
using System.Collections.Generic;
using System.Reflection;
using System.Reflection.Emit;

namespace Cdac.Testbed
{
    internal sealed class LayoutTypes
    {
        public LayoutTypes()
        {
            (Assembly, ModuleBuilder module) = Emitter.NewAssembly("Cdac.Testbed.Types", collectible: false);
            const MethodAttributes pub = MethodAttributes.Public | MethodAttributes.HideBySig;
            const MethodAttributes virtNew = pub | MethodAttributes.Virtual | MethodAttributes.NewSlot;
            const MethodAttributes pubStatic = MethodAttributes.Public | MethodAttributes.Static;

            TypeBuilder tb = module.DefineType("Cdac.Testbed.Types.Shape", TypeAttributes.Public | TypeAttributes.Class,
                typeof(object), new[] { typeof(IDisposable), typeof(IComparable) });
            FieldBuilder fa = tb.DefineField("A", typeof(int), FieldAttributes.Public);
            tb.DefineField("B", typeof(long), FieldAttributes.Public);
            tb.DefineField("C", typeof(object), FieldAttributes.Public);
            tb.DefineField("S1", typeof(int), FieldAttributes.Public | FieldAttributes.Static);
            tb.DefineField("S2", typeof(string), FieldAttributes.Public | FieldAttributes.Static);
            FieldBuilder ts = tb.DefineField("T1", typeof(int), FieldAttributes.Public | FieldAttributes.Static);
            ts.SetCustomAttribute(new CustomAttributeBuilder(
                typeof(ThreadStaticAttribute).GetConstructor(Type.EmptyTypes)!, System.Array.Empty<object>()));
            FieldBuilder sink = tb.DefineField("Sink", typeof(object), FieldAttributes.Public | FieldAttributes.Static);
            ConstructorBuilder ctor = tb.DefineDefaultConstructor(MethodAttributes.Public);

            MethodBuilder Define(string name, MethodAttributes attrs, Type? ret, Type[] args, Action<ILGenerator> body)
            {
                MethodBuilder mb = tb.DefineMethod(name, attrs, ret, args);
                body(mb.GetILGenerator());
                return mb;
            }

            // Area and Describe are never called (tests/real/coverage_net8.rs relies on it).
            Define("Area", pub, typeof(int), Type.EmptyTypes, il =>
            {
                il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldfld, fa); il.Emit(OpCodes.Ldc_I4_2);
                il.Emit(OpCodes.Mul); il.Emit(OpCodes.Ret);
            });
            Define("Describe", virtNew, typeof(int), Type.EmptyTypes, il =>
            {
                il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldfld, fa); il.Emit(OpCodes.Ret);
            });
            Define("ToString", pub | MethodAttributes.Virtual, typeof(string), Type.EmptyTypes, il =>
            {
                il.Emit(OpCodes.Ldstr, "Shape"); il.Emit(OpCodes.Ret);
            });
            Define("CompareTo", virtNew | MethodAttributes.Final, typeof(int), new[] { typeof(object) }, il =>
            {
                il.Emit(OpCodes.Ldc_I4_0); il.Emit(OpCodes.Ret);
            });
            MethodBuilder dispose = Define("System.IDisposable.Dispose",
                MethodAttributes.Private | MethodAttributes.HideBySig | MethodAttributes.Virtual
                | MethodAttributes.NewSlot | MethodAttributes.Final, null, Type.EmptyTypes, il => il.Emit(OpCodes.Ret));
            tb.DefineMethodOverride(dispose, typeof(IDisposable).GetMethod("Dispose")!);

            MethodBuilder echo = tb.DefineMethod("Echo", pubStatic);
            GenericTypeParameterBuilder[] gp = echo.DefineGenericParameters("T");
            echo.SetReturnType(gp[0]);
            echo.SetParameters(gp[0]);
            ILGenerator eil = echo.GetILGenerator();
            eil.Emit(OpCodes.Ldarg_0);
            eil.Emit(OpCodes.Ret);

            MethodInfo allocated = typeof(GC).GetMethod("GetAllocatedBytesForCurrentThread")!;

            // GC.GetAllocatedBytesForCurrentThread() around one allocation (kept in a static).
            Action<ILGenerator> Measure(Action<ILGenerator> make) => il =>
            {
                il.DeclareLocal(typeof(long));
                il.Emit(OpCodes.Call, allocated); il.Emit(OpCodes.Stloc_0);
                make(il);
                il.Emit(OpCodes.Stsfld, sink);
                il.Emit(OpCodes.Call, allocated); il.Emit(OpCodes.Ldloc_0); il.Emit(OpCodes.Sub);
                il.Emit(OpCodes.Ret);
            };
            Define("MeasureShape", pubStatic, typeof(long), Type.EmptyTypes,
                Measure(il => il.Emit(OpCodes.Newobj, ctor)));
            Define("MeasureObject", pubStatic, typeof(long), Type.EmptyTypes,
                Measure(il => il.Emit(OpCodes.Newobj, typeof(object).GetConstructor(Type.EmptyTypes)!)));
            Define("MeasureEmptyIntArray", pubStatic, typeof(long), Type.EmptyTypes,
                Measure(il => { il.Emit(OpCodes.Ldc_I4_0); il.Emit(OpCodes.Newarr, typeof(int)); }));
            Shape = tb.CreateType();

            TypeBuilder pb = module.DefineType("Cdac.Testbed.Types.Point",
                TypeAttributes.Public | TypeAttributes.Sealed | TypeAttributes.SequentialLayout, typeof(ValueType));
            FieldBuilder px = pb.DefineField("X", typeof(int), FieldAttributes.Public);
            pb.DefineField("Y", typeof(int), FieldAttributes.Public);
            MethodBuilder pm = pb.DefineMethod("ToString", pub | MethodAttributes.Virtual, typeof(string), Type.EmptyTypes);
            ILGenerator pil = pm.GetILGenerator();
            pil.Emit(OpCodes.Ldstr, "Point"); pil.Emit(OpCodes.Ret);
            pm = pb.DefineMethod("Sum", pub, typeof(int), Type.EmptyTypes);
            pil = pm.GetILGenerator();
            pil.Emit(OpCodes.Ldarg_0); pil.Emit(OpCodes.Ldfld, px); pil.Emit(OpCodes.Ret);
            Point = pb.CreateType();
        }

        public AssemblyBuilder Assembly { get; }

        public Type Shape { get; }

        public Type Point { get; }

        /// <summary>Bytes one allocation takes (the smallest of five tries): the MethodTable's
        /// BaseSize for objects of fixed size, and for an empty array.</summary>
        public Dictionary<string, long> BaseSizes()
        {
            var sizes = new Dictionary<string, long>();
            foreach ((string key, string name) in new[] {
                ("Cdac.Testbed.Types.Shape", "MeasureShape"), ("System.Object", "MeasureObject"),
                ("System.Int32[]", "MeasureEmptyIntArray") })
            {
                MethodInfo mi = Shape.GetMethod(name, BindingFlags.Public | BindingFlags.Static)!;
                long best = long.MaxValue;
                for (int i = 0; i < 5; i++)
                {
                    best = Math.Min(best, (long)mi.Invoke(null, null)!);
                }
                sizes[key] = best;
            }
            return sizes;
        }
    }
}
