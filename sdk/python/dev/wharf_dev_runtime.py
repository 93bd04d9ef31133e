"""The Python dev runtime of ``wharf plugin dev``.

componentize-py turns this module (with ``wharf_sdk``) into a component once
per toolchain, WIT and SDK version; ``wharf plugin dev`` caches it. It exports
the same world as a built plugin, and at instantiation imports the plugin's
own module from the source snapshot the host preopens read-only at
``/wharf-dev`` (a ``dev = true`` row), so a save is a new source, not a new
component. The snapshot's root is the project; the third-party packages
``wharf plugin dev`` copied from site-packages are in the directories
``wharf-dev.json`` lists under ``path``, searched after it, in the order the
release build (componentize-py) searches them.

A source that does not import (a syntax error, a missing module, an exception
at the top level) makes every export trap after printing one line,
``wharf-dev: FILE:LINE: Error: message``, on stderr: the host puts that line in
the load error, and the version that failed never replaces a working one.
"""

import importlib
import json
import sys
import traceback

import wharf_sdk as _sdk

# Modules a plugin may import. componentize-py snapshots what is imported at
# build time; importing them now keeps them available when the source is
# read at run time.
for _name in (
    "abc", "argparse", "array", "ast", "base64", "binascii", "bisect", "calendar", "collections",
    "collections.abc", "colorsys", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "enum", "errno", "fnmatch", "fractions", "functools", "glob", "gzip", "hashlib", "heapq",
    "hmac", "html", "html.parser", "inspect", "io", "ipaddress", "itertools", "json", "keyword", "locale",
    "math", "mimetypes", "numbers", "operator", "os", "os.path", "pathlib", "pprint", "posixpath", "random",
    "re", "secrets", "shlex", "statistics", "string", "struct", "textwrap", "time", "tomllib", "types",
    "typing", "unicodedata", "urllib", "urllib.parse", "uuid", "warnings", "weakref", "zlib",
    "xml.etree.ElementTree", "email.utils",
):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

#: Where the host preopens the source snapshot.
SOURCE_DIR = "/wharf-dev"

# None: not tried in this instance; True: imported; str: why not.
_state = None


def _rel(filename):
    if filename and filename.startswith(SOURCE_DIR + "/"):
        return filename[len(SOURCE_DIR) + 1:]
    return filename or "?"


def _extend_path(entries):
    """Puts ``entries`` (the project, then its site packages) where the
    release build has its ``-p`` directories: after the standard library and
    the world's bindings (componentize-py's build-time ``PYTHONPATH`` is
    ``/python:/world:/0:/1:…:/bundled``, ``/0`` being the project)."""
    entries = [e for e in entries if e not in sys.path]
    at = next((i for i, p in enumerate(sys.path) if p.strip("/").isdigit()), None)
    if at is None:
        at = sys.path.index("/world") + 1 if "/world" in sys.path else 0
    sys.path[at:at] = entries


def _import_source():
    try:
        with open(SOURCE_DIR + "/wharf-dev.json", encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        return f"wharf-dev.json:1: no plugin source at {SOURCE_DIR} ({e}); is the row `dev = true`?"
    module = str(meta.get("module") or "app")
    sys.dont_write_bytecode = True
    _extend_path([SOURCE_DIR] + [SOURCE_DIR + "/" + str(p) for p in meta.get("path") or []])
    try:
        importlib.import_module(module)
    except SyntaxError as e:
        traceback.print_exc()
        return f"{_rel(e.filename)}:{e.lineno or 0}: {type(e).__name__}: {e.msg}"
    except BaseException as e:  # noqa: BLE001 - every failure is reported
        traceback.print_exc()
        frames = traceback.extract_tb(e.__traceback__)
        mine = [f for f in frames if f.filename and f.filename.startswith(SOURCE_DIR + "/")]
        where = f"{_rel(mine[-1].filename)}:{mine[-1].lineno}" if mine else f"{module}.py:0"
        return f"{where}: {type(e).__name__}: {e}"
    return True


def _load():
    global _state
    if _state is None:
        _state = _import_source()
    if _state is not True:
        # Last on stderr: the host quotes it in the load error.
        print("wharf-dev: " + _state, file=sys.stderr, flush=True)
        raise RuntimeError(_state)


def _wrapped(cls):
    """``cls`` with every public method importing the source first."""

    def wrap(fn):
        def method(self, *args):
            _load()
            return fn(self, *args)

        method.__name__ = fn.__name__
        return method

    members = {k: wrap(v) for k, v in vars(cls).items() if callable(v) and not k.startswith("_")}
    return type(cls.__name__, (cls,), members)


Plugin = _wrapped(_sdk.Plugin)
Tool = _wrapped(_sdk.Tool)
Policy = _wrapped(_sdk.Policy)
Configure = _wrapped(_sdk.Configure)
Hooks = _wrapped(_sdk.Hooks)
Skills = _wrapped(_sdk.Skills)
Llm = _wrapped(_sdk.Llm)
