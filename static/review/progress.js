// Poll a staff-only JSON endpoint and move a <progress> bar; reload the page when finished.
// Used by the admin pages of ingestion jobs and evaluation runs (no external scripts).
(function () {
  "use strict";
  const box = document.querySelector("[data-progress-url]");
  if (!box) return;
  const bar = box.querySelector("progress");
  const text = box.querySelector(".job-progress-text");
  const url = box.getAttribute("data-progress-url");
  let delay = 1000;

  function show(state) {
    if (state.total > 0) {
      bar.max = state.total;
      bar.value = state.done;
    } else {
      bar.removeAttribute("value"); // indeterminate until the total is known
    }
    text.textContent = state.status + " · " + state.done + " / " + state.total +
      (state.total > 0 ? " (" + state.percent + "%)" : "");
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (state) {
        show(state);
        if (state.finished) {
          window.location.reload();
          return;
        }
        delay = 1000;
        window.setTimeout(poll, delay);
      })
      .catch(function () {
        delay = Math.min(delay * 2, 15000); // back off while the server is unreachable
        window.setTimeout(poll, delay);
      });
  }

  window.setTimeout(poll, delay);
})();
