"""The memo policy extender/memo.py states, checked over the package's source: cluster-derived values in
BoundedMemo, `functools.lru_cache` only with an explicit bound, `functools.cache` only on the functions whose
key space is closed (listed here, each with why)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "extender"

# module -> functions allowed an unbounded functools.cache: values fixed for the process's life.
PROCESS_CONSTANTS = {
    "extender/kube/strict_objects.py": {
        "_client_models",  # the installed client's models module: one value
        "_fields",  # per client model class name: the generated classes, a closed set
    },
    "extender/transport/views.py": {"extender_version"},  # the installed package's version: one value
}


def _decorator_name(node: ast.expr) -> tuple[str, ast.Call | None]:
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call is not None else node
    if isinstance(target, ast.Attribute):
        return target.attr, call
    if isinstance(target, ast.Name):
        return target.id, call
    return "", call


def test_unbounded_memos_are_only_the_process_constants_and_every_lru_cache_has_a_bound() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                name, call = _decorator_name(decorator)
                where = f"{relative}:{node.lineno} {node.name}"
                if name == "cache" and node.name not in PROCESS_CONSTANTS.get(relative, set()):
                    problems.append(f"{where}: functools.cache on a function not known to be a process constant")
                if name == "lru_cache":
                    bound = next((k.value for k in call.keywords if k.arg == "maxsize"), None) if call else None
                    if not isinstance(bound, ast.Constant) or not isinstance(bound.value, int):
                        problems.append(f"{where}: lru_cache without an explicit integer maxsize")
    assert not problems, "\n".join(problems)


def test_the_listed_process_constants_still_exist() -> None:
    """A function renamed or removed leaves its entry here behind: the list says only what is true."""
    for relative, names in PROCESS_CONSTANTS.items():
        source = (PACKAGE.parent / relative).read_text(encoding="utf-8")
        defined = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
        assert names <= defined, (relative, names - defined)
