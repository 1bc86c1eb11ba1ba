"""Go's `encoding/json` decoding into typed structs, as static's configuration meets it.

Parity with the reference plugin covers its error messages, and most of those are
`encoding/json`'s: a value of the wrong JSON type is recorded and decoding goes on
(the first such error wins, named by the innermost struct and the path of JSON keys,
`json: cannot unmarshal number into Go struct field Address.ipam.addresses.address of
type string`), while an error from a type's own decoder (a route, an IP address) stops
decoding at once and takes the outermost position. Keys match struct fields exactly,
else case-insensitively; unknown keys are ignored; `null` leaves a value as it was.
The schemas (Go's types, by name) are declared where they are used.
"""

import json
from typing import Any, Callable, Optional

from goip import ParseError, parse_ip


class GoNumber:
    """A JSON number as its literal text: Go decides by the target type whether
    `1.50` is an error, and its message quotes the literal."""

    def __init__(self, text: str):
        self.text = text

    def as_int(self) -> Optional[int]:
        text = self.text[1:] if self.text.startswith("-") else self.text
        if not text.isdigit() or not text.isascii():
            return None
        n = int(self.text)
        return n if -(1 << 63) <= n < (1 << 63) else None


class JsonObject(list):
    """An object's (key, value) pairs in document order, duplicates kept: Go applies
    each in turn, so the last of two keys naming one field wins."""


def _valid_text(s: str) -> str:
    """Lone UTF-16 surrogates (`"\\ud800"`) become U+FFFD, as Go decodes them."""
    return s.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, JsonObject):
        return JsonObject((_valid_text(k), _clean(v)) for k, v in value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def loads(text: str) -> Any:
    """The document with objects as `JsonObject` and numbers as `GoNumber`."""
    return _clean(
        json.loads(
            text,
            object_pairs_hook=JsonObject,
            parse_int=GoNumber,
            parse_float=GoNumber,
        )
    )


class GoError(Exception):
    """An error whose text is the reference plugin's."""


class UnmarshalTypeError(GoError):
    def __init__(self, value: str, go_type: str):
        super().__init__()
        self.value = value
        self.go_type = go_type
        self.struct: Optional[str] = None
        self.field: Optional[str] = None

    def __str__(self) -> str:
        if self.struct is not None:
            return (
                f"json: cannot unmarshal {self.value} into Go struct field "
                f"{self.struct}.{self.field} of type {self.go_type}"
            )
        return f"json: cannot unmarshal {self.value} into Go value of type {self.go_type}"


class _Abort(Exception):
    def __init__(self, error: Exception):
        self.error = error


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, GoNumber):
        return "number"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, JsonObject):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


class _Decoder:
    def __init__(self) -> None:
        self.saved: Optional[Exception] = None
        self.struct: Optional[str] = None
        self.fields: list[str] = []

    def add_context(self, error: Exception) -> Exception:
        if isinstance(error, UnmarshalTypeError) and (
            self.struct is not None or self.fields
        ):
            error.struct = self.struct or ""
            error.field = ".".join(self.fields)
        return error

    def save(self, error: UnmarshalTypeError) -> None:
        if self.saved is None:
            self.saved = self.add_context(error)


class GoType:
    name = ""

    def zero(self) -> Any:
        return None

    def decode(self, d: _Decoder, value: Any, current: Any) -> Any:
        raise NotImplementedError

    def mismatch(self, d: _Decoder, value: Any, current: Any) -> Any:
        d.save(UnmarshalTypeError(_kind(value), self.name))
        return current


class Str(GoType):
    name = "string"

    def zero(self) -> Any:
        return ""

    def decode(self, d, value, current):
        if value is None:
            return current
        if isinstance(value, str):
            return value
        return self.mismatch(d, value, current)


class Int(GoType):
    name = "int"

    def zero(self) -> Any:
        return 0

    def decode(self, d, value, current):
        if value is None:
            return current
        if isinstance(value, GoNumber):
            n = value.as_int()
            if n is None:
                d.save(UnmarshalTypeError(f"number {value.text}", self.name))
                return current
            return n
        return self.mismatch(d, value, current)


class Bool(GoType):
    name = "bool"

    def zero(self) -> Any:
        return False

    def decode(self, d, value, current):
        if value is None:
            return current
        if isinstance(value, bool):
            return value
        return self.mismatch(d, value, current)


class Interface(GoType):
    """`interface{}`: any JSON value, kept as decoded."""

    name = "interface {}"

    def decode(self, d, value, current):
        return value


class IP(GoType):
    """`net.IP`: decoded from text by `net.ParseIP`; `""` and `null` are no address."""

    name = "net.IP"

    def decode(self, d, value, current):
        if value is None:
            return None
        if not isinstance(value, str):
            return self.mismatch(d, value, current)
        if value == "":
            return None
        ip = parse_ip(value)
        if ip is None:
            raise _Abort(ParseError("IP address", value))
        return ip


class Slice(GoType):
    def __init__(self, elem: GoType):
        self.elem = elem
        self.name = "[]" + elem.name

    def decode(self, d, value, current):
        if value is None:
            return None
        if isinstance(value, list) and not isinstance(value, JsonObject):
            return [self.elem.decode(d, v, self.elem.zero()) for v in value]
        return self.mismatch(d, value, current)


class Map(GoType):
    def __init__(self, elem: GoType):
        self.elem = elem
        self.name = f"map[string]{elem.name}"

    def decode(self, d, value, current):
        if value is None:
            return None
        if isinstance(value, JsonObject):
            out = dict(current or {})
            for k, v in value:
                out[k] = self.elem.decode(d, v, self.elem.zero())
            return out
        return self.mismatch(d, value, current)


class Ptr(GoType):
    """A pointer: `null` is nil; anything else is decoded into a new value. A type
    error names the pointed-to type, as Go's does."""

    def __init__(self, elem: GoType):
        self.elem = elem
        self.name = "*" + elem.name

    def decode(self, d, value, current):
        if value is None:
            return None
        if current is None:
            current = self.elem.zero()
        return self.elem.decode(d, value, current)


def _fold(key: str) -> str:
    """Go's case folding of a key against an ASCII field name (`ſ` folds to `s`, and
    the Kelvin sign lowers to `k`)."""
    return key.replace("\u017f", "s").lower()


class Struct(GoType):
    def __init__(self, name: str, short: str, fields: list[tuple[str, GoType]]):
        self.name = name
        self.short = short
        self.fields = fields

    def zero(self) -> Any:
        return {key: t.zero() for key, t in self.fields}

    def _field(self, key: str) -> Optional[tuple[str, GoType]]:
        for field in self.fields:
            if field[0] == key:
                return field
        folded = _fold(key)
        for field in self.fields:
            if field[0].lower() == folded:
                return field
        return None

    def decode(self, d, value, current):
        if value is None:
            return current
        if not isinstance(value, JsonObject):
            return self.mismatch(d, value, current)
        out = dict(current) if current is not None else self.zero()
        for key, v in value:
            field = self._field(key)
            if field is None:
                continue
            name, t = field
            outer = (d.struct, len(d.fields))
            d.struct = self.short
            d.fields.append(name)
            out[name] = t.decode(d, v, out[name])
            # Restored only on success: an error from a type's own decoder reports
            # where it happened.
            d.struct = outer[0]
            del d.fields[outer[1] :]
        return out


class Custom(GoType):
    """A type with its own `UnmarshalJSON`: it gets any JSON value, `null` included,
    and its error stops decoding."""

    def __init__(self, name: str, decode: Callable[[Any], Any]):
        self.name = name
        self._decode = decode

    def decode(self, d, value, current):
        try:
            return self._decode(value)
        except (GoError, ParseError) as e:
            raise _Abort(e)


def unmarshal(schema: GoType, value: Any) -> Any:
    """Go's `json.Unmarshal` of the decoded document `value` into `schema`; raises
    the error Go's would return (a `GoError` or `goip.ParseError`)."""
    d = _Decoder()
    try:
        out = schema.decode(d, value, schema.zero())
    except _Abort as abort:
        raise d.add_context(abort.error)
    if d.saved is not None:
        raise d.saved
    return out


def go_quote(s: str) -> str:
    """Go's `%q` of a string (`strconv.Quote`)."""
    out = ['"']
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append("\\" + "abfnrtv"["\a\b\f\n\r\t\v".index(ch)])
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)
