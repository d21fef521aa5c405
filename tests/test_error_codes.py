"""Error replies carry a code that programs decide by; no component reads a reason's text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tfgshare import schema as s

ROOT = Path(__file__).resolve().parent.parent / "tfgshare"
# string methods that inspect text (a reason is for people: print or log it, never test it)
_TEXT_METHODS = {"startswith", "endswith", "find", "rfind", "index", "rindex", "count",
                 "lower", "upper", "casefold", "split", "rsplit", "partition", "rpartition",
                 "__contains__"}
_EXC_NAMES = {"exc", "err", "error", "e"}


def _is_reason(node: ast.AST) -> bool:
    """``x.reason``, ``x["reason"]``, or either lower-cased or stripped."""
    if isinstance(node, ast.Attribute) and node.attr == "reason":
        return True
    if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and node.slice.value == "reason"):
        return True
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("lower", "upper", "casefold", "strip")):
        return _is_reason(node.func.value)
    return False


def _is_error_text(node: ast.AST) -> bool:
    """``str(exc)``: the text of an exception (a client's ``Refused`` says the reason)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "str" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id in _EXC_NAMES)


def reason_reads(source: str) -> list[str]:
    """Where ``source`` decides from the text of a reason."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(map(_is_reason, operands)) or (
                    any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
                    and any(map(_is_error_text, operands))):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and (node.func.attr in _TEXT_METHODS and _is_reason(node.func.value)
                   or isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                   and any(_is_reason(a) for a in node.args))):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_finds_the_ways_text_was_read():
    old = ('if "key" in msg.reason.lower(): pass\n'
           'if reply["reason"] == "unknown key": pass\n'
           'ok = exc.reason.startswith("register")\n'
           'if "unknown key" in str(exc): pass\n'
           'm = re.search("regist", msg.reason)\n')
    assert {int(hit.split(":")[0]) for hit in reason_reads(old)} == {1, 2, 3, 4, 5}
    assert reason_reads('log.info("refused: %s", msg.reason)\n'
                        'if msg.code is ErrorCode.NOT_REGISTERED: pass\n'
                        'text = f"exit {code} ({msg.reason})"\n') == []


def test_no_component_decides_from_the_text_of_a_reason():
    found = {str(path.relative_to(ROOT.parent)): hits
             for path in sorted(ROOT.rglob("*.py"))
             if (hits := reason_reads(path.read_text()))}
    assert found == {}, f"decide by ErrorCode, not by a reason's words: {found}"


def test_every_error_reply_in_the_code_names_its_code():
    missing = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "reply_error"
                    and not any(k.arg == "code" for k in node.keywords)):
                missing.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}")
    assert missing == []
    with pytest.raises(TypeError):
        s.reply_error("r1", "no")                   # a code is required


def test_an_error_without_a_code_decodes_as_unknown():
    """An older peer's error reply (no ``code``) still decodes."""
    old = json.dumps({"v": 1, "type": "error", "id": "r1", "reason": "no"}).encode()
    assert s.decode(old) == s.Error(id="r1", reason="no", code=s.ErrorCode.UNKNOWN)
    new = s.encode(s.reply_error("r1", "gone", code=s.ErrorCode.NOT_FOUND))
    assert json.loads(new)["code"] == "not_found"
    assert s.decode(new).code is s.ErrorCode.NOT_FOUND


@pytest.mark.parametrize("data, problem, code", [
    (b"x" * 100, "too_large", "bad_frame"),
    (b"{junk", "malformed_json", "bad_frame"),
    (b"[1, 2]", "not_an_object", "bad_frame"),
    (b'{"a": ' * 10_000 + b"1" + b"}" * 10_000, "too_deep", "bad_frame"),
    (b'{"type": "status", "id": "r"}', "bad_version", "bad_frame"),
    (b'{"v": 1, "type": "reboot", "id": "r"}', "bad_type", "bad_frame"),
    (b'{"v": 1, "type": "status", "id": 3}', "bad_id", "bad_frame"),
    (b'{"v": 1, "type": "status", "id": "r", "job": 3}', "invalid_field", "invalid"),
])
def test_each_decode_failure_says_its_problem_and_code(data, problem, code):
    with pytest.raises(s.SchemaError) as err:
        s.decode(data, max_bytes=50 if problem == "too_large" else s.MAX_MESSAGE_BYTES)
    assert err.value.problem.value == problem and err.value.code.value == code
