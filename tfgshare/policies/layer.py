"""``Layer``: a table of one's own over a shared one, for a FreeMap's copy (``layer``).

A FreeMap kept between rounds is copied each round to plan on; a copy's first change
used to copy its tables (the use, band and free room of every busy GPU), which on a
cluster of thousands of GPUs cost more than the round. Past ``LAYER_AFTER`` entries the
copy's tables are Layers over the original's instead: a change costs what it changes.
Imports only the standard library.
"""

from __future__ import annotations

LAYER_AFTER = 512   # entries past which a copy's tables sit over the original's (Layer)


def layer(table):
    """A table of this map's own over one shared with the map it was copied from: a copy
    of it, or past ``LAYER_AFTER`` entries a ``Layer`` over it (a copy made every round
    would cost every busy GPU of a large cluster, not the GPUs the round changes)."""
    return dict(table) if len(table) < LAYER_AFTER else Layer(table)


class Layer:
    """A mapping over a ``base`` that does not change while this one is in use: this
    one's own entries, and the keys it deleted, kept apart; reads fall through to it."""

    __slots__ = ("base", "own", "gone")

    def __init__(self, base) -> None:
        self.base, self.own, self.gone = base, {}, set()

    def get(self, key, default=None):
        own = self.own
        if key in own:
            return own[key]
        if key in self.gone:
            return default
        return self.base.get(key, default)

    def __getitem__(self, key):
        got = self.get(key, _NONE)
        if got is _NONE:
            raise KeyError(key)
        return got

    def __contains__(self, key) -> bool:
        return key in self.own or (key not in self.gone and key in self.base)

    def __setitem__(self, key, value) -> None:
        self.own[key] = value
        self.gone.discard(key)

    def pop(self, key, *default):
        if key in self:
            value = self[key]
            self.own.pop(key, None)
            if key in self.base:
                self.gone.add(key)
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def __iter__(self):
        yield from self.own
        own, gone = self.own, self.gone
        yield from (k for k in self.base if k not in own and k not in gone)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def keys(self):
        return iter(self)

    def items(self):
        return ((k, self[k]) for k in self)


_NONE = object()
