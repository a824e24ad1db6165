// Bring the cited passage of a document into view and give it focus (for keyboard users).
(function () {
  "use strict";
  var target = document.querySelector(".chunk.is-highlighted");
  if (!target) return;
  // Scroll only when the passage is not already near the top (the first one usually is).
  if (target.getBoundingClientRect().top > window.innerHeight * 0.4) {
    target.scrollIntoView({ block: "start" });
  }
  target.focus({ preventScroll: true });
})();
