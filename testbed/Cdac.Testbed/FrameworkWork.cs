// Framework code and System.Linq.Expressions lambdas: calls into framework APIs so that their
// generic instantiations and helpers get JIT'ed (or their ReadyToRun code runs), and expression
// lambdas compiled to LCG dynamic methods. Every result is deterministic: the --rounds checksums
// are built from them.

using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Globalization;
using System.Linq;
using System.Linq.Expressions;
using System.Text;
using System.Text.Json;
using System.Text.RegularExpressions;

namespace Cdac.Testbed
{
    /// <summary>Expression lambdas; each Compile() makes one LCG DynamicMethod.</summary>
    internal sealed class Lambdas
    {
        public Lambdas()
        {
            ParameterExpression x = Expression.Parameter(typeof(int), "x");
            Select = Compile<Func<int, int>>(Expression.ExclusiveOr(
                Expression.Add(Expression.Multiply(x, Const(31)), Const(7)),
                Expression.RightShift(x, Const(3))), x);
            Where = Compile<Func<int, bool>>(Expression.NotEqual(Expression.Modulo(x, Const(3)), Const(0)), x);
            Key = Compile<Func<int, int>>(Expression.Modulo(x, Const(97)), x);
            Group = Compile<Func<int, int>>(Expression.And(x, Const(15)), x);
            ToText = Compile<Func<int, string>>(Expression.Call(x, typeof(int).GetMethod("ToString", Type.EmptyTypes)!), x);

            // A lambda with a loop and locals: sum of (i * 13) for i < x.
            ParameterExpression i = Expression.Variable(typeof(int), "i");
            ParameterExpression acc = Expression.Variable(typeof(int), "acc");
            LabelTarget brk = Expression.Label(typeof(int), "done");
            Loop = Compile<Func<int, int>>(Expression.Block(
                new[] { i, acc },
                Expression.Assign(i, Const(0)),
                Expression.Assign(acc, Const(0)),
                Expression.Loop(
                    Expression.IfThenElse(
                        Expression.LessThan(i, x),
                        Expression.Block(
                            Expression.AddAssign(acc, Expression.Multiply(i, Const(13))),
                            Expression.PostIncrementAssign(i)),
                        Expression.Break(brk, acc)),
                    brk)), x);

            // A family of distinct arithmetic lambdas: many LCG methods of different shapes.
            for (int k = 0; k < 24; k++)
            {
                ParameterExpression y = Expression.Parameter(typeof(int), "y");
                Expression body = Expression.Add(Expression.Multiply(y, Const(2 * k + 1)), Const(k * k));
                if (k % 2 == 1)
                {
                    body = Expression.ExclusiveOr(body, Expression.LeftShift(y, Const(k % 7 + 1)));
                }
                if (k % 3 == 0)
                {
                    body = Expression.Condition(Expression.GreaterThan(y, Const(k)), body, Expression.Negate(body));
                }
                Family.Add(Compile<Func<int, int>>(body, y));
            }
        }

        public Func<int, int> Select { get; }
        public Func<int, bool> Where { get; }
        public Func<int, int> Key { get; }
        public Func<int, int> Group { get; }
        public Func<int, string> ToText { get; }
        public Func<int, int> Loop { get; }
        public List<Func<int, int>> Family { get; } = new();

        /// <summary>The named lambdas, by the names the manifest's lcg_methods use.</summary>
        public IEnumerable<(string Name, Delegate Fn)> Named => new (string, Delegate)[]
        {
            ("select", Select), ("where", Where), ("key", Key), ("group", Group),
            ("tostring", ToText), ("loop", Loop),
        };

        public int Count => Named.Count() + Family.Count;

        private static ConstantExpression Const(int v) => Expression.Constant(v, typeof(int));

        private static T Compile<T>(Expression body, params ParameterExpression[] parameters) where T : Delegate =>
            Expression.Lambda<T>(body, parameters).Compile();

        /// <summary>Calls every lambda a few times.</summary>
        public long Exercise()
        {
            long total = 0;
            for (int v = 0; v < 40; v++)
            {
                total += Select(v) + Key(v) + Group(v) + Loop(v % 20);
                total += Where(v) ? 1 : 0;
                total += ToText(v).Length;
                foreach (Func<int, int> f in Family)
                {
                    total += f(v);
                }
            }
            return total;
        }
    }

    /// <summary>Calls into framework APIs: Regex (interpreted and compiled), LINQ over the LCG
    /// lambdas, collections, formatting, System.Text.Json.</summary>
    internal sealed class FrameworkWork
    {
        private readonly Lambdas _lambdas;
        private readonly Regex _compiled = new(@"(?<user>[a-z][a-z0-9._]*)@(?<host>[a-z0-9-]+(?:\.[a-z0-9-]+)+)",
            RegexOptions.Compiled | RegexOptions.IgnoreCase | RegexOptions.CultureInvariant);
        private readonly Regex _interpreted = new(@"\b(\d{4})-(\d{2})-(\d{2})\b", RegexOptions.CultureInvariant);
        private readonly string _text;

        public FrameworkWork(Lambdas lambdas)
        {
            _lambdas = lambdas;
            string[] words = { "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta" };
            var sb = new StringBuilder();
            for (int i = 0; i < 400; i++)
            {
                sb.Append(CultureInfo.InvariantCulture,
                    $"{words[i % words.Length]}{i}@host{i % 7}.example.org on 20{i % 30:00}-0{1 + i % 9}-1{i % 10} ");
            }
            _text = sb.ToString();
        }

        public long Regexes()
        {
            long n = 0;
            for (Match m = _compiled.Match(_text); m.Success; m = m.NextMatch())
            {
                n += m.Groups["host"].Value.Length;
            }
            n += _interpreted.Matches(_text).Count;
            n += _interpreted.Replace(_text, "$3/$2/$1").Length;
            return n;
        }

        public long Linq()
        {
            List<int> list = Enumerable.Range(0, 5000).Select(_lambdas.Select).Where(_lambdas.Where)
                .OrderBy(_lambdas.Key).ToList();
            long total = list.Distinct().Sum();
            total += list.AsEnumerable().Reverse().Order().Count();
            total += list.GroupBy(_lambdas.Group).ToArray().Length;
            total += string.Join(",", Enumerable.Range(0, 200).Select(_lambdas.ToText).ToArray()).Length;
            return total;
        }

        public static long CollectionsAndFormatting()
        {
            CultureInfo inv = CultureInfo.InvariantCulture;
            var d = new Dictionary<string, int>();
            var list = new List<int>();
            var hs = new HashSet<string>();
            var sd = new SortedDictionary<int, string>();
            var q = new Queue<double>();
            var cd = new ConcurrentDictionary<int, string>();
            var sb = new StringBuilder();
            for (int i = 0; i < 300; i++)
            {
                string k = string.Format(inv, "key-{0:D4}-{1:X8}", i, (int)(i * 2654435761L & 0x7FFFFFFF));
                d[k] = i;
                list.Add(i * 7 % 101);
                hs.Add(k.Substring(0, 6 + i % 5));
                sd[i * 37 % 1000] = k;
                q.Enqueue(i / 3.0);
                cd.TryAdd(i, k);
                sb.AppendFormat(inv, "{0,8:F3}|{1:N0}|", i / 7.0, i * 1000);
            }
            list.Sort();
            long total = d.Count + list.BinarySearch(50) + hs.Count + sd.Count + cd.Count + sb.Length;
            while (q.Count > 0)
            {
                total += (long)q.Dequeue();
            }
            var dt = new DateTime(2024, 4, 9, 12, 30, 0, DateTimeKind.Unspecified);
            total += dt.ToString("O", inv).Length + string.Format(inv, "{0:yyyy-MM-dd HH:mm}", dt).Length;
            total += 3.14159.ToString("E10", inv).Length;
            return total;
        }

        public static long Json()
        {
            var data = new Dictionary<string, List<int>>();
            for (int i = 0; i < 50; i++)
            {
                var l = new List<int>();
                for (int j = 0; j < i % 10; j++)
                {
                    l.Add(i * j);
                }
                data["entry" + i.ToString(CultureInfo.InvariantCulture)] = l;
            }
            var opts = new JsonSerializerOptions { WriteIndented = true };
            string text = JsonSerializer.Serialize(data, opts);
            Dictionary<string, List<int>>? back = JsonSerializer.Deserialize<Dictionary<string, List<int>>>(text, opts);
            long n = 0;
            using (JsonDocument doc = JsonDocument.Parse(text))
            {
                foreach (JsonProperty prop in doc.RootElement.EnumerateObject())
                {
                    n += prop.Value.GetArrayLength();
                }
            }
            return text.Length + (back?.Count ?? 0) + n;
        }

        public long RunAll() => Regexes() + Linq() + CollectionsAndFormatting() + Json();
    }
}
