"""Request contracts: every field a server may set in a request, and what the client allows in it.

A client never trusts the coordinator's request. Each handler is registered with a ``Contract``
(``HandlerSet.query(name, contract)``) that declares every config field and every array the
server may send, with its type and range; ``HandlerSet.handle`` checks the request against it
before the handler runs, so a handler only ever sees requests inside its contract::

    FIT = Contract({"learner": Choice("learnspn", "learnspn-cv"),
                    "clusters": Int(1, 64),
                    "params": Fields({"min_instances_slice": Int(1, 10**9)})},
                   required=("learner",))

A field missing from the contract, a value of the wrong type, outside its range, or not among
the allowed choices is refused (``PolicyRefusal``, naming the field and what is allowed); so is
an array the contract does not name, of another dtype kind or larger than declared. Bounds may
be callables of the ``ClientContext`` (``lambda ctx: len(ctx.data.train)``), so a range can
follow the client's own rows and policy. Values are returned as checked, never silently
changed: raising a setting to the policy's floor stays the handler's visible business
(``ctx.floor``, noted in the reply).

Why by hand: the checks run on untrusted bytes inside every client, before any computation, and
need bounds that depend on the client's own data; a schema library would add a dependency for
a hundred lines.
"""

from __future__ import annotations

import fnmatch
from abc import ABC, abstractmethod
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import numpy as np

from fedpgm.data.policy import PolicyRefusal

Bound = Union[int, float, Callable[[Any], Any], None]
MAX_TEXT = 256  # characters in a text field
MAX_LIST = 4096  # items in a list field
MAX_DOC = 1 << 20  # bytes of a JSON document field (a model spec, a schema)


class Invalid(Exception):
    """A value outside its field (the message names the field and what it allows)."""


def bound(value: Bound, ctx) -> Any:
    return value(ctx) if callable(value) else value


class Field(ABC):
    """One server-controlled value: ``check`` returns it as allowed or raises ``Invalid``."""

    @abstractmethod
    def check(self, value, ctx) -> Any:
        """``value`` as allowed for the client of ``ctx``; ``Invalid`` otherwise."""


@dataclass(frozen=True)
class Int(Field):
    """An integer in [lo, hi] (bools refused)."""
    lo: Bound = None
    hi: Bound = None

    def check(self, value, ctx) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"must be an integer, got {type(value).__name__}")
        return in_range(value, bound(self.lo, ctx), bound(self.hi, ctx))


@dataclass(frozen=True)
class Float(Field):
    """A finite number in [lo, hi]."""
    lo: Bound = None
    hi: Bound = None

    def check(self, value, ctx) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise Invalid(f"must be a finite number, got {value!r:.40}")
        return in_range(float(value), bound(self.lo, ctx), bound(self.hi, ctx))


def in_range(value, lo, hi):
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise Invalid(f"is {value}; allowed {'-inf' if lo is None else lo}..{'inf' if hi is None else hi}")
    return value


@dataclass(frozen=True)
class Choice(Field):
    """One of the listed values."""
    values: tuple

    def __init__(self, *values) -> None:
        object.__setattr__(self, "values", values)

    def check(self, value, ctx):
        if isinstance(value, (list, dict)) or value not in self.values:
            raise Invalid(f"is {value!r:.60}; allowed {', '.join(map(repr, self.values))}")
        return value


@dataclass(frozen=True)
class Flag(Field):
    """True or false."""

    def check(self, value, ctx) -> bool:
        if not isinstance(value, bool):
            raise Invalid(f"must be true or false, got {value!r:.40}")
        return value


@dataclass(frozen=True)
class Text(Field):
    """A short string."""
    max_len: int = MAX_TEXT

    def check(self, value, ctx) -> str:
        if not isinstance(value, str) or len(value) > self.max_len:
            raise Invalid(f"must be a string of at most {self.max_len} characters")
        return value


@dataclass(frozen=True)
class Column(Field):
    """The name of a column this client holds."""

    def check(self, value, ctx) -> str:
        if not isinstance(value, str) or value not in ctx.data.schema.names:
            raise Invalid(f"is {value!r:.60}, not a column this client holds")
        return value


@dataclass(frozen=True)
class ListOf(Field):
    """A list of at most ``max_len`` items, each checked by ``item``; ``unique`` refuses repeats."""
    item: Field
    max_len: Bound = MAX_LIST
    unique: bool = False

    def check(self, value, ctx) -> list:
        limit = bound(self.max_len, ctx)
        if not isinstance(value, list) or len(value) > limit:
            raise Invalid(f"must be a list of at most {limit} items")
        out = [self.item.check(v, ctx) for v in value]
        if self.unique and len({json.dumps(v, sort_keys=True) for v in out}) != len(out):
            raise Invalid("repeats an item")
        return out


def Columns(max_len: Bound = MAX_LIST) -> ListOf:
    """Distinct names of columns this client holds."""
    return ListOf(Column(), max_len, unique=True)


@dataclass(frozen=True)
class MapOf(Field):
    """A JSON object of at most ``max_len`` keys checked by ``key`` to values checked by ``value``."""
    value: Field
    key: Field = Text()
    max_len: int = MAX_LIST

    def check(self, value, ctx) -> dict:
        if not isinstance(value, dict) or len(value) > self.max_len:
            raise Invalid(f"must be an object of at most {self.max_len} keys")
        out = {}
        for k, v in value.items():
            self.key.check(k, ctx)
            try:
                out[k] = self.value.check(v, ctx)
            except Invalid as e:
                raise Invalid(f"'{k}' {e}") from None
        return out


@dataclass(frozen=True)
class Doc(Field):
    """A JSON object of at most ``max_bytes`` (a model spec, settings): the handler builds it with
    the family's own constructors, which check it further."""
    max_bytes: int = MAX_DOC

    def check(self, value, ctx) -> dict:
        if not isinstance(value, dict) or len(json.dumps(value)) > self.max_bytes:
            raise Invalid(f"must be a JSON object of at most {self.max_bytes} bytes")
        return value


@dataclass(frozen=True)
class Fields(Field):
    """A JSON object whose keys are declared (a nested contract): unknown keys are refused,
    ``required`` keys must be present."""
    fields: dict[str, Field]
    required: tuple[str, ...] = ()

    def check(self, value, ctx) -> dict:
        if not isinstance(value, dict):
            raise Invalid(f"must be an object, got {type(value).__name__}")
        unknown = sorted(set(value) - set(self.fields))
        if unknown:
            raise Invalid(f"has undeclared key(s) {unknown[:5]}; allowed {sorted(self.fields)}")
        missing = [k for k in self.required if k not in value]
        if missing:
            raise Invalid(f"lacks required key(s) {missing}")
        out = {}
        for k, v in value.items():
            try:
                out[k] = self.fields[k].check(v, ctx)
            except Invalid as e:
                raise Invalid(f"'{k}' {e}") from None
        return out


@dataclass(frozen=True)
class Maybe(Field):
    """``inner`` or null (null: the handler's default)."""
    inner: Field

    def check(self, value, ctx):
        return None if value is None else self.inner.check(value, ctx)


@dataclass(frozen=True)
class Array:
    """An array the server may send: dtype kind(s) (numpy ``kind`` letters, e.g. "f", "iu") and at
    most ``max_size`` elements (a callable of the context allowed)."""
    kinds: str = "f"
    max_size: Bound = 1 << 24

    def check(self, name: str, value: np.ndarray, ctx) -> None:
        limit = bound(self.max_size, ctx)
        if value.dtype.kind not in self.kinds:
            raise Invalid(f"array '{name}' has dtype {value.dtype}; allowed kinds '{self.kinds}'")
        if value.size > limit:
            raise Invalid(f"array '{name}' has {value.size} elements; allowed at most {limit}")


@dataclass(frozen=True)
class Contract:
    """What a server may put in one request: ``config`` fields (a ``Fields`` over the whole
    config) and ``arrays`` by name pattern (``fnmatch``: ``"setup/*"``). ``update``: the reply is
    a model update, which a policy requiring secure aggregation sends only as a secure-sum share.
    ``sent_model``: the request's arrays are a model the client trains on its rows and returns; its
    weights are the server's, which can craft them so that the update gives rows back
    (docs/security.md), so a policy that requires DP (``max_epsilon``) answers it only where the
    handler trains under DP (``dp``)."""
    fields: dict[str, Field] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    arrays: dict[str, Array] = field(default_factory=dict)
    update: bool = False
    sent_model: bool = False
    dp: bool = False

    def check(self, name: str, config: dict, arrays: dict[str, np.ndarray], ctx) -> dict:
        """The request's config as checked; ``PolicyRefusal`` naming the first field outside it."""
        try:
            checked = Fields(self.fields, self.required).check(config, ctx)
            for key, value in arrays.items():
                spec = next((a for p, a in self.arrays.items() if fnmatch.fnmatchcase(key, p)), None)
                if spec is None:
                    raise Invalid(f"array '{key}' is not declared; allowed {sorted(self.arrays) or 'none'}")
                spec.check(key, value, ctx)
        except Invalid as e:
            raise PolicyRefusal(f"client '{ctx.client_id}' refuses '{name}': {e}") from None
        return checked


NOTHING = Contract()  # a request without config or arrays (describe, release, ...)
