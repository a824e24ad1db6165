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
from retrieval.evaluation import EvaluationInputError, json_parse, tasks_parse
from retrieval.ingestion.parsers import SUPPORTED_SUFFIXES
from retrieval.models import Collection, EvaluationRun
from retrieval.pipeline.glossary import parse_glossary_json
from retrieval.quality.runs import evaluation_modes_available
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


def _collections() -> Any:
    return Collection.objects.filter(is_evaluation=False).order_by("name")


def _offer_collections(form: forms.Form, queryset: Any) -> None:
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
        _offer_collections(self, _collections())

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
        _offer_collections(self, Collection.objects.order_by("name"))

    def clean_file(self) -> object:
        upload: UploadedFile = self.cleaned_data["file"]
        try:
            data = json_parse(upload.read().decode("utf-8"), where=upload.name or "glossary")
            parse_glossary_json(data)
        except (UnicodeDecodeError, EvaluationInputError) as exc:
            raise forms.ValidationError(_("Not a JSON file: %(error)s") % {"error": exc}) from exc
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


class EvaluationRunForm(forms.Form):
    source = forms.ChoiceField(
        choices=[
            (EvaluationRun.Source.CASES, gettext_lazy("the evaluation cases marked by staff")),
            (EvaluationRun.Source.FILE, gettext_lazy("an uploaded tasks file")),
        ],
        widget=forms.RadioSelect,
        initial=EvaluationRun.Source.CASES,
    )
    tasks_file = forms.FileField(
        required=False,
        help_text=gettext_lazy(
            'JSON Lines, one task a line: {"id", "history": [{"role", "text"}], "question", '
            '"relevant": [document ids], "category"} (as demo/eval/tasks.jsonl).'
        ),
    )
    collection = forms.ModelChoiceField(queryset=Collection.objects.none(), empty_label=None)
    modes = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy(
            "“none” searches the question as typed: compare it with the rewriting modes."
        ),
    )
    ks = forms.CharField(
        label=gettext_lazy("k"),
        initial="5,10",
        help_text=gettext_lazy("recall@k for these k"),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _offer_collections(self, _collections())
        modes = self.fields["modes"]
        assert isinstance(modes, forms.MultipleChoiceField)
        available = evaluation_modes_available()
        modes.choices = [(m, m) for m in available]
        modes.initial = [m for m in available if m in {"none", "rules", "llm"}]

    def clean_ks(self) -> list[int]:
        try:
            ks = sorted({int(k) for k in self.cleaned_data["ks"].split(",") if k.strip()})
        except ValueError as exc:
            raise forms.ValidationError(_("Numbers like 5,10.")) from exc
        if not ks or ks[0] < 1 or ks[-1] > 100:
            raise forms.ValidationError(_("Numbers between 1 and 100."))
        return ks

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("source") == EvaluationRun.Source.FILE:
            upload: UploadedFile | None = data.get("tasks_file")
            if upload is None:
                self.add_error("tasks_file", _("Upload the tasks file."))
                return data
            try:
                text = upload.read().decode("utf-8")
                tasks_parse(text, name=upload.name or "tasks")
            except UnicodeDecodeError:
                self.add_error("tasks_file", _("The file is not UTF-8 text."))
                return data
            except EvaluationInputError as exc:
                self.add_error("tasks_file", str(exc))
                return data
            data["records"] = [
                json_parse(line, where="tasks") for line in text.splitlines() if line.strip()
            ]
            data["label"] = upload.name or "tasks"
        return data
