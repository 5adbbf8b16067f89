// The explorer: calls the server's own REST API (TensorFlow Serving's :predict) and draws what it
// answers. Every text a user typed or a model produced is shown with textContent: as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const PAD = "[PAD]", EOS = "[EOS]";
let models = [];
let shown = null;  // the attention on the page: {source, target, weights[target][layer][head][source]}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function showError(error) {
  $("error").textContent = error ? String(error.message || error) : "";
}

async function predict(signature, inputs) {
  const name = $("model").value;
  const response = await fetch(`/v1/models/${encodeURIComponent(name)}:predict`, {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({signature_name: signature, inputs}),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body.outputs;
}

function chooseModel() {
  const model = models.find((m) => m.name === $("model").value);
  const signatures = model ? model.signatures : [];
  $("model-info").textContent = model ? `version ${model.version}: ${signatures.join(", ")}` : "no model loaded";
  $("translate-section").hidden = !signatures.includes("translate");
  $("attention").hidden = true;
  $("fill-mask-section").hidden = !signatures.includes("fill_mask");
  showError(null);
}

function realLength(tokens, stopAfter) {
  let end = tokens.length;
  while (end > 0 && tokens[end - 1] === PAD) end -= 1;
  const stop = stopAfter ? tokens.indexOf(stopAfter) : -1;
  return stop >= 0 && stop < end ? stop + 1 : end;
}

function fillSelect(select, count, prefix) {
  select.replaceChildren(...Array.from({length: count}, (_, i) => {
    const option = element("option", "", `${prefix} ${i + 1}`);
    option.value = String(i);
    return option;
  }));
}

function weightsOf(target) {
  const layer = Number($("layer").value), head = Number($("head").value);
  return shown.weights[target][layer][head].slice(0, shown.source.length);
}

function highlight(target) {
  document.querySelectorAll(".token.target").forEach((node, i) => node.classList.toggle("active", i === target));
  const weights = target === null ? [] : weightsOf(target);
  document.querySelectorAll(".token.source").forEach((node, i) => {
    const weight = target === null ? 0 : weights[i];
    node.style.backgroundColor = `rgba(31, 95, 191, ${weight.toFixed(3)})`;
    node.style.color = weight > 0.5 ? "white" : "";
    node.dataset.weight = weight.toFixed(3);
  });
}

function showAttention(title, queryLabel, keyLabel, attention) {
  shown = attention;
  const layers = shown.weights.length ? shown.weights[0].length : 1;
  const heads = shown.weights.length ? shown.weights[0][0].length : 1;
  fillSelect($("layer"), layers, "layer");
  fillSelect($("head"), heads, "head");
  $("layer").value = String(layers - 1);
  $("attention-title").textContent = title;
  $("query-label").textContent = queryLabel;
  $("key-label").textContent = keyLabel;
  drawAttention();
}

function drawAttention() {
  const target = $("target-tokens"), source = $("source-tokens");
  target.replaceChildren(...shown.target.map((token, i) => {
    const node = element("span", "token target", token);
    node.addEventListener("mouseenter", () => highlight(i));
    node.addEventListener("mouseleave", () => highlight(null));
    return node;
  }));
  source.replaceChildren(...shown.source.map((token) => element("span", "token source", token)));
  const head = element("thead"), body = element("tbody");
  const top = element("tr");
  top.append(element("th"), ...shown.source.map((token) => element("th", "", token)));
  head.append(top);
  shown.target.forEach((token, t) => {
    const row = element("tr");
    const label = element("th", "", token);
    row.addEventListener("mouseenter", () => highlight(t));
    row.addEventListener("mouseleave", () => highlight(null));
    row.append(label, ...weightsOf(t).map((weight) => {
      const cell = element("td");
      cell.style.backgroundColor = `rgba(31, 95, 191, ${weight.toFixed(3)})`;
      cell.title = weight.toFixed(3);
      return cell;
    }));
    body.append(row);
  });
  $("heatmap").replaceChildren(head, body);
  $("attention").hidden = false;
}

async function translate(event) {
  event.preventDefault();
  showError(null);
  const text = $("source").value;
  try {
    const result = await predict("translate", {text: [text], beam_width: Number($("beam-width").value)});
    $("source-shown").textContent = text;
    $("translation").textContent = result.translation[0];
    $("score").textContent = `(score ${result.score[0].toFixed(3)}${result.truncated[0] ? ", the input was cut" : ""})`;
    const model = models.find((m) => m.name === $("model").value);
    $("no-attention").hidden = model.signatures.includes("attention");
    if (!$("no-attention").hidden) {  // a CTranslate2 version: its engine gives no attention
      $("attention").hidden = true;
      document.body.dataset.state = "translated";
      return;
    }
    const attention = await predict("attention", {text: [text]});
    const source = attention.source_tokens[0], target = attention.output_tokens[0];
    showAttention("Cross-attention of the greedy translation", "target", "source", {
      source: source.slice(0, realLength(source)),
      target: target.slice(0, realLength(target, EOS)),
      weights: attention.cross_attention[0],
    });
    document.body.dataset.state = "translated";
  } catch (error) {
    showError(error);
  }
}

async function fillMask(event) {
  event.preventDefault();
  showError(null);
  try {
    const text = $("masked").value;
    const result = await predict("fill_mask", {text: [text], top_k: Number($("top-k").value)});
    $("filled").textContent = result.filled[0];
    const masks = Math.min(result.num_masks[0], result.tokens[0].length);
    $("candidates").replaceChildren(...Array.from({length: masks}, (_, m) => {
      const item = element("li", "mask", `[MASK] ${m + 1}: `);
      result.tokens[0][m].forEach((token, k) => {
        item.append(element("span", "token candidate", `${token} ${result.scores[0][m][k].toFixed(3)}`));
      });
      return item;
    }));
    const attention = await predict("attention", {text: [text]});
    const tokens = attention.tokens[0].slice(0, realLength(attention.tokens[0]));
    const layers = attention.self_attention[0];  // [layer][head][query][key]
    showAttention("Self-attention", "query", "key", {
      source: tokens,
      target: tokens,
      weights: tokens.map((_, q) => layers.map((heads) => heads.map((rows) => rows[q]))),
    });
    document.body.dataset.state = "filled";
  } catch (error) {
    showError(error);
  }
}

async function start() {
  try {
    const response = await fetch("/explorer/models");
    models = await response.json();
    $("model").replaceChildren(...models.map((m) => {
      const option = element("option", "", `${m.name} (${m.version})`);
      option.value = m.name;
      return option;
    }));
    chooseModel();
  } catch (error) {
    showError(error);
  }
  document.body.dataset.state = "ready";
}

$("model").addEventListener("change", chooseModel);
$("translate-form").addEventListener("submit", translate);
$("fill-form").addEventListener("submit", fillMask);
$("layer").addEventListener("change", drawAttention);
$("head").addEventListener("change", drawAttention);
start();
