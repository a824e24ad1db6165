"""Forms of the chat pages: validation only, the work is done by services."""

from __future__ import annotations

from django import forms


class RenameForm(forms.Form):
    title = forms.CharField(max_length=200, strip=True)


class FeedbackForm(forms.Form):
    value = forms.TypedChoiceField(choices=[("1", "1"), ("-1", "-1")], coerce=int)
    reason = forms.CharField(max_length=2000, required=False, strip=True)
