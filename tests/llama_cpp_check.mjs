// The llama.cpp side of tests/llama_cpp_check.sh: loads a GGUF file nabla exported into a real
// llama.cpp (node-llama-cpp's prebuilt binaries, CPU only), feeds the prompt as token ids,
// decodes greedily, and compares each step with what nabla said: the same token, and
// next-token probabilities within tol (absolute, per token).
// Usage: node llama_cpp_check.mjs NODE_MODULES_DIR MODEL.gguf EXPECTED.json TOL
import {createRequire} from "node:module";
import {readFileSync} from "node:fs";
import path from "node:path";

const [modulesDir, modelPath, expectedPath, tolText] = process.argv.slice(2);
const require = createRequire(path.join(modulesDir, "noop.js"));
const {getLlama} = await import(require.resolve("node-llama-cpp"));
const expected = JSON.parse(readFileSync(expectedPath, "utf8"));
const tol = Number(tolText);

const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath});
// Keys and values cached in float32 (llama.cpp caches float16 by default), so that a float32 model
// is compared at float32 precision.
const context = await model.createContext({contextSize: 256, batchSize: 256, threads: 1,
                                           flashAttention: false,
                                           experimentalKvCacheKeyType: "F32",
                                           experimentalKvCacheValueType: "F32"});
const sequence = context.getSequence();

let worst = 0, worstAt = "", mismatch = -1;
const got = [];
const steps = sequence.evaluateWithMetadata(expected.prompt, {probabilities: true},
                                            {temperature: 0, yieldEogToken: true});
let result = await steps.next();
for (let i = 0; i < expected.tokens.length && !result.done; i++) {
    const {token, probabilities} = result.value;
    got.push(token);
    if (token !== expected.tokens[i] && mismatch < 0) mismatch = i;
    const p = expected.probs[i];
    for (let t = 0; t < p.length; t++) {
        const d = Math.abs((probabilities.get(t) ?? 0) - p[t]);
        if (d > worst) worst = d, worstAt = `step ${i}, token ${t}`;
    }
    // Continue from nabla's token, so one near-tie cannot shift every later comparison.
    result = await steps.next(expected.tokens[i]);
}
await steps.return();
// llama.cpp's own vocabulary must turn the tokens back into nabla's text.
const text = Buffer.from(model.detokenize([...expected.prompt, ...got]), "utf8");
console.log(`llama.cpp greedy: "${text.toString("latin1")}"`);
const textOk = text.equals(Buffer.from(expected.text));
console.log(`${got.length} steps; largest probability difference ${worst.toExponential(2)} (${worstAt}), tolerance ${tol}`);
await context.dispose();
await model.dispose();
if (got.length !== expected.tokens.length) {
    console.error(`llama.cpp stopped after ${got.length} of ${expected.tokens.length} tokens`);
    process.exit(1);
}
if (mismatch >= 0) {
    console.error(`greedy tokens differ first at step ${mismatch}: llama.cpp ${got[mismatch]}, nabla ${expected.tokens[mismatch]}`);
    process.exit(1);
}
if (!textOk) {
    console.error(`llama.cpp decodes the tokens to other text than nabla's tokenizer`);
    process.exit(1);
}
if (!(worst <= tol)) {
    console.error(`probabilities differ by ${worst} at ${worstAt}, over the tolerance ${tol}`);
    process.exit(1);
}
console.log("llama_cpp_check: ok");
