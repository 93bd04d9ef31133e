"""Unit tests in plain CPython: `python3 test_app.py`."""

{{test_header}}

class HooksTest(unittest.TestCase):
    def test_rejects_dangerous_calls(self):
        self.assertEqual(wharf.testing.handle("tools/pre-execute", {"arguments": {"command": "rm -rf /"}}).kind, "reject")
        self.assertEqual(wharf.testing.handle("tools/pre-execute", {"arguments": {"command": "ls"}}).kind, "pass")


if __name__ == "__main__":
    unittest.main()
