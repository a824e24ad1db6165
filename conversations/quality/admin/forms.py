"""The form that starts an evaluation run: validation only; the run is a service's."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from conversations.quality.datasets import EvaluationInputError, json_parse, tasks_parse
from conversations.quality.models import EvaluationRun
from conversations.quality.runs import evaluation_modes_available
from retrieval.admin.forms import company_collections, offer_collections
from retrieval.models import Collection


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
        offer_collections(self, company_collections())
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
