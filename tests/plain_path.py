#!/usr/bin/python3
"""tests/plain_path.py: the plain path, counted by the machine.

Every function of the project that one default training step runs, from
model_train_step down: one lazy step (--device xla, the default) and one
eager step (--device cpu), both in the reading mode (GPT_ISA=ref: the
plain-C twins as the kernels, the compiler without its fusion passes), each
listed with its file and its lines (the definition's first to last line).

  tests/plain_path.py --write FILE     runs the steps, writes the list to FILE
  tests/plain_path.py --compare A B    exits 1 when lists A and B name different
                                       functions (or B is over the line budget)

`make plain-path` writes docs/plain-path.txt; the plain suite of make test
writes the list of what runs now and compares the committed one with it.

How it is counted (the coverage build of the Makefile, build/cov):
- Executed: gcov's count of the function is above 0 (gcov --json-format
  gives each function's start_line, end_line and execution_count). The
  build wraps model_train_step (tests/plain_path_step.c) so the counts are
  zeroed as the step starts and written as it ends: the step's alone.
- From model_train_step down: reachable from it in the static call graph,
  so what other threads run meanwhile (the data loader's) is not counted.
  The graph is read from the objects' relocations, not from gcc's
  -fcallgraph-info: that one has direct calls only, and the step reaches
  much of its work through tables of function pointers (the executors of
  each op, the kernels). Built with -ffunction-sections and
  -fdata-sections, every function and every datum has a section of its
  own, so each reference of one to another, a call, a function's address
  taken or a table's entry, is a relocation of its section: an edge.
  Through tables this graph may hold more than can run; the count of
  execution then decides. One table is filled at run time and so has no
  relocation to follow: each kernel backend hands its table to
  kernels_register() before main(), and kernels_now() gives it out
  (kernels/isa.c); kernels_now() is given edges to every table handed in.
  A hook the program sets is not followed either: the compile's progress
  line (cmd/evaluate.c's compile_line) is printing, not the step's path.

The list's lines are "FILE:FIRST-LAST LINES NAME", in the order of the
program's layers and then the leaves beside them (LAYER_ORDER), then by
line; lines starting with # are comments.
Two lists differ when they name different functions (FILE and NAME): their
line numbers move with every edit above them, and are only reported.
"""
import glob
import json
import os
import subprocess
import sys
from collections import defaultdict

COVDIR = "build/cov"
BINARY = COVDIR + "/gpt"
ROOT = "model_train_step"
# The registry of kernel tables filled before main() (see above).
REGISTRY_READER, REGISTRY_WRITER = "kernels_now", "kernels_register"
READING_ISA = "ref"
LINE_BUDGET = 2500  # the plain path a reader walks stays this short
# One default step each way. The other flags change no step: they shorten
# what follows it (the eval and the final passage), which is not counted,
# and fix the threads, so that every machine splits the work as this one
# does and the list is the same. The text is a file of its own (CORPUS),
# so that a clone without the downloaded corpus lists the same path: a
# file's bytes, whatever they are, take the same functions.
STEPS = [["--device", "xla"], ["--device", "cpu"]]
CORPUS_LINE = "the cat sat on the mat, and Holmes said: elementary, my dear Watson.\n"
CORPUS_BYTES = 20000  # its training split holds many 129-byte windows
FIXED = ["--steps", "1", "--eval-batch", "1", "--final-bytes", "21", "--live", "off",
         "--threads", "2"]
# The program's layers, top down, then the leaves beside them (data,
# safetensors, watch, pod, util): the list follows this order.
LAYER_ORDER = ["cmd/", "gpt.c", "model/", "graph.c", "compiler/", "xla_sim.c", "device/",
               "tensor.c", "kernels/", "data/", "safetensors/", "watch/", "pod/", "util/"]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


# ---- executed: the step's gcov counts ----

def run_steps(tmp):
    """One lazy and one eager step, their counts added in the .gcda files."""
    for f in glob.glob(COVDIR + "/**/*.gcda", recursive=True):
        os.remove(f)
    # OMP_DYNAMIC=false: the step an idle machine runs, even on a busy one
    # (no thread trial, no redo team)
    env = dict(os.environ, GPT_ISA=READING_ISA, OMP_DYNAMIC="false")
    os.makedirs(tmp, exist_ok=True)
    corpus = os.path.join(tmp, "corpus.txt")
    with open(corpus, "w") as f:
        f.write((CORPUS_LINE * (CORPUS_BYTES // len(CORPUS_LINE) + 1))[:CORPUS_BYTES])
    for i, device in enumerate(STEPS):
        out = os.path.join(tmp, "step-%d" % i)
        subprocess.run(["rm", "-rf", out], check=True)
        subprocess.run([BINARY, "train", *device, *FIXED, "--data", corpus, "--out", out],
                       check=True, env=env, stdout=subprocess.DEVNULL)


def backend_names(obj):
    """A kernel object's renamed functions (kernels/backend-names.sh)."""
    names = {}
    if os.path.exists(obj + ".names"):
        for line in open(obj + ".names"):
            old, new = line.split()
            names[old] = new
    return names


def executed_functions():
    """{(object, symbol): (file, name, first, last)} of every function run."""
    ran = {}
    for gcda in sorted(glob.glob(COVDIR + "/**/*.gcda", recursive=True)):
        obj = gcda[:-len(".gcda")] + ".o"
        renamed = backend_names(obj)
        for doc in run(["gcov", "--json-format", "--stdout", gcda]).splitlines():
            for f in json.loads(doc)["files"]:
                for fn in f["functions"]:
                    if fn["execution_count"] > 0:
                        sym = renamed.get(fn["name"], fn["name"])
                        ran[(obj, sym)] = (f["file"], fn["name"], fn["start_line"],
                                           fn["end_line"])
    return ran


# ---- from model_train_step down: the objects' references ----

def read_object(obj):
    """The object's symbols {name: (bind, section)} and its relocations
    [(section, target name)]."""
    sections, symbols, relocs = {}, {}, []
    for line in run(["readelf", "-SW", obj]).splitlines():
        if line.lstrip().startswith("[") and "]" in line:
            num, rest = line.split("]", 1)
            if num.strip("[ ").isdigit() and rest.split():
                sections[num.strip("[ ")] = rest.split()[0]
    for line in run(["readelf", "-sW", obj]).splitlines():
        p = line.split()
        if len(p) == 8 and p[3] in ("FUNC", "OBJECT") and p[6] in sections:
            symbols[p[7]] = (p[4], sections[p[6]])
    section = None
    for line in run(["readelf", "-rW", obj]).splitlines():
        if line.startswith("Relocation section '.rela"):
            section = line.split("'")[1][len(".rela"):]
        elif section and line[:1].isalnum() and len(line.split()) >= 5:
            relocs.append((section, line.split()[4]))
    return symbols, relocs


def call_graph(objects):
    """{node: set of nodes}: node is a global symbol's name or
    "object:name" for a local one; an edge, one reference."""
    defined = {}  # global name -> its node
    per_object = {}
    for obj in objects:
        symbols, relocs = read_object(obj)
        per_object[obj] = (symbols, relocs)
        for name, (bind, _) in symbols.items():
            if bind != "LOCAL":
                defined[name] = name

    def node(obj, name):
        bind = per_object[obj][0][name][0]
        return name if bind != "LOCAL" else obj + ":" + name

    edges = defaultdict(set)
    for obj, (symbols, relocs) in per_object.items():
        in_section = defaultdict(list)
        for name, (_, section) in symbols.items():
            in_section[section].append(name)
        for section, target in relocs:
            if target.startswith("__gcov") or target.startswith(".bss.__gcov"):
                continue  # the counters
            if target in symbols:
                to = [node(obj, target)]
            elif target in in_section:  # a section symbol: what the section holds
                to = [node(obj, t) for t in in_section[target]]
            elif target in defined:
                to = [defined[target]]
            else:
                continue  # the C library's
            for src in in_section.get(section, []):
                edges[node(obj, src)].update(to)
    for src in [s for s, to in edges.items() if REGISTRY_WRITER in to]:
        edges[REGISTRY_READER].update(edges[src] - {REGISTRY_WRITER})
    return edges


def reachable(edges, root):
    seen, todo = {root}, [root]
    while todo:
        for n in edges.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


# ---- the list ----

def layer_key(entry):
    file, name, first, _ = entry
    rank = next((i for i, l in enumerate(LAYER_ORDER) if file.startswith(l)), len(LAYER_ORDER))
    return (rank, file, first, name)


def plain_path(tmp):
    run_steps(tmp)
    ran = executed_functions()
    objects = sorted({obj for obj, _ in ran} |
                     set(glob.glob(COVDIR + "/**/*.o", recursive=True)))
    seen = reachable(call_graph(objects), ROOT)
    on_path, elsewhere = set(), set()
    for (obj, sym), entry in ran.items():
        if "." in entry[1]:
            continue  # a compiler's part of a function (an OpenMP region): in its lines
        node = sym if sym in seen else obj + ":" + sym
        (on_path if node in seen else elsewhere).add(entry)
    for file, name, _, _ in sorted(elsewhere):
        print("plain_path: note: %s (%s) ran during the step, not reached from %s: another "
              "thread's, or a hook's the program set" % (name, file, ROOT), file=sys.stderr)
    return sorted(on_path, key=layer_key)


def format_list(entries):
    total = sum(last - first + 1 for _, _, first, last in entries)
    out = ["# The plain path: every function one default training step runs (lazy and",
           "# eager, GPT_ISA=%s), from %s down. Written by `make plain-path`" % (READING_ISA, ROOT),
           "# (tests/plain_path.py says how it is counted); make test's plain suite",
           "# checks it against what runs. FILE:FIRST-LAST LINES NAME, by layer."]
    out += ["%s:%d-%d %d %s" % (f, a, b, b - a + 1, n) for f, n, a, b in entries]
    out.append("# total: %d functions, %d lines" % (len(entries), total))
    return "\n".join(out) + "\n"


def read_list(path):
    """{(file, name): (first, last)} of a written list, and its line total."""
    entries = {}
    for line in open(path):
        if line.strip() and not line.startswith("#"):
            where, count, name = line.split()
            file, lines = where.rsplit(":", 1)
            first, last = lines.split("-")
            entries[(file, name)] = (int(first), int(last))
    return entries, sum(b - a + 1 for a, b in entries.values())


def compare(committed_path, now_path):
    committed, _ = read_list(committed_path)
    now, total = read_list(now_path)
    ok = True
    for file, name in sorted(now.keys() - committed.keys()):
        print("%s: %s (%s) runs in the step, and the list lacks it" % (committed_path, name, file))
        ok = False
    for file, name in sorted(committed.keys() - now.keys()):
        print("%s: %s (%s) is listed, and the step does not run it" % (committed_path, name, file))
        ok = False
    for key in sorted(now.keys() & committed.keys()):
        if now[key] != committed[key]:
            print("%s: note: %s (%s) moved to lines %d-%d (make plain-path rewrites the list)"
                  % (committed_path, key[1], key[0], *now[key]))
    if total > LINE_BUDGET:
        print("%s: the plain path is %d lines, over its budget of %d" % (now_path, total,
                                                                          LINE_BUDGET))
        ok = False
    return ok


def main(argv):
    if len(argv) == 3 and argv[1] == "--write":
        entries = plain_path(os.path.join(COVDIR, "tmp"))
        text = format_list(entries)
        open(argv[2], "w").write(text)
        sys.stdout.write(text)
        return 0
    if len(argv) == 4 and argv[1] == "--compare":
        return 0 if compare(argv[2], argv[3]) else 1
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
