"""Test-suite settings shared by every test module, and the test tiers (tf, live, slow)."""

import ast
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression   # how -m is read (pytest's own parser)
from hypothesis import settings

from tfgshare.sim.profiles import load_profiles

# CI runs the property tests on fixed examples, so a green run is reproducible; a
# developer's run (no CI variable) draws new examples each time and keeps failures.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# One model in three sizes: small and busy, medium, large and light (6000 MB does not
# fit half of an 8 GB GPU, so default-sized starts run out of memory and retry).
TOY_PROFILES = """
models:
  toy:
    params: 5000000
    startup_s: 5
    batches:
      1: {step_time_s: 1.0, memory_mb: 1000, gpu_util: 1.0}
      2: {step_time_s: 2.0, memory_mb: 3000, gpu_util: 0.6}
      3: {step_time_s: 0.5, memory_mb: 6000, gpu_util: 0.3}
"""


@pytest.fixture(scope="session")
def toy_profiles(tmp_path_factory):
    """The simulator property tests' profile (``TOY_PROFILES``), loaded."""
    path = tmp_path_factory.mktemp("prof") / "toy.yaml"
    path.write_text(TOY_PROFILES)
    return load_profiles(path)


# ---------------------------------------------------------------------------------------
# Test tiers. Every test is marked from what its code reaches, so nobody has to remember:
#   tf    it imports TensorFlow or TF-Slim: in this process, or in a command line it writes
#         (``python -c`` code, ``python -m`` a module, a ``tfgshare`` command);
#   live  it starts a coordinator or an agent process (``tfgshare coordinator|agent``, which
#         is what LocalCluster, the demo and the chaos and repro tools run);
#   slow  marked by hand (``@pytest.mark.slow``) where a test is long for another reason.
# "Reaches" is read from source, nothing is imported to decide: the test function, its
# fixtures, its module's top level, and everything in this repository (tfgshare/, slim_models/,
# philly/, tests/, tools/) that they import or name, followed from function to function; a
# class counts as its methods, a module as its top-level imports. It errs toward marking: a
# test that names a function with a lazy TensorFlow import is ``tf`` even if the branch it
# takes returns before that import (e.g. test_bad_num_classes_is_refused). ``make test-fast``
# runs ``-m "not tf and not live and not slow"``; there a test that imports TensorFlow anyway
# fails (pytest_runtest_call below), so a gap in the rule is found, not hidden; and a file
# whose top level imports TensorFlow is not even collected (pytest_ignore_collect).
# ---------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
_SEARCH = (REPO, TESTS, REPO / "tools")      # where the suite's imports are found
TF_ROOTS = frozenset({"tensorflow", "tf_slim", "tf_keras", "keras"})
LIVE_COMMANDS = frozenset({"coordinator", "agent"})   # the processes of a live cluster
TIERS = ("tf", "live", "slow")
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_CODE = re.compile(r"^\s*(import|from)\s+[\w.]+", re.M)


class _Module:
    """One of this repository's modules, parsed: its top-level names and its definitions."""

    def __init__(self, name: str, path: Path):
        self.name, self.path = name, path
        self.tree = ast.parse(path.read_text(), str(path))
        # a test or a tool script, whose strings are command lines (not this rule's own)
        self.test_side = path.parent in (TESTS, REPO / "tools") and path.name != "conftest.py"
        self.binds: dict[str, object] = {}   # name -> dotted import target or a node key
        self.defs: dict[str, ast.AST] = {}    # qualified name -> FunctionDef or ClassDef
        self.vals: dict[str, ast.AST] = {}    # top-level name -> its assigned value
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for stmt in _top_level(self.tree.body):
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                self.binds.update(_import_binds(stmt, package))
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.binds[stmt.name] = ("def", name, stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                for target in getattr(stmt, "targets", None) or [stmt.target]:
                    if isinstance(target, ast.Name):
                        self.binds[target.id] = ("val", name, target.id)
                        self.vals[target.id] = stmt.value
        self._index(self.tree.body, "")

    def _index(self, body, prefix: str) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.defs[prefix + stmt.name] = stmt
                self._index(stmt.body, f"{prefix}{stmt.name}.")


def _top_level(body):
    """The statements run at import (into if/try/with blocks, not ``__main__`` ones)."""
    for stmt in body:
        if isinstance(stmt, ast.If) and "__main__" in ast.unparse(stmt.test):
            continue
        yield stmt
        for inner in ("body", "orelse", "finalbody"):
            if isinstance(stmt, (ast.If, ast.Try, ast.With)) and hasattr(stmt, inner):
                yield from _top_level(getattr(stmt, inner))
        for handler in getattr(stmt, "handlers", []):
            yield from _top_level(handler.body)


def _import_binds(stmt, package: str) -> dict[str, str]:
    if isinstance(stmt, ast.Import):
        return {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
                for a in stmt.names}
    base = stmt.module or ""
    if stmt.level:
        up = package.split(".")[:len(package.split(".")) - stmt.level + 1]
        base = ".".join([*up, base] if base else up)
    return {a.asname or a.name: f"{base}.{a.name}" for a in stmt.names if a.name != "*"}


def _imported(stmt, package: str = "") -> list[str]:
    """The modules an import statement loads (``from a import b``: a, and a.b if a module)."""
    if isinstance(stmt, ast.Import):
        return [a.name for a in stmt.names]
    binds = _import_binds(stmt, package)
    return [next(iter(binds.values())).rpartition(".")[0] if binds else stmt.module or "",
            *binds.values()]


def _importorskip(node) -> str | None:
    if (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "importorskip"):
        return node.args[0].value
    return None


class _Reach:
    """Which tiers a test reaches, from source (see the comment above)."""

    def __init__(self):
        self._modules: dict[str, _Module | None] = {}
        self._nodes: dict[tuple, tuple[set, set, set, bool]] = {}
        self._closures: dict[tuple, tuple[set, set, bool]] = {}
        cli = self.module("tfgshare.cli")
        self.commands = {}            # tfgshare command -> its entry point, "module.function"
        if cli is not None:
            table = ast.literal_eval(cli.vals["COMMANDS"]) if "COMMANDS" in cli.vals else {}
            self.commands = {k: v[0].replace(":", ".") for k, v in table.items()}

    def module(self, name: str) -> _Module | None:
        if name not in self._modules:
            self._modules[name] = None
            parts = name.split(".")
            for base in _SEARCH:
                path = base.joinpath(*parts)
                for file in (path.with_suffix(".py"), path / "__init__.py"):
                    if all(p.isidentifier() for p in parts) and file.is_file():
                        self._modules[name] = _Module(name, file)
                        break
                if self._modules[name] is not None:
                    break
        return self._modules[name]

    # -- what a dotted name, an import or a string leads to -------------------------------
    def target(self, dotted: str, depth: int = 0) -> tuple[set, set]:
        """(tags, node keys) that naming ``dotted`` (module.attr.attr...) leads to."""
        parts = dotted.split(".")
        if parts[0] in TF_ROOTS:
            return {"tf"}, set()
        for i in range(len(parts), 0, -1):
            mod = self.module(".".join(parts[:i]))
            if mod is not None:
                break
        else:
            return set(), set()
        keys = {("mod", mod.name)}
        rest = parts[i:]
        if rest and depth < 8:
            bound = mod.binds.get(rest[0])
            if isinstance(bound, str):
                tags, more = self.target(".".join([bound, *rest[1:]]), depth + 1)
                return tags, keys | more
            if bound is not None:
                if bound[0] == "def" and len(rest) > 1 and f"{rest[0]}.{rest[1]}" in mod.defs:
                    bound = ("def", mod.name, f"{rest[0]}.{rest[1]}")
                keys.add(bound)
        return set(), keys

    def imports(self, names) -> tuple[set, set]:
        """(tags, node keys) of importing each module in ``names`` and its packages."""
        tags, keys = set(), set()
        for name in names:
            parts = name.split(".")
            if parts[0] in TF_ROOTS:
                tags.add("tf")
            for i in range(1, len(parts) + 1):
                if self.module(".".join(parts[:i])) is not None:
                    keys.add(("mod", ".".join(parts[:i])))
        return tags, keys

    # -- one node: a module's top level, a script, a definition, a value, a code string ---
    def node(self, key: tuple) -> tuple[set, set, set, bool]:
        """(tags, edges, strings, test_side) of one node."""
        if key not in self._nodes:
            self._nodes[key] = self._read(key)
        return self._nodes[key]

    def _read(self, key: tuple):
        kind, name, *rest = key
        if kind == "src":                                     # python -c code in a string
            return self.scan(ast.parse(name), {}, "") + (True,)
        if kind == "sh":                                      # a shell script it runs
            text = (REPO / name).read_text()
            words = set(re.findall(r"[\w./:-]+", text))
            run = set(re.findall(r"-m\s+([\w.]+)", text))
            return self.strings(words, "tfgshare.cli" in words, run) + (words, True)
        mod = self.module(name)
        if kind == "mod":
            tags, edges = set(), set()
            package = name if mod.path.name == "__init__.py" else name.rpartition(".")[0]
            for stmt in _top_level(mod.tree.body):
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    t, e = self.imports(_imported(stmt, package))
                    tags |= t
                    edges |= e
                elif not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                           ast.If, ast.Try, ast.With)):
                    for sub in ast.walk(stmt):
                        if _importorskip(sub):
                            t, e = self.imports([_importorskip(sub)])
                            tags |= t
                            edges |= e
            return tags, edges - {key}, set(), mod.test_side
        if kind == "main":                                    # python -m name / a script
            if mod.path.name == "__init__.py" and self.module(name + ".__main__"):
                return set(), {("main", name + ".__main__")}, set(), False
            tags, edges, strings = self.scan(mod.tree, mod.binds, name)
            return tags, edges | {("mod", name)}, strings, mod.test_side
        if kind == "val":
            tags, edges, strings = self.scan(mod.vals[rest[0]], mod.binds, name)
            return tags, edges, strings, mod.test_side
        definition = mod.defs.get(rest[0])
        if definition is None:
            return set(), {("mod", name)}, set(), mod.test_side
        if isinstance(definition, ast.ClassDef):              # a class is its methods
            methods = {("def", name, f"{rest[0]}.{s.name}") for s in definition.body
                       if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            return set(), methods | {("mod", name)}, set(), mod.test_side
        tags, edges, strings = self.scan(definition, mod.binds, name)
        return tags, edges | {("mod", name)}, strings, mod.test_side

    def scan(self, tree, binds: dict, module: str) -> tuple[set, set, set]:
        """(tags, edges, strings) of the code in ``tree`` with top-level names ``binds``."""
        tags, edges, strings = set(), set(), set()
        local = dict(binds)
        package = module.rpartition(".")[0]
        docs = {id(s.value) for s in ast.walk(tree) if isinstance(s, ast.Expr)}
        for sub in ast.walk(tree):
            if isinstance(sub, (ast.Import, ast.ImportFrom)):
                local.update(_import_binds(sub, package))
                t, e = self.imports(_imported(sub, package))
                tags |= t
                edges |= e
            elif _importorskip(sub):
                t, e = self.imports([_importorskip(sub)])
                tags |= t
                edges |= e
            elif (isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                  and id(sub) not in docs):
                strings.add(sub.value)
        for sub in ast.walk(tree):
            chain = []
            while isinstance(sub, ast.Attribute):
                chain.append(sub.attr)
                sub = sub.value
            if isinstance(sub, ast.Name) and sub.id in local:
                bound = local[sub.id]
                if isinstance(bound, str):
                    t, e = self.target(".".join([bound, *reversed(chain)]))
                else:
                    t, e = self.target(".".join([bound[1], bound[2], *reversed(chain)]))
                    e.add(bound)
                tags |= t
                edges |= e
        run = set()                                   # X of a literal [..., "-m", "X", ...]
        for sub in ast.walk(tree):
            if isinstance(sub, (ast.List, ast.Tuple)):
                for flag, arg in zip(sub.elts, sub.elts[1:]):
                    if (isinstance(flag, ast.Constant) and flag.value == "-m"
                            and isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                        run.add(arg.value)
        t, e = self.strings(strings, "tfgshare.cli" in strings, run)
        return tags | t, edges | e, strings

    def strings(self, strings: set, subprocess: bool, run=frozenset()) -> tuple[set, set]:
        """What the strings of command lines lead to: code, modules, tfgshare commands."""
        tags, edges = set(), set()
        for text in strings:
            if _CODE.search(text):
                try:
                    ast.parse(textwrap.dedent(text))
                except SyntaxError:
                    pass
                else:
                    edges.add(("src", textwrap.dedent(text)))
            elif _DOTTED.fullmatch(text) and self.module(text) is not None:
                edges.add(("main" if text in run else "mod", text))
            elif text.endswith((".py", ".sh")) and (REPO / text).is_file():   # a script
                path = (REPO / text).resolve()
                name = next((".".join(path.relative_to(b).with_suffix("").parts)
                             for b in _SEARCH[1:] if path.is_relative_to(b)), None)
                if path.suffix == ".sh":
                    edges.add(("sh", text))
                elif name and self.module(name) is not None:
                    edges.add(("main", name))
            if subprocess and text in self.commands:
                edges |= self.target(self.commands[text])[1]
                if text in LIVE_COMMANDS:
                    tags.add("live")
        return tags, edges

    # -- a test: everything its roots reach ------------------------------------------------
    def closure(self, root: tuple) -> tuple[set, set, bool]:
        """(tags, test-side strings, runs tfgshare.cli in-process) of all ``root`` reaches."""
        if root not in self._closures:
            tags, strings, seen, todo = set(), set(), set(), [root]
            while todo:
                key = todo.pop()
                if key in seen:
                    continue
                seen.add(key)
                node_tags, edges, node_strings, test_side = self.node(key)
                tags |= node_tags
                todo.extend(edges - seen)
                if test_side:
                    strings |= node_strings
            self._closures[root] = (tags, strings, ("def", "tfgshare.cli", "main") in seen)
        return self._closures[root]

    def tiers(self, roots: set) -> set:
        tags, strings, cli, done = set(), set(), False, set()
        while roots - done:
            for root in roots - done:
                t, s, c = self.closure(root)
                tags, strings, cli = tags | t, strings | s, cli or c
            done |= roots
            # A test's command line is often split between a helper (python -m tfgshare.cli)
            # and the test (the command and its flags): read the test's strings together.
            if cli or "tfgshare.cli" in strings:
                t, e = self.strings(strings & set(self.commands),
                                    subprocess="tfgshare.cli" in strings)
                tags |= t
                roots = roots | e
        return tags & set(TIERS)


_REACH = _Reach()
_TF_BEFORE = pytest.StashKey[bool]()


def _key_of(func) -> tuple | None:
    """The node of a test or fixture function defined in this repository, or None."""
    func = getattr(func, "__wrapped__", func)
    code = getattr(func, "__code__", None)
    if code is None:
        return None
    path = Path(code.co_filename).resolve()
    for base in _SEARCH:
        if path.is_relative_to(base) and path.suffix == ".py":
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if _REACH.module(name) is not None and _REACH.module(name).path == path:
                return ("def", name, func.__qualname__)
    return None


def tiers_of(item) -> set:
    """The tiers the rule gives ``item`` (besides any marked on it by hand)."""
    roots = set()
    for func in [getattr(item, "function", None),
                 *(d.func for defs in item._fixtureinfo.name2fixturedefs.values()
                   for d in defs)] if hasattr(item, "_fixtureinfo") else []:
        key = _key_of(func) if func is not None else None
        if key is not None:
            roots |= {key, ("mod", key[1])}
    module = getattr(item, "module", None)
    path = Path(getattr(module, "__file__", "") or "")
    if path.parent == TESTS:
        roots.add(("mod", path.stem))
    return _REACH.tiers(roots)


def tiers_of_code(code: str) -> set:
    """The tiers the rule gives a test whose body is ``code`` (tests/test_test_tiers.py)."""
    return _REACH.tiers({("src", textwrap.dedent(code))})


def module_tiers(path: Path) -> set:
    """The tiers a test file's top level gives all its tests (read before importing it)."""
    if path.parent != TESTS or path.suffix != ".py":
        return set()
    return _REACH.tiers({("mod", path.stem)})


def _deselects(config, tags: set) -> bool:
    """Whether ``-m`` deselects every test that has tiers ``tags``, whatever else it has."""
    text = config.option.markexpr
    if not text:
        return False
    expression = Expression.compile(text)
    others = [t for t in TIERS if t not in tags]
    for bits in range(2 ** len(others)):
        extra = {t for i, t in enumerate(others) if bits >> i & 1}
        if expression.evaluate(lambda name: name in tags | extra):
            return False
    return True


def pytest_ignore_collect(collection_path, config):
    # A file whose top level imports TensorFlow is not even imported when -m leaves out tf
    # tests: collecting it would load TensorFlow (10+ s) into a run that needs none.
    tags = module_tiers(Path(collection_path))
    if tags and _deselects(config, tags):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        for tier in sorted(tiers_of(item)):
            if item.get_closest_marker(tier) is None:
                item.add_marker(tier)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_TF_BEFORE] = "tensorflow" in sys.modules


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if (not item.stash.get(_TF_BEFORE, True) and "tensorflow" in sys.modules
            and item.get_closest_marker("tf") is None):
        pytest.fail("this test imported TensorFlow but the tier rule in tests/conftest.py did "
                    "not mark it `tf`: extend the rule (or mark it by hand and say why)")
    return result
