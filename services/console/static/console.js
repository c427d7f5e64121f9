// The console's only script of its own: token details on hover, and the colouring switch.
// Pages work without it; htmx (vendored beside it) does the live updates.
(function () {
  "use strict";
  var tip = document.createElement("div");
  tip.id = "token-tip";
  tip.hidden = true;

  function maskText(token) {
    if (token.classList.contains("m1")) return "1 (trained on)";
    if (token.classList.contains("m0")) return "0 (context)";
    return "none (not in a sample)";
  }

  function show(token) {
    var lines = ["id " + token.dataset.i, "text " + JSON.stringify(token.textContent)];
    if (token.dataset.l !== undefined) {
      var logprob = Number(token.dataset.l);
      lines.push("logprob " + logprob.toFixed(4) + "   p = " + Math.exp(logprob).toFixed(4));
    } else {
      lines.push("prompt token");
    }
    lines.push("loss mask " + maskText(token));
    if (token.dataset.t !== undefined) {
      var teacher = Number(token.dataset.t), student = Number(token.dataset.s);
      lines.push("teacher logprob " + teacher.toFixed(4) + "   student " + student.toFixed(4));
      lines.push("gap " + (teacher - student).toFixed(4) +
                 (token.classList.contains("dep") ? "   the student departs from the teacher" : ""));
    }
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    var box = token.getBoundingClientRect();
    var top = box.bottom + 6;
    if (top + tip.offsetHeight > window.innerHeight) top = box.top - tip.offsetHeight - 6;
    tip.style.top = Math.max(0, top) + "px";
    tip.style.left = Math.min(box.left, window.innerWidth - tip.offsetWidth - 8) + "px";
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.body.appendChild(tip);
    document.querySelectorAll("input[name=colour]").forEach(function (input) {
      input.addEventListener("change", function () {
        document.body.classList.toggle("by-mask", input.value === "mask" && input.checked);
      });
    });
  });
  document.addEventListener("mouseover", function (event) {
    var token = event.target.closest ? event.target.closest(".tk[data-i]") : null;
    if (token) show(token); else tip.hidden = true;
  });
})();
