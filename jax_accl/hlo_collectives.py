"""The collectives in a compiled module's text: XLA's own by kind, and jax_accl's custom
calls by target (a leaf: jax_accl.collectives and the XLA backend's checks read it)."""

from __future__ import annotations

import re

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def xla_collectives(hlo_text: str) -> dict:
    """{kind: {"ops": n, "buffers": operands}}: an async start counted once."""
    xla = {}
    for kind in KINDS:
        operands = re.findall(
            rf"^\s*(?:ROOT )?\S+ = .* {kind}(?:-start)?\(([^)]*)\)", hlo_text, re.M
        )
        if operands:
            xla[kind] = {"ops": len(operands), "buffers": sum(o.count("%") for o in operands)}
    return xla


def accl_calls(hlo_text: str) -> dict:
    """{custom-call target: count} of jax_accl's calls."""
    ours = {}
    for target in re.findall(r'custom_call_target="(accl_\w+)"', hlo_text):
        ours[target] = ours.get(target, 0) + 1
    return ours
