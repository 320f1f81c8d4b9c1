"""The native runtime tells the collectives apart in one place, the table of collectives
(xla_ffi/runtime/collective.cc): nowhere else compares or switches on a call's kind."""

import re
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "xla_ffi"
TABLE = NATIVE / "runtime" / "collective.cc"
SWITCH = re.compile(r"collective\s*[!=]=|case\s+Collective::")


# The places besides the table that name a kind: the bfloat16 wire's handler and the
# call's reduction (runtime/collective_call.cc), which carry the all-reduce's sums alone,
# refusing a site or a signature of another collective.
ALLOWED = {
    ("ffi/collective_ffi.cc", "if (collective != Collective::kAllReduce ||"),
    ("runtime/collective_call.cc", "sig.collective != Collective::kAllReduce) {"),
}


@pytest.mark.fast
def test_only_the_table_of_collectives_switches_on_a_calls_kind():
    assert TABLE.exists()
    found = [
        f"{path.relative_to(NATIVE)}:{number}: {line.strip()}"
        for path in sorted(NATIVE.rglob("*.[ch]*"))
        if path != TABLE
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SWITCH.search(line)
        and not any(
            str(path.relative_to(NATIVE)) == f and line.strip().startswith(start)
            for f, start in ALLOWED
        )
    ]
    assert not found, "switch on the collective outside its table:\n" + "\n".join(found)


@pytest.mark.fast
def test_the_table_has_a_row_for_every_collective_in_order():
    enum = (NATIVE / "algorithms" / "algorithm.h").read_text()
    kinds = re.search(r"enum class Collective[^{]*\{([^}]*)\}", enum).group(1)
    names = [k.split("=")[0].strip() for k in kinds.split(",") if k.strip()]
    rows = re.findall(r"\{\.id = Collective::(k\w+),", TABLE.read_text())
    assert rows == names


def function_lengths(text: str) -> list[tuple[int, str]]:
    """(lines, first line) of every brace block at namespace level of a C++ file (a
    function, or a class with its inline members), from its first signature line."""
    lines = text.splitlines()
    found, depth, start = [], 0, None
    for i, line in enumerate(lines):
        if line.startswith(("namespace", "}  // namespace", 'extern "C"')):
            continue
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line)  # strings, then characters, then comments
        code = re.sub(r"//.*", "", re.sub(r"'(\\.|[^'\\])'", "''", code))
        if depth == 0 and "{" in code:
            start = i
            while (
                start > 0
                and lines[start - 1].strip()
                and not re.search(r"^\s*//|[;{}]\s*$", lines[start - 1])
            ):
                start -= 1
        depth += code.count("{") - code.count("}")
        assert depth >= 0, f"unbalanced braces at line {i + 1}: {line}"
        if depth == 0 and start is not None:
            found.append((i - start + 1, lines[start].strip()))
            start = None
    assert depth == 0, "unbalanced braces at the end"
    return found


@pytest.mark.fast
def test_no_function_of_the_runtime_is_longer_than_a_screen():
    """Each step of a call fits a screen (60 lines): the runtime's files (a table's
    initializer, `... = {`, is data, not a step)."""
    long = [
        f"{path.name}: {n} lines: {first}"
        for path in sorted((NATIVE / "runtime").glob("*.cc"))
        for n, first in function_lengths(path.read_text())
        if n > 60 and not first.startswith(("class ", "struct ")) and not first.endswith("= {")
    ]
    assert not long, "\n".join(long)


@pytest.mark.fast
def test_the_length_check_sees_a_long_function():
    body = "\n".join(["  x();"] * 61)
    assert function_lengths(
        f"namespace a {{\nvoid f(int x,\n       int y) {{\n{body}\n}}\n}}  // namespace a"
    )[0] == (64, "void f(int x,")


# The routes a call may take, which only the one function (start_call, in
# runtime/collective_call.cc) chooses among, and the files that declare or define them;
# multiprocess.cc sends a group that turns out to live in one process to its flat
# schedule.
ROUTES = {
    "run_in_process": {
        "runtime/collective_call.h",
        "runtime/collective_call.cc",
        "runtime/multiprocess.cc",
    },
    "run_across_processes": {
        "runtime/collective_call.h",
        "runtime/collective_call.cc",
        "runtime/multiprocess.cc",
    },
    "one_shot": {
        "runtime/one_shot.h",
        "runtime/one_shot.cc",
        "runtime/collective_call.cc",
        "selftest/selftest.cc",
    },
}


def code_of(text: str) -> str:
    """C++ source without its comments and the contents of its strings."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def uses(name: str, code: str) -> bool:
    """Whether `code` calls or takes the address of the free function `name` (qualified
    or not; a member of that name is another function)."""
    return (
        re.search(r"(?<![\w.>])(?:\w+::)*" + name + r"\s*\(|&\s*(?:\w+::)*" + name + r"\b", code)
        is not None
    )


@pytest.mark.fast
def test_every_caller_runs_a_call_through_start_call():
    """The FFI call sites, the MPI library and the native tests' harness start a call by
    start_call or run_call (start_call on the caller's thread), never by one of its
    routes (the self-test's unit test of the one-shot protocol aside)."""
    files = {
        str(p.relative_to(NATIVE)): code_of(p.read_text()) for p in sorted(NATIVE.rglob("*.[ch]*"))
    }
    found = [
        f"{name} uses {route}"
        for name, code in files.items()
        for route, allowed in ROUTES.items()
        if name not in allowed and uses(route, code)
    ]
    assert not found, "a call started outside start_call:\n" + "\n".join(found)
    for caller in (
        "runtime/collective_site.cc",
        "mpiabi/communicators.cc",
        "bindings/testing.cc",
        "selftest/selftest.cc",
    ):
        assert uses("start_call", files[caller]) or uses("run_call", files[caller]), (
            f"{caller} no longer starts its calls by start_call/run_call"
        )


@pytest.mark.fast
def test_the_route_finder_sees_qualified_calls_and_addresses_not_comments():
    assert uses("run_in_process", "accl::run_in_process (spec, in, out, counts, a);")
    assert uses("run_in_process", "auto f = &run_in_process;")
    assert not uses("run_in_process", "x.run_in_process(spec);")
    assert not uses("run_in_process", "run_in_process_call(spec);")
    assert not uses("run_call", code_of('// run_call(spec)\n/* run_call(x) */ f("run_call(");'))
    assert uses("run_in_process", code_of((NATIVE / "runtime" / "multiprocess.cc").read_text()))
