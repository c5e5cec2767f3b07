// Flow dashboard: small enhancements on top of plain HTML forms. Everything works without this
// file; it only adds copy buttons and confirmations. Served from the binary; no inline script is
// allowed by the Content-Security-Policy, so handlers are attached here.
(function () {
  "use strict";

  function copyText(text, button) {
    var done = function () {
      var original = button.textContent;
      button.textContent = "Copied";
      button.classList.add("copied");
      window.setTimeout(function () {
        button.textContent = original;
        button.classList.remove("copied");
      }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
      return;
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "offscreen";
    document.body.appendChild(area);
    area.select();
    try {
      document.execCommand("copy");
      done();
    } finally {
      document.body.removeChild(area);
    }
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) {
      return;
    }
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (source) {
      copyText(source.textContent.trim(), button);
    }
  });

  document.addEventListener("submit", function (event) {
    var form = event.target;
    // The button pressed may ask its own question (one form, several actions).
    var question = (event.submitter && event.submitter.getAttribute("data-confirm"))
      || form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  }, true);

  // Copy buttons are useless without this script, so they start hidden and appear here.
  document.querySelectorAll("[data-copy]").forEach(function (button) {
    button.hidden = false;
  });
  document.body.addEventListener("htmx:afterSwap", function () {
    document.querySelectorAll("[data-copy]").forEach(function (button) {
      button.hidden = false;
    });
  });
})();
