"""Every file a comment, docstring or page names exists, and a name given right after it is defined there.

Comments cite the code they follow ("decisions/quota/attribution.py provisional_usage", "state/bookings.py"):
a module moved or a function renamed leaves such a pointer dangling, and a reader following it finds nothing.
This reads every Python file of the project and its pages (README, ARCHITECTURE.md, docs/, pyproject.toml),
finds each reference to a Python file and resolves it against the project's files (a suffix is enough:
"cel/analysis.py" is extender/decisions/devices/cel/analysis.py) or, for another library's file
("gunicorn/sock.py"), against the installed package. A name after the path that looks like code (snake_case,
CamelCase, CONSTANTS) must appear in the file named.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("extender", "testkit", "bench", "tools", "tests")
PAGES = ("README.md", "ARCHITECTURE.md", "pyproject.toml", "docs")
REFERENCE = re.compile(
    r"(?<![\w/.*-])((?:[\w-]+/)*[\w-]+\.py)\b(?:'s)?[ `]*(?:`?([A-Za-z_][A-Za-z0-9_]*)`?)?",
)
# Files of projects that are neither ours nor installed, cited by the trace benchmark: the analysis and conversion
# scripts of the FGD paper's published simulator (bench/trace_model.py follows them).
ELSEWHERE = frozenset({"experiments/analysis/merge_alloc_discrete.py", "merge_alloc_discrete.py", "pod_csv_to_yaml.py"})
CODE_NAME = re.compile(r"_|[a-z][A-Z]|^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$|^[A-Z][A-Z0-9_]+$")


def project_files() -> dict[str, Path]:
    files = {}
    for top in SOURCES:
        for path in (ROOT / top).rglob("*.py"):
            if ".build" not in path.parts and "__pycache__" not in path.parts:
                files[path.relative_to(ROOT).as_posix()] = path
    return files


def readable_files() -> list[Path]:
    pages: list[Path] = []
    for name in PAGES:
        path = ROOT / name
        pages.extend(sorted(path.rglob("*.md")) if path.is_dir() else [path])
    return pages + sorted(project_files().values())


@cache
def library_file(reference: str) -> Path | None:
    """A file of an installed library, for a reference whose first part names one ("gunicorn/sock.py")."""
    first = reference.split("/", 1)[0]
    if first in ("extender", "testkit", "bench", "tools", "tests") or "/" not in reference:
        return None
    spec = importlib.util.find_spec(first)
    if spec is None or not spec.submodule_search_locations:
        return None
    base = Path(next(iter(spec.submodule_search_locations))).parent
    path = base / reference
    return path if path.is_file() else None


def test_every_python_file_named_in_comments_and_pages_exists_with_the_name_given() -> None:
    files = project_files()
    by_suffix: dict[str, list[Path]] = {}
    for relative, path in files.items():
        parts = relative.split("/")
        for start in range(len(parts)):
            by_suffix.setdefault("/".join(parts[start:]), []).append(path)
    dangling = []
    for source in readable_files():
        text = source.read_text(encoding="utf-8")
        where = source.relative_to(ROOT).as_posix()
        for match in REFERENCE.finditer(text):
            reference, name = match.group(1), match.group(2)
            line = text.count("\n", 0, match.start()) + 1
            if reference in ELSEWHERE:
                continue
            targets = by_suffix.get(reference) or ([lib] if (lib := library_file(reference)) else [])
            if not targets:
                dangling.append(f"{where}:{line}: {reference}: no such file")
            elif (
                name
                and CODE_NAME.search(name)
                and not any(
                    re.search(rf"\b{re.escape(name)}\b", target.read_text(encoding="utf-8")) for target in targets
                )
            ):
                dangling.append(f"{where}:{line}: {reference} {name}: no such name there")
    assert not dangling, "\n".join(dangling)
