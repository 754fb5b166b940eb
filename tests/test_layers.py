"""kdsl's modules import only downward: errors, IR and semantics at the bottom, then the
front end and passes, then what executes programs (interpreter, reference, codegen), then
the runtime, then the judge, then test helpers and benchmarks, then the command line.
Function-level (lazy) imports count too. Regression: kdsl/runtime/module.py imported
kdsl.check (the judge) for its interpreted kernels."""
import ast
import pathlib

import kdsl

PACKAGE = pathlib.Path(kdsl.__file__).parent

LAYERS = [
    ["kdsl.errors", "kdsl.ast", "kdsl.ir", "kdsl.semantics", "kdsl.backends", "kdsl.cachefiles"],
    ["kdsl.grammar", "kdsl.passes", "kdsl.fp8", "kdsl.ircheck"],
    ["kdsl.interp", "kdsl.reference", "kdsl.cases", "kdsl.codegen", "kdsl.sass", "kdsl.flex"],
    ["kdsl.runtime", "kdsl.interpreted"],
    ["kdsl.check"],
    ["kdsl.testing", "kdsl.bench", "kdsl.bench_backward", "kdsl.benchplot", "kdsl.hosttime", "kdsl.tune"],
    ["kdsl.cli", "kdsl"],  # the package itself: kdsl.load / kdsl.compile reach into the runtime
]


def layer(module: str) -> int:
    """The layer of the longest LAYERS entry that is the module or a package above it."""
    found = [(len(n), i) for i, names in enumerate(LAYERS) for n in names
             if module == n or module.startswith(n + ".")]
    assert found, f"{module} has no layer: add it to LAYERS in tests/test_layers.py"
    return max(found)[1]


def module_name(path: pathlib.Path) -> str:
    parts = ("kdsl",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    p = PACKAGE.parent / name.replace(".", "/")
    return p.with_suffix(".py").exists() or p.is_dir()


def kdsl_imports(source: str, me: str, is_package: bool = False):
    """(line, kdsl module) for every import in a module's source, at any depth."""
    package = me if is_package else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "kdsl")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                target = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "kdsl":
                for a in node.names:  # `from . import ir` imports the module kdsl.ir
                    sub = f"{target}.{a.name}"
                    yield node.lineno, sub if _is_module(sub) else target


def upward_imports(source: str, me: str, is_package: bool = False) -> list[str]:
    # The package itself (`from .. import __version__`) is loaded before any of its modules anyway.
    return sorted({f"{me}:{line} imports {target}" for line, target in kdsl_imports(source, me, is_package)
                   if target != "kdsl" and layer(target) > layer(me)})


def test_imports_point_down_the_layers():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        upward += upward_imports(path.read_text(), module_name(path), path.name == "__init__.py")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_a_lazy_import_of_the_judge_in_the_runtime_is_caught():
    """Not vacuous: the old Interpreted class's function-level `from ..check import ...`."""
    source = (PACKAGE / "runtime" / "module.py").read_text()
    planted = source + "\n\nclass Interpreted:\n    def __init__(self):\n        from ..check import interpreted\n"
    assert upward_imports(source, "kdsl.runtime.module") == []
    assert upward_imports(planted, "kdsl.runtime.module") == [
        f"kdsl.runtime.module:{len(planted.splitlines())} imports kdsl.check"]
