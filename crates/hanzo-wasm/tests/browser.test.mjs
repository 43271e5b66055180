// The chat page in headless Chromium (Debian's, driven by playwright-core): load SmolLM2
// through the file picker, send a message, and check the streamed reply is the native greedy
// reply. Saves a screenshot (HANZO_SCREENSHOT, default target/wasm-chat.png). Then Hanzo
// Edge's SDK in the same browser: a budget refusal and the native greedy chat.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { basename, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "../../../web/serve.mjs";
import { fixtures, native } from "./common.mjs";

const CHROMIUM = process.env.HANZO_CHROMIUM ?? ["/usr/bin/chromium", "/usr/bin/chromium-headless-shell"].find(existsSync);
const SCREENSHOT =
  process.env.HANZO_SCREENSHOT ?? fileURLToPath(new URL("../../../target/wasm-chat.png", import.meta.url));
const MESSAGE = "Name three primary colors.";
const TOKENS = 24;
const BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--disable-quic"];

test("the chat page streams the native greedy reply", async (t) => {
  assert.ok(CHROMIUM, "no Chromium: apt-get install chromium (scripts/test.sh does)");
  const server = await serve(0);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: BROWSER_ARGS,
  });
  try {
    const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`http://127.0.0.1:${server.address().port}/web/`);
    await page.setInputFiles("#file", fixtures.smollm2);
    await page.waitForSelector("body[data-model=loaded]", { timeout: 120_000 });
    t.diagnostic(await page.textContent("#status"));
    // The page loads the best build the browser validates: relaxed SIMD in a current Chromium.
    const build = await page.textContent("#build");
    t.diagnostic(build);
    const relaxed = await page.evaluate(async () =>
      (await import("/crates/hanzo-wasm/js/index.js")).relaxedSimdSupported());
    assert.match(build, relaxed ? /relaxed SIMD/ : /SIMD128/);

    await page.fill("#temperature", "0");
    await page.fill("#max-tokens", String(TOKENS));
    await page.fill("#message", MESSAGE);
    // Record the reply as it grows: it must stream, not arrive at once.
    await page.evaluate(() => {
      window.lengths = [];
      new MutationObserver(() => {
        const r = document.querySelector(".assistant:last-child");
        if (r) window.lengths.push(r.textContent.length);
      }).observe(document.getElementById("chat"), { subtree: true, childList: true, characterData: true });
    });
    await page.click("#send");
    await page.waitForSelector(".assistant[data-done]", { timeout: 120_000 });
    const reply = await page.textContent(".assistant:last-child");
    const lengths = await page.evaluate(() => window.lengths);
    t.diagnostic(`reply: ${JSON.stringify(reply)}; ${await page.textContent("#speed")}`);

    await mkdir(dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // `run --chat` ends the reply with a newline for the terminal.
    const want = native("run", "-m", fixtures.smollm2, "--chat", "--temp", "0", "-n", String(TOKENS), MESSAGE);
    assert.equal(reply + "\n", want);
    assert.ok(new Set(lengths.filter((n) => n > 0)).size > 3, `streamed in pieces: ${lengths}`);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    server.close();
  }
});

test("Hanzo Edge in the browser: the budget refusal and the native greedy chat", async (t) => {
  assert.ok(CHROMIUM, "no Chromium: apt-get install chromium (scripts/test.sh does)");
  // The fixtures are fetched from the page's server, as a web app fetches its model.
  const server = await serve(0, { "/fixtures/": dirname(fixtures.smollm2) });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: BROWSER_ARGS });
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`http://127.0.0.1:${server.address().port}/web/`);
    const out = await page.evaluate(
      async ({ gemma, smollm, message, tokens }) => {
        const { HanzoEdge, BudgetError } = await import("/crates/hanzo-wasm/js/edge.js");
        let refusal = null;
        try {
          await HanzoEdge.init({ model: gemma, maxMemoryBytes: 50_000_000 });
        } catch (e) {
          refusal = { budgetError: e instanceof BudgetError, needed: e.needed, limit: e.limit, message: e.message };
        }
        const edge = await HanzoEdge.init({ model: smollm, maxContextTokens: 512, maxMemoryBytes: 400_000_000 });
        let reply = "";
        let pieces = 0;
        for await (const piece of edge.chat([{ role: "user", content: message }], { maxTokens: tokens, temperature: 0 })) {
          reply += piece;
          pieces++;
        }
        return { refusal, reply, pieces, summary: edge.summary };
      },
      {
        gemma: `/fixtures/${basename(fixtures.gemma3)}`,
        smollm: `/fixtures/${basename(fixtures.smollm2)}`,
        message: MESSAGE,
        tokens: TOKENS,
      },
    );
    t.diagnostic(JSON.stringify(out));
    assert.ok(out.refusal?.budgetError, JSON.stringify(out.refusal));
    assert.equal(out.refusal.limit, 50_000_000);
    assert.ok(out.refusal.needed > out.refusal.limit);
    const want = native("run", "-m", fixtures.smollm2, "--chat", "--temp", "0", "-n", String(TOKENS), MESSAGE);
    assert.equal(out.reply + "\n", want);
    assert.ok(out.pieces > 3, "streamed in pieces");
    assert.ok(out.summary.completionTokens > 3 && out.summary.completionTokens <= TOKENS);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    server.close();
  }
});
