"""Unit tests in plain CPython: `python3 test_app.py`."""

{{test_header}}

class SkillsTest(unittest.TestCase):
    def test_catalog_and_load(self):
        self.assertEqual([n for n, _ in wharf.testing.catalog()], ["commit-message"])
        self.assertIn("imperative", wharf.testing.call("skill", {"name": "commit-message"}).content)
        with self.assertRaises(wharf.ToolError):
            wharf.testing.call("skill", {"name": "nope"})


if __name__ == "__main__":
    unittest.main()
