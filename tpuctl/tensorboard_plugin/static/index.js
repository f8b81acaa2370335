// The tpuctl tab: TensorBoard's plugin page imports this module and calls render() (tensorboard/backend/application.py).
// Every value from a view is data from a shared model dir: it reaches the page only through textContent and
// setAttribute (numbers and fixed class names), never as markup (tests/unit/test_tensorboard_plugin_static.py).

const SVG = "http://www.w3.org/2000/svg";
// The run view's words (tpuctl/runs/view_schema.py, served by the plugin's `schema` route before anything is drawn):
// the segment kinds, in the legend's order, and the ending state drawn as a good end. Spelled there, never here.
let schema = {kinds: [], succeeded: null};
// The report's categories (tpuctl/runs/goodput.py CATEGORIES); a name not here is drawn grey.
const CATEGORIES = ["training steps", "start-up", "first step", "checkpoint save", "checkpoint restore", "lost work", "restart", "hang", "other", "evaluation", "environment setup"];
const MIN_WIDTH = 480; // px: narrower, a chart keeps this width and its section scrolls sideways
const LABEL = 150;
const ROW = 22;

function el(tag, attrs = {}, text = null, parent = null) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = String(text);
  if (parent) parent.appendChild(node);
  return node;
}

function svg(tag, attrs = {}, parent = null, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (text !== null) node.textContent = String(text);
  if (parent) parent.appendChild(node);
  return node;
}

function sized(plot, width, height) {
  // A pixel per user unit: the style's 11 px labels are 11 px on screen.
  for (const [name, value] of Object.entries({width, height, viewBox: `0 0 ${width} ${height}`})) plot.setAttribute(name, String(value));
  return plot;
}

function titled(node, text) {
  svg("title", {}, node, text);
  return node;
}

async function getJson(url) {
  return (await fetchOk(url)).json();
}

function two(n) {
  return String(n).padStart(2, "0");
}

// The browser's local time, as TensorBoard's own wall-time axes and `tpuctl report --timeline` (the machine's local
// clock) show it; zoneOf says which zone that is, once per run.
function when(t) {
  if (typeof t !== "number") return "?";
  const d = new Date(t * 1000);
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

function zoneOf(t) {
  const east = -new Date(typeof t === "number" ? t * 1000 : Date.now()).getTimezoneOffset();
  return `local time, UTC${east < 0 ? "-" : "+"}${two(Math.floor(Math.abs(east) / 60))}:${two(Math.abs(east) % 60)}`;
}

function duration(s) {
  if (typeof s !== "number") return "?";
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function percent(share) {
  return typeof share === "number" ? `${(share * 100).toFixed(1)}%` : "unknown";
}

function say(parent, text, cls = "message") {
  return el("p", {class: cls}, text, parent);
}

const REFRESH_MS = 15000; // a live run's view is republished every few seconds (launch/publish.py)

export async function render() {
  el("link", {rel: "stylesheet", href: "./style.css"}, null, document.head);
  const root = el("div", {id: "tpuctl"}, null, document.body);
  const notice = el("div", {class: "listing"}, null, root);
  const bar = el("div", {class: "picker"}, null, root);
  el("label", {for: "run-select"}, "Run ", bar);
  const select = el("select", {id: "run-select"}, null, bar);
  const page = el("div", {id: "run-page"}, null, root);
  let shown = null; // [key, the reply's text] of the run on the page
  try {
    schema = await getJson("./schema");
  } catch (error) {
    notice.replaceChildren(say(null, `cannot load the tab: ${error.message}`));
    return;
  }

  const list = async () => {
    let listing;
    try {
      listing = await getJson("./runs");
    } catch (error) {
      notice.replaceChildren(say(null, `cannot list runs: ${error.message}`));
      return;
    }
    const runs = Array.isArray(listing.runs) ? listing.runs : [];
    notice.replaceChildren();
    if (listing.message) say(notice, listing.message);
    if (runs.length === 0) {
      say(notice, `No tpuctl runs under ${listing.logdir}: a launch with --model-dir under this logdir publishes MODEL_DIR/tpuctl/RUN_ID/view.json.`, "empty");
    }
    bar.hidden = runs.length === 0;
    const keys = runs.map((run) => String(run.key));
    if (keys.join("\n") !== Array.from(select.options, (option) => option.value).join("\n")) {
      const picked = select.value;
      select.replaceChildren(...keys.map((key) => el("option", {value: key}, key)));
      if (keys.includes(picked)) select.value = picked; // the list grew or shrank: the run on the page stays picked
    }
  };

  const show = async (quietly) => {
    const key = select.value;
    if (!key) return page.replaceChildren();
    if (!quietly) {
      page.setAttribute("data-ready", "0");
      page.replaceChildren(say(null, "loading…", "loading"));
    }
    let reply;
    try {
      const text = await (await fetchOk(`./view?run=${encodeURIComponent(key)}`)).text();
      if (quietly && shown && shown[0] === key && shown[1] === text) return; // nothing new: the page stays as it is
      reply = {text, body: JSON.parse(text)};
    } catch (error) {
      if (!quietly) page.replaceChildren(say(null, `cannot load the run: ${error.message}`));
      return;
    }
    if (select.value !== key) return; // another run was picked meanwhile
    shown = [key, reply.text];
    // Redrawn in place: the hang reports the user opened stay open.
    const open = new Set(quietly ? Array.from(page.querySelectorAll("details[open]"), (d) => d.id) : []);
    page.replaceChildren();
    page.redrawCharts = null;
    if (reply.body.message || !reply.body.view) say(page, reply.body.message || "no view in the reply");
    else drawRun(page, reply.body.view);
    for (const id of open) if (document.getElementById(id)) document.getElementById(id).open = true;
    page.setAttribute("data-ready", "1");
  };

  const live = () => {
    // A run still going (no end) or a view not readable yet may change; a finished run's view does not.
    if (!shown) return true;
    try {
      const body = JSON.parse(shown[1]);
      return !body.view || body.view.run?.end === null || body.view.run?.end === undefined;
    } catch {
      return true;
    }
  };

  select.addEventListener("change", () => show(false));
  await list();
  await show(false);
  setInterval(async () => {
    if (document.hidden) return; // the tab is not on screen
    await list();
    if (select.value && (live() || !shown || shown[0] !== select.value)) await show(true);
  }, REFRESH_MS);
  let resizing = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => redrawCharts(page), 150);
  });
}

async function fetchOk(url) {
  const reply = await fetch(url, {credentials: "same-origin"});
  if (!reply.ok) throw new Error(`${url}: HTTP ${reply.status}`);
  return reply;
}

function drawRun(page, view) {
  const run = view.run || {};
  el("h2", {class: "run-id"}, run.id || "(run without an id)", page);
  const span = run.end !== null && typeof run.start === "number" ? duration(run.end - run.start) : "running";
  const meta = [run.script, run.backend, run.state, `${run.workers ?? "?"} worker${run.workers === 1 ? "" : "s"}`, `${when(run.start)} → ${run.end ? when(run.end) : "now"} (${span}; ${zoneOf(run.start)})`];
  say(page, meta.filter((part) => part !== null && part !== undefined).join(" · "), "meta");
  if (run.model_dir) say(page, `model dir ${run.model_dir}; view written ${when(view.written)}`, "meta");
  if (view.left_out > 0) say(page, `${view.left_out} malformed or excess entries of this view.json were left out.`, "note");
  // The charts are drawn in pixels, one user unit a pixel of the section's width, so text stays at the style's size
  // whatever the window; a resize draws them again (render's listener).
  const charts = [
    [el("section", {id: "goodput"}, null, page), (section, width) => drawGoodput(section, view.goodput, width)],
    [el("section", {id: "timeline"}, null, page), (section, width) => drawTimeline(section, view, width)],
    [el("section", {id: "goodput-over-time"}, null, page), (section, width) => drawOverTime(section, view.goodput_over_time, width)],
  ];
  drawProfiles(el("section", {id: "profiles"}, null, page), view.profiles);
  drawHangs(el("section", {id: "hangs"}, null, page), view.hangs);
  page.redrawCharts = () => {
    for (const [section, draw] of charts) {
      section.replaceChildren();
      draw(section, Math.max(Math.floor(section.clientWidth), MIN_WIDTH));
    }
  };
  page.redrawCharts();
}

function redrawCharts(page) {
  if (page.redrawCharts) page.redrawCharts();
}

function category(name) {
  const index = CATEGORIES.indexOf(name);
  return index < 0 ? "cat-x" : `cat-${index}`;
}

function drawGoodput(section, goodput, width) {
  el("h3", {}, "Goodput and badput", section);
  if (!goodput) return say(section, "no goodput in this view", "none");
  const bars = [{label: "run", split: goodput}];
  for (const attempt of goodput.attempts || []) {
    bars.push({label: `attempt ${attempt.attempt}${attempt.ended ? ` (${attempt.ended})` : ""}`, split: attempt});
  }
  const plot = sized(svg("svg", {class: "bars"}, section), width, bars.length * ROW + 4);
  bars.forEach((bar, i) => {
    const group = svg("g", {class: "bar", "data-label": bar.label}, plot);
    svg("text", {x: 0, y: i * ROW + 15, class: "label"}, group, bar.label);
    const wall = bar.split.wall_s;
    let x = LABEL;
    const room = width - LABEL - 120;
    for (const [name, seconds] of Object.entries(bar.split.categories || {})) {
      if (!(wall > 0) || seconds <= 0) continue;
      const w = (seconds / wall) * room;
      titled(svg("rect", {x, y: i * ROW + 3, width: Math.max(w, 0.5), height: ROW - 6, class: `part ${category(name)}`}, group),
        `${name}: ${duration(seconds)} (${percent(seconds / wall)})`);
      x += w;
    }
    svg("text", {x: width - 115, y: i * ROW + 15, class: "value"}, group, `goodput ${percent(bar.split.goodput)}`);
  });
  const legend = el("div", {class: "legend"}, null, section);
  for (const name of CATEGORIES) {
    const item = el("span", {class: "key"}, null, legend);
    el("span", {class: `swatch ${category(name)}`}, null, item);
    el("span", {}, name, item);
  }
}

function timeRange(view) {
  const run = view.run || {};
  let start = run.start;
  let end = run.end ?? view.written;
  for (const row of view.rows) {
    for (const seg of row.segments) {
      start = typeof start === "number" ? Math.min(start, seg.start) : seg.start;
      end = typeof end === "number" ? Math.max(end, seg.end) : seg.end;
    }
  }
  if (typeof start !== "number" || typeof end !== "number") return null;
  return [start, end > start ? end : start + 1];
}

function drawTimeline(section, view, width) {
  el("h3", {}, "Timeline: one row per attempt and worker", section);
  const range = timeRange(view);
  if (!range || view.rows.length === 0) return say(section, "no timeline rows in this view", "none");
  const [t0, t1] = range;
  const x = (t) => LABEL + ((Math.min(Math.max(t, t0), t1) - t0) / (t1 - t0)) * (width - LABEL - 10);
  const top = 30;
  const height = top + view.rows.length * ROW + 20;
  const plot = sized(svg("svg", {class: "timeline"}, section), width, height);
  let maxRate = 0;
  for (const row of view.rows) for (const r of row.rate?.steps_per_s || []) if (r > maxRate) maxRate = r;
  view.rows.forEach((row, i) => {
    const y = top + i * ROW;
    const group = svg("g", {class: "row", "data-attempt": row.attempt, "data-worker": row.worker}, plot);
    svg("text", {x: 0, y: y + 15, class: "label"}, group, `a${row.attempt} ${row.worker}`);
    for (const seg of row.segments) {
      const kind = schema.kinds.includes(seg.kind) ? seg.kind : "other";
      titled(svg("rect", {x: x(seg.start), y: y + 2, width: Math.max(x(seg.end) - x(seg.start), 0.5), height: ROW - 4, class: `seg seg-${kind}`}, group),
        `${seg.kind}: ${when(seg.start)}, ${duration(seg.end - seg.start)}`);
    }
    if (row.rate && maxRate > 0) rateBand(group, row.rate, y, maxRate, x, rowSpan(row));
    if (row.ending && typeof row.ending.at === "number") {
      const ex = x(row.ending.at);
      titled(svg("path", {d: `M${ex - 4} ${y + 4} L${ex + 4} ${y + ROW - 4} M${ex + 4} ${y + 4} L${ex - 4} ${y + ROW - 4}`, class: `ending ending-${row.ending.state === schema.succeeded ? "ok" : "bad"}`}, group),
        `${row.ending.state ?? "ended"}: ${row.ending.words ?? ""}`);
    }
  });
  for (const restart of view.restarts) {
    const rx = x(restart.at);
    const group = svg("g", {class: "restart"}, plot);
    svg("line", {x1: rx, x2: rx, y1: top - 12, y2: height - 20}, group);
    svg("text", {x: rx + 3, y: top - 14, class: "cause"}, group, `restart: ${restart.cause ?? "?"}`);
    titled(group, `attempt ${restart.attempt ?? "?"} after ${restart.cause ?? "?"} at ${when(restart.at)}: ${restart.words ?? ""}`);
  }
  view.hangs.forEach((hang, i) => {
    const hx = x(hang.at);
    const marker = titled(svg("path", {d: `M${hx - 6} ${top - 10} L${hx + 6} ${top - 10} L${hx} ${top - 1} Z`, class: "hang-marker", tabindex: 0, "data-hang": i}, plot),
      `hang report at ${when(hang.at)}: ${hang.summary ?? ""} (click for the stacks)`);
    const open = () => showHang(i);
    marker.addEventListener("click", open);
    marker.addEventListener("keydown", (event) => { if (event.key === "Enter") open(); });
  });
  for (const frac of [0, 0.25, 0.5, 0.75, 1]) {
    const t = t0 + frac * (t1 - t0);
    svg("text", {x: x(t), y: height - 5, class: "tick", "text-anchor": frac === 0 ? "start" : frac === 1 ? "end" : "middle"}, plot, when(t));
  }
  const legend = el("div", {class: "legend"}, null, section);
  for (const kind of schema.kinds) {
    const item = el("span", {class: "key"}, null, legend);
    el("span", {class: `swatch seg-${kind}`}, null, item);
    el("span", {}, kind, item);
  }
  const item = el("span", {class: "key"}, null, legend);
  el("span", {class: "swatch rate-key"}, null, item);
  el("span", {}, `step rate (max ${maxRate.toFixed(2)} steps/s)`, item);
}

function rowSpan(row) {
  // From the row's first segment to its last segment or its end: a bin (at least the timeline's 30 s sampling) may
  // reach past a short attempt, and the band must not draw the worker running after it ended.
  let lo = Infinity;
  let hi = -Infinity;
  for (const seg of row.segments) {
    lo = Math.min(lo, seg.start);
    hi = Math.max(hi, seg.end);
  }
  if (row.ending && typeof row.ending.at === "number") hi = Math.max(hi, row.ending.at);
  return lo <= hi ? [lo, hi] : [-Infinity, Infinity];
}

function rateBand(group, rate, y, maxRate, x, [lo, hi]) {
  // One path per row: an area whose height is the bin's rate, broken where a bin has none, within the row's span.
  let d = "";
  let open = false;
  const base = y + ROW - 2;
  const last = rate.start + rate.steps_per_s.length * rate.bin_s;
  rate.steps_per_s.forEach((r, i) => {
    const from = rate.start + i * rate.bin_s;
    const to = from + rate.bin_s;
    const left = x(Math.max(from, lo));
    const right = x(Math.min(to, hi));
    if (typeof r !== "number" || from >= hi || to <= lo) {
      if (open) d += `L${left.toFixed(1)} ${base} Z `;
      open = false;
      return;
    }
    const top = base - (r / maxRate) * (ROW - 6);
    d += open ? `L${left.toFixed(1)} ${top.toFixed(1)} ` : `M${left.toFixed(1)} ${base} L${left.toFixed(1)} ${top.toFixed(1)} `;
    d += `L${right.toFixed(1)} ${top.toFixed(1)} `;
    open = true;
  });
  if (open) d += `L${x(Math.min(last, hi)).toFixed(1)} ${base} Z`;
  if (d) svg("path", {d, class: "rate"}, group);
}

function drawOverTime(section, windows, width) {
  el("h3", {}, "Goodput over time", section);
  if (!windows || windows.length === 0) return say(section, "no goodput windows in this view", "none");
  const height = 80;
  const t0 = windows[0].start;
  const t1 = windows[windows.length - 1].end;
  const span = t1 > t0 ? t1 - t0 : 1;
  const plot = sized(svg("svg", {class: "over-time"}, section), width, height + 16);
  svg("line", {x1: LABEL, x2: width - 10, y1: height, y2: height, class: "axis"}, plot);
  svg("text", {x: 0, y: 12, class: "label"}, plot, "goodput 100%");
  for (const w of windows) {
    if (typeof w.goodput !== "number") continue;
    const left = LABEL + ((w.start - t0) / span) * (width - LABEL - 10);
    const right = LABEL + ((w.end - t0) / span) * (width - LABEL - 10);
    titled(svg("rect", {x: left, y: height - w.goodput * (height - 4), width: Math.max(right - left, 0.5), height: w.goodput * (height - 4), class: "window"}, plot),
      `${when(w.start)} – ${when(w.end)}: goodput ${percent(w.goodput)}`);
  }
  svg("text", {x: LABEL, y: height + 14, class: "tick"}, plot, when(t0));
  svg("text", {x: width - 10, y: height + 14, class: "tick", "text-anchor": "end"}, plot, when(t1));
}

function profileHref(profileRun) {
  // The Profile tab (xprof) reads run and tool from the top window's query string (its navigateWithUrl).
  const top = new URL("../../../", document.baseURI);
  top.search = new URLSearchParams({run: profileRun, tool: "overview_page"}).toString();
  top.hash = "profile";
  return top.href;
}

function pct(value) {
  return typeof value === "number" ? `${value.toFixed(1)}%` : "–";
}

function drawProfiles(section, profiles) {
  el("h3", {}, "Profile sessions", section);
  if (!profiles || profiles.length === 0) return say(section, "no profile sessions in this view (tpuctl profile RUN captures one)", "none");
  for (const profile of profiles) {
    const box = el("div", {class: "profile", "data-session": profile.session}, null, section);
    const head = el("p", {class: "profile-head"}, null, box);
    el("span", {class: "session"}, `${profile.session} at ${when(profile.at)} `, head);
    if (profile.profile_run) {
      el("a", {class: "profile-link", target: "_top", rel: "noopener", href: profileHref(profile.profile_run)}, "open in the Profile tab", head);
    } else {
      el("span", {class: "note"}, `(not under this TensorBoard's logdir: ${profile.dir ?? "no folder given"})`, head);
    }
    const verdict = profile.verdict;
    if (!verdict) {
      say(box, "no verdict for this session", "note");
      continue;
    }
    const table = el("table", {class: "verdict"}, null, box);
    const header = el("tr", {}, null, el("thead", {}, null, table));
    for (const name of ["worker", "steps", "step time (ms)", "input", "compute", "communication", "other"]) el("th", {}, name, header);
    const body = el("tbody", {}, null, table);
    for (const w of verdict.workers) {
      const tr = el("tr", {class: w.worker === verdict.straggler ? "straggler" : ""}, null, body);
      const step = w.step_ms && typeof w.step_ms.mean === "number" ? `${w.step_ms.mean.toFixed(1)} ± ${(w.step_ms.stdev ?? 0).toFixed(1)}` : "–";
      for (const cell of [w.worker + (w.worker === verdict.straggler ? " (straggler)" : ""), w.steps ?? "–", step, pct(w.input_pct), pct(w.compute_pct), pct(w.communication_pct), pct(w.other_pct)]) {
        el("td", {}, cell, tr);
      }
    }
    say(box, verdict.straggler ? `straggler: ${verdict.straggler}` : "no straggler", "straggler-line");
    for (const note of verdict.notes) say(box, note, "note");
  }
}

function drawHangs(section, hangs) {
  el("h3", {}, "Hang reports", section);
  if (!hangs || hangs.length === 0) return say(section, "no hang reports in this view", "none");
  hangs.forEach((hang, i) => {
    const details = el("details", {class: "hang", id: `hang-${i}`}, null, section);
    el("summary", {}, `${when(hang.at)} · attempt ${hang.attempt ?? "?"} · ${hang.summary ?? ""}`, details);
    el("pre", {class: "stacks"}, hang.stacks ?? "(no stacks text)", details);
  });
}

function showHang(i) {
  const details = document.getElementById(`hang-${i}`);
  if (!details) return;
  details.open = true;
  details.scrollIntoView({block: "nearest"});
}
