// Runs a WASI (wasm32-wasip1) program under Node's built-in WASI: the cargo runner for the
// kernel tests compiled to WebAssembly (scripts/test_wasm.sh). Usage: node wasi_run.mjs
// program.wasm [args...]; exits with the program's status.
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import { argv, env, exit } from "node:process";

const [program, ...args] = argv.slice(2);
const wasi = new WASI({ version: "preview1", args: [program, ...args], env, returnOnExit: true });
const module = await WebAssembly.compile(await readFile(program));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
exit(wasi.start(instance));
