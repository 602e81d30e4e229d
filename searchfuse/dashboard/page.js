"use strict";
// The searchfuse dashboard: polls /api/status and /healthz, draws the keys, the hold,
// the budgets, a timeline and the events. Every text from the server is set with
// textContent (never parsed as HTML); nothing is loaded from anywhere else.
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const POLL = Math.max(0.1, Number(document.body.dataset.poll) || 2) * 1000;
  const TOKEN = new URLSearchParams(location.search).get("token");
  const HEADERS = TOKEN ? { Authorization: "Bearer " + TOKEN } : {};
  const HOUR = 3600;
  const KINDS = {
    rate_limited: { label: "429", lane: 0, colour: "#cf222e" },
    cooldown: { label: "cooldown", lane: 1, colour: "#9a6700" },
    hold: { label: "hold", lane: 1, colour: "#8250df" },
    exhausted: { label: "exhausted", lane: 1, colour: "#cf222e" },
    cooldown_cleared: { label: "cooldown over", lane: 1, colour: "#1a7f37" },
    passed_over: { label: "passed over", lane: 2, colour: "#bc4c00" },
    serves_again: { label: "serves again", lane: 2, colour: "#1a7f37" },
    budget: { label: "budget refused", lane: 3, colour: "#0969da" },
  };
  const LANES = ["429s", "cooldowns, holds", "down the chain", "budgets"];
  // With more keys than this, a provider's table shows those needing a look first.
  const ROWS = 50;
  const URGENCY = { cooling: 0, exhausted: 1, disabled: 2, held: 3, available: 4 };
  let data = null;
  let receivedAt = 0;
  let everyKey = false;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }
  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function num(value) {
    if (value === null || value === undefined) return "?";
    return Number.isInteger(value) ? String(value) : String(Math.round(value * 1000) / 1000);
  }
  function per(seconds) {
    const names = { 1: "s", 60: "min", 3600: "h", 86400: "day" };
    return names[seconds] || num(seconds) + " s";
  }
  function span(seconds, ticking) {
    // Rounded up, as the terminal view does: time left never reads as over while it is not.
    // A countdown (`ticking`) shows its seconds up to two hours.
    const s = Math.max(0, Math.ceil(seconds));
    if (s < 120) return s + " s";
    if (s < 7200) return ticking ? Math.floor(s / 60) + " min " + (s % 60) + " s" : Math.ceil(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function elapsed() {
    return (performance.now() - receivedAt) / 1000;
  }
  function bar(used, limit) {
    const cell = el("td", null, "usage");
    if (used === null || used === undefined || !limit) {
      cell.append(el("span", num(used) + "/" + (limit ? num(limit) : "?")));
      return cell;
    }
    const share = Math.min(1, Math.max(0, used / limit));
    const colour = share >= 0.9 ? "#cf222e" : share >= 0.7 ? "#9a6700" : "#1a7f37";
    const holder = el("span", null, "bar");
    const drawing = svg("svg", { width: 112, height: 10, viewBox: "0 0 100 10",
      preserveAspectRatio: "none", role: "img", "aria-label": Math.round(share * 100) + "%" });
    drawing.append(svg("rect", { x: 0, y: 0, width: share * 100, height: 10, fill: colour }));
    holder.append(drawing);
    cell.append(holder, el("span", num(used) + "/" + num(limit)));
    return cell;
  }
  function countdown(cell, seconds, why) {
    cell.textContent = "";
    cell.dataset.left = String(seconds || 0);
    cell.dataset.why = why || "";
    tickCell(cell);
  }
  function tickCell(cell) {
    const left = Number(cell.dataset.left) - elapsed();
    cell.textContent = left > 0 ? span(left, true) + (cell.dataset.why ? " (" + cell.dataset.why + ")" : "") : "–";
  }

  function drawKeys(keys) {
    const section = document.getElementById("providers");
    section.textContent = "";
    const providers = [...new Set(keys.map((k) => k.provider))];
    for (const provider of providers) {
      section.append(el("h2", provider));
      const table = el("table", null, "keys");
      table.dataset.provider = provider;
      const head = table.createTHead().insertRow();
      for (const title of ["key", "account", "notes", "state", "used / limit", "pacing window",
        "cooldown", "last error"]) head.append(el("th", title));
      const body = table.createTBody();
      const mine = keys.filter((k) => k.provider === provider);
      let shown = mine;
      if (!everyKey && mine.length > ROWS) {
        const rank = (k) => (k.state in URGENCY ? URGENCY[k.state] : 0);
        shown = [...mine].sort((a, b) => rank(a) - rank(b)).slice(0, ROWS);  // stable: chain order
      }
      for (const key of shown) {
        const row = body.insertRow();
        row.dataset.fingerprint = key.fingerprint;
        row.append(el("td", key.key, "key"), el("td", key.account || "–", "text"),
          el("td", key.notes || "–", "text"), el("td", key.state, "state " + key.state));
        let used = key.key_usage;
        if (used !== null && used !== undefined) used += key.local_credits || 0;
        const limit = key.key_limit !== null && key.key_limit !== undefined ? key.key_limit : key.plan_limit;
        row.append(bar(used, limit));
        const window = el("td", null, "mono");
        window.textContent = key.window_limit
          ? (key.window_requests === null ? "?" : num(key.window_requests)) + "/" + key.window_limit +
            " per " + per(key.window_seconds)
          : "–";
        row.append(window);
        const cell = el("td", null, "countdown mono");
        countdown(cell, key.cooldown_left, key.cooldown_reason || (key.cooldown_left > 0 ? key.state : ""));
        row.append(cell, el("td", key.last_error || "–", "text"));
      }
      section.append(table);
      if (shown.length < mine.length) section.append(more(shown, mine));
    }
  }
  function more(shown, mine) {
    // "… 950 more of 1000 keys: 948 available, 2 exhausted", and a button showing them all.
    const counts = new Map();
    const seen = new Set(shown);
    for (const k of mine) if (!seen.has(k)) counts.set(k.state, (counts.get(k.state) || 0) + 1);
    const told = [...counts].map(([state, n]) => n + " " + state).join(", ");
    const line = el("p", "… " + (mine.length - shown.length) + " more of " + mine.length +
      " keys: " + told + " ", "more dim");
    const button = el("button", "show all " + mine.length);
    button.addEventListener("click", () => { everyKey = true; draw(); });
    line.append(button);
    return line;
  }

  function drawHold(hold) {
    const banner = document.getElementById("hold");
    const left = hold ? hold.seconds_left - elapsed() : 0;
    if (!hold || left <= 0) {
      banner.className = "banner ok";
      banner.textContent = "No hold: searches may be sent.";
      return;
    }
    banner.className = "banner hold";
    banner.textContent = "Hold: every search waits " + span(left, true) + " after a 429 on " +
      (hold.key || "a key") + (hold.provider ? " (" + hold.provider + ")" : "") + ".";
  }

  function drawBudgets(budgets) {
    // The router's own use, or (a budget per conversation or per user) how many spent
    // from it, how many used it all and who most: as `searchfuse status --budgets`.
    const body = document.querySelector("#budgets tbody");
    body.textContent = "";
    document.getElementById("budgets").hidden = budgets.length === 0;
    document.getElementById("no-budgets").hidden = budgets.length > 0;
    for (const b of budgets) {
      const row = body.insertRow();
      row.dataset.per = b.per;
      row.append(el("td", b.budget));
      if (b.used === null || b.used === undefined) {
        const many = b.per === "conversation" ? "conversations" : "users";
        row.append(el("td", num(b.limit) + " for each", "mono"), el("td", "–"),
          el("td", num(b.spenders || 0) + " " + many + ", " + num(b.exhausted || 0) + " used all"));
        const most = el("td", null, "top");
        (b.top || []).forEach((t, i) => {
          if (i) most.append(", ");
          most.append(el("span", t.who, "who"), " " + num(t.used));
        });
        if (!(b.top || []).length) most.textContent = "–";
        row.append(most);
      } else {
        row.append(bar(b.used, b.limit), el("td", num(b.left), "mono"), el("td", "–"), el("td", "–"));
      }
      const resets = el("td", null, "mono");
      resets.dataset.at = b.resets_at === null || b.resets_at === undefined ? "" : String(b.resets_at);
      tickResets(resets);
      row.append(resets);
    }
  }
  function tickResets(cell) {
    cell.textContent = cell.dataset.at ? span(Number(cell.dataset.at) - data.now - elapsed()) : "–";
  }

  function drawTimeline(events, now) {
    const chart = document.getElementById("timeline");
    chart.textContent = "";
    const left = 120, right = 890, top = 10, lane = 30;
    const x = (t) => left + ((t - (now - HOUR)) / HOUR) * (right - left);
    LANES.forEach((name, i) => {
      const y = top + i * lane + lane / 2;
      chart.append(svg("text", { x: 4, y: y + 4 }, name));
      chart.append(svg("line", { x1: left, x2: right, y1: y, y2: y, stroke: "#d0d7de" }));
    });
    for (let m = 60; m >= 0; m -= 15) {
      const tx = x(now - m * 60);
      chart.append(svg("text", { x: tx - 14, y: top + 4 * lane + 12 }, m ? "−" + m + " min" : "now"));
    }
    for (const event of events) {
      const t = Date.parse(event.time) / 1000;
      const kind = KINDS[event.kind];
      if (!kind || !(t >= now - HOUR)) continue;
      const y = top + kind.lane * lane + lane / 2;
      const mark = svg("circle", { cx: Math.min(right, x(t)), cy: y, r: 5, fill: kind.colour,
        class: "mark " + event.kind });
      mark.append(svg("title", {}, kind.label + " " + (event.key || event.provider || "")));
      chart.append(mark);
    }
  }

  function drawEvents(events) {
    const body = document.querySelector("#events tbody");
    body.textContent = "";
    for (const e of events) {
      const row = body.insertRow();
      row.className = "event " + e.kind;
      const when = new Date(e.time);
      row.append(el("td", isNaN(when) ? e.time : when.toLocaleTimeString(), "mono"),
        el("td", (KINDS[e.kind] || { label: e.kind }).label), el("td", e.provider || "–"),
        el("td", e.key || "–", "key"), el("td", e.retry_after ? span(e.retry_after) : "–", "mono"),
        el("td", e.detail || "–", "text"));
    }
  }

  function draw() {
    const error = document.getElementById("error");
    error.hidden = !data.error;
    error.textContent = data.error || "";
    const note = document.getElementById("note");
    note.hidden = !data.note;
    note.textContent = data.note || "";
    drawHold(data.hold);
    drawKeys(data.keys);
    drawBudgets(data.budgets);
    drawTimeline(data.events, data.now);
    drawEvents(data.events);
  }

  function tick() {
    if (!data) return;
    document.querySelectorAll("td.countdown").forEach(tickCell);
    document.querySelectorAll("#budgets td[data-at]").forEach(tickResets);
    drawHold(data.hold);
  }

  async function poll() {
    const connection = document.getElementById("connection");
    try {
      const health = await fetch("/healthz", { cache: "no-store" });
      const answer = await fetch("/api/status", { headers: HEADERS, cache: "no-store" });
      if (answer.status === 401) {
        connection.textContent = "a token is needed: open this page as /?token=…";
      } else if (!answer.ok) {
        connection.textContent = "the dashboard answered " + answer.status;
      } else {
        data = await answer.json();
        receivedAt = performance.now();
        draw();
        const when = new Date(data.time);
        connection.textContent = (health.ok ? "live" : "degraded") + " · updated " +
          when.toLocaleTimeString() + " · every " + POLL / 1000 + " s";
      }
    } catch (err) {
      connection.textContent = "the dashboard does not answer (" + err + "); retrying";
    }
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
    setTimeout(poll, POLL);
  }

  setInterval(tick, 1000);
  poll();
})();
