"""Unit tests in plain CPython: `python3 test_app.py`."""

{{test_header}}

class PolicyTest(unittest.TestCase):
    def test_decides_by_tool(self):
        wharf.testing.set_config({"blocked_tools": ["write"], "ask_tools": ["edit"]})
        self.assertEqual(wharf.testing.evaluate("write", {"path": "a"}).kind, "deny")
        self.assertEqual(wharf.testing.evaluate("edit", {"path": "a"}).kind, "ask")
        self.assertEqual(wharf.testing.evaluate("read", {"path": "a"}).kind, "allow")

    def test_bad_config_is_refused_and_denies(self):
        wharf.testing.set_config({"blocked_tools": "write"})
        self.assertIsNotNone(wharf.testing.validate_config())
        self.assertEqual(wharf.testing.evaluate("read").kind, "deny")


if __name__ == "__main__":
    unittest.main()
