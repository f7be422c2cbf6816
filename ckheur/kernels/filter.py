"""Safe kernel filter expressions, e.g. ``tile_n >= 128 and pipeline == 'compv5'``.

The text is parsed with :mod:`ast` and walked by a small interpreter that allows only
comparisons, and/or/not, ``in``, arithmetic, field names and literals. Nothing is ever
passed to ``eval``.
"""

from __future__ import annotations

import ast
import operator
from typing import Any, Callable, Iterable, Mapping

from ckheur.errors import UserError

_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}
_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare,
          ast.BinOp, ast.List, ast.Tuple, ast.Load, ast.Name, ast.Constant, *_CMP, *_BIN)
_ALLOWED = ("comparisons (== != < <= > >= in, not in), and / or / not, + - * / // %, "
            "field names, numbers, strings, true/false, lists")


class FilterError(UserError):
    """A filter expression uses something outside the allowed grammar or an unknown field."""


def compile_filter(text: str, fields: Iterable[str]) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a filter expression into a predicate over a mapping of kernel fields."""
    known = set(fields)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise FilterError(f"kernels.filter {text!r}: syntax error at column {e.offset}: {e.msg}") from None

    def check(node: ast.AST) -> None:
        if not isinstance(node, _NODES):
            raise FilterError(
                f"kernels.filter {text!r}: {type(node).__name__} not allowed; allowed: {_ALLOWED}")
        if isinstance(node, ast.Name) and node.id not in known and node.id.lower() not in ("true", "false"):
            raise FilterError(
                f"kernels.filter {text!r}: unknown field {node.id!r}; fields: {', '.join(sorted(known))}")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str, bool)):
            raise FilterError(f"kernels.filter {text!r}: literal {node.value!r} not allowed")
        for child in ast.iter_child_nodes(node):
            check(child)

    check(tree)

    def ev(node: ast.AST, row: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body, row)
        if isinstance(node, ast.BoolOp):
            vals = (ev(v, row) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand, row)
            return (not v) if isinstance(node.op, ast.Not) else -v
        if isinstance(node, ast.Compare):
            left = ev(node.left, row)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp, row)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BinOp):
            return _BIN[type(node.op)](ev(node.left, row), ev(node.right, row))
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e, row) for e in node.elts]
        if isinstance(node, ast.Name):
            if node.id not in known and node.id.lower() in ("true", "false"):
                return node.id.lower() == "true"
            return row[node.id]
        return node.value  # ast.Constant

    def predicate(row: Mapping[str, Any]) -> bool:
        try:
            return bool(ev(tree, row))
        except (TypeError, ZeroDivisionError) as e:
            raise FilterError(f"kernels.filter {text!r}: cannot evaluate on {row.get('name', row)}: {e}") from None

    return predicate
