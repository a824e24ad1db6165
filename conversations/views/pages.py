"""The chat pages: thin views over the conversation selectors and services.

- Every id in a URL goes through an owner-scoped selector: another user's id is a 404.
- State changes are POST with CSRF; the live chat itself runs over the WebSocket
  (`conversations.consumers`), these pages only render what is stored.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from conversations.forms import FeedbackForm, RenameForm
from conversations.models import Conversation, Message
from conversations.past import conversations_found, messages_readable
from conversations.selectors import (
    conversation_get,
    conversation_list,
    conversation_messages,
    document_chunks,
    document_readable,
    feedback_values,
    message_get,
)
from conversations.services import (
    InvalidMessage,
    conversation_delete,
    conversation_rename,
    feedback_set,
)
from conversations.views.present import ChunkView, build_turns, chat_labels, text_segments

SIDEBAR_LIMIT = 100


class AuthenticatedHttpRequest(HttpRequest):
    """What `login_required` guarantees (django-stubs' recommended pattern)."""

    user: User


# --- helpers ----------------------------------------------------------------------------------


def _safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def _safe_referer(request: HttpRequest) -> str:
    """The page that linked here when it is one of ours (the chat that cited the document)."""
    referer = request.META.get("HTTP_REFERER", "")
    if referer and url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return referer
    return reverse("chat")


def _page_context(
    request: AuthenticatedHttpRequest, current: Conversation | None
) -> dict[str, Any]:
    # The search is posted, never in the URL: a query string lands in the web server's and
    # proxies' logs, and people search for CPFs and names. A GET ?q= is ignored.
    # Printable text only: a NUL would reach PostgreSQL (which refuses it) through icontains.
    raw = request.POST.get("q", "")[:400] if request.method == "POST" else ""
    search = "".join(ch for ch in raw if ch.isprintable()).strip()[:200]
    sidebar = conversations_found(
        user=request.user,
        conversations=list(conversation_list(user=request.user, search=search)[:SIDEBAR_LIMIT]),
        search=search,
    )
    return {
        "conversations": sidebar,
        "q": search,
        "current": current,
        "i18n": chat_labels(),
        "chat_config": {
            "conversation": current.id if current else None,
            "wsPath": "/ws/chat/",
            "urls": {
                "chat": reverse("chat"),
                "login": reverse("login"),
                "conversation": reverse("conversation", args=[0]),
                "rename": reverse("conversation_rename", args=[0]),
                "delete": reverse("conversation_delete", args=[0]),
                "feedback": reverse("feedback", args=[0]),
            },
        },
    }


# --- pages ------------------------------------------------------------------------------------


@require_http_methods(["GET", "HEAD", "POST"])  # POST: the sidebar search, nothing written
@login_required
@never_cache
def chat(request: AuthenticatedHttpRequest) -> HttpResponse:
    """An empty chat: the first message creates the conversation."""
    context = _page_context(request, None)
    context["turns"] = []
    return render(request, "conversations/chat.html", context)


@require_http_methods(["GET", "HEAD", "POST"])  # POST: the sidebar search, nothing written
@login_required
@never_cache
def conversation(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    """A stored conversation; answers still being written continue over the WebSocket."""
    current = conversation_get(user=request.user, conversation_id=conversation_id)
    # Answers from documents the owner may no longer read show a note (issue 38, finding 12).
    stored = messages_readable(
        user=request.user, messages=conversation_messages(conversation=current)
    )
    answer_ids = [m.id for m in stored if m.role == Message.Role.ASSISTANT]
    feedback = feedback_values(user=request.user, message_ids=answer_ids)
    context = _page_context(request, current)
    context["turns"] = build_turns(stored, feedback)
    return render(request, "conversations/chat.html", context)


@require_POST
@login_required
def rename(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    current = conversation_get(user=request.user, conversation_id=conversation_id)
    form = RenameForm(request.POST)
    if form.is_valid():
        conversation_rename(conversation=current, title=form.cleaned_data["title"])
        messages.success(request, _("Conversa renomeada."))
    else:
        messages.error(request, _("O título não pode ficar vazio."))
    return redirect(_safe_next(request, reverse("conversation", args=[current.id])))


@require_POST
@login_required
def delete(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    current = conversation_get(user=request.user, conversation_id=conversation_id)
    own_page = reverse("conversation", args=[current.id])
    conversation_delete(conversation=current)
    messages.success(request, _("Conversa excluída."))
    target = _safe_next(request, reverse("chat"))
    if target.split("?")[0] == own_page:  # the page of what was just deleted
        target = reverse("chat")
    return redirect(target)


@require_POST
@login_required
@never_cache
def feedback(request: AuthenticatedHttpRequest, message_id: int) -> JsonResponse:
    """Thumbs up (1) or down (-1) on one of the user's answers, with an optional reason."""
    message = message_get(user=request.user, message_id=message_id)
    form = FeedbackForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"ok": False, "errors": form.errors.get_json_data()}, status=400)
    try:
        stored = feedback_set(
            message=message,
            user=request.user,
            value=form.cleaned_data["value"],
            reason=form.cleaned_data["reason"],
        )
    except InvalidMessage as exc:
        return JsonResponse({"ok": False, "errors": {"__all__": [str(exc)]}}, status=400)
    return JsonResponse({"ok": True, "value": stored.value, "reason": stored.reason})


def _chunk_id(raw: str) -> int | None:
    """The cited chunk's id from the query string, or None.

    ASCII digits only, and few of them: `str.isdigit` accepts "²" and "٣", which `int`
    refuses, and `int` refuses more than 4300 digits; both were a 500.
    """
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        return None
    return int(raw)


@require_GET
@login_required
@never_cache
def document(request: AuthenticatedHttpRequest, document_id: int) -> HttpResponse:
    """A document the user may read, every passage in order, the cited one highlighted."""
    doc = document_readable(user=request.user, document_id=document_id)
    highlighted = _chunk_id(request.GET.get("chunk", ""))
    return render(
        request,
        "conversations/document.html",
        {
            "document": doc,
            "chunks": [
                ChunkView(c.id, c.heading, text_segments(c.text))
                for c in document_chunks(document=doc)
            ],
            "highlighted": highlighted,
            "back": _safe_referer(request),
        },
    )


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability, for load balancers; no login."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:  # any database failure means not ready
        return JsonResponse({"ok": False, "database": False}, status=503)
    return JsonResponse({"ok": True, "database": True})
