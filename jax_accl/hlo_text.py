"""The collectives of a compiled module, read from its HLO text: XLA's by kind and
jax_accl's calls by target. A leaf (no jax_accl import): jax_accl.collectives reports
them (compiled.py) and the loading hook of the XLA backend checks them (xla_subsets.py)."""

from __future__ import annotations

import re

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def xla_collectives_in(hlo_text: str) -> dict:
    """{kind: {"ops", "buffers"}} of XLA's collectives (an async start counted once;
    buffers: their operands)."""
    xla = {}
    for kind in KINDS:
        operands = re.findall(
            rf"^\s*(?:ROOT )?\S+ = .* {kind}(?:-start)?\(([^)]*)\)", hlo_text, re.M
        )
        if operands:
            xla[kind] = {"ops": len(operands), "buffers": sum(o.count("%") for o in operands)}
    return xla


def accl_calls_in(hlo_text: str) -> dict:
    """{target: calls} of jax_accl's custom calls."""
    ours: dict = {}
    for target in re.findall(r'custom_call_target="(accl_\w+)"', hlo_text):
        ours[target] = ours.get(target, 0) + 1
    return ours
