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


def accl_lanes_in(hlo_text: str) -> list:
    """(lane, what names the call) of each jax_accl custom call, in the text's order:
    its instruction, its name attribute (e.g. "jax_accl.psum over ('x',)") and where JAX
    traced it (the op_name of its metadata), as far as the text gives them."""
    calls = []
    for line in hlo_text.splitlines():
        if 'custom_call_target="accl_' not in line:
            continue
        lane = re.search(r"\blane = (-?\d+)", line)
        if lane is None:
            continue
        instruction = re.match(r"\s*(?:ROOT )?(\S+) = ", line)
        name = re.search(r'\bname = "((?:[^"\\]|\\.)*)"', line)
        traced = re.search(r'op_name="((?:[^"\\]|\\.)*)"', line)
        parts = [instruction.group(1) if instruction else "?"]
        parts += [m.group(1) for m in (name, traced) if m]
        calls.append((int(lane.group(1)), f"{parts[0]} ({', '.join(parts[1:])})"))
    return calls
