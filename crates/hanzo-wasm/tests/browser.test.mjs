// The chat page in headless Chromium (Debian's, driven by playwright-core): load SmolLM2
// through the file picker, send a message, and check the streamed reply is the native greedy
// reply. Saves a screenshot (HANZO_SCREENSHOT, default target/wasm-chat.png).
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "../../../web/serve.mjs";
import { fixtures, native } from "./common.mjs";

const CHROMIUM = process.env.HANZO_CHROMIUM ?? ["/usr/bin/chromium", "/usr/bin/chromium-headless-shell"].find(existsSync);
const SCREENSHOT =
  process.env.HANZO_SCREENSHOT ?? fileURLToPath(new URL("../../../target/wasm-chat.png", import.meta.url));
const MESSAGE = "Name three primary colors.";
const TOKENS = 24;

test("the chat page streams the native greedy reply", async (t) => {
  assert.ok(CHROMIUM, "no Chromium: apt-get install chromium (scripts/test.sh does)");
  const server = await serve(0);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-quic"],
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
