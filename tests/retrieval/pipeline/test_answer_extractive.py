"""The extractive answer: chosen for the question, one document, steps kept, own opening."""

from __future__ import annotations

from typing import Any

import pytest

from retrieval.pipeline.answer import Passage, clean_citations, extractive_answer, extractive_choice
from retrieval.pipeline.answer.extractive import opening_line
from retrieval.pipeline.asks import answer_kind
from retrieval.pipeline.rewrite_rules.cues import after_switch_announcement
from retrieval.pipeline.types import GlossaryHit, HistoryMessage, RewriteResult, SearchQuery

HOTEL = Passage(
    1,
    "Reembolso de despesas de viagem",
    "Prazos",
    "Pedidos aprovados até o dia 20 são pagos junto com o salário do mês. "
    "Lance a despesa de hotel no Lumen Despesas em até 30 dias corridos da data do gasto. "
    "Guarde os comprovantes originais por cinco anos.",
    document="reembolso",
)
RESIGNATION = Passage(
    2,
    "Pedido de demissão",
    "Aviso prévio",
    "Informe na solicitação se pretende cumprir o aviso ou pedir dispensa. "
    "O aviso prévio é de 30 dias.",
    document="demissao",
)


def _answer(question: str, *passages: Passage, **kwargs: object) -> str:
    return extractive_answer(
        question=question,
        queries=[],
        passages=list(passages),
        language=str(kwargs.pop("language", "pt")),
        **kwargs,  # type: ignore[arg-type]
    )


def _expanded(question: str, query: str, *passages: Passage, **kwargs: Any) -> str:
    """The answer to `question` that the rules rewrite searched as `query`; `kwargs` go to
    the rewrite (glossary hits, spelling fixes), but `language` and `history`."""
    language = str(kwargs.pop("language", "pt"))
    history = kwargs.pop("history", ())
    return extractive_answer(
        question=question,
        queries=[query],
        passages=list(passages),
        language=language,
        rewrite=RewriteResult(queries=[SearchQuery(query, "expand")], backend="rules", **kwargs),
        history=history,
    )


def test_deadline_question_picks_the_deadline_sentence_first() -> None:
    text = _answer("qnto tempo tenho pra pedir reembolso de hotel", HOTEL, RESIGNATION)
    body = text.split("\n\n", 1)[1]
    assert body.startswith("- Lance a despesa de hotel") or body.startswith("Lance a despesa")
    assert "em até 30 dias corridos" in body
    assert "cumprir o aviso" not in text  # the resignation page is not mixed in


def test_amount_question_picks_the_amount() -> None:
    passage = Passage(
        1,
        "Vale-refeição para estagiários",
        "Valor",
        "Os estagiários recebem vale-refeição como parte do programa de estágio. "
        "O valor é de R$ 32,00 por dia útil de estágio. "
        "O crédito é feito no cartão no penúltimo dia útil do mês anterior.",
        document="vr-estagio",
    )
    text = _answer("estagiário recebe VR? qnto por dia", passage)
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("O valor é de R$ 32,00")


def test_numbered_steps_stay_together_with_their_numbers() -> None:
    passage = Passage(
        1,
        "Reembolso para prestadores",
        "Como cobrar",
        "O prestador cobra as despesas por documento fiscal:\n\n"
        "1. Reúna os comprovantes originais.\n"
        "2. Emita uma nota de débito separada com a lista de comprovantes.\n"
        "3. Envie a nota e os comprovantes para fornecedores@lumen.example.",
        document="pj",
    )
    text = _answer("como cobro o reembolso? precisa nota de débito?", passage)
    lines = [line for line in text.splitlines() if line[:2] in {"1.", "2.", "3."}]
    assert [line[:2] for line in lines] == ["1.", "2.", "3."]
    assert all(line.endswith("[1]") for line in lines)


def test_a_sibling_document_is_not_mixed_in() -> None:
    dental = Passage(
        1,
        "Plano odontológico",
        "Adesão",
        "A adesão ao plano odontológico é feita no portal, em Benefícios > Odontológico, "
        "a qualquer momento.",
        document="odonto",
    )
    health_leaving = Passage(
        2,
        "Plano de saúde após o desligamento",
        "Manutenção",
        "Quem sai da empresa pode manter o plano de saúde por até 24 meses, pagando a "
        "mensalidade integral.",
        document="saude-desligamento",
    )
    text = _answer("quero entrar no plano odontológico, como faz?", dental, health_leaving)
    assert "Benefícios > Odontológico" in text
    assert "24 meses" not in text


def test_two_questions_are_answered_from_their_own_documents() -> None:
    creche = Passage(
        2,
        "Auxílio-creche",
        "Como pedir",
        "Envie o recibo ou nota fiscal da creche pelo portal até o dia 10 de cada mês.",
        document="creche",
    )
    meal = Passage(
        1,
        "Vale-refeição",
        "Valor",
        "O vale-refeição tem valor de R$ 42,00 por dia útil trabalhado.",
        document="vr",
    )
    rewrite = RewriteResult(
        queries=[
            SearchQuery("qual o valor do vale-refeição", "decompose"),
            SearchQuery("como eu peço o auxílio-creche", "decompose"),
        ],
        backend="rules",
    )
    text = _answer(
        "qual o valor do vale-refeição e como eu peço o auxílio-creche?",
        meal,
        creche,
        rewrite=rewrite,
    )
    assert "R$ 42,00 por dia útil" in text
    assert "até o dia 10" in text


def test_opening_line_replies_in_the_turn_language_without_the_badge_label() -> None:
    passage = Passage(
        1,
        "Baja voluntaria y preaviso",
        "Plazo de preaviso",
        "La dimisión exige un preaviso de 15 días naturales para la mayoría de puestos.",
        document="baja",
    )
    text = _answer("cuánto tiempo de preaviso tengo que dar", passage, language="es")
    opening = text.splitlines()[0]
    assert opening.startswith("Sobre el plazo")
    assert opening.endswith(":")
    assert "extractiva" not in text.lower()
    english = _answer(
        "how long is the notice period?",
        Passage(1, "Notice", "", "The notice period is 30 days for everyone.", "n"),
        language="en",
    )
    assert english.startswith("On the timing")
    assert "Extractive answer" not in english


def test_citations_point_at_the_card_of_the_passage() -> None:
    text = _answer("qnto tempo tenho pra pedir reembolso de hotel", HOTEL)
    assert text.rstrip().endswith("[1]")


def test_no_passages_says_nothing_was_found() -> None:
    assert "Não encontrei" in _answer("qualquer coisa")


def test_answer_kinds_in_three_languages() -> None:
    assert answer_kind("até quando posso pedir?") == "duration"
    assert answer_kind("qual o valor do auxílio?") == "amount"
    assert answer_kind("quanto tempo leva?") == "duration"
    assert answer_kind("¿cómo lo solicito?") == "steps"
    assert answer_kind("can I keep the health plan?") == "condition"
    assert answer_kind("vale-refeição") is None


def test_a_count_of_days_is_a_duration_not_an_amount() -> None:
    assert answer_kind("preaviso baja voluntaria cuantos dias") == "duration"
    assert answer_kind("quantos dias de folga eu tenho no casamento?") == "duration"
    assert answer_kind("how many days of leave do I get?") == "duration"
    assert answer_kind("quantos reais é o auxílio?") == "amount"


def test_how_does_it_work_asks_for_the_rule_not_for_steps() -> None:
    assert answer_kind("como funciona o banco de horas?") is None
    assert answer_kind("¿cómo funciona el teletrabajo?") is None
    assert answer_kind("how does the bonus work?") is None
    assert answer_kind("como peço o auxílio-creche?") == "steps"
    # How it was is the old rule, not steps either.
    assert answer_kind("como era a participação nos lucros na política antiga?") is None
    # And what happens if: "pedir" there is part of the case, not a request to make.
    assert answer_kind("o que acontece se eu pedir demissão nas férias?") is None
    assert answer_kind("¿qué pasa si pido la baja?") is None


def test_is_it_possible_asks_for_the_condition() -> None:
    assert answer_kind("dá pra dividir as férias em 3 vezes?") == "condition"
    assert answer_kind("¿se puede trasladar el día libre?") == "condition"


def test_notice_table_row_answers_how_many_days() -> None:
    passage = Passage(
        1,
        "Baja voluntaria y preaviso",
        "Plazo de preaviso",
        "La baja voluntaria es la extinción del contrato por decisión de la persona.\n\n"
        "| Grupo | Preaviso |\n|---|---|\n| Personal técnico | 15 días naturales |\n"
        "| Dirección | 30 días naturales |",
        document="baja",
    )
    text = _answer("preaviso baja voluntaria cuantos dias", passage, language="es")
    assert text.startswith("Sobre el plazo")
    assert "15 días naturales" in text


def _two_topics(*parts: str) -> RewriteResult:
    return RewriteResult(queries=[SearchQuery(p, "decompose") for p in parts], backend="rules")


def test_two_question_opening_line_uses_the_persons_whole_words() -> None:
    reimbursement = Passage(
        1,
        "Reembolso de despesas de prestadores PJ",
        "Como cobrar",
        "Envie a nota de débito separada da nota fiscal dos serviços até o dia 5.",
        document="pj",
    )
    # The rewrite expanded the acronym; the opening line keeps the person's own words.
    rewrite = _two_topics(
        "PJ (prestador de serviço pessoa jurídica) como cobro o reembolso das despesas",
        "PJ (prestador de serviço pessoa jurídica) precisa nota de débito",
    )
    text = _answer(
        "sou PJ, como cobro o reembolso das despesas? precisa nota de debito?",
        reimbursement,
        rewrite=rewrite,
    )
    opener = text.split("\n", 1)[0]
    assert opener == "Sobre PJ, como cobro o reembolso e nota de debito:"
    assert "prestador de serviço" not in opener


def test_two_question_opening_line_in_spanish_and_english() -> None:
    leave = Passage(1, "Permisos", "", "El matrimonio da 15 días naturales de permiso.", "p")
    es = _answer(
        "cuánto es la compensación por teletrabajo y cuántos días de licencia por estudio tengo?",
        leave,
        language="es",
        rewrite=_two_topics("compensación por teletrabajo", "días de licencia por estudio"),
    )
    assert es.startswith("Sobre compensación por teletrabajo y ")
    en = _answer(
        "how much is the meal allowance and how do I request childcare support?",
        leave,
        language="en",
        rewrite=_two_topics("meal allowance amount", "request childcare support"),
    )
    assert en.startswith("On meal allowance and ")


def test_someone_who_leaves_asks_no_deadline() -> None:
    # "sai" is leaving the company here, not money or a date arriving.
    assert answer_kind("quem sai por acordo recebe o bônus?") == "condition"


def test_a_document_that_answers_with_several_lines_beats_one_stray_line() -> None:
    stray = Passage(
        1,
        "Sala de reuniões",
        "",
        "O monitor e a cadeira da sala grande ficam com a recepção.",
        document="sala",
    )
    home = Passage(
        2,
        "Equipamentos de TI",
        "",
        "O monitor pode ser levado para casa com termo de responsabilidade. "
        "A cadeira ergonômica também pode ir para casa, entregue pela transportadora.",
        document="equipamentos",
    )
    text = _answer("o monitor e a cadeira podem ir para casa?", stray, home)
    assert "termo de responsabilidade" in text
    assert "recepção" not in text


def test_a_line_that_introduces_a_list_brings_its_items() -> None:
    passage = Passage(
        1,
        "Documentos para a matrícula no curso",
        "",
        "A matrícula é feita na secretaria.\n"
        "Leve cópias dos seguintes documentos para a matrícula:\n"
        "- certidão de nascimento;\n"
        "- comprovante de residência;\n"
        "- duas fotos.\n"
        "A secretaria abre às 8h.",
        document="matricula",
    )
    text = _answer("quais documentos levo para a matrícula?", passage)
    body = clean_citations(text, 1)[0].split("\n\n", 1)[1].splitlines()
    at = body.index("- Leve cópias dos seguintes documentos para a matrícula: [1]")
    assert body[at + 1 : at + 4] == [
        "  - certidão de nascimento; [1]",
        "  - comprovante de residência; [1]",
        "  - duas fotos. [1]",
    ]


def test_how_often_asks_for_a_period_and_finds_it() -> None:
    assert answer_kind("quantas vezes por ano posso trocar de plano?") == "duration"
    assert answer_kind("¿cuántas veces puedo cambiar de plan?") == "duration"
    assert answer_kind("how often can I change my plan?") == "duration"
    passage = Passage(
        1,
        "Troca de plano de celular",
        "",
        "O plano de celular corporativo é escolhido no portal de compras. "
        "A troca de plano é permitida a cada 12 meses. "
        "O aparelho antigo deve ser devolvido à TI.",
        document="celular",
    )
    text = _answer("quantas vezes posso trocar de plano de celular?", passage)
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("A troca de plano é permitida")


def test_a_list_item_chosen_without_its_introduction_is_an_ordinary_line() -> None:
    passage = Passage(
        1,
        "Desconto do estacionamento",
        "",
        "O desconto é o menor destes valores:\n"
        "- 5% do salário de quem estaciona no prédio;\n"
        "- o custo da vaga.\n"
        "Quem vem de bicicleta tem vaga gratuita no bicicletário.",
        document="estacionamento",
    )
    text = _answer("quanto é o desconto de quem estaciona de bicicleta no prédio?", passage)
    assert "\n  - " not in text or "O desconto é o menor destes valores:" in text


def test_inflected_words_meet_through_the_languages_stemmer() -> None:
    schedule = Passage(
        1,
        "Férias",
        "Regras",
        "As férias podem ser pedidas pelo portal em até três períodos. "
        "O agendamento é feito no portal com antecedência mínima de 45 dias.",
        document="ferias",
    )
    text = _answer("como agendo minhas férias?", schedule)
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("O agendamento é feito")


def test_stems_join_inflections_in_each_language_and_ignore_missing_accents() -> None:
    from retrieval.pipeline.text import stem

    assert stem("agendo", "pt") == stem("agendamento", "pt")
    assert stem("solicitacao", "pt") == stem("solicitação", "pt")
    assert stem("pagan", "es") == stem("pago", "es")
    assert stem("cancelled", "en") == stem("cancel", "en")
    assert stem("R$", "pt") == "r$"
    # A stressed Spanish o/e turns ue/ie: "descuenta" is "descontar", "pide" is "pedir".
    assert stem("descuenta", "es") == stem("descontar", "es")
    assert stem("pierde", "es") == stem("perder", "es")


def test_short_plurals_meet_their_singular_where_snowball_leaves_them_whole() -> None:
    from retrieval.pipeline.text import stem

    # Portuguese and Spanish Snowball leave short plurals whole ("voos", "dias", "extras").
    for singular, plural in (("voo", "voos"), ("dia", "dias"), ("extra", "extras")):
        assert stem(plural, "pt") == stem(singular, "pt"), plural
    assert stem("anos", "pt") == stem("ano", "pt")
    assert stem("días", "es") == stem("día", "es")
    assert stem("viagens", "pt") == stem("viagem", "pt")  # Portuguese -ns / -m
    # A final "s" that is no plural's stays: "mais" is not "maio", "bônus" is whole.
    assert stem("mais", "pt") != stem("maio", "pt")
    assert stem("bônus", "pt") == "bonus"
    # English's stemmer folds plurals itself.
    assert stem("flights", "en") == stem("flight", "en")


def test_a_line_in_the_plural_answers_a_question_in_the_singular() -> None:
    travel = Passage(
        1,
        "Viagens nacionais",
        "Jornada em viagem",
        "O tempo em deslocamento durante a jornada conta como trabalho. "
        "Voos fora do horário normal devem ser lançados no banco de horas, com aprovação.",
        document="viagens",
    )
    text = _answer("hora de voo conta?", travel)
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("Voos fora do horário"), text


RESIGNING_ON_LEAVE = Passage(
    1,
    "Pedido de demissão durante as férias",
    "Posso pedir demissão durante as férias?",
    "O pedido de demissão pode ser apresentado a qualquer momento, inclusive durante as férias. "
    "Porém, o aviso prévio não corre durante as férias: a contagem começa no retorno. "
    "O valor das férias já pago não é devolvido.",
    document="demissao-ferias",
)


def test_a_chosen_sentence_keeps_the_porem_that_qualifies_it() -> None:
    text = _answer("posso pedir demissão durante as férias?", RESIGNING_ON_LEAVE)
    line = next(x for x in text.splitlines() if "qualquer momento" in x)
    # One line: the rule and its "porém", as the page says them together.
    assert "inclusive durante as férias. Porém, o aviso prévio não corre" in line, text


def test_a_qualifier_comes_only_with_the_sentence_it_follows() -> None:
    leave = Passage(
        1,
        "Férias",
        "Pagamento",
        "As férias são pagas até dois dias antes do início. "
        "O abono pecuniário vale para até dez dias. "
        "However, a qualifier of another sentence stays out.",
        document="ferias",
    )
    text = _answer("quando as férias são pagas?", leave)
    assert "pagas até dois dias antes" in text
    assert "However" not in text, text


def test_english_however_qualifies_the_sentence_before_it() -> None:
    keys = Passage(
        1,
        "Deleting keys",
        "About deleting keys",
        "Before you can delete an instance, you must delete every key in that instance. "
        "However, if you close your account, existing instances and keys are deleted. "
        "Keys can be restored within 30 days.",
        document="keys",
        language="en",
    )
    text = _answer("can I delete an instance with keys in it?", keys, language="en")
    line = next(x for x in text.splitlines() if "must delete every key" in x)
    assert "However, if you close your account" in line, text


def test_a_heading_written_as_a_plain_line_is_not_an_answer_line() -> None:
    """MTRAG's passages keep their headings as plain lines ("Passing sensitive data",
    "Quit India Movement"): they matched the question's words best and took a bullet that
    said nothing. A short line with a figure, an address or closing punctuation stays."""
    chat = Passage(
        1,
        "Web chat security",
        "",
        "Passing sensitive data\n"
        "You can encrypt sensitive data with the public key that IBM provides.\n"
        "Tokens expire in 24 hours\n"
        "Contact security@example.com",
        document="web-chat",
        language="en",
    )
    text = _answer("can I pass sensitive data in the web chat?", chat, language="en")
    bullets = [line.removeprefix("- ") for line in text.split("\n\n", 1)[1].splitlines()]
    assert not any(b.startswith("Passing sensitive data") for b in bullets), text
    assert any(b.startswith("You can encrypt sensitive data") for b in bullets), text
    from retrieval.pipeline.answer.extractive import _lines

    candidates = [line.text for line in _lines(chat, 0, "en")]
    assert "Passing sensitive data" not in candidates
    assert "Tokens expire in 24 hours" in candidates
    assert "Contact security@example.com" in candidates


def test_a_follow_up_is_not_answered_with_what_the_last_replies_said() -> None:
    """ "mi señora también trabaja acá, cobramos los dos?" after the daycare refund: the
    line that says the amount again (the reply said it) came first; the one that answers
    whether both parents get it was left out."""
    daycare = Passage(
        1,
        "Reintegro de guardería",
        "",
        "La empresa reintegra a los trabajadores con hijos de hasta cuatro años los gastos "
        "de guardería, hasta un máximo de $U 7.500 mensuales por hijo. "
        "Si ambos progenitores trabajan en la empresa, el reintegro se otorga a uno solo. "
        "Los reintegros se piden en el portal con la factura del mes.",
        document="guarderia",
        language="es",
    )
    history = [
        HistoryMessage("user", "me reintegran la guardería?"),
        HistoryMessage(
            "assistant",
            "Sí: la empresa reintegra los gastos de guardería de hijos de hasta cuatro años, "
            "hasta $U 7.500 mensuales por hijo.",
        ),
    ]
    question = "mi señora también trabaja en la empresa, cobramos los dos?"
    text = _answer(question, daycare, language="es", history=history)
    body = text.split("\n\n", 1)[1]
    assert body.lstrip("- ").startswith("Si ambos progenitores trabajan"), text
    # Without the conversation the amount's line leads: it is new to the reader.
    fresh = _answer(question, daycare, language="es").split("\n\n", 1)[1]
    assert fresh.lstrip("- ").startswith("La empresa reintegra"), fresh


def test_a_line_with_an_amount_the_replies_never_stated_is_new() -> None:
    """ "e o odonto?" after the health plan's dependents: the dental price row says the
    reply's words ("dependente", "mensalidade", "paga", "desconto em folha") but an amount
    it never stated; it was taken for what the reader had read and left out."""
    dental = Passage(
        1,
        "Plano odontológico",
        "Custos",
        "O plano odontológico da Lumen é oferecido pela Sorriso Pleno Odonto, com cobertura "
        "nacional. Ele é separado do plano de saúde: a adesão, os dependentes e os custos "
        "seguem regras próprias.\n\n"
        "| Beneficiário | Mensalidade | Quem paga |\n|---|---|---|\n"
        "| Titular empregado | R$ 29,90 | 100% Lumen |\n"
        "| Dependente | R$ 24,90 | 100% empregado, desconto em folha |\n\n"
        "A adesão do titular é feita no Lumen Pessoas, em Benefícios > Odontológico. "
        "Dependentes elegíveis são os mesmos do plano de saúde (cônjuge, companheiro, filhos "
        "até 24 anos), mas a inclusão é independente. Adesões feitas em até 30 dias da "
        "admissão não têm carência. Após cancelar, só é possível voltar ao plano depois de "
        "12 meses.",
        document="odonto",
    )
    history = [
        HistoryMessage("user", "o plano de saude cobre dependente?"),
        HistoryMessage(
            "assistant",
            "Sim. Cônjuge e filhos até 24 anos podem entrar; a Lumen paga 50% da mensalidade "
            "de cada dependente e o restante é descontado em folha.",
        ),
    ]
    text = _expanded(
        "e o odonto?",
        "plano de saude cobre dependente o odonto (plano odontológico)",
        dental,
        glossary_hits=[GlossaryHit("odonto", "plano odontológico")],
        history=history,
    )
    assert "R$ 24,90" in text, text


def test_an_image_is_never_an_answer_line() -> None:
    """MTRAG cloud: '![VMware Solutions and Red Hat OpenShift](https://…svg)' was a bullet."""
    page = Passage(
        1,
        "OpenShift",
        "",
        "![Red Hat OpenShift architecture](https://example.com/images/openshift-sddc.svg)\n"
        "Red Hat OpenShift helps you deploy containers on your own VMware cluster.",
        document="openshift",
        language="en",
    )
    text = _answer("How does Red Hat OpenShift help?", page, language="en")
    assert "![" not in text and ".svg" not in text, text
    assert "deploy containers" in text


def test_a_question_that_only_names_its_topic_gets_the_pages_figures() -> None:
    """ "regra do VR no home" (the demo's first question): the line that said "home office"
    and "valor" without the value came first; the day's value shares no word with the
    question. A question that names only its topic (its words in the page's title, or
    glossary terms whose expansion is) lifts the lines with figures."""
    page = Passage(
        1,
        "Vale-refeição no trabalho remoto",
        "Valor",
        "- **R$ 38,00 por dia útil** do mês (em um mês com 22 dias úteis, R$ 836,00).\n"
        "O valor por dia é menor que o da regra geral porque a empresa complementa a "
        "alimentação de quem está em casa com o auxílio home office.\n"
        "Quem está no regime híbrido segue a regra geral do vale-refeição.",
        document="vr-remoto",
    )
    rewrite = RewriteResult(
        queries=[SearchQuery("regra do VR (vale-refeição) no home (trabalho remoto)", "expand")],
        backend="rules",
        glossary_hits=[
            GlossaryHit("VR", "vale-refeição"),
            GlossaryHit("home", "trabalho remoto"),
        ],
    )
    question = "regra do VR no home"
    text = _answer(question, page, rewrite=rewrite)
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("**R$ 38,00 por dia útil**"), text
    # A question that says what it asks of the topic keeps its own best line first.
    asked = _answer("o VR no home é menor que o da regra geral?", page, rewrite=rewrite)
    assert asked.split("\n\n", 1)[1].lstrip("- ").startswith("O valor por dia é menor"), asked


def test_each_part_of_a_split_message_answers_from_its_own_searchs_best_document() -> None:
    day_off = Passage(
        1,
        "Folgas remuneradas",
        "Casamento",
        "Por casamento, o colaborador tem três dias consecutivos de folga.",
        document="folgas",
    )
    dental = Passage(
        2,
        "Plano odontológico",
        "Dependentes",
        "O cônjuge é incluído no convênio odontológico pelo portal a qualquer momento.",
        document="odonto",
    )
    health = Passage(
        3,
        "Plano de saúde",
        "Dependentes",
        "O cônjuge é incluído no convênio pelo portal em até 30 dias do casamento.",
        document="saude",
    )
    parts = ("quantos dias de folga por casamento", "como incluo meu marido no convênio")
    question = "quantos dias de folga por casamento? e como incluo meu marido no convênio?"
    # The fused list put the dental plan first; the second part's own search did not.
    rankings = {parts[0]: ["folgas"], parts[1]: ["saude", "odonto"]}
    text = _answer(
        question, day_off, dental, health, rewrite=_two_topics(*parts), rankings=rankings
    )
    assert "três dias consecutivos" in text
    assert "em até 30 dias do casamento" in text
    assert "a qualquer momento" not in text
    # A part keeps its own search's page even where another page shares more of its words.
    wordy = Passage(
        4,
        "Folgas remuneradas",
        "Convênio",
        "O convênio inclui o marido e o cônjuge no convênio: incluo, incluir, convênio.",
        document="folgas",
    )
    text = _answer(question, day_off, wordy, health, rewrite=_two_topics(*parts), rankings=rankings)
    assert "em até 30 dias do casamento" in text


def test_a_later_part_whose_search_ranks_the_earlier_parts_page_may_answer_from_another() -> None:
    bank = Passage(
        1,
        "Banco de horas e horas extras",
        "Banco de horas",
        "A Lumen adota banco de horas por acordo individual escrito, com compensação em até "
        "6 meses. O limite é de 2 horas extras por dia. Cada hora extra trabalhada conta como "
        "uma hora de crédito no banco. A hora extra de domingo conta em dobro. No "
        "desligamento, o saldo positivo do banco de horas é pago como hora extra na rescisão.",
        document="banco",
    )
    travel = Passage(
        2,
        "Viagens nacionais",
        "Jornada em viagem",
        "As passagens de voo são compradas pela agência. O tempo em deslocamento durante a "
        "jornada conta como trabalho. Voos fora do horário normal que resultem em horas "
        "extras devem ser lançados no banco de horas.",
        document="viagens",
    )
    parts = ("como funciona banco de horas", "se hora de voo em viagem conta como extra")
    question = "como funciona banco de horas e se hora de voo em viagem conta como extra"
    # Both parts' own searches put the hours bank first; it never says "voo" nor "viagem",
    # and its lines on overtime fill the second question's two lines unless it yields.
    rankings = {parts[0]: ["banco", "viagens"], parts[1]: ["banco", "viagens"]}
    text = _answer(question, bank, travel, rewrite=_two_topics(*parts), rankings=rankings)
    assert "compensação em até 6 meses" in text
    assert "devem ser lançados no banco de horas" in text, text


def test_a_line_that_answers_a_later_part_better_is_left_to_it() -> None:
    dismissal = Passage(
        1,
        "Despido en España – tipos e indemnizaciones",
        "Tipos de despido",
        "En el despido objetivo, la indemnización se pone a disposición en el mismo momento "
        "de la entrega de la carta. Por política de empresa, en despidos objetivos Lumen "
        "mantiene el seguro médico privado durante 3 meses tras la salida.\n\n"
        "| Tipo | Causa | Preaviso | Indemnización |\n|---|---|---|---|\n"
        "| Objetivo | causas económicas u organizativas | 15 días | **20 días de salario por "
        "año**, máximo 12 mensualidades |\n"
        "| Improcedente | declarado así por sentencia | — | 33 días de salario por año |\n",
        document="despido",
        language="es",
    )
    insurance = Passage(
        2,
        "Seguro médico privado",
        "Bajas",
        "Lumen ofrece a toda su plantilla un seguro médico privado sin copagos. En despidos "
        "objetivos, Lumen mantiene el seguro 3 meses.",
        document="seguro",
        language="es",
    )
    parts = (
        "indemnizacion despido objetivo",
        "se mantiene el seguro medico después de indemnizacion despido objetivo",
    )
    rankings = {parts[0]: ["despido", "seguro"], parts[1]: ["seguro", "despido"]}
    text = _answer(
        "indemnizacion despido objetivo y se mantiene el seguro medico despues?",
        dismissal,
        insurance,
        language="es",
        rewrite=_two_topics(*parts),
        rankings=rankings,
    )
    # The first question gets its own two lines: the amount is not crowded out by the line
    # on keeping the insurance, which the second question answers with.
    assert "20 días de salario por año" in text, text
    assert "mantiene el seguro" in text


def test_a_line_two_chunks_repeat_is_said_once() -> None:
    first = Passage(1, "Férias", "", "É possível dividir as férias em até três períodos.", "f")
    second = Passage(1, "Férias", "", "É possível dividir as férias em até três períodos.", "f")
    text = _answer(
        "posso dividir as férias? qual o mínimo de cada período?",
        first,
        second,
        rewrite=_two_topics("posso dividir as férias", "qual o mínimo de cada período"),
    )
    assert text.count("até três períodos") == 1


def test_como_inside_a_clause_does_not_ask_for_steps() -> None:
    assert answer_kind("e como incluo meu marido no convênio?") == "steps"
    assert answer_kind("vou viajar, como peço a diária?") == "steps"
    assert answer_kind("hora de voo conta como extra?") is None


AGUINALDO = "Sueldo anual complementario — Uruguay"


def test_a_when_question_gets_the_line_with_the_dates_though_it_shares_no_word() -> None:
    # d-068-style: "cobramos" meets "cobradas" in two lines; the line that answers "cuándo"
    # says "lo abona" and names neither the verb nor "aguinaldo", but states both dates.
    passage = Passage(
        1,
        AGUINALDO,
        "",
        "El sueldo anual complementario equivale a la doceava parte de lo percibido. "
        "La empresa lo abona en dos cuotas: la primera se paga antes del 30 de junio; la "
        "segunda, antes del 20 de diciembre. "
        "Al finalizar la relación laboral se liquida la parte generada y no cobrada. "
        "Quienes ingresan durante el semestre perciben lo efectivamente cobrado.",
        document="aguinaldo",
    )
    text = _answer("cuándo cobramos el aguinaldo?", passage, language="es")
    body = text.split("\n\n", 1)[1]
    assert body.lstrip("- ").startswith("La empresa lo abona en dos cuotas")
    assert "30 de junio" in body and "20 de diciembre" in body
    # Without a kind to ask for, nothing is forced in: the shared words decide.
    plain = _answer("aguinaldo al finalizar la relación laboral", passage, language="es")
    assert "liquida la parte generada" in plain.split("\n\n", 1)[1].splitlines()[0]


def test_a_chunk_that_opens_mid_sentence_never_shows_the_fragment() -> None:
    # Chunks overlap at a word, not at a sentence: the second one starts "é pago na
    # rescisão". With the first chunk among the passages the sentence is said whole.
    first = Passage(
        1,
        "Décimo terceiro salário",
        "",
        "O décimo terceiro é pago em duas parcelas. Em caso de desligamento, o valor "
        "proporcional é pago na rescisão, exceto na dispensa por justa causa.",
        document="13",
        position=0,
    )
    second = Passage(
        2,
        "Décimo terceiro salário",
        "",
        "é pago na rescisão, exceto na dispensa por justa causa. Estagiários não recebem "
        "décimo terceiro, pois não têm vínculo.",
        document="13",
        position=1,
    )
    question = "recebo o décimo terceiro na rescisão por justa causa?"
    text = _answer(question, second, first)
    assert "\n- é pago" not in text and "\né pago" not in text
    assert "o valor proporcional é pago na rescisão" in text
    # Alone, the fragment says that it is cut.
    alone = _answer(question, second)
    assert "…é pago na rescisão" in alone


def test_the_opening_line_leaves_out_the_announcement_of_a_new_subject() -> None:
    passage = Passage(
        1,
        "Banco de horas",
        "",
        "O banco de horas permite compensar horas extras com folgas. "
        "As horas devem ser compensadas em até seis meses.",
        document="banco",
    )
    for question, opening in [
        ("mudando de assunto, como funciona o banco de horas?", "Sobre banco de horas:"),
        ("outra pergunta: como funciona o banco de horas?", "Sobre banco de horas:"),
        ("cambiando de tema, ¿cómo funciona el banco de horas?", "Sobre banco de horas:"),
    ]:
        language = "es" if "cambiando" in question else "pt"
        assert _answer(question, passage, language=language).startswith(opening)
    # "outra coisa" inside the question is the question, not an announcement.
    assert after_switch_announcement("posso fazer outra coisa?") == "posso fazer outra coisa?"
    assert after_switch_announcement("outra pergunta") == "outra pergunta"
    assert (
        after_switch_announcement("changing the subject, how do I request a laptop?")
        == "how do I request a laptop?"
    )


def test_how_many_times_follows_the_topic_not_any_line_saying_once() -> None:
    # "vezes" names no topic: the advance's own page answers, not the card page's "uma vez
    # por ano" lines.
    advance = Passage(
        1,
        "Adiantamento salarial quinzenal e extraordinário",
        "",
        "O adiantamento quinzenal corresponde a até 40% do salário-base. "
        "Em emergências comprovadas pode ser concedido adiantamento extraordinário de até um "
        "salário-base. É permitido um adiantamento extraordinário a cada 12 meses.",
        document="adiantamento",
    )
    card = Passage(
        2,
        "Vale-refeição e vale-alimentação",
        "",
        "A segunda via do cartão é emitida sem custo uma vez por ano. "
        "O colaborador pode redistribuir o valor entre as modalidades uma vez por ano.",
        document="vr",
    )
    text = extractive_answer(
        question="quantas vezes por ano?",
        queries=["quantas vezes por ano adiantamento do salário"],
        passages=[advance, card],
        language="pt",
    )
    assert "a cada 12 meses" in text
    assert "uma vez por ano" not in text


def test_a_long_procedures_single_step_shown_alone_is_a_bullet() -> None:
    # A short procedure comes whole (test_answer_sections); a long one, for a question that
    # does not ask how, gives its one step.
    passage = Passage(
        1,
        "Reembolso para prestadores",
        "",
        "Prestadores não usam o fluxo de reembolso dos empregados.\n\n"
        "1. Reúna os comprovantes originais, em nome da sua empresa ou da contratante, e "
        "confira datas, valores e a descrição de cada despesa antes de seguir.\n"
        "2. Emita uma nota de débito separada da nota fiscal dos serviços, com a lista dos "
        "comprovantes e o número do contrato, conforme a orientação do seu contador.\n"
        "3. Envie a nota de débito e os comprovantes para fornecedores@lumen.example.",
        document="pj",
    )
    text = _answer("qual o e-mail dos fornecedores?", passage)
    assert "fornecedores@lumen.example" in text
    assert not any(line[:2] in {"1.", "2.", "3."} for line in text.splitlines()), text


def test_a_page_in_another_language_does_not_take_the_answer_from_the_top_one() -> None:
    # The Spanish question's top passage is Spanish; a Portuguese page sharing more of its
    # words ("empresa", "término") does not answer it.
    loans = Passage(
        1,
        "Adelantos de sueldo y préstamos al personal — Uruguay",
        "",
        "Al egreso, el saldo del préstamo se descuenta de la liquidación final.",
        document="prestamos-uy",
        language="es",
    )
    accounts = Passage(
        2,
        "Acesso a sistemas — prestadores de serviços",
        "",
        "O funcionário de empresa terceirizada não recebe conta de acesso sem a aprovação da "
        "gestão, e só até o término do contrato da empresa. Ao término do contrato da empresa, "
        "o gestor pede o bloqueio da conta; a exclusão não é automática.",
        document="acesso-pt",
        language="pt",
    )
    text = _answer(
        "y si me voy de la empresa con el préstamo sin terminar?", loans, accounts, language="es"
    )
    assert "liquidación final" in text
    assert "término" not in text


def test_the_opening_line_names_no_rate_period_as_the_subject() -> None:
    # "por ano" says how often, not what about: the answering page names the subject.
    title = "Adiantamento salarial — regras"
    assert opening_line("quantas vezes por ano?", "pt", "duration", title) == (
        "Sobre o prazo — Adiantamento salarial:"
    )
    assert answer_kind("quanto sai por mês pra mim?") == "amount"
    assert answer_kind("¿cuánto sale el seguro por mes?") == "amount"
    assert "sai" not in opening_line("quanto sai por mês pra mim?", "pt", "amount", title)


def test_an_article_before_a_period_word_is_no_rate() -> None:
    # "a hora extra" names the topic; "por hora" would be a rate.
    question = "como funciona a hora extra no feriado?"
    assert opening_line(question, "pt", answer_kind(question), "Horas extras") == (
        "Sobre hora extra no feriado:"
    )


def test_an_announced_change_of_subject_names_no_topic_of_the_answer() -> None:
    """'mudando de assunto, ...': lines that say 'assunto' or 'mudança' do not answer."""
    hours = Passage(
        1,
        "Banco de horas",
        "",
        "Mudanças de assunto na escala devem ser combinadas com o gestor. "
        "As horas do banco devem ser compensadas em até seis meses.",
        document="banco",
    )
    text = _answer("mudando de assunto, como funciona o banco de horas?", hours)
    first = text.split("\n\n", 1)[1].splitlines()[0]
    assert "em até seis meses" in first
    assert "Mudanças de assunto" not in first


def test_the_opening_line_repeats_the_question_not_the_persons_data() -> None:
    """The answer's first line replied with the person's name, cédula and salary."""
    opening = opening_line(
        "hola, soy [NAME_1], CI [CI_1]. ¿cuánto me toca de aguinaldo si gano [MONEY_1] por mes?",
        "es",
        "amount",
        "Sueldo anual complementario — Uruguay",
    )
    assert "[" not in opening and "aguinaldo" in opening
    salary = opening_line(
        "meu salário é [MONEY_1], qual o máximo de coparticipação que podem descontar?",
        "pt",
        "amount",
        "Assistência médica",
    )
    assert salary == "Sobre o valor — máximo de coparticipação que podem descontar:"


def test_words_that_only_ask_how_much_are_not_searched_as_text() -> None:
    """ "a PLR desse ano paga em quantas vezes?": the full-text leg, which weighs words by
    rarity, let "vezes" find the meal card's "uma vez por ano"; the vector leg keeps them."""
    from retrieval.pipeline.asks import without_asking_words

    assert without_asking_words("a PLR desse ano paga em quantas vezes?") == (
        "a PLR desse ano paga em ?"
    )
    assert without_asking_words("¿cuántos días me tocan?") == "¿ días me tocan?"
    # "vezes" that counts nothing asked stays; a question of asking words only is kept whole.
    assert without_asking_words("às vezes pago a mais") == "às vezes pago a mais"
    assert without_asking_words("quanto?") == "quanto?"


def test_a_follow_up_is_answered_with_what_the_last_reply_did_not_say() -> None:
    """ "le van a descontar del sueldo?" after a reply on reporting a stolen laptop: the
    words the rewrite carried from that reply find the reporting line again; the answer is
    the deduction rule, which the reply never mentioned."""
    laptop = Passage(
        1,
        "Equipos informáticos — Uruguay",
        "",
        "En caso de hurto o robo, el trabajador debe realizar la denuncia policial, informar "
        "a la Mesa de Ayuda en un plazo de 24 horas y adjuntar la constancia de la denuncia. "
        "El equipo de reemplazo se entrega en dos días hábiles en Montevideo. "
        "La empresa no descuenta del sueldo el valor de equipos dañados o robados, salvo dolo "
        "comprobado.",
        document="equipos-uy",
    )
    reply = (
        "Según la política de equipos informáticos, tiene que hacer la denuncia policial, "
        "avisar a la Mesa de Ayuda dentro de las 24 horas y adjuntar la constancia."
    )
    kwargs = {
        "question": "le van a descontar del sueldo?",
        "queries": ["le van a descontar del sueldo informáticos policial adjuntar constancia"],
        "passages": [laptop],
        "language": "es",
    }
    before = extractive_answer(**kwargs)  # type: ignore[arg-type]
    assert before.split("\n\n", 1)[1].lstrip("- ").startswith("En caso de hurto")
    history = [
        HistoryMessage("user", "a mi compañera [NAME_1] le robaron la laptop del auto"),
        HistoryMessage("assistant", reply),
    ]
    after = extractive_answer(**kwargs, history=history)  # type: ignore[arg-type]
    assert after.split("\n\n", 1)[1].lstrip("- ").startswith("La empresa no descuenta")


def test_a_page_the_search_put_first_on_purpose_answers() -> None:
    """ "como era a PLR na política antiga?": the version preference put the replaced page
    first; the current page shares more of the words ("política"), yet the old one answers."""
    old = Passage(
        1,
        "Participação nos lucros — programa 2024 (SUBSTITUÍDO)",
        "",
        "No programa de 2024, o valor correspondia a um salário-base fixo, pago em parcela única.",
        document="plr-2024",
    )
    current = Passage(
        2,
        "Participação nos lucros — programa 2026",
        "",
        "A política de participação nos lucros de 2026 segue a política de metas por agência.",
        document="plr-2026",
    )
    asked = {
        "question": "como era a PLR na política antiga?",
        "queries": ["como era a PLR (participação nos lucros) na política antiga?"],
        "passages": [old, current],
        "language": "pt",
    }
    assert "salário-base fixo" not in extractive_answer(**asked)  # type: ignore[arg-type]
    assert "salário-base fixo" in extractive_answer(**asked, lead="plr-2024")  # type: ignore[arg-type]


def test_a_page_that_says_none_of_the_persons_own_words_never_takes_the_answer_over() -> None:
    """ "quanto sai por mês pra mim?" after including a spouse in the health plan: the words
    carried from the conversation ("incluo plano de saúde") fill the maintenance page's
    lines; the search's own first page, on dependants, answers what is asked now."""
    dependants = Passage(
        1,
        "Assistência médica — inclusão de dependentes",
        "",
        "A Cooperativa paga 50% da mensalidade de cada dependente; o restante é descontado "
        "em folha. O titular pode incluir o cônjuge pelo portal.",
        document="dependentes",
    )
    upkeep = Passage(
        2,
        "Assistência médica — manutenção após desligamento",
        "",
        "Quem nunca incluiu dependentes pagantes no plano de saúde não tem direito à "
        "manutenção do plano de saúde. O plano de saúde individual inclui as carências.",
        document="manutencao",
    )
    text = extractive_answer(
        question="quanto sai por mês pra mim?",
        queries=["quanto sai por mês pra mim incluo plano de saúde"],
        passages=[dependants, upkeep],
        language="pt",
    )
    assert "50% da mensalidade" in text and "manutenção" not in text


def test_a_condition_is_read_in_the_pages_language() -> None:
    """Portuguese "no" is "in the" ("no portal"), Spanish "se" a pronoun ("se paga"):
    neither states a condition; "pode"/"puede" state a permission."""
    from retrieval.pipeline.answer.extractive import _states

    assert not _states("condition", "o formulario fica no portal do colaborador", "pt")
    assert _states("condition", "o titular pode levar o pai como agregado", "pt")
    assert not _states("condition", "el formulario se entrega en la oficina", "es")
    assert _states("condition", "no se acumula", "es")
    assert _states("condition", "el trabajador puede sumar a su conyuge", "es")
    assert _states("condition", "only employees are eligible", "en")


def test_a_long_questions_opening_line_ends_at_a_whole_word() -> None:
    """The subject of a long question is cut at its last word that fits, not inside one
    ("... para quem está em t:")."""
    question = (
        "Qual é o prazo para devolver os equipamentos da Cooperativa após o desligamento, "
        "para quem está em trabalho remoto integral?"
    )
    line = opening_line(question, "pt", "duration", "Devolução de equipamentos")
    subject = line.removeprefix("Sobre o prazo — ").removesuffix(":")
    assert subject.startswith("devolver os equipamentos")
    assert len(subject) <= 80
    assert question.find(subject) >= 0
    following = question[question.find(subject) + len(subject) :]
    assert following[:1] in {" ", ",", "?"}  # the subject ends where a word ends


CARD_USE = Passage(
    1,
    "Cartão corporativo — concessão e uso",
    "",
    "O cartão corporativo é fornecido a quem viaja a serviço com frequência. "
    "As despesas de viagem devem ser conciliadas no sistema até o dia 5 do mês seguinte; "
    "despesas não conciliadas levam ao bloqueio temporário do cartão. "
    "As regras de perda, roubo e cancelamento estão em política específica.",
    document="cartao-uso",
)
CARD_LOSS = Passage(
    2,
    "Cartão corporativo — perda, roubo e cancelamento",
    "",
    "Em caso de perda ou roubo, inclusive em viagem, o portador pede o bloqueio do cartão "
    "pelo aplicativo do emissor e abre chamado para a Tesouraria em até 24 horas. "
    "Compras feitas depois do aviso de perda não são cobradas do portador.",
    document="cartao-perda",
)


def test_a_page_that_sends_the_reader_elsewhere_for_what_is_asked_yields_to_that_page() -> None:
    """The search put the card's usage page first; it speaks of losing a card only to say
    that another page has those rules. That page, shown too, answers."""
    text = _answer("perdi o cartão corporativo numa viagem, como bloqueio?", CARD_USE, CARD_LOSS)
    body = text.split("\n\n", 1)[1]
    assert body.lstrip("- ").startswith("Em caso de perda ou roubo")
    assert "aplicativo do emissor" in body
    assert "conciliadas no sistema" not in body


def test_a_pointer_to_a_page_about_something_not_asked_keeps_the_answer() -> None:
    """The daycare page sends the reader to the disability allowance's page for children
    with a disability ("... sem limite de idade"): asked up to what age the daycare
    allowance goes, the daycare page still answers."""
    daycare = Passage(
        1,
        "Auxílio-creche",
        "",
        "A empresa paga auxílio-creche a quem tem filhos de até cinco anos e 11 meses de "
        "idade, no valor de até R$ 600,00 por mês. "
        "Para filhos com deficiência, aplica-se a política de auxílio a dependentes com "
        "deficiência, sem limite de idade.",
        document="creche",
    )
    disability = Passage(
        2,
        "Auxílio a dependentes com deficiência",
        "",
        "Quem tem filhos com deficiência, de qualquer idade, recebe auxílio mensal de "
        "R$ 900,00 por dependente. "
        "O auxílio é pago em folha, sem comprovação mensal, e não tem limite de idade.",
        document="deficiencia",
    )
    text = _answer("auxílio creche até que idade?", daycare, disability)
    body = text.split("\n\n", 1)[1]
    assert "cinco anos e 11 meses" in body
    assert "R$ 900,00" not in body


LEAVES = Passage(
    1,
    "Licencias por nacimiento",
    "Uruguay",
    "Las trabajadoras tienen derecho a una licencia por maternidad de 14 semanas, que "
    "comienza seis semanas antes de la fecha prevista de parto, paga por el Banco de "
    "Previsión Social con un complemento de la empresa. Los trabajadores tienen derecho a "
    "una licencia por paternidad de 13 días continuos: tres días pagos por la empresa y "
    "diez días con subsidio del Banco de Previsión Social.",
    document="licencias",
)


def test_a_line_about_the_other_parent_is_not_the_answer() -> None:
    """ptes-dev: 'la licencia por paternidad la paga el BPS o la empresa?' had the maternity
    line second: it says "licencia", "BPS" and "empresa" too, but of the other parent."""
    text = _expanded(
        "la licencia por paternidad la paga el BPS o la empresa?",
        "la licencia por paternidad la paga el BPS (Banco de Previsión Social) o la empresa?",
        LEAVES,
        language="es",
        glossary_hits=[GlossaryHit("BPS", "Banco de Previsión Social")],
    )
    assert "13 días continuos" in text, text
    assert "maternidad" not in text, text


def test_a_line_about_the_same_parent_in_the_other_language_stays() -> None:
    """A Spanish question over a Portuguese page: "paternidad" and "paternidade" are one case."""
    page = Passage(
        1,
        "Licença-paternidade",
        "Brasil",
        "A Cooperativa concede licença-paternidade de 20 dias corridos aos colaboradores "
        "efetivos. A licença-maternidade é de 180 dias.",
        document="licenca",
    )
    text = _answer("cuántos días dan por paternidad en Brasil?", page, language="es")
    assert "20 dias corridos" in text, text
    assert "180 dias" not in text, text


def test_a_line_about_another_country_or_city_is_not_the_answer() -> None:
    """ptes-dev: 'cuánto es el viático para ir a Brasil?' had Uruguay's daily allowance second;
    a city stands for its country ("pra Montevidéu": Uruguay)."""
    page = Passage(
        1,
        "Viáticos",
        "Valores",
        "Para viajes a Brasil, el viático es de US$ 60 por día, acreditado en la tarjeta "
        "corporativa. El personal que viaja por trabajo dentro de Uruguay recibe un viático "
        "diario de $U 2.200 cuando el viaje implica pernocte.",
        document="viaticos",
    )
    text = _answer("cuánto es el viático para ir a Brasil?", page, language="es")
    assert "US$ 60" in text and "$U 2.200" not in text, text
    text = _answer("y cuánto es el viático si voy a Montevideo?", page, language="es")
    assert text.split("\n\n", 1)[1].lstrip("- ").startswith("El personal"), text


def test_the_opening_line_repeats_the_question_without_its_typos() -> None:
    """ptes-dev: 'estagiaro tem recesso remunerado quantos dias' opened "Sobre o prazo —
    estagiaro tem recesso…": the rewrite's spelling fix is shown as the page writes it
    (with its accent); a fix that changes the word ("terceirizados" -> "terceirizada") is not."""
    page = Passage(
        1,
        "Programa de estágio",
        "Recesso",
        "Conforme a Lei do Estágio, o estagiário tem direito a recesso remunerado de 30 dias "
        "a cada 12 meses de estágio. Prestadores terceirizada não têm recesso.",
        document="estagio",
    )
    text = _expanded(
        "estagiaro terceirizados tem recesso remunerado quantos dias",
        "estagiario terceirizada tem recesso remunerado quantos dias",
        page,
        corrections={"estagiaro": "estagiario", "terceirizados": "terceirizada"},
    )
    opening = text.split("\n", 1)[0]
    assert "estagiário terceirizados tem recesso" in opening, opening
    assert "30 dias" in text, text


@pytest.mark.parametrize("first_text", ["## Férias", "Férias:", ""])
def test_a_message_of_names_only_answers_from_the_first_document_with_lines(
    first_text: str,
) -> None:
    # Issue #38, finding 6: a message of capitalised names alone ("Ana Maria " x 127) says
    # none of the pages' words; when the top passage has no line of its own (a heading
    # alone), choosing its lines found none and `_choose` failed on an empty `max()`.
    heading_only = Passage(1, "Férias", "Férias", first_text, document="ferias")
    answer = _answer("Ana Maria " * 127, heading_only, RESIGNATION)
    assert "O aviso prévio é de 30 dias. [2]" in answer


def test_the_answer_returns_its_lines_with_scores_and_the_words_they_say() -> None:
    built = extractive_choice(
        question="qual o prazo do aviso prévio?",
        queries=[],
        passages=[RESIGNATION, HOTEL],
        language="pt",
    )
    assert built.text == _answer("qual o prazo do aviso prévio?", RESIGNATION, HOTEL)
    first = built.lines[0]
    assert first.text == "O aviso prévio é de 30 dias." and first.number == 2
    assert first.document == "demissao" and first.heading == "Aviso prévio"
    assert first.score > 0 and first.page_rank == 0
    assert {"aviso", "previ"} & set(first.says)
    assert 0 < built.coverage <= 1 and not built.not_found


def test_an_answer_whose_lines_say_none_of_the_searched_words_covers_nothing() -> None:
    heading_only = Passage(1, "Férias", "Férias", "## Férias", document="ferias")
    built = extractive_choice(
        question="Ana Maria " * 127, queries=[], passages=[heading_only, RESIGNATION], language="pt"
    )
    assert built.lines and all(not line.says for line in built.lines)
    assert built.coverage == 0.0


@pytest.mark.parametrize(
    ("text", "language", "figure"),
    [
        ("a licenca dura cento e vinte dias", "pt", "120 dias"),
        ("el permiso dura ciento veinte dias", "es", "120 dias"),
        ("the leave lasts one hundred twenty days", "en", "120 days"),
    ],
)
def test_a_figure_written_in_words_is_read_as_a_figure(
    text: str, language: str, figure: str
) -> None:
    from retrieval.pipeline.answer.extractive import with_digits

    assert figure in with_digits(text, language)
    assert with_digits(text, "xx") == text  # a language text2num does not know: as it is


def test_a_duration_written_in_words_answers_a_how_long_question() -> None:
    """A page that writes the duration in words ("cento e vinte dias") states a duration: a
    how-long question is answered with that line first (before, the page's first line
    led: no line stated a duration)."""
    page = Passage(
        1,
        "Licença-maternidade",
        "",
        "A licença-maternidade é garantida a todas as empregadas, inclusive em caso de "
        "adoção, com o salário integral pago pela empresa.\n"
        "A licença dura cento e vinte dias, contados a partir do parto.\n"
        "O pedido é feito no portal de autoatendimento.",
        document="lm",
        language="pt",
    )
    text = _answer("quanto tempo de licença maternidade?", page)
    body = text.split("\n\n", 1)[1]
    assert body.lstrip("- ").startswith("A licença dura cento e vinte dias"), text
