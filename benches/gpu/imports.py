"""The modules a program imports when it starts, read from the source, not run: what an overlay must hold.

An overlay leaves packages out because the GPU checks never import them (benches/gpu/overlays.py). This
follows the imports that run when a module is imported, from some root modules, through the overlay's
folder and this repo's src/, and names every top-level package reached that neither holds, nor the
node's image (NODE_IMPORTS), nor the standard library: those would fail on the node with
ModuleNotFoundError, minutes into a check. It runs here, on the built overlay, before anything travels.

What runs at import: the module's own statements and class bodies, not function bodies. An import
inside `try:` or `with suppress(...)` (a fallback follows it) or under `if` (TYPE_CHECKING, a version or
platform test) may not run, so it is not followed. `import a.b.c` runs a, a.b and a.b.c; `from a.b import c`
runs a and a.b, and a.b.c when c is a submodule. A file that does not parse (newer syntax than this python
reads) is counted, skipped and reported.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Reach:
    modules: int = 0
    # top-level package -> the import chain that reached it (root first)
    missing: dict[str, list[str]] = field(default_factory=dict)
    unparsed: list[str] = field(default_factory=list)


def module_files(folders: list[Path]) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py under the folders (the first folder wins), plus
    extension modules (`x.cpython-312-...so`, `x.abi3.so`) and namespace packages. A folder that is itself
    a package (this repo's src/) counts from its parent."""
    found: dict[str, Path] = {}
    for folder in folders:
        base = folder.parent if (folder / "__init__.py").is_file() else folder
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(base)
            if any(part.endswith((".dist-info", ".data")) or part == "__pycache__" for part in rel.parts):
                continue
            if path.suffix == ".py":
                parts = rel.with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            elif path.suffix == ".so":
                name = ".".join((*rel.parts[:-1], rel.name.split(".")[0]))
            else:
                continue
            if name and name not in found:
                found[name] = path
        # a folder without __init__.py is a namespace package: importable, nothing to run
        for path in sorted(p for p in folder.rglob("*") if p.is_dir()):
            rel = path.relative_to(base)
            if not any(part.endswith((".dist-info", ".data")) or part == "__pycache__" for part in rel.parts):
                found.setdefault(".".join(rel.parts), path)
    return found


def _imports(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Absolute names of the imports that run when `module` is imported (see the module doc)."""
    out: list[str] = []

    def absolute(node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = absolute(node)
                out.append(base)
                out.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
            elif isinstance(node, ast.ClassDef):
                visit(node.body)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                # `with suppress(ImportError):` guards like a try
                if not any("suppress" in ast.unparse(item.context_expr) for item in node.items):
                    visit(node.body)
            # try / if bodies may not run, functions do not: not followed

    visit(tree.body)
    return out


def reach(roots: list[str], folders: list[Path], provided: set[str]) -> Reach:
    """Follow the imports from `roots` through `folders`; a top-level name in `provided`, in the standard
    library or in the folders is there; any other is missing."""
    # pkg_resources puts setuptools' vendored packages on sys.path when imported (its __init__.py)
    folders = folders + [f / "setuptools" / "_vendor" for f in folders if (f / "setuptools" / "_vendor").is_dir()]
    files = module_files(folders)
    tops = {name.split(".")[0] for name in files}
    result = Reach()
    parent: dict[str, str | None] = {}
    queue: list[str] = []

    def enqueue(name: str, via: str | None) -> None:
        parts = name.split(".")
        top = parts[0]
        if top not in tops:
            there = top in provided or top in sys.stdlib_module_names or top == "__main__"
            if not there and top not in result.missing:
                chain, at = [], via
                while at:
                    chain.append(at)
                    at = parent[at]
                result.missing[top] = chain[::-1] + [name]
            return
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a, then a.b, then a.b.c
            prefix = ".".join(parts[:i])
            if prefix in files and prefix not in parent:
                parent[prefix] = via
                queue.append(prefix)

    for root in roots:
        enqueue(root, None)
    while queue:
        name = queue.pop()
        path = files[name]
        result.modules += 1
        if path.suffix != ".py":  # an extension module or a namespace package
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            result.unparsed.append(name)
            continue
        for imported in _imports(tree, name, path.name == "__init__.py"):
            enqueue(imported, name)
    return result


def main(argv: list[str]) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", help="modules to start from")
    parser.add_argument("--folder", action="append", type=Path, required=True, help="where modules are found")
    parser.add_argument("--provided", nargs="*", default=[], help="top-level packages there anyway")
    args = parser.parse_args(argv)
    found = reach(args.roots, args.folder, set(args.provided))
    print(json.dumps({"modules": found.modules, "missing": found.missing, "unparsed": found.unparsed}))
    return 1 if found.missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
