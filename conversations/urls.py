from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path

from conversations import views

urlpatterns: list[URLPattern] = [
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.chat, name="chat"),
    path("c/<int:conversation_id>/", views.conversation, name="conversation"),
    path("c/<int:conversation_id>/rename/", views.rename, name="conversation_rename"),
    path("c/<int:conversation_id>/delete/", views.delete, name="conversation_delete"),
    path("documents/<int:document_id>/", views.document, name="document"),
    path("messages/<int:message_id>/feedback/", views.feedback, name="feedback"),
    path("healthz", views.healthz, name="healthz"),
]
