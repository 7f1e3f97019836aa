// Quartermaster's own behaviour on top of htmx; loaded from a file (no inline script, for CSP).

// A button or form with data-confirm asks before it submits (cancel, reject, withdraw, hold).
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = button?.dataset.confirm || event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// Fields with data-count-max show how many characters they hold against their limit (the
// server refuses longer text; the browser is not asked to cut it silently).
function attachCounter(field) {
  if (field.dataset.counted) return;
  field.dataset.counted = "1";
  const max = Number(field.dataset.countMax);
  const counter = document.createElement("small");
  counter.className = "char-counter muted";
  counter.setAttribute("aria-live", "polite");
  counter.id = `${field.id || field.name}-counter`;
  field.setAttribute("aria-describedby",
    `${field.getAttribute("aria-describedby") || ""} ${counter.id}`.trim());
  const update = () => {
    const length = field.value.length;
    counter.textContent = `${length.toLocaleString()} / ${max.toLocaleString()} characters` +
      (length > max ? ` — ${(length - max).toLocaleString()} too many` : "");
    counter.classList.toggle("over-limit", length > max);
  };
  field.addEventListener("input", update);
  field.insertAdjacentElement("afterend", counter);
  update();
}
const countAll = (root) => root.querySelectorAll("[data-count-max]").forEach(attachCounter);
document.addEventListener("DOMContentLoaded", () => countAll(document));
document.addEventListener("htmx:afterSwap", (event) => countAll(event.target));

// A search box with data-log-filter="<id>" shows only the log lines (in that element) that
// contain its text; it keeps filtering as followed logs are swapped in.
function filterLog(input) {
  const box = document.getElementById(input.dataset.logFilter);
  if (!box) return;
  const needle = input.value.toLowerCase();
  box.querySelectorAll(".log-line").forEach((line) => {
    line.hidden = needle !== "" && !line.textContent.toLowerCase().includes(needle);
  });
}
document.addEventListener("input", (event) => {
  if (event.target.dataset?.logFilter) filterLog(event.target);
});
document.addEventListener("htmx:afterSwap", (event) => {
  document.querySelectorAll(`[data-log-filter="${event.target.id}"]`).forEach(filterLog);
});
