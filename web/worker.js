// The model runs here, off the page's thread, so the page stays responsive while it loads
// and generates. Messages in: {load: File|string}, {chat: messages, options}, {stop: true}.
// Messages out: {progress}, {loaded: info}, {piece}, {done: result}, {error}.
import { Model, build, init } from "../crates/hanzo-wasm/js/index.js";

let model = null;
let abort = null;

self.onmessage = async ({ data }) => {
  try {
    if (data.stop) {
      abort?.abort();
    } else if (data.load) {
      await init();
      model?.free();
      model = null;
      const t0 = performance.now();
      model = await Model.load(data.load, {
        onProgress: (loaded, total) => self.postMessage({ progress: { loaded, total } }),
      });
      self.postMessage({ loaded: { ...model.info, build: build(), seconds: (performance.now() - t0) / 1000 } });
    } else if (data.chat) {
      abort = new AbortController();
      const ids = model.chatTokens(data.chat);
      const done = await model.generate(ids, { ...data.options, signal: abort.signal }, (piece) => {
        self.postMessage({ piece });
      });
      self.postMessage({ done });
    }
  } catch (e) {
    self.postMessage({ error: String(e?.message ?? e) });
  }
};
