"""Code fingerprints: what a stage's result can depend on in its code, and nothing else.

A DVC stage that listed its source files as deps would rerun after any edit of them, a reworded
error message or a docstring included. Instead each stage depends on a small file written by the
``code_fingerprint`` stage: the hash of the *normalised* code of the stage script and of every
library module it imports (its import closure inside ``minisci``). Normalised means the syntax tree
(so comments and formatting are gone by construction) with what cannot change a result removed:

* docstrings;
* type annotations of functions and local variables (class-level annotations stay: a dataclass
  field is declared by its annotation, and the config classes check values against them);
* messages: every string inside a ``raise`` statement, an ``assert``'s message, the ``help``/``description``/``epilog``/
  ``usage``/``metavar`` arguments of any call (argparse), and whole statements that only print or
  log: ``print(...)`` (to the terminal, not to a ``file=``), ``warnings.warn(...)`` and
  ``logger.info(...)``-style calls on a ``log``/``logger``/``logging`` object.

Anything else, a constant, an operator, a default, an import, changes the fingerprint. The
training resume check (:func:`minisci.training.code_version`) uses the same normaliser, so "the same
code" means the same thing to DVC and to a resumed run.

The same file records the content hash of the base model (``model.base``): its weights, config and
tokenizer files, wherever they are (a pip package, a local folder, the Hugging Face cache), so
replacing them makes the stages that read them stale.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from minisci.errors import MinisciError

SRC = Path(__file__).resolve().parents[1]  # the folder that holds the minisci package

# Keyword arguments whose value is text for people (argparse and friends).
MESSAGE_KEYWORDS = {"help", "description", "epilog", "usage", "metavar"}
# Methods that only log, when called on an object whose name says it is a logger.
LOG_METHODS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "log"}
MESSAGE = "<message>"


# 1. the import closure of a script inside the minisci package -------------------------------------------


def module_file(module: str, src: Path = SRC) -> Path | None:
    """``src/minisci/a/b.py`` (or ``.../__init__.py``) of ``minisci.a.b``; None if it is not a module."""
    base = src.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def minisci_imports(path: Path, src: Path = SRC) -> set[str]:
    """Library modules (``minisci.x.y``) imported anywhere in ``path``, including inside functions.
    ``from minisci.data import readers`` names the module ``minisci.data.readers``."""
    found = set()
    for module, names in _facts(path, path.read_bytes())[0]:
        if names is None:
            found.add(module)
        else:
            for name in names:
                sub = f"{module}.{name}"
                found.add(sub if module_file(sub, src) else module)
    return found


def module_closure(script: Path, src: Path = SRC) -> list[Path]:
    """The library files a script imports, directly or indirectly, sorted. Package ``__init__.py``
    files (empty here; a test keeps them so) are left out."""
    seen, todo = set(), list(minisci_imports(script, src))
    while todo:
        module = todo.pop()
        path = module_file(module, src)
        if module in seen or path is None:
            continue
        seen.add(module)
        todo += minisci_imports(path, src)
    return sorted(p for p in (module_file(m, src) for m in seen) if p.name != "__init__.py")


# 2. the normaliser ------------------------------------------------------------------------------------


def _name(node: ast.AST) -> str:
    """``a.b.c`` of a Name/Attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _name(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _is_message_call(call: ast.Call) -> bool:
    """A call made only to tell people something: print to the terminal, warnings.warn, logging."""
    name = _name(call.func)
    if name == "print":
        targets = [_name(k.value) for k in call.keywords if k.arg == "file"]
        return all(t in ("sys.stderr", "sys.stdout") for t in targets)
    if name == "warnings.warn":
        return True
    owner, _, method = name.rpartition(".")
    return method in LOG_METHODS and "log" in owner.rsplit(".", 1)[-1].lower()


def _blank_strings(node: ast.AST) -> ast.AST:
    """``node`` with every string constant and f-string replaced by one placeholder."""

    class Blank(ast.NodeTransformer):
        def visit_JoinedStr(self, node):
            return ast.Constant(MESSAGE)

        def visit_Constant(self, node):
            return ast.Constant(MESSAGE) if isinstance(node.value, str) else node

    return Blank().visit(node)


class _Normaliser(ast.NodeTransformer):
    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        """A statement list without its docstring and message-only statements (``pass`` if empty)."""
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            if isinstance(body[0].value.value, str):
                body = body[1:]
        kept = []
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and _is_message_call(stmt.value):
                continue
            if isinstance(stmt, ast.Pass):
                continue
            kept.append(stmt)
        return kept or [ast.Pass()]

    def generic_visit(self, node):
        node = super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            value = getattr(node, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                setattr(node, field, self._body(value))
        return node

    def _function(self, node):
        node.returns = None
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]:
            if arg is not None:
                arg.annotation = None
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node):
        for stmt in node.body:  # a class-level annotation declares a (dataclass) field: code
            if isinstance(stmt, ast.AnnAssign):
                stmt.field = True
        return self.generic_visit(node)

    def visit_AnnAssign(self, node):
        """Elsewhere ``x: int = 1`` is ``x = 1``, and a bare ``x: int`` does nothing."""
        node = self.generic_visit(node)
        if getattr(node, "field", False):
            return node
        if node.value is None:
            return ast.Pass()
        return ast.Assign(targets=[node.target], value=node.value)

    def visit_Assert(self, node):
        node = self.generic_visit(node)
        if node.msg is not None:
            node.msg = ast.Constant(MESSAGE)
        return node

    def visit_Raise(self, node):
        return _blank_strings(node)

    def visit_keyword(self, node):
        node = self.generic_visit(node)
        if node.arg in MESSAGE_KEYWORDS:
            node.value = ast.Constant(MESSAGE)
        return node


def parse(path: Path, raw: bytes | None = None) -> ast.Module:
    """The syntax tree of a source file (whose bytes are ``raw`` when given); a file that is not UTF-8
    or not Python is one line naming the file (and line), not a traceback of the always-run
    code_fingerprint stage."""
    raw = path.read_bytes() if raw is None else raw
    if path.is_absolute() and path.is_relative_to(Path.cwd()):
        path = path.relative_to(Path.cwd())  # the stage passes resolved paths; name it as the user does
    try:
        return ast.parse(raw.decode("utf-8"), filename=str(path))
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise MinisciError(f"{path}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {e.start})") from None
    except SyntaxError as e:
        raise MinisciError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None


def normalise(source: str | ast.Module) -> str:
    """The normalised form of Python ``source`` or its syntax tree (a dump of the tree; see the module
    docstring)."""
    tree = _Normaliser().visit(ast.parse(source) if isinstance(source, str) else source)
    return ast.dump(tree, annotate_fields=True, include_attributes=False)


def code_hash(files: list[Path], root: Path) -> str:
    """sha256 of the normalised code of ``files``, each named by its path relative to ``root``."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(_facts(path, path.read_bytes())[1].encode() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=512)
def _facts(path: Path, raw: bytes) -> tuple[tuple[tuple[str, tuple[str, ...] | None], ...], str]:
    """What the fingerprints read of one source file, parsed once per content: its ``minisci``
    imports (``(module, names)`` for ``from module import names``, ``(module, None)`` for ``import
    module``) and its normalised code. The stages' closures share most library modules: each is
    parsed and normalised once per process, however many stages import it."""
    tree = parse(path, raw)
    imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minisci":
            imports.append((node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            imports += [(a.name, None) for a in node.names if a.name.split(".")[0] == "minisci"]
    return tuple(imports), normalise(tree)  # normalise last: it rewrites the tree in place


def stage_fingerprint(script: Path, root: Path, src: Path | None = None) -> dict:
    """What a stage's code is: its script and import closure (paths relative to ``root``) and their hash."""
    files = [script, *module_closure(script, src or root / "src")]
    return {"files": [p.relative_to(root).as_posix() for p in files], "code": code_hash(files, root)}


# 3. the base model's content -------------------------------------------------------------------------

# The files of a Hugging Face model folder that make its weights, architecture and tokenizer.
MODEL_FILE_PATTERNS = ("*.safetensors", "*.json", "vocab.txt", "*.model", "merges.txt", "*.tiktoken")


def model_files(model_dir: Path) -> list[Path]:
    """The files of a Hugging Face model folder that define it (weights, config, tokenizer), sorted."""
    found = {p for pattern in MODEL_FILE_PATTERNS for p in model_dir.glob(pattern) if p.is_file()}
    return sorted(found)


def model_content_hash(model_dir: Path) -> dict[str, str]:
    """sha256 of each defining file of a model folder, by file name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in model_files(model_dir)}
