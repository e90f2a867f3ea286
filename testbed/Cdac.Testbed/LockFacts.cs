// Threads stuck on locks, for the hang analysis (`cdac locks`, `cdac analyze`): two threads
// deadlocked on two monitors, a monitor held recursively by one thread with three threads
// waiting to enter it, and (.NET 9 and later) two threads deadlocked on two
// System.Threading.Lock objects. Each lock object's type is used nowhere else, so a reader
// finds it by its type; the manifest says who holds what and who waits for what.

using System;
using System.Collections.Generic;
using System.IO;
using System.Runtime.CompilerServices;
using System.Text.Json.Nodes;
using System.Threading;

namespace Cdac.Testbed.Locks
{
    /// <summary>Taken first by "cdac-deadlock-a", then wanted by "cdac-deadlock-b".</summary>
    public sealed class DeadlockFirst
    {
    }

    /// <summary>Taken first by "cdac-deadlock-b", then wanted by "cdac-deadlock-a".</summary>
    public sealed class DeadlockSecond
    {
    }

    /// <summary>Held three times by "cdac-contended-owner"; three threads wait to enter it.</summary>
    public sealed class Contended
    {
    }

#if NET9_0_OR_GREATER
    /// <summary>Holds the System.Threading.Lock "cdac-lock-a" takes first.</summary>
    public sealed class LockDeadlockFirst
    {
        public readonly Lock Gate = new();
    }

    /// <summary>Holds the System.Threading.Lock "cdac-lock-b" takes first.</summary>
    public sealed class LockDeadlockSecond
    {
        public readonly Lock Gate = new();
    }
#endif

    /// <summary>A thread of these facts: its name and ids, and when it is about to block.</summary>
    internal sealed class LockThread
    {
        private readonly ManualResetEventSlim _blocking = new(false);

        public LockThread(string name) => Name = name;

        public string Name { get; }
        public int OsTid { get; private set; }
        public int ManagedId { get; private set; }

        /// <summary>Called by the thread itself first.</summary>
        public void Register()
        {
            OsTid = Libc.gettid();
            ManagedId = Environment.CurrentManagedThreadId;
        }

        /// <summary>Called by the thread right before the call that blocks it for good.</summary>
        public void Blocking() => _blocking.Set();

        /// <summary>Starts `body` on a new background thread named `Name`.</summary>
        public void Start(Action<LockThread> body)
        {
            var t = new Thread(() =>
            {
                Register();
                body(this);
            })
            { IsBackground = true, Name = Name };
            t.Start();
        }

        /// <summary>Waits until the thread said it blocks and the kernel has it asleep.</summary>
        public void WaitBlocked()
        {
            if (!_blocking.Wait(TimeSpan.FromSeconds(30)))
            {
                throw new InvalidOperationException($"{Name} never got to its lock");
            }
            DateTime deadline = DateTime.UtcNow + TimeSpan.FromSeconds(10);
            while (State() != "S" && DateTime.UtcNow < deadline)
            {
                Thread.Sleep(10);
            }
            // A monitor spins a little before it sleeps: give it time to give up.
            Thread.Sleep(50);
        }

        private string? State()
        {
            try
            {
                string stat = File.ReadAllText($"/proc/self/task/{OsTid}/stat");
                return stat.Substring(stat.LastIndexOf(')') + 2).Split(' ')[0];
            }
            catch (IOException)
            {
                return null;
            }
        }

        public JsonObject Describe() => new()
        {
            ["name"] = Name,
            ["os_tid"] = OsTid,
            ["managed_id"] = ManagedId,
        };
    }

    public static class LockFacts
    {
        private static readonly DeadlockFirst First = new();
        private static readonly DeadlockSecond Second = new();
        private static readonly Contended ContendedObject = new();
        public const int ContendedDepth = 3;
        public const int ContendedWaiters = 3;

        /// <summary>Takes `first`, waits at `both` until the other thread holds its own first
        /// lock, then blocks taking `second`.</summary>
        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void TakeBoth(LockThread me, object first, object second, Barrier both)
        {
            lock (first)
            {
                both.SignalAndWait();
                me.Blocking();
                lock (second)
                {
                    throw new InvalidOperationException($"{me.Name} took both locks of a deadlock");
                }
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void HoldRecursively(LockThread me, int depth)
        {
            lock (ContendedObject)
            {
                if (depth > 1)
                {
                    HoldRecursively(me, depth - 1);
                    return;
                }
                me.Blocking();
                Thread.Sleep(Timeout.Infinite);
            }
        }

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void WaitToEnter(LockThread me)
        {
            me.Blocking();
            lock (ContendedObject)
            {
                throw new InvalidOperationException($"{me.Name} entered a monitor that is never released");
            }
        }

#if NET9_0_OR_GREATER
        private static readonly LockDeadlockFirst LockFirst = new();
        private static readonly LockDeadlockSecond LockSecond = new();

        [MethodImpl(MethodImplOptions.NoInlining)]
        private static void TakeBothLocks(LockThread me, Lock first, Lock second, Barrier both)
        {
            first.Enter();
            both.SignalAndWait();
            me.Blocking();
            second.Enter();
            throw new InvalidOperationException($"{me.Name} took both locks of a deadlock");
        }
#endif

        /// <summary>Starts the threads, waits until each is blocked, and describes them.</summary>
        public static JsonObject Describe()
        {
            var a = new LockThread("cdac-deadlock-a");
            var b = new LockThread("cdac-deadlock-b");
            var both = new Barrier(2);
            a.Start(me => TakeBoth(me, First, Second, both));
            b.Start(me => TakeBoth(me, Second, First, both));
            a.WaitBlocked();
            b.WaitBlocked();

            var owner = new LockThread("cdac-contended-owner");
            owner.Start(me => HoldRecursively(me, ContendedDepth));
            owner.WaitBlocked();
            var waiters = new List<LockThread>();
            for (int i = 0; i < ContendedWaiters; i++)
            {
                var w = new LockThread($"cdac-contended-waiter-{i}");
                w.Start(WaitToEnter);
                w.WaitBlocked();
                waiters.Add(w);
            }

            var facts = new JsonObject
            {
                // a holds DeadlockFirst and waits for DeadlockSecond; b the other way round.
                ["monitor_deadlock"] = new JsonObject
                {
                    ["threads"] = new JsonArray(
                        Deadlocked(a, typeof(DeadlockFirst), typeof(DeadlockSecond)),
                        Deadlocked(b, typeof(DeadlockSecond), typeof(DeadlockFirst))),
                },
                ["contended"] = new JsonObject
                {
                    ["type"] = typeof(Contended).FullName,
                    ["owner"] = owner.Describe(),
                    ["lock_count"] = ContendedDepth,
                    ["waiters"] = new JsonArray(waiters.ConvertAll(w => (JsonNode?)w.Describe()).ToArray()),
                },
                ["lock_deadlock"] = null,
            };
#if NET9_0_OR_GREATER
            var la = new LockThread("cdac-lock-a");
            var lb = new LockThread("cdac-lock-b");
            var bothLocks = new Barrier(2);
            la.Start(me => TakeBothLocks(me, LockFirst.Gate, LockSecond.Gate, bothLocks));
            lb.Start(me => TakeBothLocks(me, LockSecond.Gate, LockFirst.Gate, bothLocks));
            la.WaitBlocked();
            lb.WaitBlocked();
            // The Lock objects are found as the Gate fields of their holders' types.
            facts["lock_deadlock"] = new JsonObject
            {
                ["threads"] = new JsonArray(
                    Deadlocked(la, typeof(LockDeadlockFirst), typeof(LockDeadlockSecond)),
                    Deadlocked(lb, typeof(LockDeadlockSecond), typeof(LockDeadlockFirst))),
            };
#endif
            return facts;
        }

        private static JsonObject Deadlocked(LockThread t, Type holds, Type waitsFor)
        {
            JsonObject o = t.Describe();
            o["holds"] = holds.FullName;
            o["waits_for"] = waitsFor.FullName;
            return o;
        }
    }
}
