// WebAssembly decode speed against the native binary on one thread (a benchmark, not a
// test): for each model, greedy generation of N tokens after a short prompt, median of three
// runs, in Node and in headless Chromium, with each build the engine runs (relaxed SIMD,
// SIMD128, scalar).
//   node scripts/bench_wasm.mjs --native target/release/hanzo-engine MODEL.gguf...
// Needs scripts/build_wasm.sh, and `npm ci` in crates/hanzo-wasm plus Debian's chromium for
// the browser rows. Prints a Markdown table.
import { execFileSync } from "node:child_process";
import { readFile, stat } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { createRequire } from "node:module";

const args = process.argv.slice(2);
const at = args.indexOf("--native");
const nativeBin = at >= 0 ? args.splice(at, 2)[1] : null;
const models = args;
const TOKENS = 32;
// "+stored": `Model.load`'s `repack: false` (the file's layout kept, for the row kernels);
// otherwise the SIMD builds load the weights interleaved eight rows at a time.
const BUILDS = ["relaxed", "relaxed+stored", "simd", "simd+stored", "scalar"];
const NAMES = {
  relaxed: "relaxed SIMD",
  "relaxed+stored": "relaxed SIMD, as stored",
  simd: "SIMD128",
  "simd+stored": "SIMD128, as stored",
  scalar: "scalar",
};
const PROMPT = "The history of the river begins";

// Runs in Node or in the page alike: load, a two-token warm-up, then three greedy runs;
// median tokens/s.
async function measure(lib, source, variant, tokens, prompt) {
  const { Model, init, memoryBytes, relaxedSimdSupported } = lib;
  const [build, repack] = [variant.split("+")[0], !variant.endsWith("+stored")];
  if (build === "relaxed" && !relaxedSimdSupported()) return null;
  await init({ build });
  const t0 = performance.now();
  const model = await Model.load(source, { repack });
  const load = (performance.now() - t0) / 1000;
  const ids = model.encode(prompt);
  await model.generate(ids, { maxTokens: 2, temperature: 0 });
  const rates = [];
  for (let i = 0; i < 3; i++) {
    rates.push((await model.generate(ids, { maxTokens: tokens, temperature: 0 })).tokensPerSecond);
  }
  rates.sort((a, b) => a - b);
  const out = { tps: rates[1], load, memory: memoryBytes() };
  model.free();
  return out;
}

const rows = [];
for (const path of models) {
  const name = basename(path);
  if (nativeBin) {
    const json = execFileSync(nativeBin, ["bench", "-m", path, "-p", "0", "-n", String(TOKENS), "-r", "3", "-t", "1", "--json"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    const tg = JSON.parse(json).find((r) => r.test === `tg${TOKENS}`);
    rows.push({ name, where: `native (${tg.kernels}), 1 thread`, tps: tg.tokens_per_second });
  }
  for (const build of BUILDS) {
    // A fresh process per build: a module is loaded once per process.
    const script = `import * as lib from ${JSON.stringify(new URL("../crates/hanzo-wasm/js/index.js", import.meta.url).href)};
      import { readFile } from "node:fs/promises";
      const measure = ${measure.toString()};
      console.log(JSON.stringify(await measure(lib, await readFile(${JSON.stringify(path)}), ${JSON.stringify(build)}, ${TOKENS}, ${JSON.stringify(PROMPT)})));`;
    const r = JSON.parse(execFileSync("node", ["--input-type=module", "-e", script], { encoding: "utf8" }));
    if (r) rows.push({ name, where: `Node ${process.version}, ${NAMES[build]}`, ...r });
  }
}

// The browser rows: the same measurement in a page.
let chromium = null;
try {
  const require = createRequire(new URL("../crates/hanzo-wasm/package.json", import.meta.url));
  chromium = require("playwright-core").chromium;
} catch {
  console.error("no playwright-core in crates/hanzo-wasm/node_modules: browser rows skipped");
}
const executablePath = ["/usr/bin/chromium", "/usr/bin/chromium-headless-shell"].find((p) => {
  try {
    execFileSync("test", ["-x", p]);
    return true;
  } catch {
    return false;
  }
});
if (chromium && executablePath) {
  const { serve } = await import("../web/serve.mjs");
  for (const path of models) {
    const server = await serve(0, { "/model/": dirname(path) });
    const origin = `http://127.0.0.1:${server.address().port}`;
    for (const build of BUILDS) {
      const browser = await chromium.launch({
        executablePath,
        args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--disable-quic"],
      });
      const page = await browser.newPage();
      await page.goto(`${origin}/web/`);
      const version = await browser.version();
      const r = await page.evaluate(
        async ([src, url, build, tokens, prompt]) => {
          const lib = await import("/crates/hanzo-wasm/js/index.js");
          const measure = (0, eval)(`(${src})`);
          return measure(lib, url, build, tokens, prompt);
        },
        [measure.toString(), `${origin}/model/${basename(path)}`, build, TOKENS, PROMPT],
      );
      if (r) rows.push({ name: basename(path), where: `Chromium ${version}, ${NAMES[build]}`, ...r });
      await browser.close();
    }
    server.close();
  }
}

console.log(`| model | where | decode t/s | load s | WebAssembly memory MiB |`);
console.log(`|---|---|---|---|---|`);
for (const r of rows) {
  const mem = r.memory ? (r.memory / 2 ** 20).toFixed(0) : "";
  console.log(`| ${r.name} | ${r.where} | ${r.tps.toFixed(1)} | ${r.load ? r.load.toFixed(2) : ""} | ${mem} |`);
}
