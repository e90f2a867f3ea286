"""Shared by scripts/perf-collapsed, scripts/nettrace-collapsed and scripts/bench-profilers (Python
standard library only): the collapsed-stack form, managed frame names made comparable, and a
summary of the hottest methods.

Collapsed form: one line per distinct stack, "root;...;leaf WEIGHT", frames root first, weights
integers, lines sorted. Managed frames are named as the testbed's manifest names methods:
"Namespace.Type::Method" (nested types with '+', no signature, no tier), so that cdac record's,
perf's and dotnet-trace's profiles can be compared frame by frame.
"""

import re

# perf map names (what perf script prints for JIT'ed code, from /tmp/perf-PID.map):
#   "void [Cdac.Testbed] Cdac.Testbed.CpuWork::HeavyPart(int32)[OptimizedTier1]"
_PERFMAP = re.compile(r"\[[^\]\s]+\] (?P<name>[^\s(]+::[^\s(]+)\(")
# TraceEvent names (dotnet-trace's speedscope / chromium output):
#   "Cdac.Testbed!Cdac.Testbed.CpuWork.HeavyPart(int32)"
_TRACEEVENT = re.compile(r"^(?P<module>[^!\s]+)!(?P<qual>[^(]+)\(")


def managed_from_perfmap(sym):
    """"Ns.Type::Method" for a perf-map symbol, or None."""
    m = _PERFMAP.search(sym)
    return m.group("name") if m else None


def managed_from_traceevent(name):
    """"Ns.Type::Method" for a TraceEvent frame name "Module!Ns.Type.Method(args)", or None."""
    m = _TRACEEVENT.match(name)
    if not m:
        return None
    qual = m.group("qual")
    for special in ("..ctor", "..cctor"):
        if qual.endswith(special):
            return qual[: -len(special)] + "::" + special[1:]
    if "." not in qual:
        return qual
    typ, method = qual.rsplit(".", 1)
    return typ + "::" + method


def write_collapsed(stacks, out):
    """Writes {tuple(frames root first): weight} as collapsed lines; returns the line count."""
    n = 0
    for frames, weight in sorted(stacks.items()):
        w = int(round(weight))
        if w <= 0 or not frames:
            continue
        out.write(";".join(f.replace(";", ":") for f in frames) + " " + str(w) + "\n")
        n += 1
    return n


def read_collapsed(path):
    stacks = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            frames, _, weight = line.rpartition(" ")
            try:
                w = float(weight)
            except ValueError:
                continue
            key = tuple(frames.split(";"))
            stacks[key] = stacks.get(key, 0) + w
    return stacks


def self_shares(stacks, only=None):
    """[(leaf frame, weight, share)] by weight, over the stacks (whose leaf matches `only`, a
    regex, when given)."""
    by_leaf = {}
    for frames, w in stacks.items():
        if not frames:
            continue
        by_leaf[frames[-1]] = by_leaf.get(frames[-1], 0) + w
    if only:
        rx = re.compile(only)
        by_leaf = {k: v for k, v in by_leaf.items() if rx.search(k)}
    total = sum(by_leaf.values()) or 1
    return sorted(((k, v, v / total) for k, v in by_leaf.items()), key=lambda x: -x[1])


def print_top(stacks, n, out, title, only=None):
    rows = self_shares(stacks, only)
    total = sum(w for _, w, _ in rows)
    out.write(f"{title}: top self frames (of {total:.0f}{' matching ' + only if only else ''})\n")
    for frame, w, share in rows[:n]:
        out.write(f"  {share * 100:6.2f}%  {w:10.0f}  {frame}\n")
