"""In-place calls only where the operand may be overwritten: a pass over a lowered module
that drops a jax_accl call's result-operand alias where the operand is an argument of
the program XLA must keep (not donated).

An in-place call (its result aliasing its operand: XLA allocates no output, and at 64 MiB
per device a fresh buffer costs more in page faults than the all-reduce) on such an
argument makes XLA copy the argument into a fresh buffer before the call: a whole pass
over memory more than the call writing its result into that fresh buffer, reading the
argument where it lies (every native algorithm reads its input and writes its output,
which may be apart). So the alias stays on intermediates (a step's gradients), a loop's
carried values and donated arguments, and goes where the operand is, under the sharding
annotations, shard_map's manual regions and the function calls JAX lowers a program
with, an argument of `main` that is not donated. The module must be whole (its calls'
sites known), so this runs after lowering (lanes.py's module hook)."""

from __future__ import annotations

from collections import defaultdict

from jax_accl import _compat as c

ir, hlo = c.ir, c.hlo

# jax_accl's calls that lower in place (every result aliasing its operand).
IN_PLACE_TARGETS = frozenset(
    {"accl_allreduce", "accl_allreduce_bf16_wire", "accl_broadcast", "accl_reduce"}
)
# Custom calls that only annotate or reshape their operand for the partitioner: the value
# is still the argument underneath.
_PASS_THROUGH_CALLS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})
_DONATION_ATTRS = ("jax.buffer_donor", "tf.aliasing_output")
_MAX_DEPTH = 256  # nested regions and calls a value is traced through (a bound, not a search)


def unalias_kept_arguments(module) -> int:
    """Drops the alias of every in-place jax_accl call's operand that is a kept argument
    of the program (kept_argument); returns how many it dropped."""
    callers, calls = defaultdict(list), []

    def visit(op):
        if op.name == "func.call":
            callers[ir.FlatSymbolRefAttr(op.attributes["callee"]).value].append(op)
        elif op.name == "stablehlo.custom_call" and _target(op) in IN_PLACE_TARGETS:
            calls.append(op)
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    for func in module.body.operations:
        if func.operation.name == "func.func":
            visit(func.operation)
    dropped = 0
    for op in calls:
        if "output_operand_aliases" not in op.attributes:
            continue
        aliases = list(ir.ArrayAttr(op.attributes["output_operand_aliases"]))
        kept = [
            a
            for a in aliases
            if not kept_argument(op.operands[hlo.OutputOperandAlias(a).operand_index], callers)
        ]
        if len(kept) != len(aliases):
            op.attributes["output_operand_aliases"] = ir.ArrayAttr.get(kept, context=op.context)
            dropped += len(aliases) - len(kept)
    return dropped


def kept_argument(value, callers: dict, depth: int = 0) -> bool:
    """True where `value` is, under sharding annotations, manual regions and calls (every
    call site's operand), an argument of `main` that is not donated; False wherever its
    origin is anything else (an intermediate, a loop's carried value) or unknown."""
    while depth < _MAX_DEPTH:
        depth += 1
        value = value.maybe_downcast()
        if isinstance(value, ir.OpResult):
            op = value.owner.operation
            if op.name != "stablehlo.custom_call" or _target(op) not in _PASS_THROUGH_CALLS:
                return False
            value = op.operands[0]
            continue
        if not isinstance(value, ir.BlockArgument):
            return False
        owner = value.owner.owner.operation  # the operation whose region holds the block
        index = value.arg_number
        if owner.name == "sdy.manual_computation":
            value = owner.operands[index]
            continue
        if owner.name != "func.func":
            return False
        name = _name(owner)
        if name == "main":
            return _undonated(owner, index)
        sites = callers.get(name, [])
        return bool(sites) and all(
            kept_argument(site.operands[index], callers, depth) for site in sites
        )
    return False


def _undonated(func, index: int) -> bool:
    if "arg_attrs" not in func.attributes:
        return True
    attrs = ir.DictAttr(ir.ArrayAttr(func.attributes["arg_attrs"])[index])
    return not any(name in attrs for name in _DONATION_ATTRS)


def _target(op) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


def _name(func) -> str:
    return ir.StringAttr(func.attributes["sym_name"]).value
