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

// A pod's log box (data-follow-box="<checkbox id>") is polled only while its Follow box is
// ticked (its first load always happens). htmx's own trigger filters are JavaScript that the
// Content-Security-Policy (no eval) does not let run, so the rule is here.
document.addEventListener("htmx:beforeRequest", (event) => {
  const box = event.detail.elt;
  const follow = box.dataset?.followBox && document.getElementById(box.dataset.followBox);
  if (follow && !follow.checked && box.childElementCount > 0) event.preventDefault();
});

// A log opens at its end, and while you are at the end new lines keep it there; scroll up and
// it stays where you are (new lines still arrive below).
const atLogEnd = (pre) => pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
document.addEventListener("htmx:beforeSwap", (event) => {
  const box = event.detail.target;
  if (!box.dataset?.followBox) return;
  const pre = box.querySelector("pre.log");
  // A hidden log (its pod's section folded) has no position of its own: it follows the end.
  box.logView = pre && pre.clientHeight > 0 ? { atEnd: atLogEnd(pre), top: pre.scrollTop }
    : { atEnd: true };
});
document.addEventListener("htmx:afterSwap", (event) => {
  const box = event.detail.target;
  const pre = box.dataset?.followBox && box.querySelector("pre.log");
  if (!pre || !box.logView) return;
  pre.scrollTop = box.logView.atEnd ? pre.scrollHeight : box.logView.top;
});
// A folded pod's section opened: its log shows its end.
document.addEventListener("toggle", (event) => {
  if (!event.target.open) return;
  event.target.querySelectorAll("[data-follow-box] pre.log").forEach((pre) => {
    pre.scrollTop = pre.scrollHeight;
  });
}, true);

// The job page: the live status carries which pods the job has and whether it has ended
// (data-pods); when that differs from what the logs panel shows, the panel reloads itself.
document.addEventListener("htmx:afterSettle", () => {
  const status = document.getElementById("job-status");
  const logs = document.getElementById("job-logs");
  if (status && logs && status.dataset.pods !== logs.dataset.pods) {
    htmx.trigger(logs, "pods-changed");
  }
});
