"""The native runtime tells the collectives apart in one place, the table of collectives
(xla_ffi/runtime/collective.cc): nowhere else compares or switches on a call's kind."""

import re
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "xla_ffi"
TABLE = NATIVE / "runtime" / "collective.cc"
SWITCH = re.compile(r"collective\s*[!=]=|case\s+Collective::")


@pytest.mark.fast
def test_only_the_table_of_collectives_switches_on_a_calls_kind():
    assert TABLE.exists()
    found = [
        f"{path.relative_to(NATIVE)}:{number}: {line.strip()}"
        for path in sorted(NATIVE.rglob("*.[ch]*"))
        if path != TABLE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SWITCH.search(line)
    ]
    assert not found, "switch on the collective outside its table:\n" + "\n".join(found)


@pytest.mark.fast
def test_the_table_has_a_row_for_every_collective_in_order():
    enum = (NATIVE / "algorithms" / "algorithm.h").read_text()
    kinds = re.search(r"enum class Collective[^{]*\{([^}]*)\}", enum).group(1)
    names = [k.split("=")[0].strip() for k in kinds.split(",") if k.strip()]
    rows = re.findall(r"\{Collective::(k\w+),", TABLE.read_text())
    assert rows == names
