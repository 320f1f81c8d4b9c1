"""Every relative link of the README and docs/ reaches a file of the checkout and, with
`#anchor`, a heading of that file (GitHub's anchors: lower case, punctuation dropped,
spaces as hyphens)."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # no headings in code
    return {anchor(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links():
    for path in DOCUMENTS:
        for target in LINK.findall(path.read_text()):
            if not re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                yield path.relative_to(REPO).as_posix(), target


@pytest.mark.parametrize("document,target", sorted(set(links())))
def test_a_relative_link_reaches_its_file_and_heading(document, target):
    file, _, fragment = target.partition("#")
    path = (REPO / document).parent / file if file else REPO / document
    assert path.exists(), f"{document}: {target}: no {path}"
    if fragment:
        assert fragment in anchors(path), f"{document}: {target}: no such heading in {file}"


def test_the_anchor_of_a_heading_is_githubs():
    assert anchor("Training: which all-reduces jax_accl carries") == (
        "training-which-all-reduces-jax_accl-carries"
    )
    assert anchor("The demo's training step") == "the-demos-training-step"
