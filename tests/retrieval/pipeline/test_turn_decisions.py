"""The turn decisions made without a model: small talk, readings kept by search evidence,
clarification with options, glossary senses, spelling and what is never searched.

Each test pins one failure pattern of issue 12 with examples of our own.
"""

from __future__ import annotations

import pytest

from retrieval.pipeline.ask_back import ambiguous_documents, reply_named_documents
from retrieval.pipeline.ask_phrases import chosen_option, clarification_question
from retrieval.pipeline.evidence import choose_reading, favour_reply_documents, reply_probe
from retrieval.pipeline.fusion import Hit, MergedHit
from retrieval.pipeline.rewrite_rules import rewrite_with_rules
from retrieval.pipeline.rewrite_rules.core import clean_query
from retrieval.pipeline.rewrite_rules.lexicon import Stats
from retrieval.pipeline.rewrite_rules.smalltalk import small_talk_kind, small_talk_reply
from retrieval.pipeline.tuning import DEFAULT_TUNING
from retrieval.pipeline.types import (
    GlossaryEntry,
    HistoryMessage,
    LexiconView,
    RewriteInput,
    SearchQuery,
)
from tests.retrieval.pipeline.test_rewrite_rules import LEXICON, lexicon_from, rewrite, words


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("obrigado!", "thanks"),
        ("valeu 👍", "thanks"),
        ("muito obrigadaaa pela ajuda!!", "thanks"),
        ("Obrigadp", "thanks"),
        ("gracias, era eso", "thanks"),
        ("thanks a lot", "thanks"),
        ("ok, entendi", "ack"),
        ("👍", "ack"),
        ("bom dia", "greeting"),
        ("buenas tardes", "greeting"),
        ("tchau", "farewell"),
    ],
)
def test_small_talk_is_recognised_in_three_languages_with_typos_and_emoji(
    text: str, kind: str
) -> None:
    assert small_talk_kind(text, _knows) == kind
    result = rewrite(text, "como peço reembolso de despesas?", "Pelo portal, em 30 dias.")
    assert result.no_search and result.small_talk == kind
    assert result.queries == []  # the previous topic is never reopened
    assert any("small talk" in note for note in result.notes)


@pytest.mark.parametrize(
    "text",
    ["obrigado, e para PJ?", "oi, qual o prazo do VR?", "e o vale?", "ok?", "entendi, mas e o VT?"],
)
def test_a_question_beside_small_talk_is_a_question(text: str) -> None:
    assert small_talk_kind(text, _knows) is None
    assert not rewrite(text, "como peço reembolso?", "Pelo portal.").no_search


def _knows(word: str) -> bool:
    """The test corpus knows the word (what the rewrite's LexiconView tells)."""
    return word in LEXICON.df


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("vlw demais, salvou!", "thanks"),
        ("brigadão, me ajudou muito", "thanks"),
        ("mil gracias, me re sirvió", "thanks"),
        ("genial, gracias crack", "thanks"),
        ("perfect, that helps a lot", "thanks"),
        ("awesome, thanks heaps", "thanks"),
        ("hey there, good morning", "greeting"),
        ("buenas, todo bien por acá", "greeting"),
        ("blz, tranquilo", "ack"),
        ("olá, tudo certo?", "greeting"),  # a greeting may ask
    ],
)
def test_small_talk_is_known_by_what_it_lacks_not_by_its_every_word(text: str, kind: str) -> None:
    # Slang and reactions no list holds ("salvou", "sirvió", "heaps", "tranquilo"): no
    # question and no word the pages know, so nothing is searched and the topic stays shut.
    assert small_talk_kind(text, _knows) == kind
    result = rewrite(text, "como peço reembolso de despesas?", "Pelo portal, em 30 dias.")
    assert result.no_search and result.small_talk == kind
    assert result.queries == []


@pytest.mark.parametrize(
    "text",
    [
        "vale transporte pj",  # a short question without "?" that names the pages' words
        "prazo reembolso hotel",  # telegraphic
        "valeu! e pra quem é PJ",  # thanks, then a follow-up without its question mark
        "ok, e o vr do estagiário",
        "gracias, y en Chile",
        "thanks, and for contractors",
        "ok, e pra mim",  # a follow-up of common words only
        "entendi, me explica melhor",  # a request
        "perfect, how do I claim",  # a question opener without "?"
        "ok, e em 2024",  # a number asked about
        # words the pages do not know, a stray "isso" and no "?": mostly not small talk
        "tive um imprevisto no voo, consigo remarcar isso",
    ],
)
def test_a_turn_that_names_the_pages_or_asks_is_not_small_talk(text: str) -> None:
    assert small_talk_kind(text, _knows) is None
    assert not rewrite(text, "como peço reembolso?", "Pelo portal.").no_search


def test_a_set_phrase_of_thanks_holds_a_word_the_pages_know() -> None:
    # "mil" is in pages of amounts ("R$ 2 mil"); in "mil gracias" it only thanks.
    assert small_talk_kind("mil gracias, crack", lambda word: word == "mil") == "thanks"
    assert small_talk_kind("mil reais, crack", lambda word: word == "mil") is None


def test_a_long_thank_you_note_is_searched_past_the_tuned_length() -> None:
    short = "muito obrigado, ajudou demais"
    long = "muito obrigado, ajudou demais, de verdade, foi super rápido e tranquilo hoje"
    assert small_talk_kind(short, _knows) == "thanks"
    assert small_talk_kind(long, _knows) is None


def test_without_corpus_statistics_only_listed_words_pass_as_small_talk() -> None:
    # No LexiconView: a word outside the lists might be content, so it is searched.
    assert small_talk_kind("obrigado!") == "thanks"
    assert small_talk_kind("obrigado, salvou") is None


def test_small_talk_reply_is_in_the_turn_language() -> None:
    assert small_talk_reply("thanks", "pt").startswith("De nada")
    assert small_talk_reply("thanks", "es").startswith("¡De nada")
    assert small_talk_reply("greeting", "en").startswith("Hello")


def test_implicit_follow_up_is_offered_with_the_conversation_topic() -> None:
    # "conta pro trajeto até o cliente?"-style: words of its own, subject only in history.
    result = rewrite(
        "se eu for desligado, perco?",
        "como funciona o banco de horas?",
        "Compensado em seis meses.",
    )
    readings = {q.reading: q.text for q in result.queries}
    assert readings["standalone"] == "se eu for desligado, perco?"
    assert "banco" in readings["contextual"] and "horas" in readings["contextual"]
    assert result.topic and "banco" in result.topic


def _hit(doc: str, chunk: int, vector: int | None, text: int | None) -> Hit:
    return Hit(chunk, chunk, doc, doc, "", "", 0, "", vector, text, 0.01)


QUERIES = [
    SearchQuery("e o auxílio-creche, qual o valor? remoto", "expand", reading="contextual"),
    SearchQuery("e o auxílio-creche, qual o valor?", "normalize", reading="standalone"),
    SearchQuery("e o auxílio-creche, qual o valor?", "original", weight=0.5),
]


def test_evidence_keeps_a_new_topic_the_turn_alone_finds_outside_the_conversation() -> None:
    creche, remote = _hit("creche", 1, 1, 1), _hit("remote", 2, 1, 2)
    results = [[creche, remote], [creche], [creche]]
    decision = choose_reading(QUERIES, results, topic_hits=[remote])
    assert decision.reading == "standalone"
    assert 0 not in decision.keep and 1 in decision.keep
    assert "new topic" in decision.reason


def test_words_that_only_ask_how_much_name_no_new_topic() -> None:
    # "quanto custa por mês?" after a newborn's health and dental plans: "custa" alone
    # lands confidently on the remote-work allowance ("ajuda de custo"), which both readings
    # then agree on. Asking how much is no new subject; the new words "auxílio-creche" are.
    queries = [
        SearchQuery("quanto custa por mês? filho", "expand", reading="contextual"),
        SearchQuery("quanto custa por mês?", "normalize", reading="standalone"),
    ]
    allowance, dental = _hit("ajuda-de-custo", 1, 1, 1), _hit("odonto-dependentes", 2, 2, 3)
    results = [[allowance, dental], [allowance, dental]]
    asked = choose_reading(queries, results, topic_hits=[dental], new_terms=("custa",))
    assert asked.reading == "contextual" and 0 in asked.keep
    named = choose_reading(queries, results, topic_hits=[dental], new_terms=("creche", "custa"))
    assert named.reading == "standalone" and 0 not in named.keep


def test_evidence_keeps_the_follow_up_when_the_turn_alone_stays_in_the_conversation() -> None:
    vr_intern, vr = _hit("vr-intern", 1, 1, 1), _hit("vr", 2, 2, 1)
    results = [[vr_intern, vr], [vr_intern], [vr_intern]]
    decision = choose_reading(QUERIES, results, topic_hits=[vr, vr_intern])
    assert decision.reading == "contextual"
    # The user's own words are not searched beside it: alone, they pull up a sibling.
    assert decision.keep == (0,)


def test_evidence_searches_both_readings_when_the_turn_alone_leaves_the_conversation() -> None:
    # Neither a confident new topic nor anything of the conversation's: a drift as often
    # as a follow-up ("and what about its side effects?"), so both readings are searched.
    # The topic-aware reading still sees the turn's own favourite near its top.
    sibling, topic = _hit("spain", 1, 7, None), _hit("chile", 2, 1, 1)
    decision = choose_reading(QUERIES, [[topic, sibling], [sibling], [sibling]], topic_hits=[topic])
    assert decision.reading == "both"
    assert decision.keep == (0, 1)
    assert decision.standalone_weight > 0


def test_evidence_keeps_the_follow_up_when_a_short_topic_lands_and_the_turn_strays() -> None:
    # "desconta alguma coisa da minha bolsa?" after the interns' meal allowance: alone, the
    # words find a payroll page; with the two-word topic, the allowance page leads both
    # legs and the payroll page is nowhere near its top.
    allowance, payroll = _hit("vr-intern", 1, 1, 1), _hit("payroll", 2, 2, 1)
    filler = [_hit(f"other-{n}", 3 + n, 4 + n, 4 + n) for n in range(3)]
    results = [[allowance, *filler, payroll], [payroll], [payroll]]
    decision = choose_reading(QUERIES, results, [allowance], topic="estagiária vale-refeição")
    assert decision.reading == "contextual" and decision.keep == (0,)
    assert "strays" in decision.reason
    # A long topic lands on its own documents whatever the turn asks: still undecided.
    long_topic = "alive film adaptations of Hamlet Romeo and Juliet"
    assert choose_reading(QUERIES, results, [allowance], topic=long_topic).reading == "both"
    # And so is a topic-aware reading unsure of its own best document.
    unsure = _hit("vr-intern", 1, 9, None)
    decision = choose_reading(
        QUERIES, [[unsure, *filler, payroll], [payroll], [payroll]], [unsure], topic="vale"
    )
    assert decision.reading == "both"


def _said(doc: str, chunk: int, vector: int, text: int, words: str) -> Hit:
    return Hit(chunk, chunk, doc, doc, "", words, 0, "", vector, text, 0.01)


def test_a_new_topic_is_the_page_that_says_the_turns_own_words() -> None:
    """ "e o auxílio-creche, qual o valor?" after remote work: with the old topic's words the
    search lands on the remote-work page, which never says "auxílio-creche"; alone, the
    turn finds the page that does. Only its own words are searched."""
    creche = _said("creche", 1, 1, 1, "O auxílio-creche é de R$ 650,00 por mês.")
    remote = _said("remote", 2, 1, 1, "O regime híbrido tem até três dias remotos.")
    results = [[remote, creche], [creche, remote], [creche]]
    decision = choose_reading(QUERIES, results, [remote], new_terms=("auxilio-creche",))
    assert decision.reading == "standalone" and 0 not in decision.keep
    assert "says the turn's own words" in decision.reason
    # A lone common word behind "the" asks of the conversation's subject: no switch.
    queries = [
        SearchQuery("Who was the enemy? Great Wall China", "expand", reading="contextual"),
        SearchQuery("Who was the enemy?", "normalize", reading="standalone"),
    ]
    wall = _said("wall", 3, 1, 1, "The Great Wall was built against nomadic raids.")
    war = _said("war", 4, 1, 1, "The enemy crossed the river.")
    decision = choose_reading(queries, [[wall], [war]], [wall], new_terms=("enemy",))
    assert "says the turn's own words" not in decision.reason


def _titled_hit(doc: str, chunk: int, rank: int, title: str, words: str) -> Hit:
    return Hit(chunk, chunk, doc, title, "", words, 0, "", rank, rank, 0.01)


def test_a_new_topic_whose_page_is_titled_by_the_turns_words_beats_a_passing_mention() -> None:
    """ "e pra quem adota, tem licença?" after "como peço o auxílio-creche?" (ptes-dev):
    the daycare page mentions maternity leave once, so with the topic's word it still led;
    the leave page is titled by both new words and the topic-aware search ranks it second.
    The carried "auxílio-creche" is dropped. "me pagan la licencia que no me tomé?" after
    resigning is a follow-up: the leave page's title says "licencia", not "pagan"."""
    queries = [
        SearchQuery("auxílio-creche pra quem adota, tem licença", "expand", reading="contextual"),
        SearchQuery("e pra quem adota, tem licença?", "normalize", reading="standalone"),
    ]
    creche = _titled_hit(
        "creche", 1, 1, "Auxílio-creche", "Pago até o fim da licença-maternidade e depois."
    )
    leave = _titled_hit(
        "leave",
        2,
        1,
        "Licença-maternidade e licença-adotante",
        "Quem adota uma criança tem 120 dias de licença.",
    )
    results = [[creche, leave], [leave, creche]]
    terms = ("adota", "licenca")
    decision = choose_reading(queries, results, [creche], new_terms=terms, language="pt")
    assert decision.reading == "standalone" and 0 not in decision.keep, decision
    assert "says the turn's own words" in decision.reason

    queries = [
        SearchQuery(
            "me pagan la licencia que no me tomé renunciar", "expand", reading="contextual"
        ),
        SearchQuery("me pagan la licencia que no me tomé?", "normalize", reading="standalone"),
    ]
    resign = _titled_hit(
        "resign", 3, 1, "Renuncia y preaviso", "Al egreso se paga la licencia no gozada."
    )
    annual = _titled_hit(
        "annual", 4, 1, "Licencia anual", "Se pagan 20 días de licencia; si no la tomé, pagan."
    )
    results = [[resign, annual], [annual, resign]]
    terms = ("pagan", "licencia")
    decision = choose_reading(queries, results, [resign], new_terms=terms, language="es")
    assert decision.reading == "contextual", decision


def test_a_follow_up_is_the_reading_whose_page_says_more_of_the_turns_words() -> None:
    """ "tenho q devolver se pedir demissão?" after the education allowance: alone, the
    words find the resignation page; with the topic, the allowance's repayment page, which
    says "devolver" too. The topic-aware reading is kept."""
    queries = [
        SearchQuery("tenho q devolver se pedir demissão pós", "expand", reading="contextual"),
        SearchQuery("tenho q devolver se pedir demissão?", "normalize", reading="standalone"),
    ]
    repay = _said("repay", 1, 1, 1, "Quem pedir demissão deve devolver os valores recebidos.")
    resign = _said("resign", 2, 1, 1, "O pedido de demissão é feito no portal.")
    results = [[repay, resign], [resign, repay]]
    terms = ("devolver", "pedir", "demissao")
    decision = choose_reading(queries, results, [], new_terms=terms, language="pt")
    assert decision.reading == "contextual" and decision.keep == (0,)
    assert "says more of the turn's own words" in decision.reason


def _merged(doc: str, chunk: int, score: float, title: str | None = None) -> MergedHit:
    hit = Hit(chunk, chunk, doc, title or doc, "", "", 0, "", 1, 1, score)
    return MergedHit(hit=hit, score=score)


def test_the_reply_probe_is_the_last_replys_own_words() -> None:
    window = [
        ("user", "como incluo minha esposa no plano?"),
        ("assistant", "Pela política de dependentes da assistência médica, no portal."),
        ("user", "quanto sai por mês pra mim?"),
    ]
    probe = reply_probe(window)
    assert probe is not None
    assert "dependentes" in probe and "assistencia" in probe and "medica" in probe
    assert "quanto" not in probe  # the user's words are the turn's, not the reply's
    assert reply_probe([("user", "oi")]) is None


def test_the_last_replys_document_wins_a_close_call_but_not_a_clear_lead() -> None:
    # "quanto sai por mês pra mim?" after the dependants' answer: the dental page leads the
    # fused list by a hair; the reply was written from the health plan's dependants page.
    dental, health = _merged("dental", 1, 0.0330), _merged("health", 2, 0.0325)
    reply_hits = [health.hit, dental.hit]
    order, lifted = favour_reply_documents([dental, health], reply_hits, ["quanto", "mes"])
    assert [m.hit.external_id for m in order] == ["health", "dental"] and lifted == ["health"]
    # What the turn's own search found clearly first stays first.
    far = _merged("health", 2, 0.0330 * (1 - 2 * DEFAULT_TUNING.reply_boost))
    order, lifted = favour_reply_documents([dental, far], reply_hits[:1], ["quanto", "mes"])
    assert [m.hit.external_id for m in order] == ["dental", "health"] and lifted == []


def test_the_last_replys_document_never_passes_a_page_whose_title_names_the_question() -> None:
    # "e para quem é PJ?" after the employees' health-plan answer: the PJ page says "PJ" in
    # its title, the reply's page does not, so the reply cannot lift its page past it.
    pj = _merged("pj", 1, 0.0330, "Plano de saúde — prestadores PJ")
    clt = _merged("clt", 2, 0.0329, "Plano de saúde — colaboradores")
    order, lifted = favour_reply_documents([pj, clt], [clt.hit], ["pj"])
    assert [m.hit.external_id for m in order] == ["pj", "clt"] and lifted == []
    # The same pair, asked with no word either title has: the reply's page wins the tie.
    order, lifted = favour_reply_documents([pj, clt], [clt.hit], ["quanto", "custa"])
    assert [m.hit.external_id for m in order] == ["clt", "pj"] and lifted == ["clt"]
    # Another passage of the same page is what a follow-up asks for: never passed.
    second = _merged("wall-2", 3, 0.0330, "History of the Great Wall")
    first = _merged("wall-1", 4, 0.0329, "History of the Great Wall")
    order, lifted = favour_reply_documents([second, first], [first.hit], ["long"])
    assert [m.hit.external_id for m in order] == ["wall-2", "wall-1"] and lifted == []


def test_a_turn_that_points_back_is_only_searched_with_its_topic() -> None:
    # "y en Chile?" after Spain's vacation: a restriction never starts a new topic, so the
    # user's words alone (which pull up any country's page) are not searched.
    result = rewrite("y en Chile?", "¿cuántos días de vacaciones tengo en España?", "23 días.")
    assert [q.reading for q in result.queries] == ["contextual"]
    assert "chile" in words(result.queries[0].text) and "vacaciones" in words(
        result.queries[0].text
    )
    decision = choose_reading(result.queries, [[_hit("chile", 1, 1, 1)]], topic_hits=[])
    assert decision.reading == "contextual" and "points back" in decision.reason


def test_readings_split_across_siblings_ask_with_their_titles_as_options() -> None:
    titles = [
        ("Licença-maternidade e licença-adotante", ["licenca", "maternidade", "adotante"]),
        ("Licença-paternidade", ["licenca", "paternidade"]),
        ("Férias — regras gerais", ["ferias", "regras", "gerais"]),
    ]
    options = ambiguous_documents(["quanto", "tempo", "licenca"], titles)
    assert options == ["Licença-maternidade e licença-adotante", "Licença-paternidade"]
    assert clarification_question(options, "pt") == (
        "Você quer saber sobre Licença-maternidade e licença-adotante ou Licença-paternidade?"
    )
    # A word that names one of them settles it: no needless clarification.
    assert ambiguous_documents(["licenca", "paternidade", "dias"], titles) == []


def test_short_vague_question_without_history_is_a_clarification_candidate() -> None:
    assert rewrite("quantos dias de licença?").clarify_terms
    assert not rewrite("quando cai o 13º?").clarify_terms  # a glossary term is specific
    assert not rewrite("quantos dias de licensa?").clarify_terms  # a typo nobody knows
    followed = rewrite("quantos dias de licença?", "como peço férias?", "No portal.")
    assert not followed.clarify_terms  # with a conversation, the readings decide instead


def test_glossary_entry_that_is_an_ordinary_word_expands_only_as_the_term() -> None:
    glossary = (GlossaryEntry("vale", "adiantamento salarial"),)
    view = LexiconView(
        df=LEXICON.df, n_chunks=LEXICON.n_chunks, language_words=frozenset({"vale", "isso"})
    )

    def run(text: str) -> list[str]:
        inp = RewriteInput(text, (), glossary, language="pt")
        return [q.text for q in rewrite_with_rules(inp, view).queries]

    verb = run("isso vale para estagiário?")
    assert verb == ["isso vale para estagiário?"]
    assert run("como peço o vale?") == ["como peço o vale (adiantamento salarial)?"]


def test_spelling_leaves_words_the_language_knows() -> None:
    corpus = ["O reembolso é apagado do sistema.", "O reembolso de viagem."]
    view = lexicon_from(corpus, corrections={"apagam": "apagado", "reenbolso": "reembolso"})
    view = LexiconView(
        df=view.df,
        n_chunks=view.n_chunks,
        corrections=view.corrections,
        language_words=frozenset({"apagam"}),
    )
    result = rewrite_with_rules(RewriteInput("vcs apagam o reenbolso?", language="pt"), view)
    assert result.corrections == {"reenbolso": "reembolso"}


def test_placeholders_amounts_and_unknown_names_are_never_searched() -> None:
    stats = Stats(LEXICON)
    text = "a colaboradora Débora Kuhn, CPF [CPF_1], ganha 6.850 e o reembolso?"
    cleaned = clean_query(text, stats, frozenset(), frozenset({"a", "e", "o"}))
    for gone in ("Débora", "Kuhn", "[CPF_1]", "6.850"):
        assert gone not in cleaned
    assert "reembolso" in cleaned and "colaboradora" in cleaned
    result = rewrite("e o reembolso, [EMAIL_1]?", "sou a Mariana, como peço férias?", "No portal.")
    searched = " ".join(q.text for q in result.queries) + (result.safe_original or "")
    assert "[EMAIL_1]" not in searched and "Mariana" not in searched


def test_this_year_is_not_a_reference_to_the_conversation() -> None:
    result = rewrite("quando sai o 13º desse ano?")
    assert not result.needs_clarification


def test_a_restriction_with_a_relative_clause_still_points_back() -> None:
    result = rewrite("e para quem é PJ?", "como funciona o reembolso de despesas?", "Pelo portal.")
    assert [q.reading for q in result.queries] == ["contextual"]
    assert {"reembolso", "pj"} <= words(result.queries[0].text)


def test_a_reference_to_the_start_beyond_the_window_asks_back() -> None:
    inp = RewriteInput(
        "voltando ao primeiro assunto, qual era o limite por mês?",
        (HistoryMessage("user", "minha senha bloqueou"), HistoryMessage("assistant", "Ok.")),
        earlier_messages=4,
        language="pt",
    )
    result = rewrite_with_rules(inp, LEXICON)
    assert result.needs_clarification and result.clarification is not None
    assert "começo da conversa" in result.clarification.question
    # The topic the user says they leave is not carried into what is searched.
    assert not any("senha" in words(q.text) for q in result.queries)
    # Inside the window, the first question's topic is carried, not the latest one's.
    history = (
        HistoryMessage("user", "como funciona o reembolso de despesas de viagem?"),
        HistoryMessage("assistant", "Pelo portal, em até 30 dias."),
        HistoryMessage("user", "minha senha bloqueou"),
        HistoryMessage("assistant", "Ok."),
    )
    inside = rewrite_with_rules(RewriteInput(inp.question, history, language="pt"), LEXICON)
    assert not inside.needs_clarification
    searched = set().union(*(words(q.text) for q in inside.queries))
    assert "reembolso" in searched and "senha" not in searched


def test_siblings_in_another_language_are_not_a_competing_reading() -> None:
    from retrieval.pipeline.ask_back import evidence_ask_back
    from retrieval.pipeline.fusion import MergedHit
    from retrieval.pipeline.types import RewriteResult

    def merged(doc: str, title: str, text: str) -> MergedHit:
        return MergedHit(Hit(1, 1, doc, title, "", text, 0, "", 1, 1, 0.01), 0.01)

    hits = [
        merged("uy", "Beneficio de alimentación — Uruguay", "La tarjeta de alimentación se carga"),
        merged("br", "Vale-alimentação — colaboradores", "O cartão de benefícios é recarregado"),
    ]
    asked = RewriteResult(queries=[], backend="rules", clarify_terms=("tarjeta", "alimentacion"))
    # one sibling is in the question's language
    assert evidence_ask_back(asked, (), hits, (), (), "", "es") is None
    # A pronoun with nothing before it gets the best titles as options...
    pointer = rewrite("e isso?")
    assert pointer.needs_clarification and pointer.clarify_reason == "pointer"
    named = evidence_ask_back(pointer, (), hits, (), (), "e isso?", "pt")
    assert named is not None and named.reason == "pointer"
    assert len(named.clarification.options) == 2


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "oi, sou a Mariana Teixeira Bonatto, e o reembolso?",
            "oi, sou a [NAME_1], e o reembolso?",
        ),
        ("hola, soy Martín Olivera Sosa, cuánto me toca?", "hola, soy [NAME_1], cuánto me toca?"),
        (
            "a colaboradora Débora Kuhn vai sair de licença",
            "a colaboradora [NAME_1] vai sair de licença",
        ),
        ("my name is John Smith, how do I claim?", "my name is [NAME_1], how do I claim?"),
        ("sou PJ, como cobro?", "sou PJ, como cobro?"),  # an acronym, not a name
        ("soy de Montevideo", "soy de Montevideo"),
        ("sou estagiária, tenho VR?", "sou estagiária, tenho VR?"),
    ],
)
def test_a_person_introduced_by_name_is_masked(text: str, masked: str) -> None:
    from retrieval.pipeline.masking import Masker

    assert Masker().mask(text) == masked


def test_identity_numbers_without_valid_check_digits_are_never_searched() -> None:
    stats = Stats(LEXICON)
    cleaned = clean_query(
        "o CPF 026.411.839-05 e a CI 4.381.226-7", stats, frozenset(), frozenset()
    )
    assert "026.411.839-05" not in cleaned and "4.381.226-7" not in cleaned


def test_and_about_a_new_subject_is_a_topic_switch() -> None:
    result = rewrite("e sobre o plano de saúde?", "qual o valor do VR?", "R$ 40 por dia.")
    assert not any("vr" in words(q.text) for q in result.queries)
    facet = rewrite("e sobre o prazo?", "como peço reembolso de despesas?", "Pelo portal.")
    assert any("reembolso" in words(q.text) for q in facet.queries)


def test_a_word_only_the_best_passage_has_names_the_reading_unless_it_is_a_verb() -> None:
    titles = [
        ("Climate of North Carolina", ["climate", "north", "carolina"]),
        ("North Carolina", ["north", "carolina"]),
    ]
    texts = [["snow", "falls", "mountains"], ["state", "capital", "raleigh"]]
    assert ambiguous_documents(["snow", "north", "carolina"], titles, texts, "en") == []
    plans = [
        ("Plano de saúde – titulares", ["plano", "saude", "titulares"]),
        ("Plano odontológico", ["plano", "odontologico"]),
    ]
    words_in = [["entrar", "plano", "adesao"], ["plano", "adesao", "carencia"]]
    # "quero entrar no plano": "entrar" says what to do, not which plan.
    assert ambiguous_documents(["entrar", "plano"], plans, words_in, "pt") == [
        "Plano de saúde – titulares",
        "Plano odontológico",
    ]
    # A longer infinitive too, though its stem ("cancel") has lost the ending.
    cancel = [["cancelar", "plano"], ["plano", "carencia"]]
    assert len(ambiguous_documents(["cancelar", "plano"], plans, cancel, "pt")) == 2


def test_a_word_that_asks_for_a_kind_of_answer_names_no_reading() -> None:
    """'qual o prazo pra pedir o reembolso?': both refund pages state a deadline; 'prazo'
    only in the best passage's words does not make it the page meant."""
    titles = [
        ("Viagens — prestação de contas e reembolso", ["viagens", "contas", "reembolso"]),
        ("Reembolso de quilometragem", ["reembolso", "quilometragem"]),
    ]
    texts = [["prazo", "dias", "reembolso"], ["quilometro", "valor", "reembolso"]]
    assert ambiguous_documents(["prazo", "pedir", "reembolso"], titles, texts, "pt") == [
        "Viagens — prestação de contas e reembolso",
        "Reembolso de quilometragem",
    ]
    # A noun beyond the titles still names the reading.
    hotel = [["hotel", "dias", "reembolso"], ["quilometro", "valor", "reembolso"]]
    assert ambiguous_documents(["hotel", "reembolso"], titles, hotel, "pt") == []


def test_a_turn_too_short_to_tell_its_language_is_read_in_the_collections() -> None:
    from retrieval.pipeline.rewrite_rules.core import turn_language

    assert turn_language(RewriteInput("node data", default_language="en")) == "en"
    assert turn_language(RewriteInput("quantos dias de férias?", default_language="en")) == "pt"


def test_a_relative_clause_with_a_verb_asks_about_someone_new() -> None:
    # "e pra quem adota, tem licença?" after the daycare allowance: a new audience and
    # topic, left to the search evidence; "e para quem é PJ?" stays a restriction.
    result = rewrite("e pra quem adota, tem licença?", "qual o valor do VR?", "R$ 40 por dia.")
    assert "standalone" in [q.reading for q in result.queries]


def test_a_follow_up_of_a_follow_up_keeps_a_word_of_the_first_topic() -> None:
    # The second question reads as self-contained ("compensado", "seis", "meses"), yet it
    # continued the hours bank; the third still needs "banco" to find its page.
    result = rewrite(
        "e estagiário participa?",
        "como funciona o banco de horas?",
        "As horas a mais viram crédito.",
        "se passar de seis meses sem compensar, perco as horas?",
        "Não: o saldo é pago como hora extra.",
    )
    contextual = [q for q in result.queries if q.reading == "contextual"]
    assert contextual and "banco" in words(contextual[0].text)
    # An explicit change of subject in between stops the walk.
    switched = rewrite(
        "e estagiário participa?",
        "como funciona o banco de horas?",
        "As horas a mais viram crédito.",
        "mudando de assunto, quando cai o 13º salário?",
        "Em novembro e dezembro.",
    )
    assert not any("banco" in words(q.text) for q in switched.queries)


def test_a_follow_up_carries_the_topic_not_what_earlier_turns_did_with_it() -> None:
    # "posso dividir?" / "y si no llego a usarla?": verbs of follow-ups, not the topic.
    from tests.retrieval.pipeline.test_rewrite_rules import CORPUS

    lexicon = lexicon_from([*CORPUS, "Quem pode dividir as férias em períodos?"])
    result = rewrite(
        "e se eu pedir demissão antes de tirar?",
        "como funcionam as férias?",
        "Trinta dias por ano.",
        "posso dividir?",
        "Sim, em até três períodos.",
        lexicon=lexicon,
        language="pt",
    )
    searched = set().union(*(words(q.text) for q in result.queries))
    assert "ferias" in searched and "dividir" not in searched


def test_a_best_page_titled_as_the_general_rule_answers_a_short_question() -> None:
    # "quantos dias de férias eu tenho?": the general page answers; the collective-vacation
    # sibling opening with the same word is no reading to offer.
    titles = [
        ("Férias – regras gerais para empregados", ["ferias", "regras", "gerais", "empregados"]),
        ("Férias coletivas de fim de ano", ["ferias", "coletivas", "fim", "ano"]),
        ("Fracionamento de férias em até três períodos", ["fracionamento", "ferias"]),
    ]
    assert ambiguous_documents(["dias", "ferias"], titles) == []
    # The same siblings with no general page first still split.
    assert ambiguous_documents(["dias", "ferias"], titles[1:] + titles[:1]) != []


def test_a_turn_that_only_asks_after_a_reply_naming_two_pages_asks_which() -> None:
    """ "quanto custa por mês?" after a reply that named the health and the dental plan: which
    one? Not when the turn, or the conversation's own topic, names one, nor when the reply
    named only one page."""
    reply = (
        "Você pode incluí-lo como dependente na assistência médica e na assistência "
        "odontológica em até 30 dias."
    )
    titles = [
        "Assistência médica — inclusão de dependentes",
        "Assistência odontológica — dependentes",
        "Auxílio-creche",
    ]
    assert reply_named_documents("quanto custa por mês?", reply, titles, "filho") == titles[:2]
    assert reply_named_documents("quanto custa o odonto por mês?", reply, titles, "filho") == []
    assert reply_named_documents("quanto custa por mês?", reply, titles, "assistência médica") == []
    one = "Você pode incluí-lo na assistência médica em até 30 dias."
    assert reply_named_documents("quanto custa por mês?", one, titles, "filho") == []
    assert reply_named_documents("quanto custa por mês?", None, titles) == []


def test_a_reply_names_a_page_by_its_subjects_words_in_any_form() -> None:
    """ "viático" names "Viáticos para viajes de trabajo", "licencia anual" names "Licencia
    anual y salario vacacional"; "con cuánta anticipación" only asks how far ahead."""
    reply = (
        "Para el viaje de trabajo te corresponde un viático de US$ 60 por día; los días "
        "personales los pedís como licencia anual en el portal."
    )
    titles = [
        "Licencia anual y salario vacacional — Uruguay",
        "Viáticos para viajes de trabajo — Uruguay",
        "Día libre por cumpleaños — Uruguay",
    ]
    question = "con cuánta anticipación lo tengo que pedir?"
    topic = "viajar a Brasil trabajo vacaciones"
    assert reply_named_documents(question, reply, titles, topic, "es") == titles[:2]


def test_an_option_of_the_question_back_is_searched_with_the_question_before_it() -> None:
    options = ["Cartão corporativo – limites, prestação de contas e uso", "Plano odontológico"]
    asked = clarification_question(options, "pt")
    assert chosen_option(options[0], asked) == options[0]  # a title holding a comma
    assert chosen_option("plano odontologico", asked) == "plano odontologico"
    assert chosen_option("prestação de contas", asked) is None  # a piece of a title
    assert chosen_option("Plano odontológico", "O plano odontológico cobre canal.") is None
    spanish = clarification_question(["Vacaciones en Chile", "Vacaciones en España"], "es")
    assert chosen_option("Vacaciones en España", spanish) == "Vacaciones en España"

    result = rewrite("Plano odontológico", "o plano paga o dentista?", asked)
    assert [r.id for r in result.fired] == ["chosen_option"]
    assert [words(q.text) >= {"odontologico", "dentista", "paga"} for q in result.queries] == [True]
    typed = rewrite("e o odontológico?", "o plano paga o dentista?", asked)
    assert "chosen_option" not in [r.id for r in typed.fired]
