"""The judged development sets the fitting and checking scripts share."""

from __future__ import annotations

from conversations.quality.datasets import development_sets, tasks_load
from tests.support import BASE_DIR


def test_every_development_set_names_files_that_load() -> None:
    sets = development_sets(BASE_DIR)
    assert set(sets) == {"ptes-dev", "ptes-aurora", "demo"}
    for dev in sets.values():
        assert dev.corpus.exists() and dev.glossary.exists()
        assert tasks_load(dev.tasks)
    assert sets["demo"].corpus.is_dir()
