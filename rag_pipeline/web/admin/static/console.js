// rag_pipeline admin console: sortable tables, the case filters, chunk text on demand, live run status.
// Plain JavaScript served by the app (no build step, no CDN); every page works without it, it only adds comfort.
"use strict";

function cellValue(row, index, type) {
  const cell = row.cells[index];
  if (!cell) return "";
  const raw = cell.dataset.v !== undefined ? cell.dataset.v : cell.textContent.trim();
  if (type === "num") {
    const n = parseFloat(raw);
    return Number.isNaN(n) ? -Infinity : n;
  }
  return raw.toLowerCase();
}

function makeSortable(table) {
  const headers = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
  headers.forEach((th, index) => {
    if (!th.classList.contains("sortable")) return;
    th.setAttribute("role", "button");
    th.addEventListener("click", () => {
      const ascending = !th.classList.contains("sorted-asc");
      headers.forEach((h) => h.classList.remove("sorted-asc", "sorted-desc"));
      th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
      const type = th.dataset.type || "text";
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      rows.sort((a, b) => {
        const x = cellValue(a, index, type), y = cellValue(b, index, type);
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      rows.forEach((r) => body.appendChild(r));
    });
  });
}

function caseFilters() {
  const table = document.getElementById("cases");
  if (!table) return;
  const search = document.getElementById("case-search");
  const zero = document.getElementById("zero-only");
  const reason = document.getElementById("reason-filter");
  const count = document.getElementById("case-count");
  const params = new URLSearchParams(window.location.search);
  search.value = params.get("q") || "";
  zero.checked = params.get("zero") === "1";
  if (params.get("reason")) reason.value = params.get("reason");
  function apply() {
    const q = search.value.trim().toLowerCase();
    let shown = 0;
    const rows = Array.from(table.tBodies[0].rows);
    rows.forEach((row) => {
      const ok = (!q || row.dataset.search.includes(q)) && (!zero.checked || row.dataset.zero === "1") &&
        (!reason.value || row.dataset.reasons.includes(" " + reason.value + " "));
      row.hidden = !ok;
      if (ok) shown += 1;
    });
    count.textContent = shown + " of " + (count.dataset.total || rows.length) + " cases";
    const next = new URLSearchParams();
    if (q) next.set("q", search.value.trim());
    if (zero.checked) next.set("zero", "1");
    if (reason.value) next.set("reason", reason.value);
    const query = next.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
  }
  document.getElementById("case-filters").addEventListener("submit", (event) => {
    if (!count.dataset.total) event.preventDefault();  // every case is on the page: filter here, no reload
  });
  search.addEventListener("input", apply);
  zero.addEventListener("change", apply);
  reason.addEventListener("change", apply);
  apply();
}

function chunkText() {
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.show-text");
    if (!button) return;
    const row = button.closest("tr");
    const open = row.nextElementSibling;
    if (open && open.classList.contains("textrow") && open.dataset.chunk === button.dataset.chunk) {
      open.remove();
      button.textContent = "text";
      return;
    }
    button.disabled = true;
    try {
      const response = await fetch("/admin/retrieval-evaluations/chunks/" + encodeURIComponent(button.dataset.chunk),
        { headers: { Accept: "application/json" }, credentials: "same-origin" });
      const data = await response.json();
      const textRow = document.createElement("tr");
      textRow.className = "textrow";
      textRow.dataset.chunk = button.dataset.chunk;
      const cell = document.createElement("td");
      cell.colSpan = row.cells.length;
      const head = document.createElement("div");
      head.className = "small muted";
      head.textContent = response.ok ? (data.document_name + " · chunk " + data.ordinal + " · " + data.chunk_id +
        (data.is_current ? "" : " · replaced by re-ingestion")) : data.detail;
      const body = document.createElement("div");
      body.className = "chunktext";
      body.textContent = response.ok ? data.content : "";
      cell.append(head, body);
      textRow.appendChild(cell);
      row.after(textRow);
      button.textContent = "hide";
    } finally {
      button.disabled = false;
    }
  });
}

function liveRuns() {
  const section = document.getElementById("live");
  if (!section) return;
  const launched = (section.dataset.launched || "").split(",").filter(Boolean);
  if (section.dataset.active === "0" && launched.length === 0) return;
  const body = document.querySelector("#live-runs tbody");
  let wasActive = true;
  async function poll() {
    let data;
    try {
      const response = await fetch(section.dataset.poll, { credentials: "same-origin" });
      data = await response.json();
    } catch (error) {
      window.setTimeout(poll, 4000);
      return;
    }
    const shown = data.runs.filter((r) => r.status === "queued" || r.status === "running" ||
      launched.includes(r.run_id));
    body.replaceChildren(...shown.map(rowOf));
    data.runs.forEach(historyStatus);  // the run history below says the same as this table
    section.hidden = false;
    if (shown.length === 0) body.innerHTML = '<tr class="empty"><td colspan="5" class="muted">no run queued or running</td></tr>';
    const warning = document.getElementById("queue-warning");
    if (data.queue && data.queue.message && !data.queue.daemon_running && !warning) {
      const div = document.createElement("div");
      div.className = "flash warning";
      div.id = "queue-warning";
      div.setAttribute("role", "alert");
      div.textContent = data.queue.message;
      section.prepend(div);
    }
    if (data.active > 0) {
      wasActive = true;
      window.setTimeout(poll, 1500);
    } else if (wasActive) {
      section.dataset.done = "1";
      const url = new URL(window.location.href);
      url.searchParams.delete("launched");
      url.searchParams.delete("uploaded");
      window.setTimeout(() => window.location.replace(url.toString()), 800);  // refresh metrics, gate, charts
    }
  }
  function historyStatus(run) {
    const cell = document.querySelector('#run-history tr[data-run="' + run.run_id + '"] td.run-status');
    if (!cell || cell.dataset.status === run.status) return;
    cell.dataset.status = run.status;
    const badge = document.createElement("span");
    badge.className = "badge " + run.status;
    badge.textContent = run.status;
    cell.replaceChildren(badge);
    if (run.error) {
      const error = document.createElement("span");
      error.className = "small bad run-error";
      error.textContent = run.error;
      cell.append(" ", error);
    }
  }
  function rowOf(run) {
    const tr = document.createElement("tr");
    tr.dataset.run = run.run_id;
    tr.dataset.status = run.status;
    const pct = run.cases_total ? Math.round((100 * run.cases_done) / run.cases_total) : 0;
    tr.innerHTML = "<td></td><td><span class='badge'></span></td><td><span class='progress'><span></span></span> " +
      "<span class='count'></span></td><td></td><td><a class='mono'></a></td>";
    tr.cells[0].textContent = run.strategy_version;
    const badge = tr.cells[1].firstChild;
    badge.textContent = run.status;
    badge.classList.add(run.status);
    if (run.error) tr.cells[1].append(" " + run.error);  // the whole reason: it is one line
    tr.querySelector(".progress > span").style.width = pct + "%";
    tr.querySelector(".count").textContent = run.cases_done + " / " + run.cases_total;
    tr.cells[3].textContent = (run.started_at || "").replace("T", " ").slice(0, 16) + " UTC";
    const link = tr.querySelector("a");
    link.href = "/admin/retrieval-evaluations/runs/" + run.run_id;
    link.textContent = run.run_id.slice(0, 8);
    return tr;
  }
  poll();
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("table.sortable").forEach(makeSortable);
  caseFilters();
  chunkText();
  liveRuns();
});
