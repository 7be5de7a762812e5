# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The kernel x layer x result table of make test-kernels: written from the
guests' result.json files into docs/testing.md and README.md, between the
kernel-matrix markers (tools/test-kernels calls write_table after a run;
`tools/test-kernels --table` rewrites it from the last results)."""

import glob
import json
import os
import re
import sys

TREE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- kernel-matrix: begin (tools/test-kernels writes this table) -->"
END = "<!-- kernel-matrix: end -->"
LAYERS = ("sock_addr", "sock_create", "setsockopt", "skb_backstop", "seccomp", "lsm_cgroup",
          "escape_guard")
# Column: the e2e modules (or test name prefix) whose tests it sums.
GROUPS = (("BPF tests", ("bpf:",)),
          ("package", ("package:",)),
          ("unit under systemd", ("test_unit",)),
          ("lsm_cgroup, strict", ("test_lsm_cgroup",)),
          ("hostile kernel, escape guard", ("test_hostile_kernel", "test_redteam2_escape",
                                            "test_redteam5_escape")),
          ("detach teardown", ("test_hostile_daemon",)),
          ("adversarial", ("test_adversarial",)),
          ("hostile run, limits", ("test_hostile_run",)),
          ("upgrade", ("test_upgrade",)))


def parse_e2e(text):
    """run.py's verdict lines: test name -> pass, fail or skip."""
    tests = {}
    for line in text.splitlines():
        m = re.match(r"^(PASS|FAIL|SKIP) ([A-Za-z0-9_]+)", line)
        if m and m.group(2) not in ("setup", "e2e"):
            tests[m.group(2)] = m.group(1).lower()
    return tests


def parse_cmocka(text):
    """test_bpf's cmocka lines: bpf:NAME -> pass or fail."""
    tests = {}
    for line in text.splitlines():
        m = re.match(r"^\[\s+(OK|FAILED)\s+\] (\S+)", line)
        if m:
            tests["bpf:" + m.group(2)] = "pass" if m.group(1) == "OK" else "fail"
    return tests


def test_modules():
    """e2e test name -> its module (the registry of this tree)."""
    sys.path.insert(0, os.path.join(TREE, "tests/e2e"))
    from harness.runner import load_tests
    from harness.registry import TESTS
    load_tests()
    return {t.__name__: t.__module__ for t in TESTS}


def group_of(name, modules):
    for title, keys in GROUPS:
        for k in keys:
            if name.startswith(k) if k.endswith(":") else modules.get(name) == k:
                return title
    return None


def kernel_key(res):
    return [int(x) for x in re.findall(r"\d+", res.get("version", ""))[:3]]


def table(results):
    modules = test_modules()
    head = ["kernel", "run"] + list(LAYERS) + [g for g, _ in GROUPS]
    rows = []
    for res in results:
        layers = res.get("layers") or {}
        cells = ["%s (`%s`)" % (res.get("version", "?"), res.get("kernel", "?")),
                 "%s, %d s" % (res.get("accel", "?"), res.get("seconds", 0))]
        for ln in LAYERS:
            v = layers.get(ln)
            cells.append("yes" if v is True else "**no**" if v is False else "?")
        counts = {}
        for name, verdict in (res.get("tests") or {}).items():
            g = group_of(name, modules)
            if g:
                p, n = counts.get(g, (0, 0))
                counts[g] = (p + (verdict == "pass"), n + 1)
        for g, _ in GROUPS:
            p, n = counts.get(g, (0, 0))
            cells.append("not run" if n == 0 else "pass (%d)" % n if p == n else
                         "**%d of %d fail**" % (n - p, n))
        rows.append(cells)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def ok(res):
    t = res.get("tests") or {}
    return t and not res.get("errors") and all(v == "pass" for v in t.values())


def text(results):
    results = sorted(results, key=kernel_key)
    passed = [r for r in results if ok(r)]
    lines = [BEGIN, ""] + table(results) + [""]
    if passed:
        lines.append("Minimum supported kernel, from what ran: **%s** (the oldest kernel on "
                     "which every test of the matrix passed)." % passed[0]["version"])
    else:
        lines.append("No kernel of the last run passed every test of the matrix.")
    failing = [r for r in results if not ok(r)]
    if failing:
        lines.append("")
    for r in failing:
        bad = sorted(n for n, v in (r.get("tests") or {}).items() if v != "pass")
        lines.append("- %s: failed %s%s." % (r.get("version"), ", ".join("`%s`" % n for n in bad)
                                          or "nothing",
                                          "; " + "; ".join(r.get("errors", []))
                                          if r.get("errors") else ""))
    lines += ["", END]
    return "\n".join(lines)


def replace_block(path, block):
    with open(path) as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        print("kernel table: %s has no kernel-matrix markers; not written" % path,
              file=sys.stderr)
        return False
    pre, rest = doc.split(BEGIN, 1)
    post = rest.split(END, 1)[1]
    with open(path + ".tmp", "w") as f:
        f.write(pre + block + post)
    os.rename(path + ".tmp", path)
    return True


def write_table(outdir):
    results = []
    for p in sorted(glob.glob(os.path.join(outdir, "*", "result.json"))):
        with open(p) as f:
            results.append(json.load(f))
    if not results:
        print("kernel table: no results under %s" % outdir, file=sys.stderr)
        return 1
    block = text(results)
    for doc in ("docs/testing.md", "README.md"):
        if replace_block(os.path.join(TREE, doc), block):
            print("kernel table: written into %s" % doc)
    return 0
