// Lets other work run (a cancel message, a repaint) between tokens without the 4 ms clamp
// nested timers get in browsers.
const isNode = typeof process !== "undefined" && !!process.versions?.node;
const channel = !isNode && typeof MessageChannel !== "undefined" ? new MessageChannel() : null;

/** Resolves once the event loop has had a turn. */
export function yieldToEventLoop() {
  if (isNode) return new Promise((resolve) => setImmediate(resolve));
  if (!channel) return new Promise((resolve) => setTimeout(resolve, 0));
  return new Promise((resolve) => {
    channel.port1.onmessage = () => resolve();
    channel.port2.postMessage(null);
  });
}
