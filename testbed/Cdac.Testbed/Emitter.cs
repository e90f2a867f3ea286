// System.Reflection.Emit: static int(int) methods, each with a known shape of IL exception clauses
// (typed catch, finally, fault, filter, nested), one very large method and a looping driver, in
// a non-collectible assembly (Cdac.Testbed.Emitted), and two methods in a collectible one
// (Cdac.Testbed.Collectible). C# cannot write a fault clause, hence IL.

using System;
using System.Collections.Generic;
using System.Linq;
using System.Reflection;
using System.Reflection.Emit;
using System.Text.Json.Nodes;

namespace Cdac.Testbed
{
    /// <summary>A created type's methods as the manifest describes them, and delegates to call them.</summary>
    internal sealed class EmittedType
    {
        public EmittedType(Type type, IReadOnlyDictionary<string, string[]> expectedClauses)
        {
            Type = type;
            ExpectedClauses = expectedClauses;
        }

        public Type Type { get; }

        /// <summary>Method name to the clause kinds it was emitted with.</summary>
        public IReadOnlyDictionary<string, string[]> ExpectedClauses { get; }
    }

    internal sealed class Emitter
    {
        private static readonly Type[] IntArg = { typeof(int) };
        private static readonly Type[] StringArg = { typeof(string) };
        private static readonly Type Ioe = typeof(InvalidOperationException);
        private static readonly Type Ae = typeof(ArgumentException);

        public static (AssemblyBuilder, ModuleBuilder) NewAssembly(string name, bool collectible)
        {
            AssemblyBuilder ab = AssemblyBuilder.DefineDynamicAssembly(new AssemblyName(name),
                collectible ? AssemblyBuilderAccess.RunAndCollect : AssemblyBuilderAccess.Run);
            return (ab, ab.DefineDynamicModule(name));
        }

        private static TypeBuilder NewStaticType(ModuleBuilder module, string fullName) =>
            module.DefineType(fullName, TypeAttributes.Public | TypeAttributes.Abstract
                | TypeAttributes.Sealed | TypeAttributes.Class);

        private static (MethodBuilder, ILGenerator) NewMethod(TypeBuilder tb, string name)
        {
            MethodBuilder mb = tb.DefineMethod(name, MethodAttributes.Public | MethodAttributes.Static,
                typeof(int), IntArg);
            return (mb, mb.GetILGenerator());
        }

        // Small IL helpers -----------------------------------------------------------------------

        private static void Ldc(ILGenerator il, int v) => il.Emit(OpCodes.Ldc_I4, v);

        /// <summary>if (x cond value) throw new excType(message), where `skip` is the branch
        /// opcode taken when the condition does NOT hold.</summary>
        private static void ThrowIf(ILGenerator il, Type excType, OpCode skipOp, int value, string message)
        {
            Label skip = il.DefineLabel();
            il.Emit(OpCodes.Ldarg_0);
            Ldc(il, value);
            il.Emit(skipOp, skip);
            il.Emit(OpCodes.Ldstr, message);
            il.Emit(OpCodes.Newobj, excType.GetConstructor(StringArg)!);
            il.Emit(OpCodes.Throw);
            il.MarkLabel(skip);
        }

        private static void BumpCounter(ILGenerator il, FieldInfo field, int by)
        {
            il.Emit(OpCodes.Ldsfld, field);
            Ldc(il, by);
            il.Emit(OpCodes.Add);
            il.Emit(OpCodes.Stsfld, field);
        }

        private static void SetLocal(ILGenerator il, LocalBuilder local, int value)
        {
            Ldc(il, value);
            il.Emit(OpCodes.Stloc, local);
        }

        private static void ReturnLocal(ILGenerator il, LocalBuilder local)
        {
            il.Emit(OpCodes.Ldloc, local);
            il.Emit(OpCodes.Ret);
        }

        // The handler-carrying methods -------------------------------------------------------------

        /// <summary>Cdac.Testbed.Handlers: the EH methods, a Counter field their finally (+1) and
        /// fault (+100) handlers bump, and Drive(n), a loop calling all of them and Large from
        /// managed code.</summary>
        public static EmittedType EmitHandlers(ModuleBuilder module, string fullName, MethodInfo large)
        {
            TypeBuilder tb = NewStaticType(module, fullName);
            FieldBuilder counter = tb.DefineField("Counter", typeof(int), FieldAttributes.Public | FieldAttributes.Static);
            var expected = new Dictionary<string, string[]>();
            var builders = new Dictionary<string, MethodBuilder>();

            // try { if (x < 0) throw IOE; r = x*3+1 } catch (InvalidOperationException) { r = -1 }
            (MethodBuilder mb, ILGenerator il) = NewMethod(tb, "TryCatchTyped");
            LocalBuilder r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            ThrowIf(il, Ioe, OpCodes.Bge, 0, "negative");
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 3); il.Emit(OpCodes.Mul); Ldc(il, 1); il.Emit(OpCodes.Add);
            il.Emit(OpCodes.Stloc, r);
            il.BeginCatchBlock(Ioe);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -1);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["TryCatchTyped"] = new[] { "typed" };
            builders["TryCatchTyped"] = mb;

            // r = 0; try { r = x + 7 } finally { Counter++ }
            (mb, il) = NewMethod(tb, "TryFinally");
            r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 7); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, r);
            il.BeginFinallyBlock();
            BumpCounter(il, counter, 1);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["TryFinally"] = new[] { "finally" };
            builders["TryFinally"] = mb;

            // try { if (x < 0) throw ArgumentException; r = x ^ 0x55 } fault { Counter += 100 }
            (mb, il) = NewMethod(tb, "TryFault");
            r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            ThrowIf(il, Ae, OpCodes.Bge, 0, "negative for fault");
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 0x55); il.Emit(OpCodes.Xor); il.Emit(OpCodes.Stloc, r);
            il.BeginFaultBlock();
            BumpCounter(il, counter, 100);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["TryFault"] = new[] { "fault" };
            builders["TryFault"] = mb;

            // try { if (x < 0) throw ArgumentException; r = x - 5 }
            // filter { e is ArgumentException && x > -1000 } { r = -2 }
            (mb, il) = NewMethod(tb, "TryFilter");
            r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            ThrowIf(il, Ae, OpCodes.Bge, 0, "negative for filter");
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 5); il.Emit(OpCodes.Sub); il.Emit(OpCodes.Stloc, r);
            il.BeginExceptFilterBlock();
            il.Emit(OpCodes.Isinst, Ae);
            il.Emit(OpCodes.Ldnull);
            il.Emit(OpCodes.Cgt_Un);
            il.Emit(OpCodes.Ldarg_0); Ldc(il, -1000); il.Emit(OpCodes.Cgt);
            il.Emit(OpCodes.And);
            il.BeginCatchBlock(null); // ends the filter (endfilter) and starts its handler
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -2);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["TryFilter"] = new[] { "filter" };
            builders["TryFilter"] = mb;

            // try { try { if (x < 0) throw IOE; if (x == 0) throw AE; r = x * x }
            //       catch (ArgumentException) { r = -10 } finally { Counter++ } }
            // catch (InvalidOperationException) { r = -20 }
            (mb, il) = NewMethod(tb, "NestedTryCatchFinally");
            r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock(); // outer
            il.BeginExceptionBlock(); // inner
            ThrowIf(il, Ioe, OpCodes.Bge, 0, "negative nested");
            ThrowIf(il, Ae, OpCodes.Bne_Un, 0, "zero nested");
            il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Mul); il.Emit(OpCodes.Stloc, r);
            il.BeginCatchBlock(Ae);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -10);
            il.BeginFinallyBlock();
            BumpCounter(il, counter, 1);
            il.EndExceptionBlock(); // inner
            il.BeginCatchBlock(Ioe);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -20);
            il.EndExceptionBlock(); // outer
            ReturnLocal(il, r);
            expected["NestedTryCatchFinally"] = new[] { "typed", "finally", "typed" };
            builders["NestedTryCatchFinally"] = mb;

            // try { if (x < 0) throw IOE; if (x == 0) throw AE; r = x + 100 }
            // catch (InvalidOperationException) { r = -30 } catch (ArgumentException) { r = -40 }
            (mb, il) = NewMethod(tb, "TwoCatches");
            r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            ThrowIf(il, Ioe, OpCodes.Bge, 0, "negative two");
            ThrowIf(il, Ae, OpCodes.Bne_Un, 0, "zero two");
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 100); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, r);
            il.BeginCatchBlock(Ioe);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -30);
            il.BeginCatchBlock(Ae);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -40);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["TwoCatches"] = new[] { "typed", "typed" };
            builders["TwoCatches"] = mb;

            // Drive(n): a loop calling all of the above (and the large method), so handlers run
            // with managed frames only; v = (i & 127) - 1 makes 1 in 128 calls throw.
            (mb, il) = NewMethod(tb, "Drive");
            LocalBuilder i = il.DeclareLocal(typeof(int));
            LocalBuilder acc = il.DeclareLocal(typeof(int));
            LocalBuilder v = il.DeclareLocal(typeof(int));
            Label body = il.DefineLabel();
            Label cond = il.DefineLabel();
            SetLocal(il, i, 0);
            SetLocal(il, acc, 0);
            il.Emit(OpCodes.Br, cond);
            il.MarkLabel(body);
            il.Emit(OpCodes.Ldloc, i); Ldc(il, 127); il.Emit(OpCodes.And); Ldc(il, 1); il.Emit(OpCodes.Sub);
            il.Emit(OpCodes.Stloc, v);
            foreach (string name in new[] { "TryCatchTyped", "TryFinally", "TryFilter", "NestedTryCatchFinally", "TwoCatches" })
            {
                il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, v);
                il.Emit(OpCodes.Call, builders[name]);
                il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc);
            }
            il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i); // i >= 0: the fault never escapes
            il.Emit(OpCodes.Call, builders["TryFault"]);
            il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc);
            il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i);
            il.Emit(OpCodes.Call, large);
            il.Emit(OpCodes.Xor); il.Emit(OpCodes.Stloc, acc);
            il.Emit(OpCodes.Ldloc, i); Ldc(il, 1); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, i);
            il.MarkLabel(cond);
            il.Emit(OpCodes.Ldloc, i); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Blt, body);
            ReturnLocal(il, acc);
            expected["Drive"] = System.Array.Empty<string>();

            return new EmittedType(tb.CreateType(), expected);
        }

        /// <summary>Cdac.Testbed.Big::Large: one long non-foldable chain, x = (x*k1 + k2) ^ (x >>> s),
        /// `steps` times: about 8 IL instructions and ~20 bytes of optimized x64 per step, below
        /// the JIT's MinOpts limits (20,000 IL instructions, 60,000 IL bytes) so that tier 1
        /// still optimizes it.</summary>
        public static (TypeBuilder, MethodBuilder) DefineLarge(ModuleBuilder module, string fullName, int steps)
        {
            TypeBuilder tb = NewStaticType(module, fullName);
            (MethodBuilder mb, ILGenerator il) = NewMethod(tb, "Large");
            il.Emit(OpCodes.Ldarg_0);
            ulong seed = 0x9E3779B9;
            for (int n = 0; n < steps; n++)
            {
                seed = unchecked(seed * 6364136223846793005UL + 1442695040888963407UL);
                int k1 = (int)(((seed >> 33) | 1) & 0x7FFFFFFF);
                int k2 = (int)(((seed >> 7) & 0x3FFFFFFF) | 0x01000000);
                int s = 1 + (int)((seed >> 59) % 31);
                Ldc(il, k1); il.Emit(OpCodes.Mul);
                Ldc(il, k2); il.Emit(OpCodes.Add);
                il.Emit(OpCodes.Dup);
                Ldc(il, s); il.Emit(OpCodes.Shr_Un);
                il.Emit(OpCodes.Xor);
            }
            il.Emit(OpCodes.Ret);
            return (tb, mb);
        }

        /// <summary>Cdac.Testbed.Collectible.Worker: a guarded method with a typed catch and a
        /// plain loop, in the collectible assembly.</summary>
        public static EmittedType EmitCollectibleWorker(ModuleBuilder module, string fullName)
        {
            TypeBuilder tb = NewStaticType(module, fullName);
            var expected = new Dictionary<string, string[]>();
            (MethodBuilder _, ILGenerator il) = NewMethod(tb, "Guarded");
            LocalBuilder r = il.DeclareLocal(typeof(int));
            il.BeginExceptionBlock();
            ThrowIf(il, Ioe, OpCodes.Bge, 0, "negative collectible");
            il.Emit(OpCodes.Ldarg_0); Ldc(il, 11); il.Emit(OpCodes.Mul); il.Emit(OpCodes.Stloc, r);
            il.BeginCatchBlock(Ioe);
            il.Emit(OpCodes.Pop);
            SetLocal(il, r, -3);
            il.EndExceptionBlock();
            ReturnLocal(il, r);
            expected["Guarded"] = new[] { "typed" };

            // SumTo(x): acc = 0; for (i = 0; i < x; i++) acc += i * 3; return acc
            (_, il) = NewMethod(tb, "SumTo");
            LocalBuilder i = il.DeclareLocal(typeof(int));
            LocalBuilder acc = il.DeclareLocal(typeof(int));
            Label body = il.DefineLabel();
            Label cond = il.DefineLabel();
            SetLocal(il, i, 0);
            SetLocal(il, acc, 0);
            il.Emit(OpCodes.Br, cond);
            il.MarkLabel(body);
            il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i); Ldc(il, 3); il.Emit(OpCodes.Mul);
            il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc);
            il.Emit(OpCodes.Ldloc, i); Ldc(il, 1); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, i);
            il.MarkLabel(cond);
            il.Emit(OpCodes.Ldloc, i); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Blt, body);
            ReturnLocal(il, acc);
            expected["SumTo"] = System.Array.Empty<string>();
            return new EmittedType(tb.CreateType(), expected);
        }

        /// <summary>Manifest entries for a created type's methods, read back from the runtime, and
        /// a delegate for each. Fails when the IL EH table is not the one emitted.</summary>
        public static List<JsonObject> Describe(EmittedType emitted, bool collectible,
            IDictionary<string, Func<int, int>> delegates, bool large = false)
        {
            var entries = new List<JsonObject>();
            foreach ((string name, string[] kinds) in emitted.ExpectedClauses)
            {
                MethodInfo mi = emitted.Type.GetMethod(name)
                    ?? throw new InvalidOperationException($"{name} not found on {emitted.Type}");
                MethodBody body = mi.GetMethodBody()
                    ?? throw new InvalidOperationException($"{name} has no body");
                List<string> clauses = Facts.ClauseKinds(mi);
                if (!clauses.OrderBy(c => c, StringComparer.Ordinal).SequenceEqual(kinds.OrderBy(c => c, StringComparer.Ordinal)))
                {
                    throw new InvalidOperationException(
                        $"{name}: emitted [{string.Join(", ", kinds)}] but the IL EH table has [{string.Join(", ", clauses)}]");
                }
                var o = new JsonObject
                {
                    ["type"] = emitted.Type.FullName,
                    ["name"] = name,
                    ["full_name"] = Facts.Name(mi),
                    ["method_desc"] = Facts.MethodDesc(mi),
                    ["clauses"] = Facts.Strings(clauses),
                    ["collectible"] = collectible,
                    ["large"] = large,
                    ["il_size"] = body.GetILAsByteArray()?.Length ?? 0,
                    ["assembly"] = emitted.Type.Assembly.GetName().Name,
                    ["function_pointer"] = Facts.FunctionPointer(mi.MethodHandle),
                };
                Facts.AddMethodFacts(o, mi);
                entries.Add(o);
                delegates[name] = mi.CreateDelegate<Func<int, int>>();
            }
            return entries;
        }
    }
}
