"""Admin forms: validation only; the work is done by services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import UploadedFile
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from retrieval.documents import UploadError, clean_folder
from retrieval.ingestion.parsers import SUPPORTED_SUFFIXES
from retrieval.json_input import JSONInputError, json_parse
from retrieval.models import Collection
from retrieval.pipeline.glossary import parse_glossary_json
from retrieval.services import default_collection


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one input (Django's documented pattern)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput())
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[UploadedFile]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


def company_collections() -> Any:
    """The knowledge bases staff work on (evaluation corpora have collections of their own)."""
    return Collection.objects.filter(is_evaluation=False).order_by("name")


def offer_collections(form: forms.Form, queryset: Any) -> None:
    """Offer these collections in the form's `collection` field, the default one chosen."""
    collection = form.fields["collection"]
    assert isinstance(collection, forms.ModelChoiceField)
    collection.queryset = queryset
    collection.initial = default_collection().pk


class DocumentUploadForm(forms.Form):
    collection = forms.ModelChoiceField(queryset=Collection.objects.none(), empty_label=None)
    uploads = MultipleFileField(
        label=gettext_lazy("files"),
        help_text=gettext_lazy("Markdown, text, HTML, PDF or Word files; several at once."),
    )
    folder = forms.CharField(
        required=False,
        max_length=200,
        help_text=gettext_lazy(
            "Prefix of the documents' ids, e.g. “pt” gives “pt/ferias”. A file whose id exists "
            "already replaces that document, if you may read it (else the file is refused)."
        ),
    )
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.order_by("name"),
        required=False,
        widget=FilteredSelectMultiple(gettext_lazy("groups"), is_stacked=False),
        help_text=gettext_lazy(
            "Who may read these documents. None: the files' own front matter decides "
            "(no groups there means everyone)."
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_collections(self, company_collections())

    def clean_uploads(self) -> list[UploadedFile]:
        files: list[UploadedFile] = self.cleaned_data["uploads"]
        limit = settings.CHATRAG_MAX_UPLOAD_MB * 1_000_000
        for upload in files:
            name = upload.name or ""
            if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
                raise forms.ValidationError(
                    _("%(name)s: unsupported file type (use %(types)s).")
                    % {"name": name, "types": ", ".join(sorted(SUPPORTED_SUFFIXES))}
                )
            if upload.size is not None and upload.size > limit:
                raise forms.ValidationError(
                    _("%(name)s is larger than %(mb)s MB.")
                    % {"name": name, "mb": settings.CHATRAG_MAX_UPLOAD_MB}
                )
        return files

    def clean_folder(self) -> str:
        try:
            return clean_folder(self.cleaned_data.get("folder") or "")
        except UploadError as exc:
            raise forms.ValidationError(str(exc)) from exc


class GlossaryImportForm(forms.Form):
    collection = forms.ModelChoiceField(queryset=Collection.objects.none(), empty_label=None)
    file = forms.FileField(
        help_text=gettext_lazy(
            'JSON: {"TERM": "expansion"} or [{"term", "expansion", "area", "active"}] '
            "(the export's format)."
        )
    )
    replace = forms.BooleanField(
        required=False,
        help_text=gettext_lazy("Delete the collection's entries that are not in the file."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offer_collections(self, Collection.objects.order_by("name"))

    def clean_file(self) -> object:
        upload: UploadedFile = self.cleaned_data["file"]
        try:
            data = json_parse(upload.read().decode("utf-8"), where=upload.name or "glossary")
            parse_glossary_json(data)
        except (UnicodeDecodeError, JSONInputError) as exc:
            raise forms.ValidationError(_("Not a JSON file: %(error)s") % {"error": exc}) from exc
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data
