// ascent run report: draws the metric charts (SVG) and the rollout browser from the JSON in #report-data.
// Plain browser JavaScript with no library and no network, inlined into report.html by ascent/report/html.py.
// Every text from the run goes in through textContent or an attribute, never as HTML.
"use strict";

const DATA = JSON.parse(document.getElementById("report-data").textContent);
const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563"];
const CHART = { width: 460, height: 230, left: 52, right: 12, top: 10, bottom: 32 };

// ---- small DOM helpers -------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(value, digits = 4) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0";
  const size = Math.abs(value);
  if (size >= 1e4 || size < 1e-3) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

function signed(value) {
  return value === null || value === undefined ? "–" : (value > 0 ? "+" : "") + fmt(value, 3);
}

// ---- header ------------------------------------------------------------------------------------------------

function renderHeader() {
  const run = DATA.run;
  document.title = `ascent report: ${run.name}`;
  const pairs = Object.entries(run.headline).map(([key, value]) =>
    el("div", { class: "pair" }, el("dt", {}, key), el("dd", {}, value)),
  );
  const header = document.getElementById("run");
  header.append(
    el("h1", {}, run.name),
    el("div", { class: "dir" }, `${run.dir} · report written ${DATA.generated}`),
    el("dl", {}, ...pairs),
  );
  if (run.config) header.append(el("details", {}, el("summary", {}, "config.yaml"), el("pre", {}, run.config)));
}

// ---- charts ------------------------------------------------------------------------------------------------

// About `count` round numbers spanning [low, high].
function niceTicks(low, high, count) {
  const raw = (high - low) / Math.max(count, 1);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((s) => raw <= s);
  const ticks = [];
  for (let tick = Math.ceil(low / step) * step; tick <= high + step * 1e-9; tick += step) ticks.push(+tick.toFixed(12));
  return ticks;
}

// The y range of a chart: padded, and from 0 when the values are non-negative and 0 is not far off.
function yDomain(arrays) {
  const values = arrays.flat().filter((v) => v !== null);
  let low = Math.min(...values);
  let high = Math.max(...values);
  if (low >= 0 && low <= high * 0.5) low = 0;
  const pad = high > low ? (high - low) * 0.05 : Math.abs(high) * 0.1 || 1;
  return [low === 0 ? 0 : low - pad, high + pad];
}

// One chart: {title, metrics, stacked, lines}. A line through each metric's logged steps (a metric logged only on
// some steps, such as validation, is joined across the gaps); with `stacked`, areas stacked in order instead, and
// the metrics in `lines` (such as the step's total time) as dashed lines over them.
function chart(spec) {
  const steps = DATA.metrics.steps;
  const { width, height, left, right, top, bottom } = CHART;
  const series = spec.metrics.map((name) => DATA.metrics.series[name]);
  const lines = (spec.lines || []).map((name) => DATA.metrics.series[name]);
  const logged = (list) => steps.map((_, i) => i).filter((i) => list.some((values) => values[i] !== null));
  const rows = logged(series);
  const allRows = logged([...series, ...lines]);
  const stacks = spec.stacked ? stack(series) : null;
  const xLow = steps[allRows[0]];
  const xHigh = Math.max(steps[allRows[allRows.length - 1]], xLow + 1);
  const [yLow, yHigh] = yDomain(stacks ? [stacks[stacks.length - 1], ...lines] : [...series, ...lines]);
  const x = (step) => left + ((step - xLow) / (xHigh - xLow)) * (width - left - right);
  const y = (value) => top + (1 - (value - yLow) / (yHigh - yLow)) * (height - top - bottom);

  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": spec.title });
  axes(root, x, y, [xLow, xHigh], [yLow, yHigh]);
  const path = (points) => points.map(([px, py], j) => `${j ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
  const layers = spec.metrics.map((name, k) => {
    const color = COLORS[k % COLORS.length];
    const group = svg("g", { class: "layer", "data-metric": name });
    if (stacks) {
      const upper = rows.map((i) => [x(steps[i]), y(stacks[k][i])]);
      const lower = rows.map((i) => [x(steps[i]), y(k ? stacks[k - 1][i] : 0)]).reverse();
      group.append(
        svg("path", { class: "series area", d: path([...upper, ...lower]) + "Z", fill: color, stroke: color }),
      );
    } else {
      group.append(line(series[k], rows, x, y, color, path));
    }
    root.append(group);
    // Identical series (reward/accuracy is reward/mean for a 0/1 reward) hide each other: the legend says so.
    const twin = spec.metrics.slice(0, k).find((other, j) => JSON.stringify(series[j]) === JSON.stringify(series[k]));
    return { name: twin ? `${name} (= ${twin})` : name, color, group, values: series[k] };
  });
  (spec.lines || []).forEach((name, j) => {
    const color = j ? COLORS[(spec.metrics.length + j) % COLORS.length] : "#111827";
    const group = svg("g", { class: "overlay", "data-metric": name });
    group.append(line(lines[j], allRows, x, y, color, path, "4 3"));
    root.append(group);
    layers.push({ name, color, group, values: lines[j] });
  });

  const figure = el("figure", { class: "chart", "data-title": spec.title }, el("figcaption", {}, spec.title), root);
  figure.append(legend(layers));
  hover(figure, root, layers, allRows, x);
  return figure;
}

// Grid lines and tick labels on both axes, and the x axis's name.
function axes(root, x, y, [xLow, xHigh], [yLow, yHigh]) {
  const { width, height, left, right, bottom } = CHART;
  for (const tick of niceTicks(yLow, yHigh, 5)) {
    root.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(tick), y2: y(tick) }));
    root.append(svg("text", { class: "tick-label", x: left - 6, y: y(tick) + 4, "text-anchor": "end" }, fmt(tick, 3)));
  }
  for (const tick of niceTicks(xLow, xHigh, 6).filter(Number.isInteger)) {
    root.append(svg("line", { class: "axis", x1: x(tick), x2: x(tick), y1: height - bottom, y2: height - bottom + 4 }));
    root.append(
      svg("text", { class: "tick-label", x: x(tick), y: height - bottom + 15, "text-anchor": "middle" }, tick),
    );
  }
  root.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: height - bottom, y2: height - bottom }));
  const middle = (left + width - right) / 2;
  root.append(svg("text", { class: "axis-label", x: middle, y: height - 2, "text-anchor": "middle" }, "step"));
}

// A line through the logged values of one series, with a dot on each when there are few.
function line(values, rows, x, y, color, path, dash) {
  const group = svg("g");
  const points = rows.filter((i) => values[i] !== null).map((i) => [x(DATA.metrics.steps[i]), y(values[i])]);
  group.append(
    svg("path", { class: "series", d: path(points), stroke: color, ...(dash ? { "stroke-dasharray": dash } : {}) }),
  );
  if (points.length <= 30)
    for (const [px, py] of points) group.append(svg("circle", { cx: px, cy: py, r: 2.5, fill: color }));
  return group;
}

// Cumulative sums of the stages per step (a stage not timed on a step counts 0 there).
function stack(series) {
  const sums = [];
  series.forEach((values, k) => sums.push(values.map((v, i) => (k ? sums[k - 1][i] : 0) + (v || 0))));
  return sums;
}

function legend(layers) {
  const box = el("div", { class: "legend" });
  for (const layer of layers) {
    const button = el(
      "button",
      { type: "button", title: "show or hide" },
      el("span", { class: "swatch", style: `background:${layer.color}` }),
      layer.name,
    );
    if (layer.group) {
      button.addEventListener("click", () => {
        const hidden = button.classList.toggle("off");
        layer.group.style.display = hidden ? "none" : "";
      });
    }
    box.append(button);
  }
  return box;
}

// A cursor at the logged step nearest the pointer, and a tooltip with every series' value there.
function hover(figure, root, layers, rows, x) {
  const { width, height, left, right, top, bottom } = CHART;
  const cursor = svg("line", { class: "cursor", y1: top, y2: height - bottom, visibility: "hidden" });
  const tip = el("div", { class: "tooltip", hidden: true });
  const area = svg("rect", {
    x: left,
    y: top,
    width: width - left - right,
    height: height - top - bottom,
    fill: "transparent",
  });
  root.append(cursor, area);
  figure.append(tip);
  area.addEventListener("mousemove", (event) => {
    const box = root.getBoundingClientRect();
    const px = ((event.clientX - box.left) / box.width) * width;
    const distance = (row) => Math.abs(x(DATA.metrics.steps[row]) - px);
    const i = rows.reduce((best, row) => (distance(row) < distance(best) ? row : best));
    cursor.setAttribute("x1", x(DATA.metrics.steps[i]));
    cursor.setAttribute("x2", x(DATA.metrics.steps[i]));
    cursor.setAttribute("visibility", "visible");
    const table = el(
      "table",
      {},
      el("tr", {}, el("td", {}, "step"), el("td", { class: "value" }, DATA.metrics.steps[i])),
    );
    for (const layer of layers) {
      const name = el("td", {}, el("span", { class: "swatch", style: `background:${layer.color}` }), layer.name);
      table.append(el("tr", {}, name, el("td", { class: "value" }, fmt(layer.values[i]))));
    }
    tip.replaceChildren(table);
    tip.hidden = false;
    const figureBox = figure.getBoundingClientRect();
    const tipLeft = event.clientX - figureBox.left + 14;
    tip.style.left = `${Math.min(tipLeft, figureBox.width - tip.offsetWidth - 4)}px`;
    tip.style.top = `${event.clientY - figureBox.top + 14}px`;
  });
  area.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden");
    tip.hidden = true;
  });
}

// Any metric of the run, picked from a list: for everything the fixed charts leave out.
function metricExplorer() {
  const names = Object.keys(DATA.metrics.series);
  const charted = new Set(DATA.charts.flatMap((spec) => [...spec.metrics, ...spec.lines]));
  const select = el("select", { "aria-label": "metric" }, ...names.map((name) => el("option", { value: name }, name)));
  select.value = names.find((name) => !charted.has(name)) || names[0];
  const holder = el("div", { class: "explorer" });
  const draw = () => {
    const figure = chart({ title: "Any metric", metrics: [select.value], stacked: false });
    figure.querySelector("figcaption").append(select);
    holder.replaceChildren(figure);
  };
  select.addEventListener("change", draw);
  draw();
  return holder;
}

function renderCharts() {
  const box = document.getElementById("charts");
  if (!DATA.metrics.steps.length) {
    box.replaceWith(el("p", { class: "empty" }, "No metrics yet: metrics.jsonl is missing or empty."));
    return;
  }
  for (const spec of DATA.charts) box.append(chart(spec));
  box.append(metricExplorer());
}

// ---- rollout browser ---------------------------------------------------------------------------------------

const browser = { split: "train", stepIndex: 0, page: 0, pageSize: 10, verdict: "all", min: "", max: "", text: "" };

function stepsOf(split) {
  return DATA.rollouts[split] || [];
}

function currentStep() {
  return stepsOf(browser.split)[browser.stepIndex];
}

function filteredSamples() {
  const step = currentStep();
  if (!step) return [];
  const min = browser.min === "" ? -Infinity : Number(browser.min);
  const max = browser.max === "" ? Infinity : Number(browser.max);
  const text = browser.text.toLowerCase();
  return step.samples.filter(
    (s) =>
      (browser.verdict === "all" || (browser.verdict === "correct") === s.correct) &&
      (s.reward === null ? browser.min === "" && browser.max === "" : s.reward >= min && s.reward <= max) &&
      (!text || s.prompt.toLowerCase().includes(text) || s.response.toLowerCase().includes(text)),
  );
}

// Diverging colours for token advantages: blue above 0, red below, stronger with |advantage| / scale.
function advantageColor(value, scale) {
  if (value === null || !scale) return "transparent";
  const strength = Math.min(Math.abs(value) / scale, 1) * 0.75;
  return value > 0 ? `rgba(37, 99, 235, ${strength.toFixed(3)})` : `rgba(220, 38, 38, ${strength.toFixed(3)})`;
}

function advantageScale(step) {
  let scale = 0;
  for (const sample of step.samples)
    for (const a of sample.token_advantages) if (a !== null) scale = Math.max(scale, Math.abs(a));
  return scale;
}

function responseView(sample, scale) {
  const box = el("div", { class: "text response" });
  if (!sample.response_tokens.length) {
    box.append(sample.response);
    return box;
  }
  sample.response_tokens.forEach((token, i) => {
    const advantage = sample.token_advantages.length ? sample.token_advantages[i] : undefined;
    const attrs = { class: "tok" };
    if (advantage !== undefined) {
      attrs["data-advantage"] = advantage === null ? "" : String(advantage);
      attrs.title = `advantage ${signed(advantage)}`;
      attrs.style = `background:${advantageColor(advantage, scale)}`;
    }
    box.append(el("span", attrs, token));
  });
  return box;
}

function sampleCard(sample, index, scale) {
  const verdict = sample.correct ? "correct" : "wrong";
  const meta = el(
    "div",
    { class: "meta" },
    el("span", { class: `badge ${verdict}`, title: verdict }, `reward ${fmt(sample.reward, 3)}`),
    ...[
      `group ${sample.group}`,
      `sample ${index + 1}`,
      sample.advantage === null ? null : `advantage ${signed(sample.advantage)}`,
      `finish: ${sample.finish_reason}`,
      sample.response_length === null ? null : `${sample.response_length} tokens`,
      sample.data_source ? `source: ${sample.data_source}` : null,
    ].map((text) => text && el("span", {}, text)),
  );
  const components = Object.entries(sample.reward_components);
  const table = el(
    "table",
    { class: "components" },
    el("tr", {}, el("th", {}, "reward component"), el("th", {}, "value")),
    ...components.map(([name, value]) => el("tr", {}, el("td", {}, name), el("td", { class: "value" }, fmt(value)))),
  );
  return el(
    "article",
    { class: "sample", "data-group": sample.group, "data-reward": sample.reward },
    meta,
    el("div", { class: "label" }, "prompt"),
    el("div", { class: "text prompt" }, sample.prompt),
    el("div", { class: "label" }, "response"),
    responseView(sample, scale),
    sample.ground_truth === null ? null : el("div", { class: "label" }, `ground truth: ${sample.ground_truth}`),
    components.length ? table : null,
  );
}

function renderSamples() {
  const step = currentStep();
  const list = document.getElementById("samples");
  const status = document.getElementById("page-status");
  const note = document.getElementById("step-note");
  const scaleBox = document.getElementById("advantage-scale");
  if (!step) {
    list.replaceChildren(el("p", { class: "empty" }, `No ${browser.split} rollouts in this run.`));
    status.textContent = "";
    note.textContent = "";
    scaleBox.hidden = true;
    return;
  }
  const samples = filteredSamples();
  const pages = Math.max(1, Math.ceil(samples.length / browser.pageSize));
  browser.page = Math.min(browser.page, pages - 1);
  const first = browser.page * browser.pageSize;
  const shown = samples.slice(first, first + browser.pageSize);
  const scale = advantageScale(step);
  list.replaceChildren(...shown.map((sample) => sampleCard(sample, step.samples.indexOf(sample), scale)));
  if (!shown.length) list.append(el("p", { class: "empty" }, "No sample of this step passes the filter."));
  status.textContent = samples.length
    ? `${first + 1}–${first + shown.length} of ${samples.length} (filtered from ${step.samples.length})`
    : `0 of ${step.samples.length}`;
  status.dataset.count = samples.length;
  document.getElementById("prev-page").disabled = browser.page === 0;
  document.getElementById("next-page").disabled = browser.page >= pages - 1;
  note.textContent =
    step.num_samples > step.samples.length
      ? `Step ${step.step}: the report holds the first ${step.samples.length} of its ${step.num_samples} samples ` +
        `(at most ${DATA.max_samples_per_step} per step; ascent view --max-samples-per-step N holds more).`
      : "";
  scaleBox.hidden = !scale;
  scaleBox.querySelector(".low").textContent = signed(-scale);
  scaleBox.querySelector(".high").textContent = signed(scale);
}

function renderStepOptions() {
  const select = document.getElementById("step-select");
  select.replaceChildren(
    ...stepsOf(browser.split).map((step, i) =>
      el("option", { value: i }, `step ${step.step} (${step.num_samples} samples)`),
    ),
  );
  select.value = String(browser.stepIndex);
  const embedded = stepsOf(browser.split).length;
  const total = DATA.rollouts.num_steps[browser.split];
  document.getElementById("steps-note").textContent =
    embedded < total
      ? `${embedded} of the ${total} ${browser.split} steps with rollouts are in this report, evenly spaced ` +
        `(ascent view --max-rollout-steps N holds more).`
      : "";
}

function renderRollouts() {
  const box = document.getElementById("rollouts");
  const splits = ["train", "val"].filter((split) => stepsOf(split).length);
  if (!splits.length) {
    box.append(el("p", { class: "empty" }, "No rollout samples in this run (rollouts/step_*.jsonl)."));
    return;
  }
  browser.split = splits[0];
  browser.stepIndex = stepsOf(browser.split).length - 1; // the newest step first
  const rerender = (resetPage = true) => {
    if (resetPage) browser.page = 0;
    renderSamples();
  };
  const setStep = (index) => {
    browser.stepIndex = Math.max(0, Math.min(index, stepsOf(browser.split).length - 1));
    document.getElementById("step-select").value = String(browser.stepIndex);
    rerender();
  };
  const splitSelect = el(
    "select",
    {
      id: "split-select",
      onchange: (event) => {
        browser.split = event.target.value;
        browser.stepIndex = stepsOf(browser.split).length - 1;
        renderStepOptions();
        rerender();
      },
    },
    ...splits.map((split) => el("option", { value: split }, split === "val" ? "validation" : "train")),
  );
  const input = (attrs, key) =>
    el("input", { ...attrs, oninput: (event) => ((browser[key] = event.target.value), rerender()) });
  const controls = el(
    "div",
    { class: "controls" },
    el("label", {}, "split", splitSelect),
    el(
      "label",
      {},
      "step",
      el("button", { type: "button", id: "prev-step", onclick: () => setStep(browser.stepIndex - 1) }, "◀"),
      el("select", { id: "step-select", onchange: (event) => setStep(Number(event.target.value)) }),
      el("button", { type: "button", id: "next-step", onclick: () => setStep(browser.stepIndex + 1) }, "▶"),
    ),
    el(
      "label",
      {},
      "show",
      el(
        "select",
        { id: "verdict-filter", onchange: (event) => ((browser.verdict = event.target.value), rerender()) },
        el("option", { value: "all" }, "all samples"),
        el("option", { value: "correct" }, "correct only"),
        el("option", { value: "wrong" }, "wrong only"),
      ),
    ),
    el("label", {}, "reward ≥", input({ type: "number", step: "any", id: "reward-min" }, "min")),
    el("label", {}, "≤", input({ type: "number", step: "any", id: "reward-max" }, "max")),
    el("label", {}, "text", input({ type: "search", id: "text-filter", placeholder: "in prompt or response" }, "text")),
    el(
      "label",
      {},
      "per page",
      el(
        "select",
        { id: "page-size", onchange: (event) => ((browser.pageSize = Number(event.target.value)), rerender()) },
        ...[5, 10, 25, 50].map((n) => el("option", { value: n, selected: n === browser.pageSize }, n)),
      ),
    ),
  );
  const turn = (pages) => () => {
    browser.page += pages;
    rerender(false);
  };
  const pager = el(
    "div",
    { class: "pager" },
    el("button", { type: "button", id: "prev-page", onclick: turn(-1) }, "◀ prev"),
    el("span", { id: "page-status" }),
    el("button", { type: "button", id: "next-page", onclick: turn(1) }, "next ▶"),
    el(
      "span",
      { class: "scale", id: "advantage-scale", title: "token colour: the token's advantage" },
      "token advantage",
      el("span", { class: "low" }),
      el("span", {
        class: "bar",
        style: "background:linear-gradient(90deg,rgba(220,38,38,.75),transparent,rgba(37,99,235,.75))",
      }),
      el("span", { class: "high" }),
    ),
  );
  box.append(
    controls,
    el("p", { class: "note", id: "steps-note" }),
    el("p", { class: "note", id: "step-note" }),
    pager,
    el("div", { id: "samples" }),
  );
  renderStepOptions();
  renderSamples();
}

renderHeader();
renderCharts();
renderRollouts();
document.body.dataset.ready = "true";
