"""Unit tests of wharf_sdk in plain CPython: `python3 sdk/python/tests/test_wharf_sdk.py`."""

import enum
import json
import os
import sys
import unittest
from dataclasses import dataclass, field
from typing import Annotated, Dict, List, Literal, Optional, Tuple, Union

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import wharf_sdk as wharf  # noqa: E402


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Inner:
    flag: bool = wharf.arg("A flag.")


@dataclass
class Everything:
    """Ignored in tool schemas."""

    name: str = wharf.arg("The name.", minLength=1)
    count: int = wharf.arg("How many.", default=3, minimum=0)
    ratio: float = 0.5
    tags: List[str] = field(default_factory=list)
    color: Color = Color.RED
    mode: Literal["a", "b"] = "a"
    maybe: Optional[int] = None
    either: Union[int, str] = 0
    pair: Tuple[int, str] = (1, "x")
    extra: Dict[str, int] = field(default_factory=dict)
    inner: Optional[Inner] = None
    note: Annotated[str, "A note."] = ""


class SchemaTest(unittest.TestCase):
    def test_schema_of_dataclass(self):
        s = wharf.schema_of(Everything)
        p = s["properties"]
        self.assertEqual(s["type"], "object")
        self.assertEqual(s["required"], ["name"])
        self.assertFalse(s["additionalProperties"])
        self.assertEqual(p["name"], {"type": "string", "description": "The name.", "minLength": 1})
        self.assertEqual(p["count"]["default"], 3)
        self.assertEqual(p["count"]["minimum"], 0)
        self.assertEqual(p["ratio"]["type"], "number")
        self.assertEqual(p["tags"], {"type": "array", "items": {"type": "string"}})
        self.assertEqual(p["color"]["enum"], ["red", "blue"])
        self.assertEqual(p["color"]["default"], "red")
        self.assertEqual(p["mode"]["enum"], ["a", "b"])
        self.assertEqual(p["maybe"]["type"], ["integer", "null"])
        self.assertEqual(len(p["either"]["anyOf"]), 2)
        self.assertEqual(len(p["pair"]["prefixItems"]), 2)
        self.assertEqual(p["extra"]["additionalProperties"], {"type": "integer"})
        self.assertEqual(p["inner"]["type"], ["object", "null"])
        self.assertEqual(p["inner"]["properties"]["flag"]["description"], "A flag.")
        self.assertEqual(p["note"]["description"], "A note.")
        json.dumps(s)

    def test_unsupported_type(self):
        with self.assertRaises(TypeError):
            wharf.schema_of(complex)


class ParseTest(unittest.TestCase):
    def test_parse_and_defaults(self):
        v = wharf.parse_args(Everything, {"name": "n", "color": "blue", "inner": {"flag": True}, "pair": [2, "y"], "count": 4.0})
        self.assertEqual(v.color, Color.BLUE)
        self.assertEqual(v.inner, Inner(True))
        self.assertEqual(v.pair, (2, "y"))
        self.assertEqual(v.count, 4)
        self.assertEqual(v.tags, [])

    def test_errors_name_the_pointer(self):
        cases = [
            ({}, "missing required field `name`"),
            ({"name": 1}, "/name: expected string"),
            ({"name": "n", "tags": ["a", 2]}, "/tags/1: expected string"),
            ({"name": "n", "color": "green"}, "/color: expected one of"),
            ({"name": "n", "mode": "c"}, "/mode: expected one of"),
            ({"name": "n", "bogus": 1}, "unknown field(s) bogus"),
            ({"name": "n", "count": True}, "/count: expected integer, got boolean"),
            ({"name": "n", "inner": {"flag": "yes"}}, "/inner/flag: expected boolean"),
        ]
        for args, want in cases:
            with self.assertRaises(wharf.ToolError) as e:
                wharf.parse_args(Everything, args)
            self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
            self.assertIn(want, e.exception.message, args)


class ToolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        @wharf.tool(mode="exclusive", name="t_echo")
        def t_echo(args: Everything, ctx: wharf.Context):
            """Echoes."""
            return {"name": args.name, "ws": ctx.workspace}

        @wharf.tool
        def t_fail():
            raise KeyError("boom")

        @wharf.tool
        def t_io(ctx: wharf.Context) -> str:
            open(ctx.resolve("does/not/exist"))

    def test_registry_and_call(self):
        t = wharf.testing.tools()
        self.assertEqual(t["t_echo"]["mode"], "exclusive")
        self.assertEqual(t["t_echo"]["description"], "Echoes.")
        self.assertNotIn("description", t["t_echo"]["input_schema"])
        self.assertEqual(t["t_fail"]["input_schema"]["properties"], {})
        out = wharf.testing.call("t_echo", {"name": "x"}, workspace="/w")
        self.assertEqual(json.loads(out.content), {"name": "x", "ws": "/w"})

    def test_error_mapping(self):
        for name, args, code in [
            ("t_fail", {}, "INTERNAL"),
            ("t_io", {}, "NOT_FOUND"),
            ("nope", {}, "UNKNOWN_TOOL"),
            ("t_echo", "not json", "INVALID_ARGUMENT"),
        ]:
            with self.assertRaises(wharf.ToolError) as e:
                wharf.testing.call(name, args, workspace="/nonexistent")
            self.assertEqual(e.exception.code, code, name)
        self.assertEqual(wharf.error_from_exception(PermissionError(13, "denied", "/x")).code, "PERMISSION_DENIED")
        self.assertEqual(wharf.error_from_exception(ValueError("bad")).code, "INVALID_ARGUMENT")

    def test_context_paths(self):
        ctx = wharf.Context(workspace="/w")
        self.assertEqual(ctx.resolve("a/../b"), "/w/b")
        self.assertEqual(ctx.confine("sub/x"), "/w/sub/x")
        with self.assertRaises(wharf.ToolError) as e:
            ctx.confine("../etc/passwd")
        self.assertEqual(e.exception.code, "PERMISSION_DENIED")
        with self.assertRaises(wharf.ToolError):
            wharf.Context().resolve("relative")

    def test_bad_names_and_modes(self):
        with self.assertRaises(ValueError):
            wharf.tool(name="bad name")(lambda: None)
        with self.assertRaises(ValueError):
            wharf.tool(mode="sometimes")


class HostFakesTest(unittest.TestCase):
    def setUp(self):
        wharf.testing.reset()

    def test_config_and_kv(self):
        wharf.testing.set_config({"limit": 3})
        self.assertEqual(wharf.config.get("limit"), 3)
        self.assertIsNone(wharf.config.get("nope"))

        @dataclass
        class Cfg:
            limit: int = 1
            name: str = "x"

        self.assertEqual(wharf.config.load(Cfg), Cfg(3, "x"))
        wharf.testing.set_config({"limit": "three"})
        with self.assertRaises(wharf.ToolError):
            wharf.config.load(Cfg)
        wharf.kv.set_json("a/1", {"n": 1})
        wharf.kv.set("a/2", "two")
        self.assertEqual(wharf.kv.get_json("a/1"), {"n": 1})
        self.assertEqual(wharf.kv.get("a/2"), b"two")
        self.assertEqual(wharf.kv.list_keys("a/"), ["a/1", "a/2"])
        wharf.kv.delete("a/1")
        self.assertIsNone(wharf.kv.get("a/1"))
        with self.assertRaises(wharf.ProcessError):
            wharf.process.run("ls")


class PolicyHooksSkillsLlmTest(unittest.TestCase):
    def test_glob_and_rules(self):
        self.assertTrue(wharf.glob_match("secrets/**", "secrets/a/b"))
        self.assertTrue(wharf.glob_match("**/*.pem", "a/b/c.pem"))
        self.assertTrue(wharf.glob_match("*.pem", "c.pem"))
        self.assertFalse(wharf.glob_match("src/*.rs", "src/a/b.rs"))
        self.assertTrue(wharf.glob_match("file[0-9].txt", "file3.txt"))
        req = wharf.PolicyRequest("write", "fs", json.dumps({"path": "secrets/x"}), workspace="/w")
        self.assertEqual(wharf.PathRules(["secrets/**"]).first_match(req), ("secrets/x", "secrets/**"))
        self.assertIsNone(wharf.PathRules(["other/**"]).first_match(req))

    def test_policy_fails_closed(self):
        @wharf.policy
        def evaluate(req):
            if req.tool == "boom":
                raise RuntimeError("bug")
            if req.tool == "odd":
                return "yes"
            return None

        self.assertEqual(wharf.testing.evaluate("read").kind, "allow")
        self.assertEqual(wharf.testing.evaluate("boom").kind, "deny")
        self.assertEqual(wharf.testing.evaluate("odd").kind, "deny")
        self.assertEqual(wharf.rewrite({"a": 1}).value, {"a": 1})

    def test_config_validator(self):
        self.assertIsNone(wharf.testing.validate_config())

        @wharf.config_validator
        def check():
            n = wharf.config.get("n", 0)
            if n < 0:
                return "n must not be negative"
            if n > 10:
                raise ValueError("n too large")

        wharf.testing.set_config({"n": 1})
        self.assertIsNone(wharf.testing.validate_config())
        wharf.testing.set_config({"n": -1})
        self.assertEqual(wharf.testing.validate_config(), "n must not be negative")
        wharf.testing.set_config({"n": 11})
        self.assertEqual(wharf.testing.validate_config(), "ValueError: n too large")
        wharf.testing.reset()
        wharf._VALIDATOR.clear()

    def test_hooks(self):
        @wharf.hook("agent/request")
        def on_request(payload):
            return {"changed": payload["n"] + 1}

        wharf.prompt_section("x", 1, "text")
        o = wharf.testing.handle("agent/request", {"n": 1})
        self.assertEqual((o.kind, json.loads(o.value)), ("replace", {"changed": 2}))
        self.assertEqual(wharf.testing.handle("session/event", {}).kind, "pass")
        with self.assertRaises(ValueError):
            wharf.hook("no/such-point")

    def test_skills_and_llm(self):
        wharf.skills_catalog(lambda: [{"name": "a", "description": "A"}, ("b", "B")])
        wharf.skill_loader(lambda n: {"a": "text a"}[n])
        self.assertEqual(wharf.testing.catalog(), [("a", "A"), ("b", "B")])
        self.assertEqual(wharf.testing.load_skill("a"), "text a")

        @wharf.llm_adapter
        class Adapter:
            def model(self):
                return wharf.ModelInfo("m", 10)

            def start(self, req):
                yield [wharf.reasoning("r"), wharf.text("t")]
                yield wharf.tool_call("c1", "read", {"path": "x"})
                yield wharf.usage(prompt_tokens=1, completion_tokens=2)
                yield wharf.finish("tool-calls")

        ev = wharf.testing.complete({})
        self.assertEqual(ev[0], ("reasoning", "r"))
        self.assertEqual(ev[2], ("tool-call", ("c1", "read", '{"path": "x"}')))
        self.assertEqual(ev[-1], ("finish", "tool-calls"))
        with self.assertRaises(ValueError):
            wharf.finish("later")
        with self.assertRaises(ValueError):
            wharf.LlmError("nope", "x")

    def test_questions_are_scripted_outside_a_component(self):
        wharf.testing.reset()
        with self.assertRaises(wharf.QuestionError) as e:
            wharf.questions.ask("Which?", {"type": "object", "properties": {}})
        self.assertEqual(e.exception.kind, "no-session")
        wharf.testing.answer_questions(wharf.Answer("accept", {"name": "Ada"}), wharf.Answer("decline"))
        a = wharf.questions.ask("Who?", {"type": "object", "properties": {"name": {"type": "string"}}})
        self.assertTrue(a.accepted)
        self.assertEqual(a.values, {"name": "Ada"})
        self.assertEqual(wharf.questions.ask_text("Who?", "{}").action, "decline")
        self.assertEqual(wharf._variant_case(type("SessionError_NotGranted", (), {})()), "not-granted")
        self.assertEqual(wharf._variant_case(type("Answer_Accept", (), {})()), "accept")


if __name__ == "__main__":
    unittest.main()
