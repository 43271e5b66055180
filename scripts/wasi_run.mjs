// Runs a WASI (wasm32-wasip1) program under Node's built-in WASI: the cargo runner for the
// kernel tests compiled to WebAssembly (scripts/test_wasm.sh). Usage: node wasi_run.mjs
// program.wasm [args...]; exits with the program's status.
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import process, { argv, env, exit } from "node:process";
import { setFlagsFromString } from "node:v8";

// Relaxed SIMD (for the relaxed-SIMD build of the kernel tests) is on by default from Node 22.
// Node 20 has it behind a flag, and there its baseline compiler (Liftoff) gets
// `i32x4.relaxed_dot_i8x16_i7x16_add_s` wrong, so that build runs optimized code only.
if (Number(process.versions.node.split(".")[0]) < 22) {
  setFlagsFromString("--experimental-wasm-relaxed-simd");
  setFlagsFromString("--no-liftoff");
}

const [program, ...args] = argv.slice(2);
const wasi = new WASI({ version: "preview1", args: [program, ...args], env, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(program));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
exit(wasi.start(instance));
