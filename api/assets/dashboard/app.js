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

  // The assign page's type-ahead: a picked person's e-mail is added to the list once.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-pick-email]");
    if (!button) {
      return;
    }
    var list = document.querySelector(button.getAttribute("data-pick-into"));
    if (!list) {
      return;
    }
    var email = button.getAttribute("data-pick-email");
    var listed = list.value.split(/[\s,;]+/).filter(function (entry) {
      return entry !== "";
    });
    var known = listed.some(function (entry) {
      return entry.toLowerCase() === email.toLowerCase();
    });
    if (!known) {
      listed.push(email);
      list.value = listed.join("\n");
    }
    button.classList.add("picked");
    button.setAttribute("aria-pressed", "true");
  });

  // Enter in a search box that only looks people up must not send the form around it.
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.matches("[data-no-submit]")) {
      event.preventDefault();
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
