"""Unit tests of path_guard in plain CPython: `python3 test_app.py`."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("WHARF_SDK_PYTHON", os.path.join(HERE, "..", "..")))
sys.path.insert(0, HERE)

import app  # noqa: E402,F401  (registers the policy)
import wharf_sdk as wharf  # noqa: E402

WS = "/work/project"


class PathGuardTest(unittest.TestCase):
    def setUp(self):
        wharf.testing.reset()
        wharf.testing.set_config({"deny": ["secrets/**", "*.env"], "allow": ["notes/**"]})

    def decide(self, tool, path):
        return wharf.testing.evaluate(tool, {"path": path, "content": "x"}, workspace=WS)

    def test_denies_matching_writes(self):
        d = self.decide("write", "secrets/key.txt")
        self.assertEqual(d.kind, "deny")
        self.assertIn("secrets/**", d.value)
        self.assertEqual(self.decide("edit", "config/prod.env").kind, "deny")
        self.assertEqual(self.decide("write", f"{WS}/secrets/a/b").kind, "deny")
        # `..` cannot sneak past a rule.
        self.assertEqual(self.decide("write", "notes/../secrets/x").kind, "deny")

    def test_allows_asks_and_ignores_reads(self):
        self.assertEqual(self.decide("write", "notes/today.md").kind, "allow")
        self.assertEqual(self.decide("write", "src/main.rs").kind, "ask")
        self.assertEqual(self.decide("read", "secrets/key.txt").kind, "allow")

    def test_config_is_checked_at_load(self):
        self.assertIsNone(wharf.testing.validate_config())
        wharf.testing.set_config({"deny": "not a list"})
        self.assertIn("/config/deny: expected array", wharf.testing.validate_config())
        wharf.testing.set_config({"deny": [" "]})
        self.assertIn("empty glob", wharf.testing.validate_config())

    def test_bad_config_fails_closed(self):
        wharf.testing.set_config({"deny": "not a list"})
        self.assertEqual(self.decide("write", "a.txt").kind, "deny")
        self.assertEqual(self.decide("read", "a.txt").kind, "deny")

    def test_glob(self):
        self.assertTrue(wharf.glob_match("**/x.txt", "x.txt"))
        self.assertTrue(wharf.glob_match("a/**/b", "a/1/2/b"))
        self.assertFalse(wharf.glob_match("a/*", "a/b/c"))
        self.assertTrue(wharf.glob_match("*.env", "deep/dir/.env"))


if __name__ == "__main__":
    unittest.main()
