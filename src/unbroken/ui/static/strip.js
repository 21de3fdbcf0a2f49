// The run strip: the loaded save points (the page's bounded timeline) drawn as one row, so a
// 40-save run reads at a glance: tokens per model turn as bars, crashes (a resume's save point)
// as red rules, how each call left without a result was settled as a dot, approvals and
// compactions as marks. Drawing only: what each save point says comes from settlementsOf, the
// one place that reads it (today the notes' text; a recorded settlement field later).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

// How a call was settled, from the last clause of its note (watching.describe's words), and its
// colour; the first pattern that matches wins.
const SETTLED = [
  [/outcome UNKNOWN/, "unknown", "#b42318"],
  [/the probe's result is its result/, "probed", "#2b59c3"],
  [/its recorded result was used/, "reused", "#1e7b34"],
  [/settled by hand/, "resolved", "#7a3fb0"],
  [/run again|run now/, "run again", "#a15c00"],
  [/not run/, "not run", "#6b6b66"],
  [/\brun \(attempt/, "ran", "#a15c00"],
];

function settlementsOf(save) {
  if (Array.isArray(save.settlements)) return save.settlements;  // recorded, when records carry it
  const found = [];
  for (const line of save.notes || []) {
    const call = /^call (\S+) \(([^)]*)\): (.*)$/.exec(line);
    if (!call) continue;
    const kind = SETTLED.find(([pattern]) => pattern.test(call[3])) || [null, "other", "#6b6b66"];
    found.push({ call_id: call[1], tool: call[2], how: kind[1], colour: kind[2], text: line });
  }
  return found;
}

function svg(tag, attrs, title) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (title) {
    const hint = document.createElementNS(SVG_NS, "title");
    hint.textContent = title;  // text, never markup
    node.append(hint);
  }
  return node;
}

function drawStrip(saves) {
  const step = Math.max(4, Math.min(28, Math.floor(1100 / Math.max(1, saves.length))));
  const width = step * saves.length + 2, barTop = 6, barHeight = 46, markY = 64, height = 78;
  const most = Math.max(1, ...saves.map((s) => s.tokens_added || 0));
  const root = svg("svg", { id: "strip", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `the last ${saves.length} save points` });
  root.append(svg("line", { x1: 0, y1: barTop + barHeight, x2: width, y2: barTop + barHeight, stroke: "#e2e1dc" }));
  saves.forEach((save, i) => {
    const x = 1 + i * step, mid = x + step / 2;
    const data = { "data-seq": save.seq };
    if (save.tokens_added > 0) {  // a model answer (a turn, or the final one)
      const h = Math.max(1, Math.round((save.tokens_added / most) * barHeight));
      root.append(svg("rect", { ...data, "data-mark": "turn", x: x + 1, y: barTop + barHeight - h, width: Math.max(1, step - 2),
        height: h, fill: "#9db3e6" }, `save ${save.seq}: turn ${save.turns}, +${save.tokens_added} tokens`));
    }
    if (save.kind === "reconcile") {
      root.append(svg("rect", { ...data, "data-mark": "crash", x: mid - 1, y: 0, width: 2, height: barTop + barHeight + 4,
        fill: "#b42318" }, `save ${save.seq}: resumed after a crash or a stop (${save.label})`));
    } else if (save.kind === "compaction") {
      root.append(svg("rect", { ...data, "data-mark": "compaction", x: x + 1, y: markY - 5, width: Math.max(2, step - 2), height: 10,
        fill: "#7a3fb0" }, `save ${save.seq}: older turns compacted into a summary`));
    } else if (save.label === "approval_requested" || save.label === "approval_decided") {
      const r = Math.min(5, step / 2);
      root.append(svg("path", { ...data, "data-mark": "approval", d: `M${mid} ${markY - r} L${mid + r} ${markY} L${mid} ${markY + r} L${mid - r} ${markY} Z`,
        fill: "#e0a100" }, `save ${save.seq}: ${save.label.replace("_", " ")}`));
    }
    settlementsOf(save).forEach((settled, k) => {
      root.append(svg("circle", { ...data, "data-mark": "settled", "data-how": settled.how, cx: mid, cy: markY + 8 - k * 7,
        r: Math.min(3.5, step / 2), fill: settled.colour }, `save ${save.seq}: ${settled.text}`));
    });
  });
  return root;
}

function stripLegend() {
  const key = (colour, text) => {
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour;
    const item = document.createElement("span");
    item.append(swatch, text);
    return item;
  };
  const legend = document.createElement("div");
  legend.className = "strip-legend muted";
  legend.append(key("#9db3e6", "tokens per model turn"), key("#b42318", "crash, resumed / unknown outcome"),
    key("#2b59c3", "settled by its probe"), key("#1e7b34", "from the ledger"), key("#a15c00", "run again"),
    key("#e0a100", "approval"), key("#7a3fb0", "compaction / by hand"));
  return legend;
}
