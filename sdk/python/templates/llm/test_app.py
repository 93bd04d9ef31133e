"""Unit tests in plain CPython: `python3 test_app.py`."""

{{test_header}}

class LlmTest(unittest.TestCase):
    def test_echoes(self):
        events = wharf.testing.complete({"messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(events, [("text", "echo: hi"), ("finish", "stop")])


if __name__ == "__main__":
    unittest.main()
