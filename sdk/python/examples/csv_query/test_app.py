"""Unit tests of csv_query in plain CPython: `python3 test_app.py`.

They run the tool function as the component does (argument parsing, error
mapping) but without building; `wharf plugin call` tests the built component.
"""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("WHARF_SDK_PYTHON", os.path.join(HERE, "..", "..")))
sys.path.insert(0, HERE)

import app  # noqa: E402,F401  (registers the tool)
import wharf_sdk as wharf  # noqa: E402

CSV = """region,product,amount,qty
EU,apple,10.5,3
EU,pear,4,1
US,apple,7,2
US,plum,12,4
EU,apple,1.5,1
"""


class CsvQueryTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(self.dir.name, "sales.csv"), "w") as f:
            f.write(CSV)

    def tearDown(self):
        self.dir.cleanup()

    def call(self, **args):
        return wharf.testing.call("csv_query", {"path": "sales.csv", **args}, workspace=self.dir.name)

    def test_schema(self):
        s = wharf.testing.tools()["csv_query"]["input_schema"]
        self.assertEqual(s["required"], ["path"])
        self.assertEqual(s["properties"]["limit"]["default"], 50)
        self.assertIn("==", s["properties"]["where"]["items"]["properties"]["op"]["enum"])
        self.assertFalse(s["additionalProperties"])

    def test_filter_and_select(self):
        out = self.call(columns=["product", "amount"], where=[{"column": "amount", "op": ">", "value": 5}])
        self.assertIn("5 rows read, 3 matched", out.content)
        self.assertEqual([r["product"] for r in out.details["rows"]], ["apple", "apple", "plum"])

    def test_group_and_aggregate(self):
        out = self.call(group_by=["region"], aggregate=[{"fn": "sum", "column": "amount"}, {"fn": "count"}],
                        order_by="sum(amount)", descending=True)
        rows = out.details["rows"]
        self.assertEqual(rows[0], {"region": "US", "sum(amount)": 19.0, "count(*)": 2})
        self.assertEqual(rows[1]["sum(amount)"], 16.0)
        self.assertIn("| US | 19 | 2 |", out.content)

    def test_errors_are_clean(self):
        with self.assertRaises(wharf.ToolError) as e:
            self.call(where=[{"column": "nope", "op": "==", "value": "x"}])
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        with self.assertRaises(wharf.ToolError) as e:
            wharf.testing.call("csv_query", {"path": "missing.csv"}, workspace=self.dir.name)
        self.assertEqual(e.exception.code, "NOT_FOUND")
        with self.assertRaises(wharf.ToolError) as e:
            self.call(limit="ten")
        self.assertEqual(e.exception.code, "INVALID_ARGUMENT")
        self.assertIn("/limit", e.exception.message)


if __name__ == "__main__":
    unittest.main()
