#!/usr/bin/env python3
"""The layering check of issue 21 (point 5), run by ctest as test `layers`.

Reads every file under src/ (its #includes) and the library's object files in the build tree
(the symbols each defines and uses, from `nm`), and reports:

  cycle            files that depend on each other, directly or around a loop (a strongly
                   connected component of the graph of includes and calls; a .c and its own .h
                   are one unit, named by the path without the extension)
  upward-include   an include from a lower layer into a higher one
  upward-call      a call (or data use) from a lower layer into a higher one
  isa              instruction-set-specific code outside src/kernels/ (intrinsics headers,
                   target attributes or pragmas, vector intrinsics, ia32 builtins, inline asm)
  private-include  a face (src/compat, src/mpi, src/ggml) including the library's internals, or
                   the CLI (tools/) or the benchmarks (bench/) including a library-internal
                   header (anything under src/) other than INTERNAL_BENCH_HEADER

Layers, lowest first: core <- runtime <- kernels <- ops (and host) <- layer, faces (compat, mpi,
ggml, omp); Python and the CLI sit above, over public headers. Public headers (include/) and the test
hooks' declarations (src/testing.h) belong to no layer.

Known violations are listed in scripts/layers_allow.txt, one per line with a reason. The check
fails on a violation not listed there and on a listed one that no longer occurs (a ratchet:
remove the line when the violation is fixed). `--print` writes the current violations in the
list's format.
"""

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

LAYERS = {
    "core": 0,
    "runtime": 1,
    "kernels": 2,
    "ops": 3,
    "layer": 4,
    "compat": 4,
    "mpi": 4,
    "ggml": 4,
    "omp": 4,
}
NEUTRAL_SRC = {"testing.h", "bench.h"}  # the test hooks (defined in several layers); the benchmarks' header
# The one library-internal header the benchmarks may include (src/-relative), once it exists.
INTERNAL_BENCH_HEADER = "bench.h"
APP_DIRS = ("tools", "bench")  # programs over the public headers
FACES = ("compat", "mpi", "ggml", "omp")  # libraries over the public headers (their own folder's aside)

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
ISA_HEADERS = re.compile(r"^(?:\w*intrin\.h|arm_neon\.h|arm_sve\.h|arm_acle\.h|cpuid\.h)$")
ISA_CODE = [
    ("target attribute", re.compile(r"__attribute__\s*\(\(\s*(?:__)?target(?:_clones)?(?:__)?\s*\(")),
    ("target pragma", re.compile(r"#\s*pragma\s+(?:GCC\s+target|clang\s+attribute)")),
    ("x86 intrinsics", re.compile(r"\b(?:_mm(?:256|512)?_\w+\s*\(|__m(?:128|256|512)[dhi]?\b|_tile_\w+\s*\()")),
    ("neon intrinsics", re.compile(r"\b(?:u?int|float|poly|bfloat)(?:8|16|32|64)x\d+(?:x\d)?_t\b")),
    ("ia32 builtin", re.compile(r"\b__builtin_ia32_\w+")),
    ("inline asm", re.compile(r"\b(?:__asm__|__asm|asm)\s*(?:__volatile__|volatile)?\s*\(")),
]


def strip_comments(text, strings=True):
    """C source with comments (and string/char literals, unless strings is False) blanked, the
    line structure kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'" and strings:
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * max(0, min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def unit_of(rel):
    """src-relative path -> its unit: the path without the extension."""
    return os.path.splitext(rel)[0]


def folder_of(rel):
    return rel.split("/", 1)[0] if "/" in rel else ""


class Tree:
    def __init__(self, source):
        self.source = os.path.abspath(source)
        self.src = os.path.join(self.source, "src")
        self.include = os.path.join(self.source, "include")
        self.files = {}  # src-relative path -> text without comments and strings (code)
        self.raw = {}  # ... without comments (for the includes)
        for root, dirs, names in os.walk(self.src):
            dirs.sort()
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    path = os.path.join(root, name)
                    rel = os.path.relpath(path, self.src).replace(os.sep, "/")
                    with open(path, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    self.raw[rel] = strip_comments(text, strings=False)
                    self.files[rel] = strip_comments(text)
        self.apps = {}  # source-relative path of tools/bench files -> raw text
        for d in APP_DIRS:
            for root, dirs, names in os.walk(os.path.join(self.source, d)):
                dirs.sort()
                for name in sorted(names):
                    if name.endswith((".c", ".h")):
                        path = os.path.join(root, name)
                        rel = os.path.relpath(path, self.source).replace(os.sep, "/")
                        with open(path, encoding="utf-8", errors="replace") as f:
                            self.apps[rel] = f.read()

    def resolve(self, including_dir, name):
        """A quoted include -> ("src", rel) | ("public", rel) | ("app", rel) | (None, name)."""
        for base in (including_dir, self.src, self.include, os.path.join(self.source, "bench")):
            path = os.path.normpath(os.path.join(base, name))
            if os.path.isfile(path):
                if path.startswith(self.src + os.sep):
                    return "src", os.path.relpath(path, self.src).replace(os.sep, "/")
                if path.startswith(self.include + os.sep):
                    return "public", os.path.relpath(path, self.include).replace(os.sep, "/")
                return "app", os.path.relpath(path, self.source).replace(os.sep, "/")
        return None, name  # generated (qmoe/version.h) or system


def includes(text):
    return [(m.group(1), m.group(2)) for m in INCLUDE_RE.finditer(text)]


def object_files(source, build):
    """(object path, src-relative source) for every object of a src/ file in the build tree."""
    found = []
    build = os.path.abspath(build)
    src = os.path.join(source, "src")
    for root, dirs, names in os.walk(build):
        dirs.sort()
        parts = root.replace(os.sep, "/").split("/")
        if "CMakeFiles" not in parts:
            continue
        k = len(parts) - 1 - parts[::-1].index("CMakeFiles")
        if k + 1 >= len(parts) or not parts[k + 1].endswith(".dir"):
            continue
        target_src = os.path.join(source, os.path.relpath("/".join(parts[:k]) or "/", build))
        inner = "/".join(parts[k + 2:])
        for name in sorted(names):
            if not name.endswith(".o"):
                continue
            rel = os.path.join(inner, name[: -len(".o")]).replace("__/", "../")
            path = os.path.normpath(os.path.join(target_src, rel))
            if path.startswith(src + os.sep) and os.path.isfile(path):
                found.append((os.path.join(root, name), os.path.relpath(path, src).replace(os.sep, "/")))
    return found


def symbols(nm, objs):
    """unit -> (defined globals, undefined) from nm's POSIX output."""
    defined, used = defaultdict(set), defaultdict(set)
    by_path = dict(objs)
    paths = sorted(by_path)
    for i in range(0, len(paths), 200):
        batch = paths[i : i + 200]
        out = subprocess.run([nm, "-A", "-P", *batch], check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            # "path: name type [value size]"; the path may itself hold ": " only in odd trees
            head, _, rest = line.rpartition(": ")
            if not head:
                head, _, rest = line.partition(":")
            fields = rest.split()
            if len(fields) < 2 or head not in by_path:
                continue
            name, kind = fields[0], fields[1]
            unit = unit_of(by_path[head])
            if kind == "U":
                used[unit].add(name)
            elif kind in "TDBRCGSVWi":
                defined[unit].add(name)
    return defined, used


def tarjan(nodes, edges):
    """Strongly connected components (iterative Tarjan)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                comps.append(sorted(comp))
    return comps


def check(tree, build, nm):
    """Returns (violations: key -> detail, unchecked units, stats)."""
    v = {}
    units = {unit_of(rel) for rel in tree.files if rel not in NEUTRAL_SRC}
    unknown = sorted({folder_of(rel) for rel in tree.files if rel not in NEUTRAL_SRC} - set(LAYERS))
    if unknown:
        raise SystemExit("check_layers: folders without a layer: %s (add them to LAYERS)" % ", ".join(unknown))
    edges = defaultdict(set)
    why = defaultdict(list)  # (from unit, to unit) -> reasons
    n_inc = 0
    for rel, text in sorted(tree.files.items()):
        if rel in NEUTRAL_SRC:
            continue
        here = os.path.dirname(os.path.join(tree.src, rel))
        for kind, name in includes(tree.raw[rel]):
            if kind == "<":
                if ISA_HEADERS.match(os.path.basename(name)) and folder_of(rel) != "kernels":
                    v["isa: %s <%s>" % (rel, name)] = "includes <%s>" % name
                continue
            where, target = tree.resolve(here, name)
            if where != "src" or target in NEUTRAL_SRC:
                continue
            a, b = unit_of(rel), unit_of(target)
            if a != b:
                n_inc += 1
                edges[a].add(b)
                why[a, b].append("%s includes %s" % (rel, target))
            if LAYERS[folder_of(rel)] < LAYERS[folder_of(target)]:
                v["upward-include: %s -> %s" % (rel, target)] = "%s (%s) includes %s (%s)" % (
                    rel, folder_of(rel), target, folder_of(target))
            elif folder_of(rel) in FACES and folder_of(target) != folder_of(rel):
                v["private-include: %s -> %s" % (rel, target)] = (
                    "%s: a face includes the library's internal src/%s" % (rel, target))
        if folder_of(rel) != "kernels":
            for what, pattern in ISA_CODE:
                m = pattern.search(text)
                if m:
                    line = text.count("\n", 0, m.start()) + 1
                    v["isa: %s %s" % (rel, what)] = "%s:%d: %s" % (rel, line, m.group(0).strip())
    # calls, from the objects
    objs = object_files(tree.source, build)
    defined, used = symbols(nm, objs)
    built = {unit_of(rel) for _, rel in objs}
    unchecked = sorted(unit_of(rel) for rel in tree.files if rel.endswith(".c") and unit_of(rel) not in built)
    owner = defaultdict(set)
    for unit, names in defined.items():
        for name in names:
            owner[name].add(unit)
    calls = defaultdict(set)
    for a, names in used.items():
        for name in names:
            for b in owner.get(name, ()):
                if b != a:
                    calls[a, b].add(name)
    for (a, b), names in sorted(calls.items()):
        edges[a].add(b)
        why[a, b].append("%s uses %s of %s" % (a, ", ".join(sorted(names)[:4]) + (" ..." if len(names) > 4 else ""), b))
        if LAYERS[folder_of(a)] < LAYERS[folder_of(b)]:
            v["upward-call: %s -> %s" % (a, b)] = "%s (%s) uses %s of %s (%s)" % (
                a, folder_of(a), ", ".join(sorted(names)), b, folder_of(b))
    for comp in tarjan(units, edges):
        if len(comp) < 2:
            continue
        inside = set(comp)
        detail = ["%s -> %s: %s" % (a, b, "; ".join(why[a, b])) for a in comp for b in sorted(edges[a] & inside)]
        key = "cycle: " + " ".join(comp)
        v[key] = "\n      ".join(detail)
        if inside & set(unchecked):
            v[key] += "\n      (not all of its units were built: its calls are incomplete)"
    # the programs: public headers only
    for rel, text in sorted(tree.apps.items()):
        here = os.path.dirname(os.path.join(tree.source, rel))
        for kind, name in includes(strip_comments(text, strings=False)):
            if kind != '"':
                continue
            where, target = tree.resolve(here, name)
            if where == "src" and target != INTERNAL_BENCH_HEADER:
                v["private-include: %s -> %s" % (rel, target)] = "%s includes the internal src/%s" % (rel, target)
    stats = {"files": len(tree.files), "objects": len(objs), "include edges": n_inc, "call edges": len(calls)}
    return v, unchecked, stats


def read_allow(path):
    allow, errors = {}, []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            key, sep, reason = line.partition(" | ")
            if not sep or not reason.strip():
                errors.append("%s:%d: expected 'violation | reason': %s" % (path, n, line))
            elif key.strip() in allow:
                errors.append("%s:%d: listed twice: %s" % (path, n, key.strip()))
            else:
                allow[key.strip()] = reason.strip()
    return allow, errors


def kind_of(key):
    return key.split(":", 1)[0]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", default=os.path.dirname(here), help="the source tree")
    ap.add_argument("--build", required=True, help="the build tree (for the object files)")
    ap.add_argument("--allow", default=os.path.join(here, "layers_allow.txt"))
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--print", action="store_true", help="print the violations as allowlist lines")
    args = ap.parse_args()
    tree = Tree(args.source)
    found, unchecked, stats = check(tree, args.build, args.nm)
    if args.print:
        for key in sorted(found):
            print("%s | " % key)
        return 0
    allow, errors = read_allow(args.allow)

    # a violation about a unit this build did not compile (no MPI here, the other architecture's
    # kernels) is incomplete: it is neither new nor gone
    def checkable(key):
        words = key.split()
        return not any(u in words or u + ".c" in words for u in unchecked)

    new = sorted(k for k in found if k not in allow and checkable(k))
    stale = sorted(k for k in allow if k not in found and checkable(k))
    unsure = sorted(k for k in set(found) ^ set(allow) if not checkable(k))
    for e in errors:
        print(e)
    for k in new:
        print("NEW  %s\n      %s" % (k, found[k]))
    for k in stale:
        print("GONE %s\n      (listed in %s but no longer found: remove the line)" % (k, args.allow))
    counts = defaultdict(int)
    for k in found:
        counts[kind_of(k)] += 1
    kinds = ["cycle", "upward-include", "upward-call", "isa", "private-include"]
    print("layers: %d files, %d objects, %d include and %d call edges; %s; %d allowlisted, %d new, "
          "%d gone, %d unchecked%s" % (
              stats["files"], stats["objects"], stats["include edges"], stats["call edges"],
              ", ".join("%d %s" % (counts[k], k) for k in kinds), sum(k in allow for k in found),
              len(new), len(stale), len(unsure),
              ("; not built here: " + " ".join(unchecked)) if unchecked else ""))
    return 1 if new or stale or errors else 0


if __name__ == "__main__":
    sys.exit(main())
