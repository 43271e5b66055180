// The chat page: picks a model, hands it to the worker, streams the replies into the page.
const $ = (id) => document.getElementById(id);
const worker = new Worker(new URL("worker.js", import.meta.url), { type: "module" });
const history = [];
let reply = null;

function setBusy(busy) {
  $("message").disabled = busy;
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

function load(source) {
  $("progress").hidden = false;
  $("progress").value = 0;
  $("status").textContent = "Loading…";
  $("message").disabled = $("send").disabled = true;
  worker.postMessage({ load: source });
}

function addTurn(role, text) {
  const div = document.createElement("div");
  div.className = `turn ${role}`;
  div.textContent = text;
  $("chat").append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

worker.onmessage = ({ data }) => {
  if (data.progress) {
    const { loaded, total } = data.progress;
    $("progress").value = total ? loaded / total : 0;
    $("status").textContent = `Loading… ${(loaded / 2 ** 20).toFixed(0)} MiB` +
      (total ? ` of ${(total / 2 ** 20).toFixed(0)} MiB` : "");
  } else if (data.loaded) {
    const i = data.loaded;
    $("progress").hidden = true;
    $("status").textContent = `${i.architecture}: ${i.layers} layers, ${i.vocabSize} tokens, ` +
      `loaded in ${i.seconds.toFixed(2)} s.`;
    const builds = { relaxed: "relaxed SIMD", simd: "SIMD128", scalar: "scalar (no SIMD in this browser)" };
    $("build").textContent = `WebAssembly build: ${builds[i.build]}`;
    document.body.dataset.model = "loaded";
    setBusy(false);
    $("message").focus();
  } else if (data.piece !== undefined) {
    reply.textContent += data.piece;
  } else if (data.done) {
    const d = data.done;
    history.push({ role: "assistant", content: d.text });
    $("speed").textContent = `${d.tokens.length} tokens, ${d.tokensPerSecond.toFixed(1)} tokens/s ` +
      `(prompt: ${d.promptTokens} tokens in ${d.promptSeconds.toFixed(2)} s) — ${d.finishReason}`;
    reply.dataset.done = d.finishReason;
    setBusy(false);
  } else if (data.error) {
    if (reply && !reply.dataset.done) {
      reply.classList.add("error");
      reply.textContent = data.error;
      reply.dataset.done = "error";
    } else {
      $("status").textContent = data.error;
      $("progress").hidden = true;
    }
    setBusy(false);
  }
};

$("file").addEventListener("change", (e) => {
  if (e.target.files[0]) load(e.target.files[0]);
});
$("url-form").addEventListener("submit", (e) => {
  e.preventDefault();
  if ($("url").value) load($("url").value);
});
$("composer").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("message").value.trim();
  if (!text) return;
  $("message").value = "";
  history.push({ role: "user", content: text });
  addTurn("user", text);
  reply = addTurn("assistant", "");
  setBusy(true);
  worker.postMessage({
    chat: history,
    options: { temperature: Number($("temperature").value), maxTokens: Number($("max-tokens").value) },
  });
});
$("message").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => worker.postMessage({ stop: true }));

const params = new URLSearchParams(location.search);
if (params.get("model")) load(new URL(params.get("model"), location.href).href);
