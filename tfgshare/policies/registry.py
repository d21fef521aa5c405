"""Policies by name: the one place the simulator and the coordinator get them."""

from __future__ import annotations

import dataclasses
import importlib

from .base import Policy

# name -> "module:class", imported only when asked for
_POLICIES: dict[str, str] = {
    "fifo": "tfgshare.policies.fifo:Fifo",
    "sjf": "tfgshare.policies.sjf:Sjf",
    "tiresias": "tfgshare.policies.tiresias:Tiresias",
    "tiresias-promote": "tfgshare.policies.tiresias:TiresiasPromote",
    "gandiva": "tfgshare.policies.gandiva:Gandiva",
    "fgs": "tfgshare.policies.fgs:Fgs",
}

POLICY_NAMES: tuple[str, ...] = tuple(_POLICIES)


def split_share(name: str) -> tuple[str, str] | None:
    """(order, placement) of a name ``ORDER/PLACEMENT`` such as ``fifo/fgd``, else None."""
    order, slash, placement = name.partition("/")
    return (order, placement) if slash else None


def policy_class(name: str) -> type:
    """The class implementing the policy called ``name``."""
    if split_share(name) is not None:
        from .share_order import ShareOrder
        return ShareOrder
    if name not in _POLICIES:
        raise ValueError(f"unknown policy {name!r}; valid policies: {', '.join(POLICY_NAMES)}")
    module, cls = _POLICIES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def policy_params(name: str) -> dict[str, object]:
    """The tunable parameters of a policy and their defaults."""
    fixed = {"order", "placement"} if split_share(name) is not None else set()
    return {f.name: f.default for f in dataclasses.fields(policy_class(name))
            if f.init and f.name not in fixed}


def get_policy(name: str, **params: object) -> Policy:
    """A new policy called ``name`` with these parameters (others at their defaults).

    Raises ValueError for an unknown name or parameter.
    """
    cls = policy_class(name)
    known = {f.name for f in dataclasses.fields(cls) if f.init}
    pair = split_share(name)
    if pair is not None:
        known -= {"order", "placement"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"policy {name!r} has no parameter(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(sorted(known))}")
        return cls(order=pair[0], placement=pair[1], **params)
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"policy {name!r} has no parameter(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(sorted(known)) or 'none'}")
    return cls(**params)
