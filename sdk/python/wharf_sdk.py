"""wharf_sdk: write Wharf plugins in Python, built with componentize-py.

A Wharf plugin is a WebAssembly component implementing the WIT contract
``wharf:plugin@0.1.0``. componentize-py turns a Python module into such a
component; this module turns the contract into decorators and plain Python
values, so a tool plugin is a dataclass and a function::

    from dataclasses import dataclass
    import wharf_sdk as wharf

    wharf.plugin(name="shout", version="0.1.0", description="Upper-cases text.")

    @dataclass
    class ShoutArgs:
        text: str = wharf.arg("The text to shout.")

    @wharf.tool(mode="parallel")
    def shout(args: ShoutArgs) -> str:
        \"\"\"Returns the text in upper case.\"\"\"
        return args.text.upper()

    # componentize-py looks for these classes in the app module.
    from wharf_sdk import Plugin, Tool

Build it with ``wharf plugin build`` (or by hand:
``componentize-py -d WIT -w tool-plugin componentize app -p SDK_DIR -o app.wasm``).

The same module works in plain CPython, without the component bindings: the
host imports then fall back to local fakes (``log`` prints to stderr, ``kv``
is a dict, ``config`` is what :func:`testing.set_config` gave), so plugin
logic can be unit-tested with ``python3 -m unittest`` before it is built.

Exports by kind (import the names the world needs into the app module):

======== ==================================== =============================
kind     define with                          world / export names
======== ==================================== =============================
tool     ``@tool``                            ``tool-plugin``: Plugin, Tool
policy   ``@policy``, ``@config_validator``   ``policy-plugin``: Plugin, Policy, Configure
hooks    ``@hook``, ``prompt_section()``      ``hooks-plugin``: Plugin, Hooks
skills   ``@skills_catalog``, ``@skill_loader`` + ``@tool``
                                              ``skills-plugin``: Plugin, Skills, Tool
llm      ``@llm_adapter``                     ``llm-plugin``: Plugin, Llm
======== ==================================== =============================

A tool or a policy may ask the session's user a question while it runs
(``questions.ask(message, schema)``, answered ``Answer("accept", values)``,
``decline`` or ``cancel``): set ``questions = true`` under ``[tool.wharf]``
(the build then targets ``tool-questions-plugin`` or
``policy-questions-plugin``); the operator grants ``questions = true``.
"""

from __future__ import annotations

import dataclasses
import enum
import errno as _errno
import inspect
import json
import os
import posixpath
import re
import sys
import traceback
import types as _pytypes
import typing
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

__all__ = [
    "WIT_PACKAGE",
    "SDK_VERSION",
    "plugin",
    "arg",
    "Doc",
    "tool",
    "ToolError",
    "Output",
    "Context",
    "schema_of",
    "parse_args",
    "error_from_exception",
    "log",
    "config",
    "kv",
    "process",
    "ProcessError",
    "questions",
    "QuestionError",
    "Answer",
    "policy",
    "config_validator",
    "PolicyRequest",
    "Decision",
    "allow",
    "deny",
    "ask",
    "rewrite",
    "glob_match",
    "PathRules",
    "hook",
    "prompt_section",
    "Outcome",
    "HOOK_POINTS",
    "skills_catalog",
    "skill_loader",
    "llm_adapter",
    "LlmError",
    "ModelInfo",
    "text",
    "reasoning",
    "tool_call",
    "usage",
    "finish",
    "testing",
    "Plugin",
    "Tool",
    "Policy",
    "Configure",
    "Hooks",
    "Skills",
    "Llm",
]

#: The WIT package this SDK targets.
WIT_PACKAGE = "wharf:plugin@0.1.0"
#: This SDK's version.
SDK_VERSION = "0.1.0"

# ---------------------------------------------------------------------------
# Component bindings (absent in plain CPython)
# ---------------------------------------------------------------------------

try:  # pragma: no cover - only inside a component build
    from wit_world.imports import types as _wt  # type: ignore
    from componentize_py_types import Err as _Err  # type: ignore

    IN_COMPONENT = True
except ImportError:  # plain CPython: tests and tooling
    _wt = None
    _Err = None
    IN_COMPONENT = False


# The generated binding modules, imported now: componentize-py runs this
# module's top level at build time and snapshots the result, and a module not
# imported then cannot be imported when the component runs. Each world has
# only some of them.
_BINDINGS: Dict[str, Any] = {}
if IN_COMPONENT:  # pragma: no cover
    import importlib as _importlib

    for _name in (
        "wit_world.imports.log",
        "wit_world.imports.config",
        "wit_world.imports.kv",
        "wit_world.imports.process",
        "wit_world.imports.questions",
        "wit_world.exports.tool",
        "wit_world.exports.policy",
        "wit_world.exports.hooks",
        "wit_world.exports.llm",
        "wit_world.exports.skills",
    ):
        try:
            _BINDINGS[_name] = _importlib.import_module(_name)
        except ImportError:
            pass


def _import(name: str):
    """A generated binding module (imported at build time, see above)."""
    m = _BINDINGS.get(name)
    if m is None:
        raise RuntimeError(f"wharf_sdk: {name} is not part of this component's world")
    return m


# ---------------------------------------------------------------------------
# Self-description
# ---------------------------------------------------------------------------

_FS_ACCESS = ("none", "read-only", "read-write")


@dataclasses.dataclass
class _Info:
    name: str = "plugin"
    version: str = "0.1.0"
    description: str = ""
    filesystem: str = "none"
    hosts: List[str] = dataclasses.field(default_factory=list)
    env: List[str] = dataclasses.field(default_factory=list)
    process: bool = False
    memory_mb: Optional[int] = None


_INFO = _Info()


def plugin(
    name: str,
    version: str = "0.1.0",
    description: str = "",
    *,
    filesystem: str = "none",
    hosts: Iterable[str] = (),
    env: Iterable[str] = (),
    process: bool = False,
    memory_mb: Optional[int] = None,
) -> None:
    """Declares the plugin's self-description and what it asks to be granted.

    ``filesystem`` is ``"none"``, ``"read-only"`` or ``"read-write"`` (access
    to the directories the operator grants); ``hosts`` are outbound HTTP host
    patterns; ``env`` names environment variables; ``process`` asks for the
    sandboxed ``process`` capability; ``memory_mb`` says how much memory the
    plugin needs (Python components want 64+ MiB; the host default is 256).
    The effective grant is this request intersected with the operator's.
    """
    if filesystem not in _FS_ACCESS:
        raise ValueError(f"filesystem must be one of {_FS_ACCESS}, not {filesystem!r}")
    global _INFO
    _INFO = _Info(name, version, description, filesystem, list(hosts), list(env), bool(process), memory_mb)


def _info_record():
    t = _wt
    fs = {"none": t.FsAccess.NONE, "read-only": t.FsAccess.READ_ONLY, "read-write": t.FsAccess.READ_WRITE}
    i = _INFO
    return t.PluginInfo(
        name=i.name,
        version=i.version,
        description=i.description,
        requests=t.GrantRequest(
            filesystem=fs[i.filesystem], hosts=list(i.hosts), env=list(i.env), process=i.process, memory_mb=i.memory_mb
        ),
    )


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class ToolError(Exception):
    """A failed tool call the model should see and repair.

    ``code`` is a stable ``SCREAMING_SNAKE_CASE`` identifier; the model reads
    ``message``. Raise it from a tool; other exceptions are mapped by
    :func:`error_from_exception`.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def invalid_argument(cls, message: str) -> "ToolError":
        return cls("INVALID_ARGUMENT", message)

    @classmethod
    def not_found(cls, message: str) -> "ToolError":
        return cls("NOT_FOUND", message)

    @classmethod
    def permission_denied(cls, message: str) -> "ToolError":
        return cls("PERMISSION_DENIED", message)

    @classmethod
    def unknown_tool(cls, name: str) -> "ToolError":
        return cls("UNKNOWN_TOOL", f"this plugin has no tool named `{name}`")

    @classmethod
    def internal(cls, message: str) -> "ToolError":
        return cls("INTERNAL", message)


_ERRNO_CODES = {
    "ENOENT": "NOT_FOUND",
    "EACCES": "PERMISSION_DENIED",
    "EPERM": "PERMISSION_DENIED",
    "EROFS": "PERMISSION_DENIED",
    "ENOTCAPABLE": "PERMISSION_DENIED",
    "EEXIST": "ALREADY_EXISTS",
    "ENOTDIR": "NOT_A_DIRECTORY",
    "EISDIR": "IS_A_DIRECTORY",
    "ENOTEMPTY": "DIRECTORY_NOT_EMPTY",
    "EINVAL": "INVALID_ARGUMENT",
    "ETIMEDOUT": "TIMEOUT",
    "ENOSPC": "RESOURCE_EXHAUSTED",
    "EDQUOT": "RESOURCE_EXHAUSTED",
    "EFBIG": "RESOURCE_EXHAUSTED",
    "ENOMEM": "RESOURCE_EXHAUSTED",
}


def error_from_exception(e: BaseException) -> ToolError:
    """Maps an exception to a clean tool error:

    - :class:`ToolError` as it is;
    - ``OSError`` by errno: ``NOT_FOUND``, ``PERMISSION_DENIED`` (also a
      read-only filesystem or an ungranted directory), ``ALREADY_EXISTS``,
      ``NOT_A_DIRECTORY``, ``IS_A_DIRECTORY``, ``DIRECTORY_NOT_EMPTY``,
      ``TIMEOUT``, ``RESOURCE_EXHAUSTED``, else ``IO``; the message names the
      file;
    - ``ValueError`` (bad JSON, bad numbers, bad encodings …):
      ``INVALID_ARGUMENT``;
    - ``NotImplementedError``: ``UNSUPPORTED``; ``MemoryError``:
      ``RESOURCE_EXHAUSTED``;
    - anything else: ``INTERNAL`` with the exception type and message (the
      traceback goes to the host log at debug level).
    """
    if isinstance(e, ToolError):
        return e
    if isinstance(e, OSError):
        name = _errno.errorcode.get(e.errno or 0, "")
        code = _ERRNO_CODES.get(name)
        if code is None:
            code = {
                FileNotFoundError: "NOT_FOUND",
                PermissionError: "PERMISSION_DENIED",
                FileExistsError: "ALREADY_EXISTS",
                IsADirectoryError: "IS_A_DIRECTORY",
                NotADirectoryError: "NOT_A_DIRECTORY",
                TimeoutError: "TIMEOUT",
            }.get(type(e), "IO")
        what = e.strerror or str(e)
        msg = f"{e.filename}: {what}" if e.filename else what
        return ToolError(code, msg)
    if isinstance(e, ValueError):
        return ToolError("INVALID_ARGUMENT", str(e) or type(e).__name__)
    if isinstance(e, NotImplementedError):
        return ToolError("UNSUPPORTED", str(e) or "not implemented")
    if isinstance(e, MemoryError):
        return ToolError("RESOURCE_EXHAUSTED", "out of memory")
    return ToolError("INTERNAL", f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------------------
# Typed arguments: dataclasses -> JSON Schema, JSON -> dataclasses
# ---------------------------------------------------------------------------


class Doc(str):
    """``Annotated[str, Doc("what this is")]``: a field description."""


def arg(description: Optional[str] = None, *, default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING, **schema: Any) -> Any:
    """A documented dataclass field: ``path: str = arg("File to read.")``.

    ``description`` is what the model reads. ``default``/``default_factory``
    make the field optional. Extra keywords are merged into the field's JSON
    Schema (``minimum=1``, ``maxLength=200``, ``examples=[…]``).
    """
    metadata = {"description": description, "schema": schema}
    if default is not dataclasses.MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(metadata=metadata)


_NoneType = type(None)


def _hints(cls) -> Dict[str, Any]:
    module = sys.modules.get(cls.__module__)
    return typing.get_type_hints(cls, globalns=vars(module) if module else None, include_extras=True)


def _split_annotated(tp):
    """(inner type, description or None, extra schema)."""
    desc, extra = None, {}
    if typing.get_origin(tp) is typing.Annotated:
        args = typing.get_args(tp)
        tp = args[0]
        for a in args[1:]:
            if isinstance(a, str):
                desc = str(a)
            elif isinstance(a, dict):
                extra.update(a)
    return tp, desc, extra


def _is_optional(tp) -> bool:
    tp, _, _ = _split_annotated(tp)
    return typing.get_origin(tp) in (Union, _UnionType()) and _NoneType in typing.get_args(tp)


def _UnionType():
    return getattr(_pytypes, "UnionType", Union)


def schema_of(tp) -> Dict[str, Any]:
    """The JSON Schema (draft 2020-12 subset, inlined) of a Python type.

    Supports dataclasses (fields become properties; fields without a default
    are ``required``; ``additionalProperties: false``), ``str``, ``int``,
    ``float``, ``bool``, ``Any``, ``Optional[T]``, ``Union``, ``Literal``,
    ``enum.Enum`` subclasses (their values), ``list[T]``/``tuple[T, ...]``/
    ``set[T]``, ``dict[str, T]`` and ``Annotated[T, "description"]``.
    """
    tp, desc, extra = _split_annotated(tp)
    s = _schema_inner(tp)
    if desc:
        s["description"] = desc
    s.update(extra)
    return s


def _schema_inner(tp) -> Dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return {}
    if tp is _NoneType or tp is None:
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        s: Dict[str, Any] = {"enum": values}
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1:
            s["type"] = kinds.pop()
        return s
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_schema(tp)
    if origin is typing.Literal:
        s = {"enum": list(args)}
        kinds = {_json_type(v) for v in args}
        if len(kinds) == 1:
            s["type"] = kinds.pop()
        return s
    if origin in (Union, _UnionType()):
        members = [a for a in args if a is not _NoneType]
        nullable = len(members) != len(args)
        if len(members) == 1:
            s = schema_of(members[0])
            if nullable:
                t = s.get("type")
                if isinstance(t, str):
                    s["type"] = [t, "null"]
                    if "enum" in s:
                        s["enum"] = list(s["enum"]) + [None]
                elif not s:
                    pass
                else:
                    s = {"anyOf": [s, {"type": "null"}]}
            return s
        alts = [schema_of(m) for m in members]
        if nullable:
            alts.append({"type": "null"})
        return {"anyOf": alts}
    if origin in (list, List, set, frozenset) or tp in (list, set, frozenset):
        s = {"type": "array"}
        if args:
            s["items"] = schema_of(args[0])
        if origin in (set, frozenset) or tp in (set, frozenset):
            s["uniqueItems"] = True
        return s
    if origin is tuple or tp is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0])}
        if args:
            return {
                "type": "array",
                "prefixItems": [schema_of(a) for a in args],
                "items": False,
                "minItems": len(args),
                "maxItems": len(args),
            }
        return {"type": "array"}
    if origin in (dict, Dict) or tp is dict:
        s = {"type": "object"}
        if len(args) == 2:
            s["additionalProperties"] = schema_of(args[1])
        return s
    raise TypeError(f"wharf_sdk: no JSON Schema for type {tp!r}")


def _json_type(v) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None:
        return "null"
    return "object"


def _dataclass_schema(cls) -> Dict[str, Any]:
    hints = _hints(cls)
    props: Dict[str, Any] = {}
    required: List[str] = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        s = schema_of(hints.get(f.name, Any))
        desc = f.metadata.get("description") if f.metadata else None
        if desc:
            s["description"] = desc
        if f.metadata and f.metadata.get("schema"):
            s.update(f.metadata["schema"])
        if f.default is not dataclasses.MISSING:
            d = f.default.value if isinstance(f.default, enum.Enum) else f.default
            if d is not None and _jsonable(d):
                s.setdefault("default", d)
        elif f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            required.append(f.name)
        props[f.name] = s
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    doc = inspect.getdoc(cls)
    if doc and not doc.startswith(cls.__name__ + "("):
        out["description"] = doc
    return out


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


class _ArgError(ValueError):
    pass


def parse_args(tp, value: Any, path: str = ""):
    """Converts decoded JSON into ``tp`` (usually a dataclass), checking
    types; a mismatch raises :class:`ToolError` ``INVALID_ARGUMENT`` naming
    the JSON Pointer of the bad value."""
    try:
        return _convert(tp, value, path)
    except _ArgError as e:
        raise ToolError("INVALID_ARGUMENT", f"invalid arguments: {e}") from None


def _where(path: str) -> str:
    return path or "/"


def _convert(tp, v, path):
    tp, _, _ = _split_annotated(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return v
    if tp is _NoneType:
        if v is not None:
            raise _ArgError(f"{_where(path)}: expected null")
        return None
    if tp is bool:
        if not isinstance(v, bool):
            raise _ArgError(f"{_where(path)}: expected boolean, got {_json_type(v)}")
        return v
    if tp is int:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise _ArgError(f"{_where(path)}: expected integer, got {_json_type(v)}")
        return v
    if tp is float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise _ArgError(f"{_where(path)}: expected number, got {_json_type(v)}")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            raise _ArgError(f"{_where(path)}: expected string, got {_json_type(v)}")
        return v
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(v)
        except ValueError:
            allowed = ", ".join(json.dumps(m.value) for m in tp)
            raise _ArgError(f"{_where(path)}: expected one of {allowed}, got {json.dumps(v)}") from None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(v, dict):
            raise _ArgError(f"{_where(path)}: expected object, got {_json_type(v)}")
        hints = _hints(tp)
        fields = {f.name: f for f in dataclasses.fields(tp) if f.init}
        unknown = [k for k in v if k not in fields]
        if unknown:
            raise _ArgError(f"{_where(path)}: unknown field(s) {', '.join(sorted(unknown))}; expected {', '.join(fields)}")
        kwargs = {}
        for name, f in fields.items():
            if name in v:
                kwargs[name] = _convert(hints.get(name, Any), v[name], f"{path}/{name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                raise _ArgError(f"{_where(path)}: missing required field `{name}`")
        return tp(**kwargs)
    if origin is typing.Literal:
        if v not in args or any(type(v) is bool and type(a) is not bool for a in args if a == v):
            allowed = ", ".join(json.dumps(a) for a in args)
            raise _ArgError(f"{_where(path)}: expected one of {allowed}, got {json.dumps(v)}")
        return v
    if origin in (Union, _UnionType()):
        if v is None and _NoneType in args:
            return None
        errors = []
        for a in args:
            if a is _NoneType:
                continue
            try:
                return _convert(a, v, path)
            except _ArgError as e:
                errors.append(str(e))
        raise _ArgError(errors[0] if len(errors) == 1 else f"{_where(path)}: matches none of: " + "; ".join(errors))
    if origin in (list, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(v, list):
            raise _ArgError(f"{_where(path)}: expected array, got {_json_type(v)}")
        item = args[0] if args else Any
        items = [_convert(item, x, f"{path}/{i}") for i, x in enumerate(v)]
        if origin in (set, frozenset) or tp in (set, frozenset):
            return (frozenset if (origin or tp) is frozenset else set)(items)
        return items
    if origin is tuple or tp is tuple:
        if not isinstance(v, list):
            raise _ArgError(f"{_where(path)}: expected array, got {_json_type(v)}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], x, f"{path}/{i}") for i, x in enumerate(v))
        if args and len(args) != len(v):
            raise _ArgError(f"{_where(path)}: expected {len(args)} items, got {len(v)}")
        return tuple(_convert(a, x, f"{path}/{i}") for i, (a, x) in enumerate(zip(args, v))) if args else tuple(v)
    if origin is dict or tp is dict:
        if not isinstance(v, dict):
            raise _ArgError(f"{_where(path)}: expected object, got {_json_type(v)}")
        val = args[1] if len(args) == 2 else Any
        return {k: _convert(val, x, f"{path}/{k}") for k, x in v.items()}
    raise _ArgError(f"{_where(path)}: unsupported argument type {tp!r}")


# ---------------------------------------------------------------------------
# Tools
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Context:
    """Facts about the call being made."""

    session_id: str = "test"
    call_id: str = "call_0"
    #: The session's workspace directory, if any (also the guest path when
    #: the plugin was granted it).
    workspace: Optional[str] = None

    def resolve(self, path: str) -> str:
        """``path`` made absolute against the workspace and normalized
        (``..`` removed lexically). Relative paths need a workspace."""
        if not posixpath.isabs(path):
            if not self.workspace:
                raise ToolError.invalid_argument(f"`{path}` is relative but the session has no workspace")
            path = posixpath.join(self.workspace, path)
        return posixpath.normpath(path)

    def confine(self, path: str) -> str:
        """:meth:`resolve`, refusing paths outside the workspace
        (``PERMISSION_DENIED``) before anything touches the filesystem."""
        p = self.resolve(path)
        if self.workspace:
            root = posixpath.normpath(self.workspace)
            if p != root and not p.startswith(root.rstrip("/") + "/"):
                raise ToolError.permission_denied(f"{path}: outside the workspace {root}")
        return p


@dataclasses.dataclass
class Output:
    """A tool result: ``content`` for the model, ``details`` (a JSON object)
    for surfaces only."""

    content: str
    details: Optional[Dict[str, Any]] = None


@dataclasses.dataclass
class _ToolDef:
    name: str
    description: str
    mode: str
    fn: Callable
    args_type: Any
    takes_ctx: bool
    schema: Dict[str, Any]


_TOOLS: Dict[str, _ToolDef] = {}
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def tool(fn: Optional[Callable] = None, *, name: Optional[str] = None, description: Optional[str] = None, mode: str = "parallel", schema: Optional[Dict[str, Any]] = None):
    """Registers a tool. Use as ``@tool`` or ``@tool(mode="exclusive")``.

    The function takes its arguments as a dataclass (its first parameter's
    annotation; the JSON Schema is derived from it), optionally followed by
    a :class:`Context`; or no parameters at all. It returns a ``str``, an
    :class:`Output`, or any JSON-serializable value (sent as JSON text).
    ``description`` defaults to the docstring. ``mode`` is ``"parallel"``
    (may run next to other calls) or ``"exclusive"`` (runs alone).
    ``schema`` overrides the derived schema (then the function receives a
    ``dict``).
    """
    if mode not in ("parallel", "exclusive"):
        raise ValueError(f"mode must be 'parallel' or 'exclusive', not {mode!r}")

    def register(f: Callable) -> Callable:
        tname = name or f.__name__
        if not _NAME_RE.match(tname):
            raise ValueError(f"tool name {tname!r} must match [a-zA-Z0-9_-]{{1,64}}")
        params = list(inspect.signature(f).parameters.values())
        hints = typing.get_type_hints(f, include_extras=True)
        args_type = None
        takes_ctx = False
        if params:
            first = hints.get(params[0].name, dict if schema else Any)
            if first is Context:
                takes_ctx = True
            else:
                args_type = first
                takes_ctx = len(params) > 1
        if schema is not None:
            s = dict(schema)
            args_type = args_type if args_type is not None else dict
        elif args_type is None:
            s = {"type": "object", "properties": {}, "additionalProperties": False}
        else:
            s = schema_of(args_type)
            s.pop("description", None)
        desc = description or inspect.getdoc(f) or ""
        _TOOLS[tname] = _ToolDef(tname, desc, mode, f, args_type, takes_ctx, s)
        return f

    return register(fn) if fn is not None else register


def _run_tool(name: str, arguments: str, ctx: Context) -> Output:
    """Runs a registered tool; every failure becomes a :class:`ToolError`."""
    t = _TOOLS.get(name)
    if t is None:
        raise ToolError.unknown_tool(name)
    try:
        raw = json.loads(arguments) if arguments.strip() else {}
    except ValueError as e:
        raise ToolError.invalid_argument(f"arguments are not JSON: {e}") from None
    try:
        call_args = []
        if t.args_type is not None:
            if t.args_type is dict or t.args_type is Any:
                call_args.append(raw)
            else:
                call_args.append(parse_args(t.args_type, raw))
        if t.takes_ctx:
            call_args.append(ctx)
        result = t.fn(*call_args)
    except BaseException as e:  # noqa: BLE001 - every failure is a clean result
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        err = error_from_exception(e)
        if err.code == "INTERNAL":
            log.debug(f"{name}: {''.join(traceback.format_exception(type(e), e, e.__traceback__))}")
        raise err from None
    return _to_output(result)


def _to_output(result: Any) -> Output:
    if isinstance(result, Output):
        return result
    if result is None:
        return Output("")
    if isinstance(result, str):
        return Output(result)
    return Output(json.dumps(result, indent=2, ensure_ascii=False, default=str))


# ---------------------------------------------------------------------------
# Host imports: log, config, kv, process
# ---------------------------------------------------------------------------


class _Log:
    """The host's log (``WHARF_LOG=debug`` shows it), attributed to this
    plugin. Outside a component, lines go to stderr."""

    _LEVELS = ("trace", "debug", "info", "warn", "error")

    def write(self, level: str, message: str) -> None:
        if _wt is not None:
            lg = _import("wit_world.imports.log")
            lg.write(getattr(lg.Level, level.upper()), str(message))
        elif self._LEVELS.index(level) >= self._native_threshold():
            print(f"[{level}] {message}", file=sys.stderr)

    def _native_threshold(self) -> int:
        want = os.environ.get("WHARF_LOG", "warn").lower()
        return self._LEVELS.index(want) if want in self._LEVELS else 3

    def trace(self, message: str) -> None:
        self.write("trace", message)

    def debug(self, message: str) -> None:
        self.write("debug", message)

    def info(self, message: str) -> None:
        self.write("info", message)

    def warn(self, message: str) -> None:
        self.write("warn", message)

    def error(self, message: str) -> None:
        self.write("error", message)


log = _Log()

_FAKE_CONFIG: Dict[str, Any] = {}
_FAKE_KV: Dict[str, bytes] = {}


class _Config:
    """This plugin's own configuration (its profile row's ``config`` table)."""

    def get_all(self) -> Dict[str, Any]:
        """The whole table (``{}`` when there is none)."""
        if _wt is None:
            return json.loads(json.dumps(_FAKE_CONFIG))
        text = _import("wit_world.imports.config").get_json()
        try:
            v = json.loads(text) if text else {}
        except ValueError:
            v = {}
        return v if isinstance(v, dict) else {}

    def get(self, key: str, default: Any = None) -> Any:
        """One top-level key, decoded from JSON (``default`` when absent)."""
        return self.get_all().get(key, default)

    def load(self, cls):
        """The table as a dataclass ``cls`` (typed, with its defaults);
        a mismatch raises ``ToolError`` ``INVALID_ARGUMENT``."""
        try:
            return _convert(cls, self.get_all(), "/config")
        except _ArgError as e:
            raise ToolError("INVALID_ARGUMENT", f"invalid plugin config: {e}") from None


config = _Config()


class _Kv:
    """A small key-value store private to this plugin, kept across calls (each
    call gets a fresh instance, so module globals do not survive)."""

    def get(self, key: str) -> Optional[bytes]:
        if _wt is None:
            return _FAKE_KV.get(key)
        v = _import("wit_world.imports.kv").get(key)
        return bytes(v) if v is not None else None

    def set(self, key: str, value: Union[bytes, str]) -> None:
        data = value.encode() if isinstance(value, str) else bytes(value)
        if _wt is None:
            _FAKE_KV[key] = data
            return
        try:
            _import("wit_world.imports.kv").set(key, data)
        except Exception as e:  # componentize-py raises Err(str)
            raise ToolError("RESOURCE_EXHAUSTED", f"kv: {getattr(e, 'value', e)}") from None

    def delete(self, key: str) -> None:
        if _wt is None:
            _FAKE_KV.pop(key, None)
            return
        _import("wit_world.imports.kv").delete(key)

    def list_keys(self, prefix: str = "") -> List[str]:
        if _wt is None:
            return sorted(k for k in _FAKE_KV if k.startswith(prefix))
        return list(_import("wit_world.imports.kv").list_keys(prefix))

    def get_json(self, key: str, default: Any = None) -> Any:
        v = self.get(key)
        return default if v is None else json.loads(v.decode())

    def set_json(self, key: str, value: Any) -> None:
        self.set(key, json.dumps(value))


kv = _Kv()


class ProcessError(Exception):
    """``process.run`` failed: ``kind`` is ``not-granted``,
    ``sandbox-unavailable``, ``invalid`` or ``failed``."""

    def __init__(self, kind: str, message: str = ""):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


class _Process:
    """Runs commands under the host's OS sandbox; only when the operator
    granted ``process`` (otherwise :class:`ProcessError` ``not-granted``)."""

    def run(self, command: str, *, workdir: Optional[str] = None, timeout_ms: Optional[int] = None, stdin: Optional[bytes] = None) -> Dict[str, Any]:
        """Runs ``/bin/sh -c command`` to completion; returns ``exit_code``,
        ``signal``, ``timed_out``, ``output`` (combined, capped),
        ``output_bytes`` and ``spill_path``."""
        if _wt is None:
            raise ProcessError("not-granted", "no host outside a component")
        p = _import("wit_world.imports.process")
        try:
            out = p.run(p.Command(command=command, workdir=workdir, timeout_ms=timeout_ms, stdin=stdin))
        except Exception as e:
            v = getattr(e, "value", None)
            kind = type(v).__name__.split("_")[-1].lower().replace("notgranted", "not-granted").replace("sandboxunavailable", "sandbox-unavailable")
            raise ProcessError(kind, str(getattr(v, "value", "") or "")) from None
        return {
            "exit_code": out.exit_code,
            "signal": out.signal,
            "timed_out": out.timed_out,
            "output": out.output,
            "output_bytes": out.output_bytes,
            "spill_path": out.spill_path,
        }


process = _Process()


# ---------------------------------------------------------------------------
# Host import: questions (ask the session's user)
# ---------------------------------------------------------------------------


class QuestionError(Exception):
    """``questions.ask`` failed: ``kind`` is ``no-session``, ``not-granted``,
    ``invalid`` (the form is outside the host's bounds; nobody was asked),
    ``failed``, ``cancelled``, or ``no-import`` (the component was built
    without ``questions = true``)."""

    def __init__(self, kind: str, message: str = ""):
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


@dataclasses.dataclass(frozen=True)
class Answer:
    """The user's answer: ``action`` is ``accept`` (``values`` holds the
    fields, checked against the form by the host), ``decline`` or
    ``cancel`` (nobody answered: dismissed, withdrawn, past the deadline)."""

    action: str
    values: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.action == "accept"


_FAKE_ANSWERS: List[Answer] = []
_QUESTIONS_IMPORT = "wit_world.imports.questions"


class _Questions:
    """Asks the session's user a question during a tool call (or a
    policy's decision): a message and a small flat form, a JSON Schema
    object of at most 16 ``string`` / ``number`` / ``integer`` /
    ``boolean`` fields. Needs ``questions = true`` under ``[tool.wharf]``
    in ``pyproject.toml`` (the world ``tool-questions-plugin`` or
    ``policy-questions-plugin``) and the operator's ``questions = true``
    grant (otherwise :class:`QuestionError` ``not-granted``). ``wharf run``
    declines at once; the call's (a policy's: its own) deadline bounds the
    wait."""

    def ask(self, message: str, schema: Dict[str, Any]) -> Answer:
        """Asks ``message`` with the form ``schema`` (a dict; its fields are
        asked in its key order) and waits for the answer."""
        return self.ask_text(message, json.dumps(schema))

    def ask_text(self, message: str, schema: str) -> Answer:
        """:meth:`ask` with the schema as JSON text."""
        if _wt is None:
            if _FAKE_ANSWERS:
                return _FAKE_ANSWERS.pop(0)
            raise QuestionError("no-session", "no host outside a component (testing.answer_questions scripts answers)")
        q = _BINDINGS.get(_QUESTIONS_IMPORT)
        if q is None:
            raise QuestionError(
                "no-import",
                "this component's world has no `questions` import: set `questions = true` under [tool.wharf] "
                "in pyproject.toml and rebuild",
            )
        try:
            a = q.ask(str(message), str(schema))
        except Exception as e:  # componentize-py raises Err(session-error)
            v = getattr(e, "value", None)
            kind = _variant_case(v) or "failed"
            raise QuestionError(kind, str(getattr(v, "value", "") or "")) from None
        case = _variant_case(a)
        if case == "accept":
            try:
                values = json.loads(getattr(a, "value", "") or "{}")
            except ValueError:
                values = None
            if not isinstance(values, dict):
                raise QuestionError("failed", "the host's answer is not a JSON object")
            return Answer("accept", values)
        return Answer("decline" if case == "decline" else "cancel")


def _variant_case(v: Any) -> Optional[str]:
    """The case of a componentize-py variant value (``SessionError_NotGranted``
    -> ``not-granted``)."""
    if v is None:
        return None
    name = type(v).__name__.split("_")[-1]
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


questions = _Questions()


# ---------------------------------------------------------------------------
# Policies
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class PolicyRequest:
    """The call under review."""

    tool: str
    plugin: str
    arguments: str
    session_id: str = "test"
    agent_depth: int = 0
    workspace: Optional[str] = None

    @property
    def args(self) -> Any:
        """The arguments decoded (``None`` if they are not JSON)."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return None

    def paths(self, keys: Iterable[str] = ("path",)) -> List[str]:
        """The string values of these argument keys (top level, or strings
        in a list), resolved against the workspace and normalized."""
        a = self.args if isinstance(self.args, dict) else {}
        ctx = Context(self.session_id, "", self.workspace)
        out = []
        for k in keys:
            v = a.get(k)
            for s in v if isinstance(v, list) else [v]:
                if isinstance(s, str) and s:
                    try:
                        out.append(ctx.resolve(s))
                    except ToolError:
                        out.append(posixpath.normpath(s))
        return out


@dataclasses.dataclass(frozen=True)
class Decision:
    """A policy verdict: build it with :func:`allow`, :func:`deny`,
    :func:`ask` or :func:`rewrite`."""

    kind: str
    value: Any = None


def allow() -> Decision:
    """No objection."""
    return Decision("allow")


def deny(reason: str) -> Decision:
    """Refuse the call; the model sees ``reason``."""
    return Decision("deny", reason)


def ask(reason: str) -> Decision:
    """Ask a human (or the headless rule, ``agent.ask``)."""
    return Decision("ask", reason)


def rewrite(arguments: Dict[str, Any]) -> Decision:
    """Allow the call with these arguments instead."""
    return Decision("rewrite", arguments)


_POLICY: List[Callable] = []


def policy(fn: Callable) -> Callable:
    """Registers the policy function: ``(PolicyRequest) -> Decision``
    (``None`` means allow). It runs on every call of every tool, so keep it
    cheap. An exception denies the call (fail closed)."""
    _POLICY[:] = [fn]
    return fn


def _evaluate(req: PolicyRequest) -> Decision:
    if not _POLICY:
        return allow()
    try:
        d = _POLICY[0](req)
    except BaseException as e:  # noqa: BLE001 - fail closed
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return deny(f"policy error: {type(e).__name__}: {e}")
    if d is None:
        return allow()
    if not isinstance(d, Decision):
        return deny(f"policy error: returned {type(d).__name__}, not a Decision")
    return d


def _glob_regex(pattern: str) -> "re.Pattern[str]":
    i, out = 0, []
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$")


def glob_match(pattern: str, path: str) -> bool:
    """Whether ``path`` matches a glob: ``*`` and ``?`` within one path
    segment, ``**`` across segments (``**/x`` also matches ``x``),
    ``[abc]``/``[!abc]`` classes. A pattern without ``/`` matches the last
    segment (``*.env`` matches ``a/b/.env``)."""
    if "/" not in pattern:
        path = path.rsplit("/", 1)[-1]
    return bool(_glob_regex(pattern).match(path))


class PathRules:
    """Glob rules over the paths a call touches, relative to the workspace.

    ``PathRules(["secrets/**", "*.env"]).first_match(req)`` returns the
    first path (relative to the workspace when inside it) matched by a rule,
    with the rule, or ``None``."""

    def __init__(self, patterns: Iterable[str], keys: Iterable[str] = ("path",)):
        self.patterns = list(patterns)
        self.keys = tuple(keys)

    def first_match(self, req: PolicyRequest) -> Optional[tuple]:
        root = posixpath.normpath(req.workspace) if req.workspace else None
        for p in req.paths(self.keys):
            rel = p
            if root and (p == root or p.startswith(root.rstrip("/") + "/")):
                rel = posixpath.relpath(p, root)
            for pat in self.patterns:
                if glob_match(pat, rel) or glob_match(pat, p):
                    return (rel, pat)
        return None


# ---------------------------------------------------------------------------
# Configuration check (export `configure`)
# ---------------------------------------------------------------------------

_VALIDATOR: List[Callable] = []


def config_validator(fn: Callable) -> Callable:
    """Registers the configuration check run when a version loads (export
    ``wharf:plugin/configure``, part of the ``policy-plugin`` world): raise
    (``ToolError``, ``ValueError`` …) or return an error string to refuse
    the version with that message; return ``None`` to accept. Without one,
    every configuration is accepted."""
    _VALIDATOR[:] = [fn]
    return fn


def _validate_config() -> Optional[str]:
    """The check's verdict: ``None`` (ok) or the error message."""
    if not _VALIDATOR:
        return None
    try:
        r = _VALIDATOR[0]()
    except ToolError as e:
        return e.message
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return f"{type(e).__name__}: {e}"
    return None if r is None or r is True else str(r)


# ---------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------

#: Hook point names (host spelling).
HOOK_POINTS = (
    "system-prompt",
    "agent/pre-step",
    "agent/request",
    "agent/request-error",
    "agent/turn-stopping",
    "tools/pre-execute",
    "tools/post-execute",
    "tools/result",
    "session/event",
)


def _point_key(name: str) -> str:
    key = name.replace("/", "-")
    if key not in [p.replace("/", "-") for p in HOOK_POINTS]:
        raise ValueError(f"unknown hook point {name!r}; one of {', '.join(HOOK_POINTS)}")
    return key


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a hook answers: ``Outcome.PASS``, :meth:`replace` or
    :meth:`reject`."""

    kind: str
    value: Optional[str] = None

    @staticmethod
    def replace(payload: Any) -> "Outcome":
        """Carry on with this payload instead (JSON-serialized; waterfall
        points only)."""
        return Outcome("replace", payload if isinstance(payload, str) else json.dumps(payload))

    @staticmethod
    def reject(reason: str) -> "Outcome":
        """Stop: reject the step, object to stopping, or block the call."""
        return Outcome("reject", reason)


Outcome.PASS = Outcome("pass")  # type: ignore[attr-defined]

_HOOKS: Dict[str, tuple] = {}
_SECTIONS: List[tuple] = []


def hook(point: str, priority: int = 0):
    """Registers a listener on a hook point (``"tools/pre-execute"`` …);
    lower ``priority`` runs first. The function takes the payload (decoded
    JSON) and returns ``None`` (pass), an :class:`Outcome`, or a value to
    replace the payload with."""

    key = _point_key(point)

    def register(f: Callable) -> Callable:
        _HOOKS[key] = (priority, f)
        return f

    return register


def prompt_section(id: str, order: int, text: str) -> None:
    """Adds a static system-prompt section (``order``: lower first)."""
    _SECTIONS.append((id, order, text))


def _handle(point_key: str, payload: str) -> Outcome:
    entry = _HOOKS.get(point_key)
    if entry is None:
        return Outcome.PASS  # type: ignore[attr-defined]
    try:
        data = json.loads(payload) if payload else None
    except ValueError:
        data = payload
    try:
        r = entry[1](data)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        log.warn(f"hook {point_key} failed: {type(e).__name__}: {e}")
        return Outcome.PASS  # type: ignore[attr-defined]
    if r is None:
        return Outcome.PASS  # type: ignore[attr-defined]
    if isinstance(r, Outcome):
        return r
    return Outcome.replace(r)


# ---------------------------------------------------------------------------
# Skills
# ---------------------------------------------------------------------------

_SKILLS: Dict[str, Callable] = {}


def skills_catalog(fn: Callable) -> Callable:
    """Registers the catalog function: ``() -> [(name, description), …]``
    (or dicts with those keys). A skills plugin also offers tools (world
    ``skills-plugin``), usually a ``skill`` tool that returns a skill's text."""
    _SKILLS["catalog"] = fn
    return fn


def skill_loader(fn: Callable) -> Callable:
    """Registers the loader: ``(name) -> str`` (raise ``KeyError`` or
    :class:`ToolError` when there is no such skill)."""
    _SKILLS["load"] = fn
    return fn


def _catalog() -> List[tuple]:
    out = []
    for e in _SKILLS["catalog"]() if "catalog" in _SKILLS else []:
        if isinstance(e, dict):
            out.append((e["name"], e.get("description", "")))
        else:
            out.append((e[0], e[1]))
    return out


# ---------------------------------------------------------------------------
# Model adapters
# ---------------------------------------------------------------------------

LLM_ERROR_CODES = (
    "auth",
    "quota",
    "rate-limit",
    "context-window-exceeded",
    "invalid-request",
    "server",
    "transport",
    "timeout",
    "aborted",
    "stream-closed",
    "malformed-response",
    "empty-response",
)
FINISH_REASONS = ("stop", "tool-calls", "max-tokens", "content-filter", "retryable")


class LlmError(Exception):
    """A failed model request; ``code`` is one of :data:`LLM_ERROR_CODES`
    (the host's retry policy keys on it)."""

    def __init__(self, code: str, message: str, *, http_status: Optional[int] = None, retry_after_ms: Optional[int] = None):
        if code not in LLM_ERROR_CODES:
            raise ValueError(f"unknown llm error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.http_status, self.retry_after_ms = code, message, http_status, retry_after_ms


@dataclasses.dataclass
class ModelInfo:
    model: str
    context_window: int = 65536


def text(s: str) -> tuple:
    """A visible-text event."""
    return ("text", s)


def reasoning(s: str) -> tuple:
    """A reasoning-text event."""
    return ("reasoning", s)


def tool_call(id: str, name: str, arguments: Any) -> tuple:
    """A complete tool call (``arguments``: dict or JSON text)."""
    return ("tool-call", (id, name, arguments if isinstance(arguments, str) else json.dumps(arguments)))


def usage(prompt_tokens: int = 0, completion_tokens: int = 0, cache_hit_tokens: int = 0, cache_miss_tokens: int = 0, reasoning_tokens: int = 0) -> tuple:
    """Token accounting (usually last)."""
    return ("usage", (prompt_tokens, completion_tokens, cache_hit_tokens, cache_miss_tokens, reasoning_tokens))


def finish(reason: str = "stop") -> tuple:
    """The end of the turn: one of :data:`FINISH_REASONS`."""
    if reason not in FINISH_REASONS:
        raise ValueError(f"unknown finish reason {reason!r}")
    return ("finish", reason)


_LLM: List[Any] = []


def llm_adapter(cls):
    """Registers a model adapter class with ``model() -> ModelInfo`` and
    ``start(request: dict) -> iterable``: the iterable yields events
    (:func:`text`, :func:`tool_call`, :func:`finish` …) or lists of events
    (one batch each). ``request`` has ``system``, ``messages`` (dicts with
    ``role``, ``content``, ``reasoning``, ``tool_calls``, ``tool_call_id``),
    ``tools`` (``name``, ``description``, ``input_schema`` decoded,
    ``mode``) and ``max_tokens``. Raise :class:`LlmError` to fail."""
    _LLM[:] = [cls]
    return cls


def _llm_instance():
    if not _LLM:
        raise LlmError("invalid-request", "no @llm_adapter registered")
    return _LLM[0]()


def _batches(it: Iterable) -> Iterator[list]:
    for item in it:
        if isinstance(item, list):
            yield item
        else:
            yield [item]


# ---------------------------------------------------------------------------
# Export classes (componentize-py instantiates them)
# ---------------------------------------------------------------------------


def _raise_tool_error(err: ToolError):
    raise _Err(_wt.ToolError(code=err.code, message=err.message))


class Plugin:
    """Export ``wharf:plugin/plugin``: the self-description."""

    def info(self):
        return _info_record()


class Tool:
    """Export ``wharf:plugin/tool``: the ``@tool`` functions."""

    def list_tools(self):
        t = _wt
        modes = {"parallel": t.ToolMode.PARALLEL, "exclusive": t.ToolMode.EXCLUSIVE}
        return [
            t.ToolSpec(name=d.name, description=d.description, input_schema=json.dumps(d.schema), mode=modes[d.mode])
            for d in _TOOLS.values()
        ]

    def call(self, name, arguments, context):
        ctx = Context(context.session_id, context.call_id, context.workspace)
        try:
            out = _run_tool(name, arguments, ctx)
        except ToolError as e:
            _raise_tool_error(e)
        details = json.dumps(out.details) if out.details is not None else None
        return _wt.ToolOutput(content=out.content, details=details)


class Policy:
    """Export ``wharf:plugin/policy``: the ``@policy`` function."""

    def evaluate(self, req):
        p = _import("wit_world.exports.policy")
        d = _evaluate(
            PolicyRequest(req.tool, req.plugin, req.arguments, req.session_id, req.agent_depth, req.workspace)
        )
        if d.kind == "deny":
            return p.Decision_Deny(str(d.value))
        if d.kind == "ask":
            return p.Decision_Ask(str(d.value))
        if d.kind == "rewrite":
            return p.Decision_Rewrite(d.value if isinstance(d.value, str) else json.dumps(d.value))
        return p.Decision_Allow()


class Configure:
    """Export ``wharf:plugin/configure``: the ``@config_validator`` check."""

    def validate(self):
        err = _validate_config()
        if err is not None:
            raise _Err(err)


class Hooks:
    """Export ``wharf:plugin/hooks``: ``@hook`` listeners and prompt sections."""

    def subscriptions(self):
        h = _import("wit_world.exports.hooks")
        return [h.Subscription(point=getattr(h.HookPoint, k.upper().replace("-", "_")), priority=p) for k, (p, _) in _HOOKS.items()]

    def prompt_sections(self):
        h = _import("wit_world.exports.hooks")
        return [h.PromptSection(id=i, order=o, text=t) for (i, o, t) in _SECTIONS]

    def handle(self, point, payload):
        h = _import("wit_world.exports.hooks")
        o = _handle(point.name.lower().replace("_", "-"), payload)
        if o.kind == "replace":
            return h.Outcome_Replace(o.value)
        if o.kind == "reject":
            return h.Outcome_Reject(o.value)
        return h.Outcome_Pass()


class Skills:
    """Export ``wharf:plugin/skills``: the catalog and loader."""

    def catalog(self):
        s = _import("wit_world.exports.skills")
        try:
            return [s.SkillSummary(name=n, description=d) for n, d in _catalog()]
        except Exception as e:
            raise _Err(f"{type(e).__name__}: {e}")

    def load(self, name):
        try:
            if "load" not in _SKILLS:
                raise KeyError(name)
            return str(_SKILLS["load"](name))
        except KeyError:
            raise _Err(f"no skill named `{name}`")
        except ToolError as e:
            raise _Err(e.message)
        except Exception as e:
            raise _Err(f"{type(e).__name__}: {e}")


def _lower_event(L, ev):
    kind, v = ev
    if kind == "text":
        return L.Event_Text(v)
    if kind == "reasoning":
        return L.Event_Reasoning(v)
    if kind == "tool-call":
        return L.Event_ToolCall(_wt.ToolCall(id=v[0], name=v[1], arguments=v[2]))
    if kind == "usage":
        return L.Event_Usage(L.Usage(*v))
    if kind == "finish":
        return L.Event_Finish(getattr(L.FinishReason, v.upper().replace("-", "_")))
    raise ValueError(f"unknown event {kind!r}")


def _lower_llm_error(L, e: BaseException):
    if not isinstance(e, LlmError):
        e = LlmError("invalid-request", f"{type(e).__name__}: {e}")
    return L.Error(
        code=getattr(L.ErrorCode, e.code.upper().replace("-", "_")),
        message=e.message,
        http_status=e.http_status,
        retry_after_ms=e.retry_after_ms,
    )


def _request_dict(req) -> Dict[str, Any]:
    def msg(m):
        return {
            "role": m.role.name.lower(),
            "content": m.content,
            "reasoning": m.reasoning,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
            "tool_call_id": m.tool_call_id,
        }

    def spec(t):
        try:
            schema = json.loads(t.input_schema)
        except ValueError:
            schema = {}
        return {"name": t.name, "description": t.description, "input_schema": schema, "mode": t.mode.name.lower()}

    return {
        "system": req.system,
        "messages": [msg(m) for m in req.messages],
        "tools": [spec(t) for t in req.tools],
        "max_tokens": req.max_tokens,
    }


class Llm:
    """Export ``wharf:plugin/llm``: the ``@llm_adapter`` class; each
    completion is a resource backed by the iterator ``start`` returned."""

    def model(self):
        L = _import("wit_world.exports.llm")
        m = _llm_instance().model()
        if isinstance(m, tuple):
            m = ModelInfo(*m)
        return L.ModelInfo(model=m.model, context_window=m.context_window)

    def start(self, req):
        L = _import("wit_world.exports.llm")
        try:
            it = _batches(_llm_instance().start(_request_dict(req)))
        except BaseException as e:  # noqa: BLE001
            raise _Err(_lower_llm_error(L, e))

        class Completion(L.Completion):
            def next(self):
                try:
                    batch = next(it, None)
                except BaseException as e:  # noqa: BLE001
                    raise _Err(_lower_llm_error(L, e))
                if batch is None:
                    return None
                return [_lower_event(L, ev) for ev in batch]

        return Completion()


# ---------------------------------------------------------------------------
# Testing without a component
# ---------------------------------------------------------------------------


class testing:
    """Helpers for unit tests in plain CPython (no component, no host)::

        import app, wharf_sdk as wharf
        out = wharf.testing.call("csv_query", {"path": "data.csv"}, workspace="/tmp/x")
        assert "3 rows" in out.content

    They run the registered functions exactly as the export classes do
    (argument parsing, error mapping), with fake ``config``/``kv``/``log``.
    To test the built component as the host runs it, use ``wharf plugin
    call`` (see docs/plugin-guide.md).
    """

    @staticmethod
    def set_config(cfg: Dict[str, Any]) -> None:
        """What ``config`` returns from now on."""
        _FAKE_CONFIG.clear()
        _FAKE_CONFIG.update(cfg)

    @staticmethod
    def reset() -> None:
        """Empties the fake config, kv store and scripted answers."""
        _FAKE_CONFIG.clear()
        _FAKE_KV.clear()
        _FAKE_ANSWERS.clear()

    @staticmethod
    def answer_questions(*answers: Answer) -> None:
        """What ``questions.ask`` returns next, in order (then
        :class:`QuestionError` ``no-session`` again)."""
        _FAKE_ANSWERS.extend(answers)

    @staticmethod
    def tools() -> Dict[str, Dict[str, Any]]:
        """``{name: {"description", "mode", "input_schema"}}`` as listed to
        the host."""
        return {n: {"description": d.description, "mode": d.mode, "input_schema": d.schema} for n, d in _TOOLS.items()}

    @staticmethod
    def call(name: str, args: Any = None, *, workspace: Optional[str] = None) -> Output:
        """Calls a tool; raises :class:`ToolError` like the host would
        report it."""
        text_args = args if isinstance(args, str) else json.dumps(args or {})
        return _run_tool(name, text_args, Context("test", "call_0", workspace))

    @staticmethod
    def evaluate(tool: str, args: Any = None, *, plugin: str = "test", workspace: Optional[str] = None, agent_depth: int = 0) -> Decision:
        """Runs the ``@policy`` function on a call."""
        text_args = args if isinstance(args, str) else json.dumps(args or {})
        return _evaluate(PolicyRequest(tool, plugin, text_args, "test", agent_depth, workspace))

    @staticmethod
    def validate_config() -> Optional[str]:
        """Runs the ``@config_validator`` check: ``None`` or the error."""
        return _validate_config()

    @staticmethod
    def handle(point: str, payload: Any) -> Outcome:
        """Runs the ``@hook`` listener of ``point``."""
        return _handle(_point_key(point), payload if isinstance(payload, str) else json.dumps(payload))

    @staticmethod
    def catalog() -> List[tuple]:
        return _catalog()

    @staticmethod
    def load_skill(name: str) -> str:
        return str(_SKILLS["load"](name))

    @staticmethod
    def complete(request: Dict[str, Any]) -> List[tuple]:
        """All events the ``@llm_adapter`` streams for ``request``."""
        req = {"system": "", "messages": [], "tools": [], "max_tokens": None}
        req.update(request)
        return [ev for batch in _batches(_llm_instance().start(req)) for ev in batch]
