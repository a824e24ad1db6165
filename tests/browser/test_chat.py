"""The chat in a real browser against a real server: the issue's scenarios end to end."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from .conftest import DEMO_PASSWORDS, SCREENSHOTS, E2EDatabase

pytestmark = pytest.mark.browser

ANSWER_TIMEOUT = 120_000  # the server's first question also loads the embedding model
FINAL_STATE = re.compile(r"^(complete|clarify|stopped|error)$")
RESTRICTED_TITLE = "Tabela de faixas salariais"


def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def login(page: Page, base: str, username: str) -> None:
    page.goto(base + "/login/")
    page.get_by_label("Usuário").fill(username)
    page.get_by_label("Senha").fill(DEMO_PASSWORDS[username])
    page.get_by_role("button", name="Entrar").click()
    page.wait_for_url(base + "/")
    expect(page.locator("#composer-input")).to_be_visible()


def ask(page: Page, text: str, *, wait: bool = True) -> Locator:
    """Type a question, press Enter, and (by default) wait for its turn to finish."""
    count = page.locator("#messages > .turn").count()
    box = page.locator("#composer-input")
    box.fill(text)
    box.press("Enter")
    turn = page.locator("#messages > .turn").nth(count)
    expect(turn.locator('[data-slot="user-text"]')).to_have_text(text)
    if wait:
        expect(turn).to_have_attribute("data-state", FINAL_STATE, timeout=ANSWER_TIMEOUT)
    return turn


def open_trace(turn: Locator) -> Locator:
    trace = turn.locator('[data-slot="trace"]')
    expect(trace).to_be_visible()
    if trace.get_attribute("open") is None:
        trace.locator("summary").click()
    trace.scroll_into_view_if_needed()
    return trace


def query_texts(turn: Locator, *, exclude_original: bool = True) -> list[tuple[str, str]]:
    items = turn.locator(".query")
    found = [
        (items.nth(i).get_attribute("data-type") or "", items.nth(i).locator(".qtext").inner_text())
        for i in range(items.count())
    ]
    return [(t, q) for t, q in found if not (exclude_original and t == "original")]


def document_id(db: E2EDatabase, external_id: str) -> int:
    rows = db.query("SELECT id FROM retrieval_document WHERE external_id = %s", [external_id])
    assert rows, f"{external_id} is not in the e2e database"
    return int(rows[0][0])


# --- the scenarios ----------------------------------------------------------------------------


def test_vr_home_shows_trace_sources_and_an_extractive_answer(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    shot(page, "01-empty-chat")
    turn = ask(page, "Qual a regra do VR no home?")
    expect(turn).to_have_attribute("data-state", "complete")
    page.wait_for_url(re.compile(r"/c/\d+/$"))
    conversation_id = re.search(r"/c/(\d+)/", page.url).group(1)  # type: ignore[union-attr]

    # The trace: VR and home expanded from the glossary, and highlighted in the queries.
    trace = open_trace(turn)
    glossary = trace.locator('[data-slot="glossary"] mark')
    expect(glossary.filter(has_text="VR → vale-refeição")).to_have_count(1)
    expect(glossary.filter(has_text="home → trabalho remoto")).to_have_count(1)
    expect(trace.locator(".query .qtext mark").first).to_be_visible()
    searched = " ".join(q for _, q in query_texts(turn)).lower()
    assert "vale-refeição" in searched and "trabalho remoto" in searched, searched

    # Sources, numbered; an extractive answer, plainly labelled, citing them.
    cards = turn.locator(".source-card")
    assert cards.count() >= 1
    expect(cards.first.locator(".source-n")).to_have_text("1")
    # The "no model" label is the badge, with how to connect one; the answer replies.
    badge = turn.locator('[data-slot="extractive"]')
    expect(badge).to_be_visible()
    expect(badge).to_contain_text("Resposta extrativa")
    expect(badge).to_contain_text("CHATRAG_LLM_BACKEND")
    answer = turn.locator('[data-slot="answer"]')
    expect(answer).to_contain_text("Sobre")
    expect(answer).not_to_contain_text("Resposta extrativa")
    # The answer's lines are a real list: bullets, not "- " typed at each line's start.
    expect(answer.locator("ul > li").first).to_be_visible()
    assert not any(line.startswith("- ") for line in answer.inner_text().splitlines())
    badge.scroll_into_view_if_needed()
    shot(page, "02-extractive-answer")
    citation = answer.locator("a.cite").first
    expect(citation).to_be_visible()
    target = citation.get_attribute("href")
    assert target and page.locator(target).count() == 1
    expect(turn.locator('[data-slot="actions"]')).to_be_visible()
    shot(page, "02-answer")
    trace.scroll_into_view_if_needed()
    shot(page, "02b-trace")

    # The conversation is in the sidebar, current.
    item = page.locator(f'.conv-item[data-conversation-id="{conversation_id}"]')
    expect(item).to_have_class(re.compile("is-current"))
    expect(page.locator("#conversation-title")).to_have_text("Qual a regra do VR no home?")

    # Thumbs up is stored and shown pressed; the reason form appears.
    turn.get_by_role("button", name="Resposta útil").click()
    expect(turn.get_by_role("button", name="Resposta útil")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(turn.locator('[data-slot="reason-form"]')).to_be_visible()

    # A reload renders the same turn from the database, trace included.
    page.reload()
    stored = page.locator("#messages > .turn").last
    expect(stored).to_have_attribute("data-state", "complete")
    expect(stored.locator(".source-card")).to_have_count(cards.count())
    expect(stored.get_by_role("button", name="Resposta útil")).to_have_attribute(
        "aria-pressed", "true"
    )
    expect(open_trace(stored).locator('[data-slot="glossary"] mark')).to_have_count(
        glossary.count()
    )

    # A source card opens the document at the cited passage, highlighted.
    link = stored.locator(".source-link").first
    href = link.get_attribute("href") or ""
    chunk = re.search(r"chunk=(\d+)", href).group(1)  # type: ignore[union-attr]
    link.click()
    page.wait_for_url(re.compile(r"/documents/\d+/"))
    highlighted = page.locator(f"#chunk-{chunk}")
    expect(highlighted).to_have_class(re.compile("is-highlighted"))
    expect(highlighted).to_be_in_viewport()
    expect(page.locator(".chunk.is-highlighted")).to_have_count(1)
    shot(page, "03-document-highlighted")


def test_follow_up_is_resolved_from_the_previous_question(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    ask(page, "como funciona o reembolso de despesas?")
    follow_up = ask(page, "e para quem é PJ?")
    trace = open_trace(follow_up)
    queries = query_texts(follow_up)
    assert any(
        "reembolso" in text.lower() and ("pj" in text.lower() or "pessoa jurídica" in text.lower())
        for _, text in queries
    ), f"no query combines reembolso and PJ: {queries}"
    # The rule that carried the topic is named in the page's language, its detail beside it.
    carried = trace.locator('.rule[data-rule="carry_topic"]').first
    expect(carried.locator(".rule-label")).to_have_text("assunto da conversa retomado")
    expect(carried.locator(".rule-detail")).to_contain_text("reembolso")
    shot(page, "04-follow-up")
    # After a reload, in English, the stored trace names it in English.
    page.get_by_role("button", name="English").click()
    stored = page.locator("#messages > .turn").last
    trace = open_trace(stored)
    expect(trace.locator('.rule[data-rule="carry_topic"] .rule-label').first).to_have_text(
        "conversation topic carried"
    )


def test_multi_topic_question_is_decomposed(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    turn = ask(page, "como funciona férias e o que acontece se eu pedir demissão no meio")
    open_trace(turn)
    queries = query_texts(turn)
    decomposed = [text for kind, text in queries if kind == "decompose"]
    assert len(decomposed) == 2, f"expected two decompose queries: {queries}"
    expect(turn.locator('.query[data-type="decompose"] .qtype').first).to_have_text("decomposta")
    shot(page, "05-decomposed")


def test_bare_follow_up_asks_for_clarification(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    turn = ask(page, "e isso?")
    expect(turn).to_have_attribute("data-state", "clarify")
    expect(turn.locator('[data-slot="answer"]')).not_to_be_empty()
    expect(turn.locator(".source-card")).to_have_count(0)
    options = turn.locator('[data-slot="options"] button')
    shot(page, "06-clarification")
    if options.count():
        choice = options.first.inner_text()
        options.first.click()
        second = page.locator("#messages > .turn").nth(1)
        expect(second.locator('[data-slot="user-text"]')).to_have_text(choice)
        expect(second).to_have_attribute("data-state", FINAL_STATE, timeout=ANSWER_TIMEOUT)


def test_restricted_document_is_invisible_to_ana_and_visible_to_rita(
    browser: Any, live_url: str, e2e_db: E2EDatabase
) -> None:
    restricted = document_id(e2e_db, "pt/faixas-salariais-2026")
    question = "qual a faixa salarial da banda P3?"
    for username, allowed in (("ana", False), ("rita", True)):
        context = browser.new_context(viewport={"width": 1280, "height": 860}, locale="pt-BR")
        try:
            page = context.new_page()
            login(page, live_url, username)
            turn = ask(page, question)
            titles = turn.locator(".source-card .source-title").all_inner_texts()
            leaked = [t for t in titles if t.startswith(RESTRICTED_TITLE)]
            response = page.goto(f"{live_url}/documents/{restricted}/")
            assert response is not None
            if allowed:
                assert leaked, f"rita should see the salary table; got {titles}"
                assert response.status == 200
                expect(page.locator(".badge-restricted")).to_be_visible()
            else:
                assert not leaked, f"ana must not see the salary table; got {titles}"
                assert response.status == 404
            page.go_back()
            shot(page, f"07-restricted-{username}")
        finally:
            context.close()


def test_reload_while_answering_keeps_the_answer(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    ask(page, "quantos dias de férias eu tenho?", wait=False)
    page.wait_for_url(re.compile(r"/c/\d+/$"))  # the conversation exists: reload at once
    page.reload()
    turns = page.locator("#messages > .turn")
    expect(turns).to_have_count(1)
    turn = turns.first
    expect(turn.locator('[data-slot="user-text"]')).to_have_text("quantos dias de férias eu tenho?")
    expect(turn).to_have_attribute("data-state", FINAL_STATE, timeout=ANSWER_TIMEOUT)
    expect(turn).to_have_attribute("data-state", "complete")
    shown = turn.locator('[data-slot="answer"]').inner_text()
    assert shown.strip()
    # What the page shows is what was stored: the server draws the same paragraphs and lists
    # as the page's script did while it streamed.
    page.reload()
    stored = page.locator('#messages > .turn [data-slot="answer"]')
    expect(page.locator("#messages > .turn").first).to_have_attribute("data-state", "complete")
    assert stored.inner_text() == shown


def test_reload_mid_stream_resumes_and_stop_stops(page: Page, slow_url: str) -> None:
    login(page, slow_url, "ana")
    turn = ask(page, "Qual a regra do VR no home?", wait=False)
    expect(turn).to_have_attribute("data-state", "streaming", timeout=ANSWER_TIMEOUT)
    expect(turn.locator('[data-slot="answer"]')).to_contain_text("palavra3", timeout=30_000)
    expect(page.locator("#stop-button")).to_be_visible()
    expect(page.locator("#send-button")).to_be_disabled()
    shot(page, "08-streaming")

    # Reload mid-answer: the snapshot restores the text so far and the stream continues.
    page.reload()
    turn = page.locator("#messages > .turn").first
    expect(turn).to_have_attribute("data-state", "streaming")
    answer = turn.locator('[data-slot="answer"]')
    expect(answer).to_contain_text("palavra3")
    expect(answer).to_contain_text("palavra25", timeout=30_000)
    expect(answer.locator("a.cite").first).to_be_visible()  # [1] became a link to card 1

    # Stop: the answer ends, is marked as stopped, and stays that way after a reload.
    page.locator("#stop-button").click()
    expect(turn).to_have_attribute("data-state", "stopped", timeout=15_000)
    expect(turn.locator('[data-slot="state"]')).to_have_text("Resposta interrompida.")
    expect(page.locator("#stop-button")).to_be_hidden()
    expect(page.locator("#send-button")).to_be_enabled()
    stopped_text = answer.inner_text()
    time.sleep(1.0)
    assert answer.inner_text() == stopped_text
    assert "palavra399" not in stopped_text
    shot(page, "09-stopped")
    page.reload()
    stored = page.locator("#messages > .turn").first
    expect(stored).to_have_attribute("data-state", "stopped")
    expect(stored.locator('[data-slot="answer"]')).to_have_text(stopped_text)


def test_language_switch_to_spanish(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    expect(page.locator("#new-conversation")).to_contain_text("Nova conversa")
    page.get_by_role("button", name="Español").click()
    expect(page.locator("html")).to_have_attribute("lang", "es")
    expect(page.locator("#new-conversation")).to_contain_text("Nueva conversación")
    expect(page.locator("#composer-input")).to_have_attribute(
        "placeholder", "Pregunta sobre beneficios, vacaciones, reembolsos…"
    )
    expect(page.get_by_role("button", name="Español")).to_have_attribute("aria-current", "true")
    shot(page, "10-spanish")
    page.get_by_role("button", name="English").click()
    expect(page.locator("#new-conversation")).to_contain_text("New conversation")


def test_rename_and_delete_from_the_sidebar(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    ask(page, "como funciona o vale-transporte?")
    page.wait_for_url(re.compile(r"/c/\d+/$"))
    conversation_id = re.search(r"/c/(\d+)/", page.url).group(1)  # type: ignore[union-attr]
    item = page.locator(f'.conv-item[data-conversation-id="{conversation_id}"]')

    item.locator(".js-rename").click()
    dialog = page.locator("#rename-dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Título").fill("Vale-transporte")
    shot(page, "11-rename-dialog")
    dialog.get_by_role("button", name="Salvar").click()
    expect(page.locator("#conversation-title")).to_have_text("Vale-transporte")
    expect(item.locator(".conv-link")).to_have_text("Vale-transporte")

    item.locator(".js-delete").click()
    dialog = page.locator("#delete-dialog")
    expect(dialog).to_contain_text("Vale-transporte")
    dialog.get_by_role("button", name="Cancelar").click()
    expect(item).to_have_count(1)
    item.locator(".js-delete").click()
    dialog.get_by_role("button", name="Excluir").click()
    page.wait_for_url(re.compile(r"/$"))
    expect(page.locator(f'.conv-item[data-conversation-id="{conversation_id}"]')).to_have_count(0)
    response = page.goto(f"{live_url}/c/{conversation_id}/")
    assert response is not None and response.status == 404


def test_narrow_screen_collapses_the_sidebar(browser: Any, live_url: str) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 800}, locale="pt-BR")
    try:
        page = context.new_page()
        login(page, live_url, "ana")
        sidebar = page.locator("#sidebar")
        expect(sidebar).to_be_hidden()
        shot(page, "12-mobile")
        page.get_by_role("button", name="Mostrar conversas").click()
        expect(sidebar).to_be_visible()
        page.wait_for_timeout(400)  # let the slide-in transition end before the screenshot
        expect(page.get_by_role("button", name="Mostrar conversas")).to_have_attribute(
            "aria-expanded", "true"
        )
        shot(page, "13-mobile-sidebar")
        page.keyboard.press("Escape")
        expect(sidebar).to_be_hidden()
    finally:
        context.close()


def test_keyboard_only_login_and_question(page: Page, live_url: str) -> None:
    page.goto(live_url + "/login/")
    shot(page, "00-login")
    page.keyboard.type("ana")  # the username field has focus
    page.keyboard.press("Tab")
    page.keyboard.type(DEMO_PASSWORDS["ana"])
    page.keyboard.press("Enter")
    page.wait_for_url(live_url + "/")
    expect(page.locator("#composer-input")).to_be_focused()
    page.keyboard.type("o que é PLR?")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("e quando é paga?")
    expect(page.locator("#composer-input")).to_have_value("o que é PLR?\ne quando é paga?")
    page.keyboard.press("Enter")
    turn = page.locator("#messages > .turn").first
    expect(turn).to_have_attribute("data-state", FINAL_STATE, timeout=ANSWER_TIMEOUT)
    expect(page.locator("#composer-input")).to_have_value("")


# --- turn decisions without a model (issue 12) -----------------------------------------------


def test_thanks_after_an_answer_gets_a_short_reply_without_sources(
    page: Page, live_url: str
) -> None:
    login(page, live_url, "ana")
    first = ask(page, "como peço reembolso de despesas de viagem?")
    expect(first.locator(".source-card").first).to_be_visible()
    thanks = ask(page, "obrigado!")
    expect(thanks).to_have_attribute("data-state", "complete")
    expect(thanks.locator('[data-slot="answer"]')).to_contain_text("De nada")
    expect(thanks.locator(".source-card")).to_have_count(0)
    trace = open_trace(thanks)
    expect(trace).to_contain_text("small talk")
    assert query_texts(thanks, exclude_original=False) == []
    shot(page, "12-thanks-no-search", full_page=True)


def test_ambiguous_plan_question_offers_the_plans_as_buttons(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    turn = ask(page, "quero entrar no plano, como faz?")
    expect(turn).to_have_attribute("data-state", "clarify")
    expect(turn.locator('[data-slot="answer"]')).to_contain_text("Você quer saber sobre")
    options = turn.locator('[data-slot="options"] button')
    labels = [options.nth(i).inner_text() for i in range(options.count())]
    assert 2 <= len(labels) <= 4, labels
    assert any("odontológico" in label for label in labels), labels
    expect(turn.locator(".source-card")).to_have_count(0)
    shot(page, "12-clarification-options")
    choice = next(label for label in labels if "odontológico" in label)
    options.filter(has_text=choice).first.click()
    second = page.locator("#messages > .turn").nth(1)
    expect(second.locator('[data-slot="user-text"]')).to_have_text(choice)
    expect(second).to_have_attribute("data-state", "complete", timeout=ANSWER_TIMEOUT)
    expect(second.locator(".source-card").first).to_contain_text("odontológico")


def test_a_clicked_option_is_searched_with_the_question_it_answers(
    page: Page, live_url: str
) -> None:
    # The button sends only the option's title; the next turn's rewrite joins it to what
    # the person asked ("cobre dentista?"), and its trace says which rule did.
    login(page, live_url, "ana")
    turn = ask(page, "o plano cobre dentista?")
    expect(turn).to_have_attribute("data-state", "clarify")
    options = turn.locator('[data-slot="options"] button')
    labels = [options.nth(i).inner_text() for i in range(options.count())]
    choice = next(label for label in labels if "odontológico" in label)
    options.filter(has_text=choice).first.click()
    second = page.locator("#messages > .turn").nth(1)
    expect(second.locator('[data-slot="user-text"]')).to_have_text(choice)
    expect(second).to_have_attribute("data-state", "complete", timeout=ANSWER_TIMEOUT)
    trace = open_trace(second)
    searched = " ".join(q for _, q in query_texts(second)).lower()
    assert "odontológico" in searched and "dentista" in searched, searched
    expect(trace).to_contain_text("opção escolhida")
    shot(page, "36-option-keeps-the-question", full_page=True)


def test_pronoun_with_nothing_before_it_asks_with_options_and_keeps_the_verb(
    page: Page, live_url: str
) -> None:
    login(page, live_url, "ana")
    turn = ask(page, "isso vale para estagiário?")
    expect(turn).to_have_attribute("data-state", "clarify")
    options = turn.locator('[data-slot="options"] button')
    assert options.count() >= 2
    trace = open_trace(turn)
    # "vale" is the verb here (is valid), not the glossary's salary advance.
    expect(trace).not_to_contain_text("adiantamento salarial")
    shot(page, "12-pronoun-clarification")


def test_country_fixed_by_the_conversation_leads_the_follow_up(page: Page, live_url: str) -> None:
    login(page, live_url, "ana")
    ask(page, "¿cuántos días de vacaciones tengo en Chile?")
    follow_up = ask(page, "¿y si renuncio antes de tomarlas?")
    expect(follow_up.locator(".source-card").first).to_contain_text("Chile")
    open_trace(follow_up)
    queries = query_texts(follow_up, exclude_original=False)
    assert all("chile" in text.lower() for _, text in queries), queries
    # The country is a preference no looser query outvotes: Chile's pages before any
    # other country's, and the trace says so.
    titles = follow_up.locator(".source-card .source-title").all_inner_texts()
    chile = [i for i, title in enumerate(titles) if "Chile" in title]
    others = [i for i, title in enumerate(titles) if "España" in title or "México" in title]
    assert chile and (not others or max(chile) < min(others)), titles
    expect(follow_up).to_contain_text("country filter: chile")
    shot(page, "12-chile-follow-up", full_page=True)


def test_a_tab_beyond_the_socket_cap_says_so_and_connects_once_another_closes(
    context: Any, live_url: str
) -> None:
    """CHATRAG_MAX_SOCKETS_PER_USER (8, the default) tabs of one user, and a ninth."""
    tabs = [context.new_page()]
    login(tabs[0], live_url, "rita")
    for _ in range(8):
        tab = context.new_page()
        tab.goto(live_url + "/")
        expect(tab.locator("#composer-input")).to_be_visible()
        tabs.append(tab)
    # The tab refused is the last one whose socket arrived (almost always the ninth).
    deadline = time.monotonic() + 20
    while not (refused := [t for t in tabs if t.locator("#connection-status").is_visible()]):
        assert time.monotonic() < deadline, "no tab was refused"
        tabs[-1].wait_for_timeout(200)
    assert len(refused) == 1
    (over,) = refused
    expect(over.locator("#connection-status")).to_have_text(re.compile("janelas demais do chat"))
    shot(over, "14-too-many-tabs")
    next(t for t in tabs if t is not over).close()
    # It tries again every 30 seconds: in by then, the notice gone.
    expect(over.locator("#connection-status")).to_be_hidden(timeout=45_000)


def test_a_question_the_pages_do_not_answer_says_so_and_staff_see_why(
    browser: Any, page: Page, live_url: str, e2e_db: E2EDatabase
) -> None:
    """Issue 35: the demo knowledge base has no canteen menu; the answer says the pages
    found don't say it and lists the closest ones, and the staff timeline shows the turn's
    answer check ("pages did not say", why these lines)."""
    login(page, live_url, "ana")
    turn = ask(page, "qual o cardápio do refeitório hoje?")
    answer = turn.locator('[data-slot="answer"]')
    expect(answer).to_contain_text("não dizem isso")
    expect(turn.locator(".source-card").first).to_be_visible()  # the closest pages
    answer.scroll_into_view_if_needed()
    shot(page, "not-found-answer")
    [(conversation_id,)] = e2e_db.query(
        "SELECT m.conversation_id FROM conversations_message m"
        " WHERE m.text = 'qual o cardápio do refeitório hoje?' ORDER BY m.id DESC LIMIT 1"
    )

    staff = browser.new_context(locale="pt-BR")
    try:
        admin = staff.new_page()
        admin.goto(live_url + "/admin/login/")
        admin.locator("#id_username").fill("admin")
        admin.locator("#id_password").fill(DEMO_PASSWORDS["admin"])
        admin.locator("input[type=submit]").click()
        admin.wait_for_url(live_url + "/admin/")
        admin.goto(live_url + f"/admin/conversations/conversation/{conversation_id}/change/")
        check = admin.locator(".review-answer-check").last
        expect(check).to_contain_text("don't hold it")
        expect(admin.locator("body")).to_contain_text("pages did not say")
        lines = admin.locator(".review-answer-lines").last
        expect(lines).to_be_visible()
        lines.scroll_into_view_if_needed()
        admin.screenshot(path=str(SCREENSHOTS / "answer-why-in-the-timeline.png"))
    finally:
        staff.close()


def test_an_english_question_over_portuguese_pages_answers_from_the_right_line(
    page: Page, live_url: str
) -> None:
    """Issue 35: the demo's pages are Portuguese; asked in English, the answer quotes the
    corporate card page's lost-or-stolen line, which shares no word with the question (a
    page in another language than the question is read by its lines' meaning), not the
    meal-voucher lines that say "crédito"."""
    login(page, live_url, "ana")
    turn = ask(page, "how do I report a lost company credit card?")
    answer = turn.locator('[data-slot="answer"]')
    expect(answer).to_contain_text("bloqueie no aplicativo do banco")
    expect(answer).to_contain_text("24 horas")
    answer.scroll_into_view_if_needed()
    shot(page, "35-english-question-portuguese-line")
