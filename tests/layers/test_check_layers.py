#!/usr/bin/env python3
"""scripts/check_layers.py on small trees made here, compiled with the build's C compiler: each
kind of violation is found (calls from the objects, includes from the sources), the allowlist
passes what it lists, and fails on what it does not list and on what no longer occurs."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "check_layers.py")
CC = os.environ.get("QMOE_CC", "cc")
NM = os.environ.get("QMOE_NM", "nm")

# A clean tree: core <- runtime <- ops, each calling down only.
CLEAN = {
    "src/core/util.h": "#pragma once\nint core_util(int x);\n",
    "src/core/util.c": '#include "core/util.h"\nint core_util(int x) { return x + 1; }\n',
    "src/runtime/pool.h": '#pragma once\n#include "core/util.h"\nint pool_run(int x);\n',
    "src/runtime/pool.c": '#include "runtime/pool.h"\nint pool_run(int x) { return core_util(x); }\n',
    "src/ops/op.c": '#include "runtime/pool.h"\nint op_exec(int x);\nint op_exec(int x) { return pool_run(x); }\n',
    "tools/cli.c": '#include "qmoe/api.h"\n#include "local.h"\nint main(void) { return 0; }\n',
    "tools/local.h": "/* the program's own header */\n",
    "include/qmoe/api.h": "/* public */\n",
}

# Every kind, once: a call cycle in runtime (no include between the two files), an include from
# core up into runtime, a call from runtime up into ops, AVX-512 code in ops, and the CLI
# reaching an internal header.
BROKEN = dict(CLEAN)
BROKEN.update({
    "src/runtime/a.c": "int b_fn(int);\nint a_fn(int x);\nint a_fn(int x) { return x ? b_fn(x - 1) : 0; }\n",
    "src/runtime/b.c": "int a_fn(int);\nint b_fn(int x);\nint b_fn(int x) { return a_fn(x); }\n",
    "src/core/util.h": '#pragma once\n#include "runtime/pool.h"\nint core_util(int x);\n',
    "src/runtime/up.c": "int op_exec(int);\nint up(void);\nint up(void) { return op_exec(1); }\n",
    # a header, so that no compiler has to know the intrinsics to build the tree
    "src/ops/fast.h": "/* _mm512_add_ps( in a comment is not code */\n#include <immintrin.h>\n"
                      '__attribute__((target("avx512f"))) float fast(float *p);\n'
                      '__attribute__((target("avx512f"))) float fast(float *p)\n'
                      "{ __m512 v = _mm512_loadu_ps(p); return _mm512_reduce_add_ps(v); }\n",
    "tools/cli.c": '#include "core/util.h"\nint main(void) { return 0; }\n',
})

BROKEN_KEYS = [
    # util.h includes pool.h, which includes util.h; pool.c calls util.c: one component
    "cycle: core/util runtime/pool",
    "cycle: runtime/a runtime/b",
    "isa: ops/fast.h <immintrin.h>",
    "isa: ops/fast.h target attribute",
    "isa: ops/fast.h x86 intrinsics",
    "private-include: tools/cli.c -> core/util.h",
    "upward-call: runtime/up -> ops/op",
    "upward-include: core/util.h -> runtime/pool.h",
]


def make_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    # objects where CMake puts them: build/CMakeFiles/<target>.dir/src/<path>.o
    for rel in files:
        if rel.startswith("src/") and rel.endswith(".c"):
            obj = os.path.join(root, "build", "CMakeFiles", "lib.dir", rel + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            subprocess.run([CC, "-c", "-O1", "-I", os.path.join(root, "src"), "-I",
                            os.path.join(root, "include"), "-o", obj, os.path.join(root, rel)],
                           check=True)


def run(root, allow_lines, *extra):
    allow = os.path.join(root, "allow.txt")
    with open(allow, "w") as f:
        f.write("# test\n" + "".join(line + "\n" for line in allow_lines))
    p = subprocess.run([sys.executable, SCRIPT, "--source", root, "--build", os.path.join(root, "build"),
                        "--allow", allow, "--nm", NM, *extra], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


class CheckLayers(unittest.TestCase):
    def tree(self, files):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        make_tree(d.name, files)
        return d.name

    def test_clean_tree_passes_with_an_empty_list(self):
        root = self.tree(CLEAN)
        rc, out = run(root, [])
        self.assertEqual(rc, 0, out)
        self.assertIn("0 cycle, 0 upward-include, 0 upward-call, 0 isa, 0 private-include", out)

    def test_every_kind_is_found_exactly(self):
        root = self.tree(BROKEN)
        rc, out = run(root, [], "--print")
        self.assertEqual(rc, 0, out)
        self.assertEqual([line.split(" | ")[0] for line in out.splitlines()], BROKEN_KEYS)

    def test_allowlist_is_a_ratchet(self):
        root = self.tree(BROKEN)
        listed = [k + " | reason" for k in BROKEN_KEYS]
        rc, out = run(root, listed)
        self.assertEqual(rc, 0, out)
        self.assertIn("8 allowlisted, 0 new, 0 gone", out)
        # a violation not listed fails
        rc, out = run(root, listed[1:])
        self.assertEqual(rc, 1, out)
        self.assertIn("NEW  " + BROKEN_KEYS[0], out)
        self.assertIn("runtime/pool -> core/util: runtime/pool.h includes core/util.h", out)
        # a listed violation that no longer occurs fails
        rc, out = run(root, listed + ["cycle: ops/x ops/y | fixed long ago"])
        self.assertEqual(rc, 1, out)
        self.assertIn("GONE cycle: ops/x ops/y", out)
        # a line without a reason fails
        rc, out = run(root, listed[:-1] + [BROKEN_KEYS[-1]])
        self.assertEqual(rc, 1, out)
        self.assertIn("expected 'violation | reason'", out)

    def test_calls_come_from_the_objects(self):
        files = dict(CLEAN)
        # the cycle is only in the calls: no include links the two files
        files["src/ops/p.c"] = "int q(int);\nint p(int x);\nint p(int x) { return q(x); }\n"
        files["src/ops/q.c"] = "int p(int);\nint q(int x);\nint q(int x) { return x ? p(x - 1) : 0; }\n"
        root = self.tree(files)
        rc, out = run(root, [], "--print")
        self.assertEqual(out.split(" | ")[0], "cycle: ops/p ops/q", out)

    def test_a_folder_without_a_layer_is_refused(self):
        files = dict(CLEAN)
        files["src/gpu/dev.c"] = "int dev(void);\nint dev(void) { return 0; }\n"
        root = self.tree(files)
        rc, out = run(root, [])
        self.assertNotEqual(rc, 0)
        self.assertIn("folders without a layer: gpu", out)


if __name__ == "__main__":
    unittest.main()
