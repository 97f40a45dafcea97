"""What a decoded message is, checked before pygls sees it: the JSON-RPC envelope and the request id.

protocol.py answers every request it can identify, even a damaged one; these functions say whether a
message is a JSON-RPC 2.0 message at all, and find the id of a request whose body could not be decoded.
They are pure (no server, no I/O), so the fuzz findings they encode are easy to test one by one.
"""

from __future__ import annotations

import json
import re
from typing import Any


def valid_id(value: Any) -> bool:
    """JSON-RPC ids are strings or numbers. A bool is an int in Python (and pygls would turn `true` into
    1, answering as if for request 1): refused with the other wrong types."""
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def id_of(text: str) -> Any:
    """The id of a request whose body is damaged (cut short, or nested too deeply for json.loads), when
    its top level names a "method" and a number or string "id" before the damage; None otherwise (the
    error then goes out with id null, as JSON-RPC says)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        value = data.get("id")
        return value if "method" in data and valid_id(value) else None
    return _top_level_id(text)


# JSON tokens, enough to walk the top level: strings (an unterminated one runs to the end), punctuation,
# and any other run (numbers, literals, junk).
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+')


def _top_level_id(text: str) -> Any:
    """Walk the tokens of a JSON object without building it; deeper levels are only counted, so an id
    inside params is never taken for the request's own."""
    depth = 0
    state = "start"  # at depth 1: key, colon, value, after (a value; expecting , or })
    key: Any = None
    candidate: str | None = None
    msg_id: Any = None
    has_method = False
    for match in _TOKEN.finditer(text):
        token = match.group()
        if depth > 1:
            if token in ("{", "["):
                depth += 1
            elif token in ("}", "]"):
                depth -= 1
            continue
        if state == "start":
            if token != "{":
                return None
            depth, state = 1, "key"
        elif state == "key":
            if token == "}":
                break
            try:
                key = json.loads(token)
            except ValueError:
                break
            state = "colon"
        elif state == "colon":
            if token != ":":
                break
            has_method = has_method or key == "method"
            state = "value"
        elif state == "value":
            if token in ("{", "["):
                depth = 2
            elif key == "id":
                candidate = token
            state = "after"
        elif state == "after":
            if token not in (",", "}"):
                break
            if candidate is not None:  # the id's token is whole: a , or } followed it
                try:
                    msg_id = json.loads(candidate)
                except ValueError:
                    return None
                candidate = None
            if has_method and msg_id is not None or token == "}":
                break
            state = "key"
    return msg_id if has_method and valid_id(msg_id) else None


def envelope_problem(data: Any) -> str | None:
    """What makes `data` no JSON-RPC 2.0 message (None when it is one)."""
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not an object"
    if data.get("jsonrpc") != "2.0":
        return f'"jsonrpc" is {data.get("jsonrpc")!r}, not "2.0"'
    if "id" in data and not valid_id(data["id"]):
        return f'"id" is {data["id"]!r}; ids are numbers or strings'
    if "method" in data:
        if not isinstance(data["method"], str):
            return f'"method" is {data["method"]!r}, not a string'
        params = data.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            return f'"params" is a {type(params).__name__}; params are an object or an array'
    elif "result" not in data and "error" not in data:
        return "neither a request, a notification nor a response"
    return None
