"""Unit tests in plain CPython: `python3 test_app.py`."""

{{test_header}}

class ToolTest(unittest.TestCase):
    def test_greets(self):
        self.assertEqual(wharf.testing.call("{{ident}}", {"name": "Wharf"}).content, "Hello, Wharf!")

    def test_bad_arguments(self):
        with self.assertRaises(wharf.ToolError) as e:
            wharf.testing.call("{{ident}}", {"name": "x", "times": 0})
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(wharf.ToolError) as e:
            wharf.testing.call("{{ident}}", {})
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")

    def test_schema(self):
        schema = wharf.testing.tools()["{{ident}}"]["input_schema"]
        self.assertEqual(schema["required"], ["name"])


if __name__ == "__main__":
    unittest.main()
