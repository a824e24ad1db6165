"""Who may see what over HTTP: every endpoint, every persona; CSRF, headers, cookies, throttling.

Ana owns the data; Rita (group rh-restrito) and Carlos (another area) are other users;
"anon" has no session. Another user's id must be a 404 that shows none of Ana's data.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, reverse

from chatrag.middleware import DEFAULT_CSP
from conversations.models import Conversation, Feedback, Message, TurnTrace
from conversations.services import conversation_create, message_store_user
from conversations.urls import urlpatterns
from retrieval.ingestion.services import chunk_partition_ensure
from retrieval.models import Chunk, Document
from retrieval.services import default_collection
from tests.conftest import RESTRICTED

pytestmark = pytest.mark.django_db

PERSONAS = ("ana", "rita", "carlos", "anon")
LOGIN = "login"  # expected: a redirect to the login page
SECRETS = (
    "Pergunta secreta da Ana",
    "Resposta secreta para a Ana",
    "consulta reescrita secreta",
    "Título secreto",
)
RESTRICTED_TEXT = "Banda P3 da matriz de mérito: tabela confidencial"


@dataclass
class World:
    users: dict[str, User]
    conversation: Conversation
    question: Message
    answer: Message
    restricted: Document
    public: Document


def _document(external_id: str, text: str, groups: list[Group]) -> Document:
    from django.conf import settings

    collection = default_collection()
    document = Document.objects.create(
        collection=collection, external_id=external_id, title=external_id, checksum="x"
    )
    document.groups.set(groups)
    chunk_partition_ensure(collection=collection)  # as ingestion does before a chunk is written
    Chunk.objects.create(
        document=document,
        collection=collection,
        position=0,
        heading="Seção",
        text=text,
        embedding=[0.1] * settings.CHATRAG_EMBEDDING_DIM,
        is_public=not groups,
        group_ids=[g.id for g in groups],
    )
    return document


@pytest.fixture
def world(personas: dict[str, User]) -> World:
    conversation = conversation_create(user=personas["ana"], title="Título secreto")
    question = message_store_user(conversation=conversation, text="Pergunta secreta da Ana")
    TurnTrace.objects.create(
        message=question,
        rewrite={"backend": "rules", "queries": [{"text": "consulta reescrita secreta"}]},
    )
    answer = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text="Resposta secreta para a Ana",
        status=Message.Status.COMPLETE,
        reply_to=question,
    )
    return World(
        users=personas,
        conversation=conversation,
        question=question,
        answer=answer,
        restricted=_document("restrito", RESTRICTED_TEXT, [Group.objects.get(name=RESTRICTED)]),
        public=_document("publico", "O vale-refeição é pago por dia útil.", []),
    )


def _client(world: World, persona: str, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    if persona != "anon":
        client.force_login(world.users[persona])
    return client


# --- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request and what each persona must get (a status, or LOGIN for the login redirect)."""

    url_name: str
    method: str
    url: Callable[[World], str]
    expect: dict[str, int | str]
    data: dict[str, str] = field(default_factory=dict)
    # Checked after every request that was refused: nothing changed.
    unchanged: Callable[[World], bool] | None = None


def _conversation_intact(w: World) -> bool:
    current = Conversation.objects.filter(pk=w.conversation.id).first()
    return current is not None and current.title == "Título secreto"


def _no_feedback(w: World) -> bool:
    return not Feedback.objects.exists()


OWNED = {"ana": 200, "rita": 404, "carlos": 404, "anon": LOGIN}
EVERYONE = {"ana": 200, "rita": 200, "carlos": 200, "anon": 200}
SIGNED_IN = {"ana": 200, "rita": 200, "carlos": 200, "anon": LOGIN}
CASES: dict[str, Case] = {
    "chat": Case("chat", "get", lambda w: reverse("chat"), SIGNED_IN),
    "chat-search-other-users-words": Case(
        "chat", "post", lambda w: reverse("chat"), SIGNED_IN, data={"q": "secreta"}
    ),
    "conversation": Case(
        "conversation", "get", lambda w: reverse("conversation", args=[w.conversation.id]), OWNED
    ),
    "conversation-missing": Case(
        "conversation",
        "get",
        lambda w: reverse("conversation", args=[999_999_999]),
        {**OWNED, "ana": 404},
    ),
    "conversation-over-bigint": Case(
        "conversation", "get", lambda w: f"/c/{10**30}/", {**OWNED, "ana": 404}
    ),
    "rename": Case(
        "conversation_rename",
        "post",
        lambda w: reverse("conversation_rename", args=[w.conversation.id]),
        {**OWNED, "ana": 302},
        data={"title": "Renomeada"},
        unchanged=_conversation_intact,
    ),
    "delete": Case(
        "conversation_delete",
        "post",
        lambda w: reverse("conversation_delete", args=[w.conversation.id]),
        {**OWNED, "ana": 302},
        unchanged=_conversation_intact,
    ),
    "feedback-on-answer": Case(
        "feedback",
        "post",
        lambda w: reverse("feedback", args=[w.answer.id]),
        OWNED,
        data={"value": "1", "reason": "útil"},
        unchanged=_no_feedback,
    ),
    "feedback-on-question": Case(
        "feedback",
        "post",
        lambda w: reverse("feedback", args=[w.question.id]),
        {**OWNED, "ana": 400},
        data={"value": "1"},
        unchanged=_no_feedback,
    ),
    "document-restricted": Case(
        "document",
        "get",
        lambda w: reverse("document", args=[w.restricted.id]),
        {"ana": 404, "rita": 200, "carlos": 404, "anon": LOGIN},
    ),
    "document-restricted-cited-chunk": Case(
        "document",
        "get",
        lambda w: (
            reverse("document", args=[w.restricted.id]) + f"?chunk={w.restricted.chunks.get().id}"
        ),
        {"ana": 404, "rita": 200, "carlos": 404, "anon": LOGIN},
    ),
    "document-public": Case(
        "document", "get", lambda w: reverse("document", args=[w.public.id]), SIGNED_IN
    ),
    "document-missing": Case(
        "document",
        "get",
        lambda w: reverse("document", args=[999_999_999]),
        {"ana": 404, "rita": 404, "carlos": 404, "anon": LOGIN},
    ),
    "login-page": Case(
        "login", "get", lambda w: reverse("login"), {**{p: 302 for p in PERSONAS}, "anon": 200}
    ),
    "logout": Case("logout", "post", lambda w: reverse("logout"), {p: 302 for p in PERSONAS}),
    "healthz": Case("healthz", "get", lambda w: reverse("healthz"), EVERYONE),
    "set-language": Case(
        "set_language",
        "post",
        lambda w: "/i18n/setlang/",
        {p: 302 for p in PERSONAS},
        data={"language": "es", "next": "/"},
    ),
    "admin": Case(
        "admin",
        "get",
        lambda w: "/admin/",
        {p: 302 for p in PERSONAS},  # none of them is staff: to the admin's own login
    ),
}
TABLE = [
    pytest.param(name, persona, id=f"{name}-{persona}") for name in CASES for persona in PERSONAS
]


@pytest.mark.parametrize(("case_name", "persona"), TABLE)
def test_access_table(world: World, case_name: str, persona: str) -> None:
    case = CASES[case_name]
    client = _client(world, persona)
    url = case.url(world)
    response = getattr(client, case.method)(url, case.data)
    expected = case.expect[persona]
    if expected == LOGIN:
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next=")
    else:
        assert response.status_code == expected, (url, response.content[:300])
    body = response.content.decode(errors="replace")
    if persona != "ana":
        # Whatever came back, none of Ana's data is in it.
        for secret in SECRETS:
            assert secret not in body, (case_name, secret)
    if persona != "rita":
        assert "P3 da matriz" not in body
    if expected in (404, LOGIN) and case.unchanged is not None:
        assert case.unchanged(world), "a refused request changed something"


def test_every_endpoint_is_in_the_table() -> None:
    """A new URL without an access row fails here, not in production."""
    names = {p.name for p in urlpatterns if isinstance(p, URLPattern)}
    covered = {case.url_name for case in CASES.values()}
    assert names - covered == set()


def test_owner_gets_her_data(world: World) -> None:
    client = _client(world, "ana")
    page = client.get(reverse("conversation", args=[world.conversation.id])).content.decode()
    assert all(secret in page for secret in SECRETS)
    page = client.post(reverse("chat"), {"q": "secreta"}).content.decode()
    assert page.count("Título secreto") >= 1
    assert (
        RESTRICTED_TEXT
        in _client(world, "rita")
        .get(reverse("document", args=[world.restricted.id]))
        .content.decode()
    )


def test_search_never_finds_another_users_conversations(world: World) -> None:
    for persona in ("rita", "carlos"):
        body = _client(world, persona).get(reverse("chat"), {"q": "secreta"}).content.decode()
        assert f'data-conversation-id="{world.conversation.id}"' not in body


def test_superuser_reads_restricted_documents_but_not_conversations(world: World) -> None:
    boss = User.objects.create_superuser("boss", password="pw-boss-123")
    client = Client()
    client.force_login(boss)
    assert client.get(reverse("document", args=[world.restricted.id])).status_code == 200
    # Conversations are private even from admins on the chat pages.
    assert client.get(reverse("conversation", args=[world.conversation.id])).status_code == 404


def test_user_removed_from_the_group_loses_the_document(world: World) -> None:
    url = reverse("document", args=[world.restricted.id])
    rita = _client(world, "rita")
    assert rita.get(url).status_code == 200
    world.users["rita"].groups.clear()
    assert rita.get(url).status_code == 404


# --- CSRF -----------------------------------------------------------------------------------------

CSRF_POSTS = {
    "rename": (lambda w: reverse("conversation_rename", args=[w.conversation.id]), {"title": "x"}),
    "delete": (lambda w: reverse("conversation_delete", args=[w.conversation.id]), {}),
    "feedback": (lambda w: reverse("feedback", args=[w.answer.id]), {"value": "1"}),
    "logout": (lambda w: reverse("logout"), {}),
    "set-language": (lambda w: "/i18n/setlang/", {"language": "es"}),
}


@pytest.mark.parametrize("name", list(CSRF_POSTS))
def test_post_without_csrf_token_is_rejected(world: World, name: str) -> None:
    url, data = CSRF_POSTS[name]
    client = _client(world, "ana", enforce_csrf_checks=True)
    response = client.post(url(world), data)
    assert response.status_code == 403
    assert _conversation_intact(world) and _no_feedback(world)
    # Still signed in: the logout did not happen either.
    assert client.get(reverse("chat")).status_code == 200


def test_login_without_csrf_token_is_rejected(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("login"), {"username": "ana", "password": "pw-ana-123"})
    assert response.status_code == 403
    assert client.get(reverse("chat")).status_code == 302


def test_post_with_the_pages_token_is_accepted(world: World) -> None:
    client = _client(world, "ana", enforce_csrf_checks=True)
    page = client.get(reverse("conversation", args=[world.conversation.id])).content.decode()
    token = page.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    response = client.post(
        reverse("conversation_rename", args=[world.conversation.id]),
        {"title": "Com token", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302


# --- headers and cookies --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "url"),
    [
        ("ana", lambda w: reverse("chat")),
        ("ana", lambda w: reverse("conversation", args=[w.conversation.id])),
        ("ana", lambda w: reverse("document", args=[w.public.id])),
        ("ana", lambda w: reverse("conversation", args=[999_999_999])),  # the 404 page too
        ("anon", lambda w: reverse("login")),
        ("anon", lambda w: reverse("healthz")),
    ],
    ids=["chat", "conversation", "document", "not-found", "login", "healthz"],
)
def test_security_headers_on_every_page(world: World, persona: str, url: Any) -> None:
    response = _client(world, persona).get(url(world))
    assert response["Content-Security-Policy"] == DEFAULT_CSP
    assert "script-src 'self'" in DEFAULT_CSP and "'unsafe-inline'" not in DEFAULT_CSP
    assert "frame-ancestors 'none'" in DEFAULT_CSP and "object-src 'none'" in DEFAULT_CSP
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "camera=()" in response["Permissions-Policy"]


def test_private_pages_are_not_cached(world: World) -> None:
    ana, rita = _client(world, "ana"), _client(world, "rita")
    for response in (
        ana.get(reverse("chat")),
        ana.get(reverse("conversation", args=[world.conversation.id])),
        rita.get(reverse("document", args=[world.restricted.id])),
        ana.post(reverse("feedback", args=[world.answer.id]), {"value": "1"}),
    ):
        assert "no-store" in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_session_and_csrf_cookies_are_http_only_and_same_site(world: World) -> None:
    client = Client()
    client.get(reverse("login"))
    response = client.post(reverse("login"), {"username": "ana", "password": "pw-ana-123"})
    session = response.cookies["sessionid"]
    assert session["httponly"] and session["samesite"] == "Lax"
    csrf = client.cookies["csrftoken"]
    assert csrf["httponly"] and csrf["samesite"] == "Lax"


def test_secure_cookies_and_hsts_when_configured_for_production(
    world: World, settings: Any
) -> None:
    # The values production settings take (tests/test_settings.py checks they do).
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    client = Client()
    client.get(reverse("login"), secure=True)
    response = client.post(
        reverse("login"),
        {"username": "ana", "password": "pw-ana-123"},
        HTTP_X_FORWARDED_PROTO="https",
    )
    assert response.cookies["sessionid"]["secure"]
    assert client.cookies["csrftoken"]["secure"]
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
    # Plain HTTP (no proxy saying https) never gets HSTS.
    assert "Strict-Transport-Security" not in Client().get(reverse("login"))


# --- login throttling -----------------------------------------------------------------------------


@pytest.fixture
def throttle(settings: Any) -> Any:
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    return settings


def _login(client: Client, password: str, username: str = "ana", **extra: Any) -> Any:
    return client.post(reverse("login"), {"username": username, "password": password}, **extra)


def test_login_is_refused_after_n_failures_even_with_the_right_password(
    world: World, throttle: Any
) -> None:
    client = Client()
    for _ in range(2):
        assert _login(client, "wrong").status_code == 200
    locked = _login(client, "wrong")  # the Nth failure locks
    assert locked.status_code == 429
    right = _login(client, "pw-ana-123")  # the N+1th: refused, right password or not
    assert right.status_code == 429
    assert "sessionid" not in right.cookies
    body = right.content.decode()
    assert 'id="login-locked"' in body and "Muitas tentativas sem sucesso" in body
    assert "tente de novo em 1 minuto" in body
    assert 'value="ana"' in body  # the form is there to try again later
    assert client.get(reverse("chat")).status_code == 302
    # The locked page still works under the CSP.
    assert " style=" not in body and "<script>" not in body


def test_lockout_resets_after_the_cool_off(world: World, throttle: Any) -> None:
    client = Client()
    for _ in range(3):
        _login(client, "wrong")
    assert _login(client, "pw-ana-123").status_code == 429
    time.sleep(1.2)
    response = _login(client, "pw-ana-123")
    assert response.status_code == 302 and response["Location"] == reverse("chat")
    assert client.get(reverse("chat")).status_code == 200


def test_lockout_is_per_username_and_address(world: World, throttle: Any) -> None:
    attacker = Client(REMOTE_ADDR="10.0.0.66")
    for _ in range(3):
        _login(attacker, "wrong")
    assert _login(attacker, "pw-ana-123").status_code == 429
    # Ana from her own machine is not locked out by someone else's guessing...
    assert _login(Client(REMOTE_ADDR="10.0.0.7"), "pw-ana-123").status_code == 302
    # ...nor is another user at the attacker's address.
    assert _login(attacker, "pw-carlos-123", username="carlos").status_code == 302


def test_successful_login_resets_the_count(world: World, throttle: Any) -> None:
    client = Client()
    _login(client, "wrong")
    _login(client, "wrong")
    assert _login(client, "pw-ana-123").status_code == 302
    client.post(reverse("logout"))
    _login(client, "wrong")
    _login(client, "wrong")
    assert _login(client, "pw-ana-123").status_code == 302


def test_admin_login_is_throttled_too(world: World, throttle: Any) -> None:
    world.users["ana"].is_staff = True
    world.users["ana"].save(update_fields=["is_staff"])
    client = Client()
    for _ in range(3):
        client.post("/admin/login/", {"username": "ana", "password": "wrong"})
    response = client.post("/admin/login/", {"username": "ana", "password": "pw-ana-123"})
    assert response.status_code == 429
    assert client.get("/admin/").status_code == 302  # still signed out


def test_lockout_message_is_in_the_users_language(world: World, throttle: Any) -> None:
    client = Client(HTTP_ACCEPT_LANGUAGE="es")
    for _ in range(3):
        response = _login(client, "wrong")
    body = response.content.decode()
    assert response.status_code == 429
    assert "Demasiados intentos fallidos" in body and "1 minuto" in body
    english = Client(HTTP_ACCEPT_LANGUAGE="en", REMOTE_ADDR="10.0.0.8")
    for _ in range(3):
        response = _login(english, "wrong")
    assert "Too many failed attempts" in response.content.decode()


def test_behind_proxies_the_forwarded_client_address_is_counted(
    world: World, throttle: Any
) -> None:
    throttle.CHATRAG_PROXY_COUNT = 1
    proxy = "172.16.0.2"  # every request arrives from the proxy
    for _ in range(3):
        _login(Client(REMOTE_ADDR=proxy), "wrong", HTTP_X_FORWARDED_FOR="203.0.113.9")
    # A client cannot dodge the count by prepending an address of its own choosing.
    spoofed = _login(
        Client(REMOTE_ADDR=proxy), "pw-ana-123", HTTP_X_FORWARDED_FOR="1.2.3.4, 203.0.113.9"
    )
    assert spoofed.status_code == 429
    other = _login(Client(REMOTE_ADDR=proxy), "pw-ana-123", HTTP_X_FORWARDED_FOR="198.51.100.4")
    assert other.status_code == 302


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
        ("http://127.0.0.1:9999", "127.0.0.1:8000", False),
        ("http://localhost:8000", "127.0.0.1:8000", False),
        # Behind nginx the Host has no port: the Origin's must be its scheme's default.
        ("https://chat.example.com", "chat.example.com", True),
        ("https://chat.example.com:443", "chat.example.com", True),
        ("https://chat.example.com:8443", "chat.example.com", False),
        ("http://[::1]:8000", "[::1]:8000", True),
        ("http://127.0.0.1:8000/path", "127.0.0.1:8000", False),
        ("null", "127.0.0.1:8000", False),
        ("", "127.0.0.1:8000", False),
        ("http://127.0.0.1:8000", "", False),
    ],
)
def test_a_websocket_origin_must_be_the_site_it_was_opened_on(
    origin: str, host: str, same: bool
) -> None:
    from chatrag.middleware import same_origin

    assert same_origin(origin, host, []) is same
    assert same_origin(
        "https://chat.example.com:8443", "internal:8000", ["https://chat.example.com:8443"]
    )
