"""csv_query: filter, aggregate and sort a CSV file from a granted directory.

One tool, ``csv_query``: select columns, keep rows matching ``where``
conditions (all must hold), group and aggregate (count/sum/avg/min/max),
sort, and limit. Values compare as numbers when both sides parse as numbers,
else as text. The result is a Markdown table for the model, and the rows as
JSON details for surfaces.
"""

import csv
import io
from dataclasses import dataclass, field
from typing import List, Literal, Optional, Union

import wharf_sdk as wharf

wharf.plugin(
    name="csv_query",
    version="0.1.0",
    description="Query CSV files: select, filter, group, aggregate, sort.",
    filesystem="read-only",
)

#: Largest file read, in bytes (a model-facing tool should not slurp gigabytes).
MAX_BYTES = 32 << 20
#: Largest `limit`.
MAX_LIMIT = 1000


@dataclass
class Condition:
    column: str = wharf.arg("Column name (from the header row).")
    op: Literal["==", "!=", "<", "<=", ">", ">=", "contains", "startswith", "endswith"] = wharf.arg(
        "Comparison. Numbers compare numerically when both sides are numeric; `contains`/`startswith`/`endswith` are case-insensitive text tests."
    )
    value: Union[str, float] = wharf.arg("Value to compare with.")


@dataclass
class Aggregate:
    fn: Literal["count", "sum", "avg", "min", "max"] = wharf.arg("Aggregate function.")
    column: Optional[str] = wharf.arg("Column to aggregate (not needed for `count`).", default=None)


@dataclass
class QueryArgs:
    path: str = wharf.arg("CSV file: absolute, or relative to the session workspace. The first row is the header.")
    columns: Optional[List[str]] = wharf.arg("Columns to return (default: all). Ignored when aggregating.", default=None)
    where: List[Condition] = wharf.arg("Conditions a row must all satisfy.", default_factory=list)
    group_by: Optional[List[str]] = wharf.arg("Group rows by these columns before aggregating.", default=None)
    aggregate: List[Aggregate] = wharf.arg("Aggregates to compute (per group, or over all matching rows).", default_factory=list)
    order_by: Optional[str] = wharf.arg("Sort by this column (or an aggregate's output name, e.g. `sum(amount)`).", default=None)
    descending: bool = wharf.arg("Sort in descending order.", default=False)
    limit: int = wharf.arg("Return at most this many rows.", default=50, minimum=1, maximum=MAX_LIMIT)
    delimiter: str = wharf.arg("Field delimiter.", default=",", minLength=1, maxLength=1)


def number(s):
    """The value as a float, or None."""
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        return float(s)
    try:
        return float(str(s).strip().replace("_", ""))
    except ValueError:
        return None


def matches(row, c: Condition) -> bool:
    cell = row.get(c.column, "")
    if c.op in ("contains", "startswith", "endswith"):
        a, b = cell.lower(), str(c.value).lower()
        return {"contains": b in a, "startswith": a.startswith(b), "endswith": a.endswith(b)}[c.op]
    x, y = number(cell), number(c.value)
    if x is None or y is None:
        x, y = cell, str(c.value)
    return {
        "==": x == y,
        "!=": x != y,
        "<": x < y,
        "<=": x <= y,
        ">": x > y,
        ">=": x >= y,
    }[c.op]


def aggregate(rows, agg: Aggregate):
    if agg.fn == "count":
        if agg.column is None:
            return len(rows)
        return sum(1 for r in rows if r.get(agg.column, "") != "")
    values = [number(r.get(agg.column, "")) for r in rows]
    values = [v for v in values if v is not None]
    if not values:
        return None
    if agg.fn == "sum":
        return sum(values)
    if agg.fn == "avg":
        return sum(values) / len(values)
    return min(values) if agg.fn == "min" else max(values)


def agg_name(a: Aggregate) -> str:
    return f"{a.fn}({a.column or '*'})"


def fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.6g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def sort_key(v):
    n = number(v)
    return (0, n, "") if n is not None else (1, 0.0, str(v))


@wharf.tool(mode="parallel")
def csv_query(args: QueryArgs, ctx: wharf.Context) -> wharf.Output:
    """Queries a CSV file like a tiny SQL engine: select columns, filter rows with
    `where` conditions, group and aggregate (count/sum/avg/min/max), sort and limit.
    Returns a Markdown table. Example: {"path": "sales.csv", "where": [{"column":
    "region", "op": "==", "value": "EU"}], "group_by": ["product"], "aggregate":
    [{"fn": "sum", "column": "amount"}], "order_by": "sum(amount)", "descending": true}"""
    path = ctx.resolve(args.path)
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise wharf.ToolError("RESOURCE_EXHAUSTED", f"{args.path}: larger than {MAX_BYTES >> 20} MiB")
    # (Decode by hand: componentize-py bundles only the codecs that are
    # imported statically, and utf-8-sig is looked up by name.)
    text = data.decode("utf-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = csv.DictReader(io.StringIO(text), delimiter=args.delimiter)
    header = reader.fieldnames or []
    if not header:
        raise wharf.ToolError.invalid_argument(f"{args.path}: empty file (no header row)")

    def check(col, what):
        if col not in header:
            raise wharf.ToolError.invalid_argument(f"unknown column `{col}` in {what}; columns: {', '.join(header)}")

    for c in args.where:
        check(c.column, "where")
    for col in args.columns or []:
        check(col, "columns")
    for col in args.group_by or []:
        check(col, "group_by")
    for a in args.aggregate:
        if a.fn != "count" and a.column is None:
            raise wharf.ToolError.invalid_argument(f"`{a.fn}` needs a column")
        if a.column is not None:
            check(a.column, "aggregate")

    total = 0
    rows = []
    for row in reader:
        total += 1
        if all(matches(row, c) for c in args.where):
            rows.append(row)
    matched = len(rows)

    if args.aggregate or args.group_by:
        keys = args.group_by or []
        groups = {}
        for r in rows:
            groups.setdefault(tuple(r.get(k, "") for k in keys), []).append(r)
        if not keys:
            groups = {(): rows}
        aggs = args.aggregate or [Aggregate("count")]
        out_cols = keys + [agg_name(a) for a in aggs]
        table = [dict(zip(keys, k), **{agg_name(a): aggregate(g, a) for a in aggs}) for k, g in groups.items()]
    else:
        out_cols = args.columns or header
        table = [{c: r.get(c, "") for c in out_cols} for r in rows]

    if args.order_by is not None:
        if args.order_by not in out_cols:
            raise wharf.ToolError.invalid_argument(f"cannot order by `{args.order_by}`; output columns: {', '.join(out_cols)}")
        table.sort(key=lambda r: sort_key(r.get(args.order_by)), reverse=args.descending)
    shown = table[: args.limit]

    lines = [
        "| " + " | ".join(out_cols) + " |",
        "|" + "|".join("---" for _ in out_cols) + "|",
    ]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in out_cols) + " |" for r in shown]
    summary = f"{total} rows read, {matched} matched"
    if args.aggregate or args.group_by:
        summary += f", {len(table)} group(s)"
    if len(table) > len(shown):
        summary += f"; showing the first {len(shown)} of {len(table)}"
    wharf.log.debug(f"csv_query {path}: {summary}")
    return wharf.Output(
        summary + "\n\n" + "\n".join(lines),
        details={"columns": out_cols, "rows": shown, "total": total, "matched": matched},
    )


# componentize-py instantiates these (world `tool-plugin`).
from wharf_sdk import Plugin, Tool  # noqa: E402,F401
