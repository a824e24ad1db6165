/* chatrag chat page: the WebSocket client, live rendering of turns, sidebar dialogs.
 *
 * - No dependencies, no build step. Works under a strict Content-Security-Policy: data comes
 *   from <script type="application/json"> blocks, markup from <template> elements rendered by
 *   the same Django partials as the stored messages.
 * - Text from users, documents and the model is only ever inserted as text (textContent,
 *   append(string)); never as HTML.
 * - The server is the source of truth: a reload renders what is stored, `open` resumes an
 *   answer still being written (snapshot + deltas), and anything missed while disconnected is
 *   reconciled by re-reading the conversation page.
 */
(function () {
  "use strict";

  const configEl = document.getElementById("chat-config");
  if (!configEl) return;
  const config = JSON.parse(configEl.textContent);
  const T = JSON.parse(document.getElementById("i18n").textContent);
  const lang = document.documentElement.lang || "pt-br";

  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const slot = (root, name) => root.querySelector('[data-slot="' + name + '"]');

  const els = {
    messages: $("#messages"),
    scroller: $("#scroller"),
    empty: $("#empty-state"),
    form: $("#composer"),
    input: $("#composer-input"),
    send: $("#send-button"),
    stop: $("#stop-button"),
    connection: $("#connection-status"),
    title: $("#conversation-title"),
    actions: $("#conversation-actions"),
    convList: $("#conv-list"),
    convEmpty: $("#conv-empty"),
  };

  const FINAL = new Set(["complete", "clarify", "stopped", "error"]);
  const ACTIVE = new Set(["pending", "streaming"]);
  const STALE_MS = 90000;
  const TOO_MANY_SOCKETS_RETRY_MS = 30000; // a closed tab frees a place at once
  const lastEvent = new WeakMap(); // turn -> time of the last frame about it

  const state = {
    conversation: config.conversation,
    socket: null,
    retries: 0,
    outbox: [],
    resyncing: false,
    unknownSeen: false,
    reconcileTimer: 0,
    autoscroll: true,
    connectionNotice: "",
  };

  // --- small helpers ---------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function url(name, id) {
    return config.urls[name].replace("/0/", "/" + Number(id) + "/");
  }

  function fromTemplate(id) {
    return document.getElementById(id).content.firstElementChild.cloneNode(true);
  }

  function format(template, values) {
    return template.replace(/%\((\w+)\)s/g, (_, key) => String(values[key] ?? ""));
  }

  function safeUrl(value) {
    // A path on this site only: not "javascript:", "//host", a backslash read as "//", or
    // whitespace and control characters (browsers drop tabs and newlines from URLs).
    return typeof value === "string" && /^\/(?![\/\\])[^\s\x00-\x1f\x7f]*$/.test(value)
      ? value
      : "#";
  }

  function csrfToken() {
    const input = $('input[name="csrfmiddlewaretoken"]');
    return input ? input.value : "";
  }

  function titleFrom(text) {
    // Same rule as conversations.services.title_from_text.
    const flat = text.split(/\s+/).filter(Boolean).join(" ");
    if (flat.length <= 60) return flat;
    const cut = flat.slice(0, 59);
    const space = cut.lastIndexOf(" ");
    return (space > 0 ? cut.slice(0, space) : cut) + "…";
  }

  // --- scrolling -------------------------------------------------------------------------

  function nearBottom() {
    const s = els.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 140;
  }

  function stick(force) {
    if (force) state.autoscroll = true;
    if (state.autoscroll) {
      els.scroller.scrollTo({ top: els.scroller.scrollHeight, behavior: force ? "auto" : "smooth" });
    }
  }

  els.scroller.addEventListener("scroll", () => {
    state.autoscroll = nearBottom();
  });

  // --- turns -----------------------------------------------------------------------------

  function allTurns() {
    return $$(".turn", els.messages);
  }

  function turnByUser(id) {
    return els.messages.querySelector('.turn[data-user-message-id="' + Number(id) + '"]');
  }

  function turnByAnswer(id) {
    const answer = els.messages.querySelector(
      '.msg-assistant[data-message-id="' + Number(id) + '"]'
    );
    return answer ? answer.closest(".turn") : null;
  }

  function answerId(turn) {
    return $(".msg-assistant", turn).dataset.messageId || "";
  }

  function createTurn(userText) {
    const turn = fromTemplate("tpl-turn");
    setUserText(turn, userText || "");
    els.messages.append(turn);
    els.empty.hidden = true;
    return turn;
  }

  function setUserText(turn, text) {
    slot(turn, "user-text").textContent = text;
    $(".msg-user", turn).hidden = !text;
  }

  function setUserId(turn, id) {
    turn.dataset.userMessageId = String(id);
    turn.id = "turn-" + Number(id);
  }

  function setAnswerId(turn, id) {
    if (id) $(".msg-assistant", turn).dataset.messageId = String(Number(id));
  }

  function touch(turn) {
    lastEvent.set(turn, Date.now());
  }

  function setState(turn, name, message) {
    turn.dataset.state = name;
    turn.setAttribute("aria-busy", String(ACTIVE.has(name)));
    const label = message || (T.states && T.states[name]) || "";
    const status = slot(turn, "state");
    status.textContent = label;
    status.hidden = !label;
    slot(turn, "actions").hidden = !(name === "complete" || name === "stopped");
    if (name !== "clarify") slot(turn, "options").hidden = true;
    updateBusy();
  }

  // The answer as streamed, markup characters included (the server renders it in data-raw).
  function answerText(turn) {
    return slot(turn, "answer").dataset.raw || "";
  }

  // Plain runs, `**bold**` runs and `[n]` citations of existing sources, as DOM nodes.
  function inline(text, sourceCount, answer) {
    const pattern = /\*\*([^*\n]+?)\*\*|\[(\d{1,3})\]/g;
    const parts = [];
    let position = 0;
    let match;
    while ((match = pattern.exec(text)) !== null) {
      const number = match[2] === undefined ? 0 : Number(match[2]);
      if (match[2] !== undefined && (number < 1 || number > sourceCount)) continue;
      if (match.index > position) parts.push(text.slice(position, match.index));
      if (match[1] !== undefined) {
        parts.push(el("strong", "", match[1]));
      } else {
        const link = el("a", "cite", match[0]);
        link.href = "#src-" + answer + "-" + number;
        parts.push(link);
      }
      position = match.index + match[0].length;
    }
    if (position < text.length) parts.push(text.slice(position));
    return parts;
  }

  // The answer as paragraphs and lists, read as the server reads it (answer_blocks in
  // conversations/views/present.py): "- item", "  - nested item", "3. step"; a blank line
  // ends a paragraph or a list.
  function answerBlocks(text) {
    const blocks = [];
    let lines = [];
    let open = false;
    const paragraphEnd = () => {
      if (lines.length) blocks.push({ kind: "p", text: lines.join("\n") });
      lines = [];
    };
    const item = (kind, body, start) => {
      paragraphEnd();
      const last = blocks[blocks.length - 1];
      if (!(open && last.kind === kind)) blocks.push({ kind, start, items: [] });
      blocks[blocks.length - 1].items.push({ text: body, children: [] });
      open = true;
    };
    for (const line of text.split("\n")) {
      const nested = /^ {2,}[-*•] (.*)$/.exec(line);
      const last = blocks[blocks.length - 1];
      if (nested && open && last.items.length) {
        last.items[last.items.length - 1].children.push(nested[1]);
        continue;
      }
      const bullet = nested || /^[-*•] (.*)$/.exec(line);
      const numbered = /^(\d{1,3})[.)] (.*)$/.exec(line);
      if (bullet) item("ul", bullet[1], 1);
      else if (numbered) item("ol", numbered[2], Number(numbered[1]));
      else if (!line.trim()) {
        paragraphEnd();
        open = false;
      } else {
        open = false;
        lines.push(line);
      }
    }
    paragraphEnd();
    return blocks;
  }

  function renderAnswer(turn, text) {
    const box = slot(turn, "answer");
    box.dataset.raw = text;
    const sourceCount = slot(turn, "source-list").children.length;
    const id = answerId(turn);
    const filled = (tag, body) => {
      const node = el(tag, "");
      node.append(...inline(body, sourceCount, id));
      return node;
    };
    const nodes = answerBlocks(text).map((block) => {
      if (block.kind === "p") return filled("p", block.text);
      const list = el(block.kind, "");
      if (block.kind === "ol") list.setAttribute("start", String(block.start));
      for (const item of block.items) {
        const li = filled("li", item.text);
        if (item.children.length) {
          const sub = el("ul", "");
          for (const child of item.children) sub.append(filled("li", child));
          li.append(sub);
        }
        list.append(li);
      }
      return list;
    });
    box.replaceChildren(...nodes);
    box.hidden = !text;
  }

  function renderSources(turn, sources) {
    const list = slot(turn, "source-list");
    const id = answerId(turn);
    list.replaceChildren(
      ...(sources || []).map((source) => {
        const card = fromTemplate("tpl-source");
        card.id = "src-" + id + "-" + Number(source.n);
        slot(card, "n").textContent = String(source.n);
        slot(card, "title").textContent = source.title || "";
        slot(card, "link").href = safeUrl(source.url);
        const section = slot(card, "section");
        section.textContent = source.section || "";
        section.hidden = !source.section;
        slot(card, "snippet").textContent = (source.snippet || "").replaceAll("**", "");
        return card;
      })
    );
    slot(turn, "sources").hidden = list.children.length === 0;
    renderAnswer(turn, answerText(turn)); // citations may point at the new cards
  }

  function renderOptions(turn, options) {
    const box = slot(turn, "options");
    box.replaceChildren(
      ...(options || []).map((option) => {
        const button = el("button", "option js-option", option);
        button.type = "button";
        button.dataset.option = option;
        return button;
      })
    );
    box.hidden = box.children.length === 0;
  }

  function highlighted(text, phrases) {
    const wanted = phrases.filter((p) => p && p.trim()).sort((a, b) => b.length - a.length);
    if (!wanted.length) return [text];
    const escaped = wanted.map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    const pattern = new RegExp(escaped.join("|"), "gi");
    const parts = [];
    let position = 0;
    let match;
    while ((match = pattern.exec(text)) !== null) {
      if (match[0] === "") {
        pattern.lastIndex += 1;
        continue;
      }
      if (match.index > position) parts.push(text.slice(position, match.index));
      parts.push(el("mark", "", match[0]));
      position = match.index + match[0].length;
    }
    if (position < text.length) parts.push(text.slice(position));
    return parts;
  }

  function fillRow(root, name, items, build) {
    slot(root, name).replaceChildren(...items.map(build));
    slot(root, name + "-row").hidden = items.length === 0;
  }

  function traceFromFrame(frame) {
    return {
      original: frame.original || "",
      backend: frame.backend || "",
      model: frame.model || "",
      queries: frame.queries || [],
      glossary: frame.glossary || [],
      corrections: Object.entries(frame.corrections || {}),
      rules: frame.rules || [],
      notes: frame.notes || [],
      anomalies: frame.anomalies || [],
      errors: frame.errors || [],
    };
  }

  function renderTrace(turn, trace) {
    const grid = fromTemplate("tpl-trace");
    slot(grid, "original").textContent = trace.original;
    const expansions = trace.glossary.map((g) => g.expansion || "");
    slot(grid, "queries").replaceChildren(
      ...trace.queries.map((query) => {
        const item = el("li", "query");
        item.dataset.type = query.type;
        const type = el("span", "qtype qtype-" + query.type, T.queryTypes[query.type] || query.type);
        type.title = query.type;
        const text = el("span", "qtext");
        text.append(...highlighted(String(query.text || ""), expansions));
        item.append(type, " ", text);
        if (typeof query.weight === "number" && query.weight !== 1) {
          item.append(" ", el("span", "qweight", T.weight + " " + query.weight.toLocaleString(lang)));
        }
        return item;
      })
    );
    fillRow(grid, "glossary", trace.glossary, (g) => {
      const item = el("li");
      item.append(el("mark", "gloss", g.term + " → " + g.expansion));
      return item;
    });
    fillRow(grid, "corrections", trace.corrections, ([wrong, right]) => {
      const item = el("li");
      item.append(el("del", "", wrong), " → ", el("ins", "", right));
      return item;
    });
    // Each named rule by its label in the page's language, then its own detail; then the
    // notes no rule wrote.
    const notes = [...trace.rules.map((rule) => ({ rule })), ...trace.notes.map((note) => ({ note }))];
    fillRow(grid, "notes", notes, (item) => {
      if (!item.rule) return el("li", "", item.note);
      const li = el("li", "rule");
      li.dataset.rule = item.rule.id;
      const label = el("span", "rule-label", T.rules[item.rule.id] || item.rule.id);
      label.title = item.rule.id;
      li.append(label, " ", el("span", "rule-detail", item.rule.detail || ""));
      return li;
    });
    fillRow(grid, "anomalies", trace.anomalies, (note) => el("li", "", note));
    fillRow(grid, "errors", trace.errors, (note) => el("li", "", note));
    slot(grid, "backend").textContent =
      (T.backends[trace.backend] || trace.backend) + (trace.model ? " · " + trace.model : "");
    slot(turn, "trace-body").replaceChildren(grid);
    slot(turn, "trace").hidden = false;
  }

  // --- busy state, stop ------------------------------------------------------------------

  function activeTurns() {
    return allTurns().filter((t) => ACTIVE.has(t.dataset.state));
  }

  function updateBusy() {
    const busy = activeTurns().length > 0;
    els.stop.hidden = !busy;
    els.send.disabled = busy;
  }

  els.stop.addEventListener("click", () => {
    for (const turn of activeTurns()) {
      if (turn.dataset.userMessageId) {
        send({ type: "stop", message_id: Number(turn.dataset.userMessageId) });
      } else {
        turn.dataset.stopRequested = "1"; // sent as soon as the server accepts the message
      }
    }
    els.input.focus();
  });

  // --- the conversation ------------------------------------------------------------------

  function conversationItem(id, title) {
    const item = fromTemplate("tpl-conversation");
    const name = title || T.untitled;
    item.dataset.conversationId = String(id);
    const link = slot(item, "link");
    link.href = url("conversation", id);
    link.textContent = name;
    const rename = slot(item, "rename");
    rename.dataset.url = url("rename", id);
    rename.dataset.title = title;
    rename.setAttribute("aria-label", format(T.rename, { title: name }));
    const remove = slot(item, "delete");
    remove.dataset.url = url("delete", id);
    remove.dataset.title = title;
    remove.setAttribute("aria-label", format(T.delete, { title: name }));
    return item;
  }

  function markCurrent(item) {
    for (const other of $$(".conv-item.is-current", els.convList)) {
      other.classList.remove("is-current");
      $(".conv-link", other).removeAttribute("aria-current");
    }
    item.classList.add("is-current");
    $(".conv-link", item).setAttribute("aria-current", "page");
  }

  function setConversation(id, title) {
    if (state.conversation === id) return;
    state.conversation = id;
    const path = url("conversation", id);
    history.replaceState(null, "", path);
    for (const input of $$('input[name="next"]')) input.value = path;
    els.title.textContent = title || T.untitled;
    document.title = (title || T.untitled) + " · chatrag";
    for (const button of $$(".js-rename, .js-delete", els.actions)) {
      button.dataset.url = url(button.classList.contains("js-rename") ? "rename" : "delete", id);
      button.dataset.title = title;
    }
    els.actions.hidden = false;
    const item = conversationItem(id, title);
    els.convList.prepend(item);
    markCurrent(item);
    els.convEmpty.hidden = true;
  }

  function bumpConversation(id) {
    const item = els.convList.querySelector('.conv-item[data-conversation-id="' + Number(id) + '"]');
    if (item && item !== els.convList.firstElementChild) els.convList.prepend(item);
  }

  function sendMessage(text) {
    const clean = (text || "").trim();
    if (!clean || activeTurns().length > 0) return false;
    const clientId = "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
    const turn = createTurn(clean);
    turn.dataset.clientId = clientId;
    if (!state.conversation) state.pendingTitle = titleFrom(clean);
    setState(turn, "pending");
    touch(turn);
    send({ type: "message", conversation: state.conversation, text: clean, client_id: clientId });
    stick(true);
    return true;
  }

  // --- frames from the server ------------------------------------------------------------

  function turnForUser(id, userText) {
    let turn = turnByUser(id);
    if (!turn) {
      // A turn started elsewhere (another tab) or missed while reconnecting.
      turn = createTurn(userText || "");
      setUserId(turn, id);
      setState(turn, "pending");
      if (!userText) scheduleReconcile();
    }
    touch(turn);
    return turn;
  }

  const handlers = {
    conversation(frame) {
      setConversation(frame.id, state.pendingTitle || "");
    },
    accepted(frame) {
      const turn = allTurns().find((t) => t.dataset.clientId === frame.client_id);
      if (!turn) return;
      delete turn.dataset.clientId;
      setUserId(turn, frame.message_id);
      touch(turn);
      bumpConversation(frame.conversation);
      if (turn.dataset.stopRequested) send({ type: "stop", message_id: frame.message_id });
    },
    rewrite(frame) {
      renderTrace(turnForUser(frame.message_id, frame.original), traceFromFrame(frame));
    },
    clarify(frame) {
      const turn = turnForUser(frame.reply_to);
      setAnswerId(turn, frame.message_id);
      renderAnswer(turn, frame.question || "");
      setState(turn, "clarify");
      renderOptions(turn, frame.options);
    },
    sources(frame) {
      const turn = turnForUser(frame.reply_to);
      setAnswerId(turn, frame.message_id);
      renderSources(turn, frame.sources);
      if (!FINAL.has(turn.dataset.state)) setState(turn, "streaming");
    },
    snapshot(frame) {
      const turn = turnForUser(frame.reply_to);
      setAnswerId(turn, frame.message_id);
      if (!slot(turn, "source-list").children.length) renderSources(turn, frame.sources);
      const text = frame.text || "";
      if (text.length > answerText(turn).length) renderAnswer(turn, text);
      if (!FINAL.has(turn.dataset.state)) setState(turn, "streaming");
    },
    delta(frame) {
      const turn = turnByAnswer(frame.message_id);
      if (!turn) {
        resync();
        return;
      }
      touch(turn);
      const current = answerText(turn);
      const end = frame.offset + frame.delta.length;
      if (frame.offset > current.length) {
        resync(); // a gap: ask for a snapshot
        return;
      }
      if (end <= current.length) return; // already have it
      renderAnswer(turn, current + frame.delta.slice(current.length - frame.offset));
      if (turn.dataset.state === "pending") setState(turn, "streaming");
    },
    done(frame) {
      const turn = turnForUser(frame.reply_to);
      setAnswerId(turn, frame.message_id);
      renderAnswer(turn, frame.text || "");
      slot(turn, "extractive").hidden = !frame.extractive;
      setState(turn, frame.status === "stopped" ? "stopped" : "complete");
    },
    error(frame) {
      if (frame.reply_to) {
        setState(turnForUser(frame.reply_to), "error", frame.message);
        return;
      }
      const unaccepted = allTurns().filter((t) => t.dataset.clientId);
      const turn = unaccepted[unaccepted.length - 1];
      if (turn) {
        setState(turn, "error", frame.message);
        delete turn.dataset.clientId;
        if (!els.input.value) els.input.value = slot(turn, "user-text").textContent;
      } else {
        notice(frame.message);
      }
    },
    pong() {
      if (!state.resyncing) return;
      state.resyncing = false;
      if (state.unknownSeen || activeTurns().length) reconcile();
    },
  };

  function handle(frame) {
    const handler = frame && handlers[frame.type];
    if (!handler) return;
    const follow = nearBottom();
    handler(frame);
    if (follow && state.autoscroll) stick(false);
  }

  // --- resynchronising -------------------------------------------------------------------

  function resync() {
    if (state.resyncing || !state.conversation) return;
    state.resyncing = true;
    send({ type: "open", conversation: state.conversation });
    send({ type: "ping" }); // frames are answered in order: the pong follows the snapshots
  }

  function scheduleReconcile() {
    state.unknownSeen = true;
    clearTimeout(state.reconcileTimer);
    state.reconcileTimer = setTimeout(reconcile, 400);
  }

  // Re-read the stored conversation and take every turn the server has finished that this
  // page has not (a `done` sent while the socket was down, or before it joined).
  function reconcile() {
    state.unknownSeen = false;
    if (!state.conversation) return;
    const pageUrl = url("conversation", state.conversation);
    fetch(pageUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
      .then((html) => {
        const page = new DOMParser().parseFromString(html, "text/html");
        const canInsert = !allTurns().some((t) => t.dataset.clientId);
        let previous = null;
        for (const stored of $$("#messages > .turn", page)) {
          const id = stored.dataset.userMessageId;
          if (!id) continue;
          let local = turnByUser(id);
          const storedFinal = FINAL.has(stored.dataset.state);
          if (!local) {
            if (!canInsert) continue;
            local = document.importNode(stored, true);
            if (previous) previous.after(local);
            else els.messages.prepend(local);
          } else if (
            storedFinal &&
            (!FINAL.has(local.dataset.state) || !slot(local, "user-text").textContent)
          ) {
            const fresh = document.importNode(stored, true);
            local.replaceWith(fresh);
            local = fresh;
          }
          touch(local);
          previous = local;
        }
        els.empty.hidden = allTurns().length > 0;
        updateBusy();
      })
      .catch(() => {
        /* the next reconnect or watchdog tick tries again */
      });
  }

  // A turn that hears nothing for a long time: check the server, then give up on it.
  setInterval(() => {
    const now = Date.now();
    for (const turn of activeTurns()) {
      const idle = now - (lastEvent.get(turn) || now);
      if (idle > 2 * STALE_MS) setState(turn, "error", T.noResponse);
      else if (idle > STALE_MS && !turn.dataset.checked) {
        turn.dataset.checked = "1";
        reconcile();
      }
    }
  }, 10000);

  // --- the socket ------------------------------------------------------------------------

  function send(frame) {
    if (state.socket && state.socket.readyState === WebSocket.OPEN) {
      state.socket.send(JSON.stringify(frame));
    } else {
      state.outbox.push(frame);
    }
  }

  function notice(text) {
    els.connection.textContent = text;
    els.connection.hidden = !text;
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const socket = new WebSocket(scheme + location.host + config.wsPath);
    state.socket = socket;
    socket.addEventListener("open", () => {
      state.retries = 0;
      notice("");
      state.resyncing = false;
      if (state.conversation) resync();
      const queued = state.outbox.splice(0);
      for (const frame of queued) socket.send(JSON.stringify(frame));
    });
    socket.addEventListener("message", (event) => {
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return;
      }
      handle(frame);
    });
    socket.addEventListener("close", (event) => {
      if (state.socket === socket) state.socket = null;
      if (event.code === 4401) {
        location.assign(config.urls.login + "?next=" + encodeURIComponent(location.pathname));
        return;
      }
      if (event.code === 4429) {
        // The user's other tabs hold every place: say so, and try again now and then.
        notice(T.tooManySockets);
        setTimeout(connect, TOO_MANY_SOCKETS_RETRY_MS);
        return;
      }
      notice(els.connection.dataset.reconnecting || "");
      const delay = Math.min(10000, 500 * 2 ** state.retries);
      state.retries += 1;
      setTimeout(connect, delay);
    });
  }

  // --- composer --------------------------------------------------------------------------

  els.form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (sendMessage(els.input.value)) els.input.value = "";
    els.input.focus();
  });

  // Grow with the text where CSS `field-sizing` is not supported (CSSOM is allowed by CSP).
  if (!(window.CSS && CSS.supports("field-sizing", "content"))) {
    els.input.addEventListener("input", () => {
      els.input.style.height = "auto";
      els.input.style.height = Math.min(els.input.scrollHeight, 220) + "px";
    });
  }

  els.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      els.form.requestSubmit();
    }
  });

  // --- clicks anywhere in the page -------------------------------------------------------

  function openDialog(id, button) {
    const dialog = document.getElementById(id);
    const form = slot(dialog, "form");
    form.action = button.dataset.url;
    form.querySelector('input[name="next"]').value = location.pathname + location.search;
    if (id === "rename-dialog") {
      const input = $("#rename-input");
      input.value = button.dataset.title || "";
      dialog.showModal();
      input.select();
    } else {
      slot(dialog, "title").textContent = button.dataset.title
        ? "“" + button.dataset.title + "”"
        : "";
      dialog.showModal();
    }
  }

  function postFeedback(turn, value, reason) {
    const body = new FormData();
    body.set("value", String(value));
    body.set("reason", reason || "");
    return fetch(url("feedback", answerId(turn)), {
      method: "POST",
      body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    }).then((response) => {
      if (!response.ok) throw new Error(String(response.status));
      return response.json();
    });
  }

  function actionStatus(turn, text) {
    const status = slot(turn, "action-status");
    status.textContent = text;
    clearTimeout(status._timer);
    status._timer = setTimeout(() => {
      status.textContent = "";
    }, 4000);
  }

  document.addEventListener("click", (event) => {
    const target = event.target.closest(
      ".js-rename, .js-delete, .js-dialog-cancel, .js-option, .js-copy, .js-thumb"
    );
    if (!target) return;
    const turn = target.closest(".turn");
    if (target.matches(".js-rename") && target.dataset.url) {
      openDialog("rename-dialog", target);
    } else if (target.matches(".js-delete") && target.dataset.url) {
      openDialog("delete-dialog", target);
    } else if (target.matches(".js-dialog-cancel")) {
      target.closest("dialog").close();
    } else if (target.matches(".js-option")) {
      sendMessage(target.dataset.option);
    } else if (target.matches(".js-copy") && turn) {
      const text = answerText(turn);
      const done = () => actionStatus(turn, T.copied);
      const failed = () => actionStatus(turn, T.copyFailed);
      if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, failed);
      else failed();
    } else if (target.matches(".js-thumb") && turn) {
      const value = Number(target.dataset.value);
      postFeedback(turn, value, "").then(
        () => {
          for (const thumb of $$(".js-thumb", turn)) {
            thumb.setAttribute("aria-pressed", String(thumb === target));
          }
          slot(turn, "reason-form").hidden = false;
          actionStatus(turn, T.feedbackSaved);
        },
        () => actionStatus(turn, T.feedbackFailed)
      );
    }
  });

  document.addEventListener("submit", (event) => {
    const form = event.target.closest('[data-slot="reason-form"]');
    if (!form) return;
    event.preventDefault();
    const turn = form.closest(".turn");
    const pressed = $('.js-thumb[aria-pressed="true"]', turn);
    if (!pressed) return;
    const reason = form.elements.reason.value.trim();
    postFeedback(turn, Number(pressed.dataset.value), reason).then(
      () => {
        form.hidden = true;
        actionStatus(turn, T.feedbackSaved);
      },
      () => actionStatus(turn, T.feedbackFailed)
    );
  });

  // --- sidebar on narrow screens ---------------------------------------------------------

  const toggle = $("#sidebar-toggle");
  function setSidebar(open) {
    document.body.classList.toggle("sidebar-open", open);
    toggle.setAttribute("aria-expanded", String(open));
    if (open) $("#search-input").focus();
  }
  toggle.addEventListener("click", () => setSidebar(!document.body.classList.contains("sidebar-open")));
  $("#backdrop").addEventListener("click", () => setSidebar(false));
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) {
      setSidebar(false);
      toggle.focus();
    }
  });

  // --- start -----------------------------------------------------------------------------

  els.connection.dataset.reconnecting = els.connection.textContent.trim();
  els.connection.textContent = "";
  for (const turn of allTurns()) touch(turn);
  updateBusy();
  if (allTurns().length) stick(true);
  connect();
  if (!allTurns().length) els.input.focus();
})();
